"""Which ConfigMaps a PyTorchJob's containers read their environment from.

A container names ConfigMaps in ``envFrom[].configMapRef.name`` and in
``env[].valueFrom.configMapKeyRef.name``; a ConfigMap must be in the pod's namespace
(../shared/reference/NOTES.md, "Kubernetes semantics"). ``submit`` reads the ones the input lacks
from the cluster (read-only) so the validator can resolve them; the local runner resolves env from
the ones in the input.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["containers_of", "is_configmap", "is_pytorchjob", "missing_configmaps", "referenced_configmaps"]


def is_pytorchjob(obj: Any) -> bool:
    """True for a ``kubeflow.org/*`` ``PyTorchJob`` mapping."""
    return (
        isinstance(obj, dict)
        and obj.get("kind") == "PyTorchJob"
        and str(obj.get("apiVersion", "")).startswith("kubeflow.org/")
    )


def is_configmap(obj: Any) -> bool:
    """True for a ``v1`` ``ConfigMap`` mapping."""
    return isinstance(obj, dict) and obj.get("kind") == "ConfigMap" and obj.get("apiVersion") == "v1"


def containers_of(job: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(replica_type, container)`` for every container and init container of every replica."""
    specs = ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {})
    if not isinstance(specs, dict):
        return
    for rtype, rspec in specs.items():
        pod = (((rspec or {}).get("template") or {}).get("spec") or {}) if isinstance(rspec, dict) else {}
        if not isinstance(pod, dict):
            continue
        for key in ("initContainers", "containers"):
            for container in pod.get(key) or []:
                if isinstance(container, dict):
                    yield str(rtype), container


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
        if not is_pytorchjob(job):
            continue
        ns = (job.get("metadata") or {}).get("namespace") or namespace
        for name in referenced_configmaps(job):
            key = (ns, name)
            if key not in present and key not in out:
                out.append(key)
    return out
