"""Which ConfigMaps a workload's containers (a PyTorchJob's, or any registered kind's) read their environment from.

A container names ConfigMaps in ``envFrom[].configMapRef.name`` and in
``env[].valueFrom.configMapKeyRef.name``; a ConfigMap must be in the pod's namespace
(../shared/reference/NOTES.md, "Kubernetes semantics"). ``submit`` reads the ones the input lacks
from the cluster (read-only) so the validator can resolve them; the local runner resolves env from
the ones in the input.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import kinds
from .validate.objindex import ObjectIndex

__all__ = ["containers_of", "is_configmap", "is_pytorchjob", "is_workload", "missing_configmaps", "referenced_configmaps"]


def is_workload(obj: Any) -> bool:
    """True for a mapping of a registered kind (:func:`k8sddp.kinds.lookup`: its group, any version)."""
    return isinstance(obj, dict) and kinds.lookup(obj.get("apiVersion"), obj.get("kind")) is not None


def is_pytorchjob(obj: Any) -> bool:
    """True for a ``kubeflow.org/*`` ``PyTorchJob`` mapping."""
    return isinstance(obj, dict) and kinds.lookup(obj.get("apiVersion"), obj.get("kind")) is kinds.PYTORCHJOB


def is_configmap(obj: Any) -> bool:
    """True for a ``v1`` ``ConfigMap`` mapping."""
    return isinstance(obj, dict) and obj.get("kind") == "ConfigMap" and obj.get("apiVersion") == "v1"


def containers_of(job: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(replica or group name, container)`` for every init container and container of every pod
    template of a registered kind (:meth:`k8sddp.kinds.Kind.pod_templates`); nothing for others."""
    kind = kinds.lookup(job.get("apiVersion"), job.get("kind"))
    if kind is None:
        return
    for view in kind.pod_templates(job, kinds.CheckContext("baseline", ObjectIndex())):
        for key in ("initContainers", "containers"):
            listed = view.pod_spec.get(key)
            for container in listed if isinstance(listed, list) else []:
                if isinstance(container, dict):
                    yield view.group, container
        if view.container_index is None and isinstance(view.container, dict):
            yield view.group, view.container  # a merged container that is not in the template (a TrainJob's trainer)


def referenced_configmaps(job: dict[str, Any]) -> list[str]:
    """Names of the ConfigMaps the job's containers take env from, sorted, without repeats."""
    names: set[str] = set()
    for _, container in containers_of(job):
        for src in container.get("envFrom") or []:
            ref = (src or {}).get("configMapRef") if isinstance(src, dict) else None
            if isinstance(ref, dict) and ref.get("name"):
                names.add(str(ref["name"]))
        for var in container.get("env") or []:
            ref = ((var or {}).get("valueFrom") or {}).get("configMapKeyRef") if isinstance(var, dict) else None
            if isinstance(ref, dict) and ref.get("name"):
                names.add(str(ref["name"]))
    return sorted(names)


def missing_configmaps(objs: list[dict[str, Any]], *, namespace: str) -> list[tuple[str, str]]:
    """``(namespace, name)`` of ConfigMaps the jobs in ``objs`` reference that ``objs`` lack.

    Args:
        objs: the input's objects.
        namespace: the namespace of objects that name none (the one they will be applied to).
    """
    present = {
        ((o.get("metadata") or {}).get("namespace") or namespace, (o.get("metadata") or {}).get("name"))
        for o in objs
        if is_configmap(o)
    }
    out: list[tuple[str, str]] = []
    for job in objs:
        if not is_workload(job):
            continue
        ns = (job.get("metadata") or {}).get("namespace") or namespace
        for name in referenced_configmaps(job):
            key = (ns, name)
            if key not in present and key not in out:
                out.append(key)
    return out
