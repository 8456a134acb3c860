"""The objects of the whole input that a kind may resolve references to.

:class:`ObjectIndex` is a :class:`~.envresolve.ConfigMapIndex` (so the env resolution reads it
unchanged) that also holds the objects of the kinds that a registered kind refers to by name
(``Kind.references``: a Trainer ``TrainingRuntime`` for a ``TrainJob``, a ``RayCluster`` for a
``RayJob`` with a cluster selector), looked up by API group, kind, namespace and name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .envresolve import ConfigMapIndex

__all__ = ["ObjectIndex", "api_group"]

_MAPPING = (dict, Mapping)


def api_group(api_version: Any) -> str:
    """The API group of an ``apiVersion`` (``kubeflow.org/v1`` -> ``kubeflow.org``; ``v1`` -> ``""``)."""
    text = api_version if isinstance(api_version, str) else ""
    return text.rsplit("/", 1)[0] if "/" in text else ""


class ObjectIndex(ConfigMapIndex):
    """ConfigMaps (``v1``) and the objects of the referenced kinds, by namespace and name.

    Args:
        references: ``(API group, kind)`` pairs to keep besides ConfigMaps (the registry's
            :func:`k8sddp.kinds.referenced_kinds`).
        default_namespace: the namespace objects without one are applied to (``None``: unknown).
    """

    def __init__(self, references: Iterable[tuple[str, str]] = (), default_namespace: str | None = None) -> None:
        super().__init__(default_namespace=default_namespace)
        self.references = frozenset(references)
        self._objects: dict[tuple[str, str, str | None, str], Mapping[str, Any]] = {}
        self._searched: dict[tuple[str, str, str | None, str], str] = {}

    def wants(self, obj: Any) -> bool:
        """True for a ConfigMap or an object of a referenced kind."""
        if not isinstance(obj, _MAPPING):
            return False
        if obj.get("kind") == "ConfigMap" and obj.get("apiVersion") == "v1":
            return True
        return (api_group(obj.get("apiVersion")), str(obj.get("kind"))) in self.references

    def add(self, obj: Mapping[str, Any]) -> None:
        """Add a ConfigMap or an object of a referenced kind (others, and nameless ones, are ignored)."""
        if obj.get("kind") == "ConfigMap" and obj.get("apiVersion") == "v1":
            super().add(obj)
            return
        key = (api_group(obj.get("apiVersion")), str(obj.get("kind")))
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, _MAPPING) else None
        if key not in self.references or not isinstance(name, str):
            return
        ns = meta.get("namespace") if isinstance(meta, _MAPPING) and isinstance(meta.get("namespace"), str) and meta.get("namespace") else None
        self._objects[(key[0], key[1], ns or self.default_namespace, name)] = obj

    def lookup(self, group: str, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The object ``group``/``kind`` named ``name`` in ``namespace`` (``None`` or ``""``: the
        default namespace; a cluster-scoped kind is stored and found under that too), or ``None``."""
        if not isinstance(namespace, str) or not namespace:
            namespace = self.default_namespace
        return self._objects.get((group, kind, namespace, name))

    def objects(self, group: str, kind: str) -> list[Mapping[str, Any]]:
        """Every held object of ``group``/``kind``, in input order."""
        return [o for (g, k, _, _), o in self._objects.items() if (g, k) == (group, kind)]

    def mark_searched(self, group: str, kind: str, namespace: str | None, name: str, where: str) -> None:
        """Record that the object was looked for in ``where`` (``"the cluster at https://..."``) and
        is not there (``validate --cluster``); ``namespace`` ``None`` for a cluster-scoped kind."""
        self._searched[(group, kind, namespace, name)] = where

    def searched(self, group: str, kind: str, namespace: str | None, name: str) -> str:
        """Where the object was looked for besides the input and not found (``""``: nowhere); a
        namespaced object without a namespace is taken to be in the default namespace."""
        if namespace is None and (group, kind, None, name) not in self._searched:
            namespace = self.default_namespace
        return self._searched.get((group, kind, namespace, name), "")

    def elsewhere_object(self, group: str, kind: str, namespace: str | None, name: str) -> str:
        """For a message: ``" (the input has it in namespace 'b')"`` when a namespaced object
        ``name`` of ``group``/``kind`` is held only in other namespaces (a TrainJob reads a
        ``TrainingRuntime`` of its own namespace only)."""
        if not isinstance(namespace, str) or not namespace:
            namespace = self.default_namespace
        others = sorted(str(ns) for (g, k, ns, n) in self._objects if (g, k, n) == (group, kind, name) and ns != namespace and ns is not None)
        if not others:
            return ""
        return f" (the input has it in namespace {', '.join(repr(o) for o in others)}; a TrainJob reads its own namespace's only)"
