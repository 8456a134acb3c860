"""The webhook's read-only look-up of a TrainJob's Kubeflow Trainer runtime (docs/admission.md)."""

from __future__ import annotations

from typing import Any, Protocol

from .. import kinds
from ..kinds.trainermerge import runtime_key
from ..schemagen_trainer import TRAINER_GROUP, TRAINER_VERSION

__all__ = ["RuntimeSource", "lookup_runtime"]


class RuntimeSource(Protocol):
    """Reads Kubeflow Trainer runtimes (read-only). :class:`k8sddp.admission.lookup.KubeLookup` implements it."""

    def get_runtime(self, kind: str, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        """The runtime as a dict, or ``None`` when it does not exist.

        Raises:
            k8sddp.admission.review.LookupFailed: it could not be read.
        """
        ...


def lookup_runtime(source: RuntimeSource, obj: dict[str, Any], namespace: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """The runtime ``obj`` (a TrainJob) refers to, read from ``source`` within ``timeout`` seconds.

    Returns:
        ``(runtime, warning)``: the runtime with its ``apiVersion`` and ``kind`` filled in, or
        ``None`` (not a TrainJob, a runtime of another group, not found, unreadable) with a
        warning saying why (``""`` where there is nothing to say).
    """
    from .review import LookupFailed

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
