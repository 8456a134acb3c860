"""The registry of workload kinds and wrappers, keyed by (API group, kind)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..validate.objindex import api_group

if TYPE_CHECKING:
    from .base import Kind, Wrapper

__all__ = ["job_kinds", "kinds", "lookup", "lookup_wrapper", "referenced_kinds", "register", "register_wrapper", "skip_label"]

_KINDS: dict[tuple[str, str], Kind] = {}
_WRAPPERS: dict[tuple[str, str], Wrapper] = {}


def register(kind: Kind) -> Kind:
    """Make ``kind`` known under ``(kind.group, kind.kind)``; returns it (usable on a module constant).

    Raises:
        ValueError: another kind is registered under the same key.
    """
    key = (kind.group, kind.kind)
    if key in _KINDS and _KINDS[key] is not kind:
        raise ValueError(f"kind {kind.kind} ({kind.group}) is registered twice")
    _KINDS[key] = kind
    return kind


def register_wrapper(wrapper: Wrapper) -> Wrapper:
    """Make ``wrapper`` known under each ``(apiVersion, kind)`` it unwraps.

    Raises:
        ValueError: another wrapper is registered under the same key.
    """
    for api in wrapper.api_versions:
        key = (api, wrapper.kind)
        if key in _WRAPPERS and _WRAPPERS[key] is not wrapper:
            raise ValueError(f"wrapper {wrapper.kind} ({api}) is registered twice")
        _WRAPPERS[key] = wrapper
    return wrapper


def lookup(api_version: Any, kind: Any) -> Kind | None:
    """The kind registered for ``kind`` in the group of ``api_version`` (any version: a version the
    kind does not serve is the kind's own finding), or ``None``."""
    return _KINDS.get((api_group(api_version), str(kind)))


def lookup_wrapper(api_version: Any, kind: Any) -> Wrapper | None:
    """The wrapper registered for exactly ``api_version`` and ``kind``, or ``None``."""
    return _WRAPPERS.get((str(api_version), str(kind)))


def kinds() -> list[Kind]:
    """Every registered kind, in registration order."""
    return list(_KINDS.values())


def job_kinds() -> dict[str, Kind]:
    """The kinds ``submit`` creates and ``status``/``logs``/``delete`` follow (``submit_role ==
    "job"``), by their lower-case name (``pytorchjob``, ``trainjob``: the ``--kind`` values), in
    registration order."""
    return {k.kind.lower(): k for k in _KINDS.values() if k.submit_role == "job"}


def referenced_kinds() -> frozenset[tuple[str, str]]:
    """``(group, kind)`` of the objects that registered kinds resolve by reference (for :class:`~k8sddp.validate.objindex.ObjectIndex`)."""
    return frozenset(ref for k in _KINDS.values() for ref in k.references)


def skip_label(api_version: Any, kind: Any) -> str:
    """How a skipped object is counted: its kind, with its group added when a registered kind has
    the same name in another group (``PyTorchJob (training.kubedl.io)``), so it never reads as
    a skipped Kubeflow job."""
    name = str(kind)
    group = api_group(api_version)
    if any(k == name and g != group for g, k in _KINDS) or any(k == name for _, k in _WRAPPERS):
        return f"{name} ({group or api_version})"
    return name
