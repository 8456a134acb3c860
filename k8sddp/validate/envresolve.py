"""Resolve a container's effective environment from a manifest, as the kubelet would.

Semantics (``../shared/reference/NOTES.md``, Kubernetes semantics): ``envFrom`` sources apply in
order (a later source wins), each key gets the source's ``prefix``; an ``env`` entry wins over every
``envFrom`` source; a ConfigMap must be in the pod's namespace. k8sddp never reads Secrets, so a
value that comes from a Secret, a field or resource reference, a file, or a ConfigMap that the input
does not hold is *unresolved*: it cannot be verified and is reported as such, never passed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["ConfigMapIndex", "EnvValue", "effective_env"]

#: Key of a ConfigMap: (namespace or None for "the namespace it will be applied to", name).
ConfigMapKey = tuple[str | None, str]


@dataclasses.dataclass(frozen=True)
class EnvValue:
    """The effective value of one variable.

    Attributes:
        value: the string value, or ``None`` when unresolved.
        source: where it comes from, for messages (``env``, ``ConfigMap 'x' (envFrom)``...).
        unresolved: why the value cannot be known from the input (empty when resolved).
    """

    value: str | None
    source: str
    unresolved: str = ""


class ConfigMapIndex:
    """ConfigMaps of the input, looked up by namespace and name.

    Args:
        configmaps: ConfigMap objects (dicts with ``metadata.name``, optional ``metadata.namespace``
            and ``data``).
        default_namespace: the namespace objects without one will be applied to, when known
            (``None``: the same unknown namespace for all of them).
    """

    def __init__(self, configmaps: list[Mapping[str, Any]] = (), default_namespace: str | None = None) -> None:  # type: ignore[assignment]
        self.default_namespace = default_namespace
        self._maps: dict[ConfigMapKey, dict[str, str]] = {}
        for cm in configmaps:
            self.add(cm)

    def add(self, cm: Mapping[str, Any]) -> None:
        """Add one ConfigMap object (ignored if it has no name)."""
        meta = cm.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str):
            return
        data = cm.get("data") or {}
        ns = meta.get("namespace") or self.default_namespace
        self._maps[(ns, name)] = {str(k): v for k, v in data.items() if isinstance(v, str)} if isinstance(data, Mapping) else {}

    def get(self, namespace: str | None, name: str) -> dict[str, str] | None:
        """The ConfigMap's ``data``, or ``None`` if the input does not hold it."""
        return self._maps.get((namespace or self.default_namespace, name))

    def __len__(self) -> int:
        return len(self._maps)


def _value_from(ref: Any, namespace: str | None, cms: ConfigMapIndex) -> EnvValue | None:
    """Resolve an ``env[].valueFrom``; ``None`` means the variable is not set at all."""
    if not isinstance(ref, Mapping):
        return EnvValue(None, "valueFrom", "valueFrom is not an object")
    cm_ref = ref.get("configMapKeyRef")
    if isinstance(cm_ref, Mapping):
        cm_name, key = cm_ref.get("name"), cm_ref.get("key")
        where = f"key {key!r} of ConfigMap {cm_name!r} (valueFrom)"
        data = cms.get(namespace, str(cm_name))
        if data is None:
            return EnvValue(None, where, f"ConfigMap {cm_name!r} is not in the input")
        if key in data:
            return EnvValue(data[str(key)], where)
        if cm_ref.get("optional"):
            return None
        return EnvValue(None, where, f"ConfigMap {cm_name!r} has no key {key!r} (the pod would not start)")
    for kind, label in (
        ("secretKeyRef", "a Secret"),
        ("fieldRef", "a field reference"),
        ("resourceFieldRef", "a resource field reference"),
        ("fileKeyRef", "a file key reference"),
    ):
        if kind in ref:
            sub = ref.get(kind) or {}
            name = sub.get("name") if isinstance(sub, Mapping) else None
            what = f"{label} {name!r}" if name else label
            return EnvValue(None, f"{what} (valueFrom)", f"it comes from {what}, which k8sddp cannot read")
    return EnvValue(None, "valueFrom", "valueFrom names no known source")


def effective_env(container: Mapping[str, Any], namespace: str | None, cms: ConfigMapIndex) -> dict[str, EnvValue]:
    """The effective environment of ``container``.

    Args:
        container: a pod-spec container (``env``, ``envFrom``).
        namespace: the pod's namespace (``None``: the namespace it will be applied to).
        cms: the ConfigMaps the input holds.

    Returns:
        Variable name -> :class:`EnvValue`, in a stable order. A variable that an unresolvable
        ``envFrom`` source might set (and no ``env`` entry overrides) is unresolved.
    """
    result: dict[str, EnvValue] = {}
    # Unresolvable envFrom sources seen so far; any of them may define any variable.
    opaque: list[str] = []
    opaque_at: dict[str, int] = {}
    env_from = container.get("envFrom") or []
    for source in env_from if isinstance(env_from, list) else []:
        if not isinstance(source, Mapping):
            continue
        prefix = str(source.get("prefix") or "")
        cm_ref = source.get("configMapRef")
        if isinstance(cm_ref, Mapping):
            cm_name = str(cm_ref.get("name"))
            data = cms.get(namespace, cm_name)
            if data is not None:
                for key, value in data.items():
                    result[prefix + key] = EnvValue(value, f"ConfigMap {cm_name!r} (envFrom)")
                    opaque_at[prefix + key] = len(opaque)
                continue
            opaque.append(f"ConfigMap {cm_name!r} (envFrom), which is not in the input")
            continue
        secret_ref = source.get("secretRef")
        name = secret_ref.get("name") if isinstance(secret_ref, Mapping) else None
        opaque.append(f"Secret {name!r} (envFrom), which k8sddp cannot read")
    env = container.get("env") or []
    explicit: set[str] = set()
    for entry in env if isinstance(env, list) else []:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        name = entry["name"]
        explicit.add(name)
        if "valueFrom" in entry:
            resolved = _value_from(entry["valueFrom"], namespace, cms)
            if resolved is None:
                result.pop(name, None)
            else:
                result[name] = resolved
        else:
            value = entry.get("value", "")
            result[name] = EnvValue(value if isinstance(value, str) else str(value), "env")
    if opaque:
        result = _OpaqueEnv(result, opaque, opaque_at, explicit)
    return result


class _OpaqueEnv(dict[str, EnvValue]):
    """An effective env with unresolvable ``envFrom`` sources: a lookup of a variable that no
    ``env`` entry sets, and that no resolvable source sets *after* the last opaque one, is
    unresolved."""

    def __init__(self, known: dict[str, EnvValue], opaque: list[str], opaque_at: dict[str, int], explicit: set[str]) -> None:
        super().__init__(known)
        self._opaque = opaque
        self._opaque_at = opaque_at
        self._explicit = explicit

    def _maybe_overridden(self, name: str) -> bool:
        if name in self._explicit:
            return False
        # A resolvable envFrom source set it after opaque[k-1]; later opaque sources may override.
        return self._opaque_at.get(name, 0) < len(self._opaque)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (super().__contains__(name) or self._maybe_overridden(name))

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        if self._maybe_overridden(name):
            return EnvValue(None, self._opaque[-1], "it may come from " + self._opaque[-1])
        return super().get(name, default)

    def __getitem__(self, name: str) -> EnvValue:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value
