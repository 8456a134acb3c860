"""The webhook's read-only look-up of a TrainJob's Kubeflow Trainer runtime (docs/admission.md)."""

from __future__ import annotations

from typing import Any

from .. import kinds
from ..kinds.trainermerge import runtime_key
from ..schemagen_trainer import TRAINER_GROUP, TRAINER_VERSION
from .sources import LookupFailed, RuntimeSource

__all__ = ["RuntimeSource", "lookup_runtime"]


def lookup_runtime(source: RuntimeSource, obj: dict[str, Any], namespace: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """The runtime ``obj`` (a TrainJob) refers to, read from ``source`` within ``timeout`` seconds.

    Returns:
        ``(runtime, warning)``: the runtime with its ``apiVersion`` and ``kind`` filled in, or
        ``None`` (not a TrainJob, a runtime of another group, not found, unreadable) with a
        warning saying why (``""`` where there is nothing to say).
    """
    if kinds.lookup(obj.get("apiVersion"), obj.get("kind")) is not kinds.TRAINJOB:
        return None, ""
    group, kind, name = runtime_key(obj)
    if group != TRAINER_GROUP or not name:
        return None, ""
    try:
        runtime = source.get_runtime(kind, namespace, name, timeout=timeout)
    except LookupFailed as exc:
        return None, f"k8sddp: {kind} {name} unreadable: {exc}"
    if runtime is None:
        return None, f"k8sddp: {kind} {name} not found" + (f" in namespace {namespace}" if kind == "TrainingRuntime" else "")
    return {"apiVersion": f"{TRAINER_GROUP}/{TRAINER_VERSION}", "kind": kind, **runtime}, ""
