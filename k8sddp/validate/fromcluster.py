"""``validate --cluster``: read the objects the input refers to but lacks from the API server, read-only.

Two kinds of references, both through the kinds registry (no kind is named here):

1. the objects of a kind's :attr:`~k8sddp.kinds.Kind.references` that an object names
   (:meth:`~k8sddp.kinds.Kind.referenced_objects`: a TrainJob's ``ClusterTrainingRuntime``, or its
   ``TrainingRuntime`` in the TrainJob's namespace), read by the referenced kind's API coordinates
   (its registered :class:`~k8sddp.kinds.StatusModel`: version and plural);
2. then the ConfigMaps the training containers take env from (``envFrom[].configMapRef``,
   ``env[].valueFrom.configMapKeyRef``), in the pod's namespace, including those named by a
   runtime just read.

What is found joins the :class:`~.objindex.ObjectIndex` the checks read, as if it were in the
input; a referenced object that is not on the cluster is recorded
(:meth:`~.objindex.ObjectIndex.mark_searched`) so its finding (KDP230 for a runtime) says it was
looked for there, and it stays unverifiable, never a pass. Only GETs by name are made (RBAC:
``get`` on the resources named, no ``list``/``watch``); a failed read (forbidden, unreachable)
raises :class:`k8sddp.errors.ClusterError` (exit 3) rather than passing a check it could not make.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from .. import kinds
from .objindex import ObjectIndex

__all__ = ["ReferenceReader", "missing_configmaps", "missing_objects", "resolve_from_cluster"]

_MAPPING = (dict, Mapping)
#: Wrappers inside wrappers are opened this deep at most (as the checks do).
_MAX_DEPTH = 8


class ReferenceReader(Protocol):
    """Read-only GETs by name; :class:`k8sddp.cluster.client.Cluster` implements it.

    Attributes:
        server: the API server's URL (for messages).
    """

    server: str

    def read_configmap(self, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """The ConfigMap, or ``None`` when it does not exist.

        Raises:
            ClusterError: forbidden, unreachable.
        """
        ...

    def read_object(self, group: str, version: str, plural: str, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """The object (``namespace`` ``None``: cluster-scoped), or ``None`` when it does not exist.

        Raises:
            ClusterError: forbidden, unreachable.
        """
        ...


def _workloads(obj: Any, depth: int = 0) -> Iterator[tuple[kinds.Kind, Mapping[str, Any]]]:
    """Every object of a registered kind in ``obj``: itself, or what a wrapper (AppWrapper, Katib
    Experiment) holds, and the items of a ``kind: List``."""
    if not isinstance(obj, _MAPPING) or depth > _MAX_DEPTH:
        return
    items = obj.get("items")
    if isinstance(items, list) and str(obj.get("kind", "")).endswith("List"):
        for item in items:
            yield from _workloads(item, depth + 1)
        return
    kind = kinds.lookup(obj.get("apiVersion"), obj.get("kind"))
    if kind is not None:
        yield kind, obj
        return
    wrapper = kinds.lookup_wrapper(obj.get("apiVersion"), obj.get("kind"))
    if wrapper is not None:
        for held in wrapper.unwrap(obj, kinds.CheckContext("baseline", ObjectIndex())).inner:
            yield from _workloads(held.obj, depth + 1)


def _namespace(obj: Mapping[str, Any], default: str) -> str:
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, _MAPPING) else None
    return ns if isinstance(ns, str) and ns else default


def missing_objects(objs: Iterable[Any], index: ObjectIndex, namespace: str) -> list[tuple[str, str, str | None, str]]:
    """``(group, kind, namespace, name)`` of the objects that the workloads in ``objs`` refer to
    and ``index`` lacks, each once; ``namespace``: where objects without one are applied."""
    out: list[tuple[str, str, str | None, str]] = []
    for obj in objs:
        for kind, workload in _workloads(obj):
            for ref in kind.referenced_objects(workload, _namespace(workload, namespace)):
                group, rkind, ns, name = ref
                held = index.lookup(group, rkind, ns, name) if ns is not None else next(
                    (o for o in index.objects(group, rkind) if isinstance(o.get("metadata"), _MAPPING) and o["metadata"].get("name") == name), None)
                if held is None and ref not in out:
                    out.append(ref)
    return out


def missing_configmaps(objs: Iterable[Any], index: ObjectIndex, namespace: str) -> list[tuple[str, str]]:
    """``(namespace, name)`` of the ConfigMaps the training pods of ``objs`` read env from (their
    references resolved through ``index``) that ``index`` lacks."""
    out: list[tuple[str, str]] = []
    for obj in objs:
        for kind, workload in _workloads(obj):
            ns = _namespace(workload, namespace)
            for view in kind.pod_templates(workload, kinds.CheckContext("baseline", index, ns)):
                containers = [c for key in ("initContainers", "containers") for c in (view.pod_spec.get(key) or []) if isinstance(c, _MAPPING)]
                if view.container_index is None and isinstance(view.container, _MAPPING):
                    containers.append(view.container)  # a merged container (a TrainJob's trainer)
                for name in _configmap_names(containers):
                    if index.get(ns, name) is None and (ns, name) not in out:
                        out.append((ns, name))
    return out


def _configmap_names(containers: Iterable[Mapping[str, Any]]) -> list[str]:
    names: dict[str, None] = {}
    for c in containers:
        for src in c.get("envFrom") or []:
            ref = src.get("configMapRef") if isinstance(src, _MAPPING) else None
            if isinstance(ref, _MAPPING) and isinstance(ref.get("name"), str) and ref["name"]:
                names[ref["name"]] = None
        for var in c.get("env") or []:
            vf = var.get("valueFrom") if isinstance(var, _MAPPING) else None
            ref = vf.get("configMapKeyRef") if isinstance(vf, _MAPPING) else None
            if isinstance(ref, _MAPPING) and isinstance(ref.get("name"), str) and ref["name"]:
                names[ref["name"]] = None
    return list(names)


def resolve_from_cluster(reader: ReferenceReader, objs: list[Any], index: ObjectIndex, namespace: str) -> list[str]:
    """Read what ``objs`` refer to and ``index`` lacks from ``reader`` into ``index``.

    Args:
        reader: the cluster (read-only GETs).
        objs: the input's parsed objects (documents; lists and wrappers are opened).
        index: the input's ConfigMaps and referenced objects, its ``default_namespace`` set to
            ``namespace``; gains what is found, and records what is not (:meth:`ObjectIndex.mark_searched`).
        namespace: where objects without a namespace are applied (``-n``, else the context's).

    Returns:
        One line per object read, for the log (``ClusterTrainingRuntime k8sddp-torch``).

    Raises:
        ClusterError: a read failed (forbidden, unreachable, an API error other than NotFound).
    """
    where = f"the cluster at {reader.server}"
    read: list[str] = []
    for group, kind, ns, name in missing_objects(objs, index, namespace):
        model = next((k for k in kinds.kinds() if (k.group, k.kind) == (group, kind)), None)
        if model is None:
            continue  # (a reference to a kind k8sddp does not know: nothing to check it with)
        got = reader.read_object(group, model.status.version, model.status.plural, name, namespace=ns)
        if got is None:
            index.mark_searched(group, kind, ns, name, where)
            continue
        got = {"apiVersion": f"{group}/{model.status.version}", "kind": kind, **got}
        index.add(got)
        read.append(f"{kind} {ns + '/' if ns else ''}{name}")
    for ns, name in missing_configmaps(objs, index, namespace):
        cm = reader.read_configmap(name, namespace=ns)
        if cm is None:
            continue  # (the env resolution says the ConfigMap is missing)
        index.add(cm)
        read.append(f"ConfigMap {ns}/{name}")
    return read
