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

#: ``dict`` first: ``isinstance`` against the ``Mapping`` ABC alone costs several times more, and
#: these checks run many times for every manifest.
_MAPPING = (dict, Mapping)

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
        name = meta.get("name") if isinstance(meta, _MAPPING) else None
        if not isinstance(name, str):
            return
        data = cm.get("data") or {}
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) and meta.get("namespace") else self.default_namespace
        self._maps[(ns, name)] = {str(k): v for k, v in data.items() if isinstance(v, str)} if isinstance(data, _MAPPING) else {}

    def get(self, namespace: str | None, name: str) -> dict[str, str] | None:
        """The ConfigMap's ``data``, or ``None`` if the input does not hold it."""
        if not isinstance(namespace, str) or not namespace:
            namespace = self.default_namespace
        return self._maps.get((namespace, name))

    def elsewhere(self, namespace: str | None, name: str) -> str:
        """For a message: ``" (the input has it in namespace 'b')"`` when a ConfigMap ``name``
        exists only in other namespaces (a pod reads ConfigMaps of its own namespace only)."""
        if not isinstance(namespace, str) or not namespace:
            namespace = self.default_namespace
        others = sorted(str(ns) for ns, n in self._maps if n == name and ns != namespace and ns is not None)
        if not others:
            return ""
        return f" (the input has it in namespace {', '.join(repr(o) for o in others)}; a pod reads its own namespace only)"

    def __len__(self) -> int:
        return len(self._maps)


def _value_from(ref: Any, namespace: str | None, cms: ConfigMapIndex) -> EnvValue | None:
    """Resolve an ``env[].valueFrom``; ``None`` means the entry is skipped (an optional key that the
    ConfigMap lacks), leaving any value ``envFrom`` gave the variable."""
    if not isinstance(ref, _MAPPING):
        return EnvValue(None, "valueFrom", "valueFrom is not an object")
    cm_ref = ref.get("configMapKeyRef")
    if isinstance(cm_ref, _MAPPING):
        cm_name, key = cm_ref.get("name"), cm_ref.get("key")
        where = f"key {key!r} of ConfigMap {cm_name!r} (valueFrom)"
        data = cms.get(namespace, str(cm_name))
        if data is None:
            return EnvValue(None, where, f"ConfigMap {cm_name!r} is not in the input{cms.elsewhere(namespace, str(cm_name))}")
        if isinstance(key, str) and key in data:
            return EnvValue(data[key], where)
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
            name = sub.get("name") if isinstance(sub, _MAPPING) else None
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
    # (description, prefix): a source with a prefix can only set names that start with it.
    opaque: list[tuple[str, str]] = []
    opaque_at: dict[str, int] = {}
    env_from = container.get("envFrom") or []
    for source in env_from if isinstance(env_from, list) else []:
        if not isinstance(source, _MAPPING):
            continue
        prefix = str(source.get("prefix") or "")
        cm_ref = source.get("configMapRef")
        if isinstance(cm_ref, _MAPPING):
            cm_name = str(cm_ref.get("name"))
            data = cms.get(namespace, cm_name)
            if data is not None:
                for key, value in data.items():
                    result[prefix + key] = EnvValue(value, f"ConfigMap {cm_name!r} (envFrom)")
                    opaque_at[prefix + key] = len(opaque)
                continue
            opaque.append((f"ConfigMap {cm_name!r} (envFrom), which is not in the input{cms.elsewhere(namespace, cm_name)}", prefix))
            continue
        secret_ref = source.get("secretRef")
        name = secret_ref.get("name") if isinstance(secret_ref, _MAPPING) else None
        opaque.append((f"Secret {name!r} (envFrom), which k8sddp cannot read", prefix))
    env = container.get("env") or []
    explicit: set[str] = set()
    # Lookups while env is read follow the same rules as the finished result ($(VAR) references).
    result = _OpaqueEnv(result, opaque, opaque_at, explicit)
    for entry in env if isinstance(env, list) else []:
        if not isinstance(entry, _MAPPING) or not isinstance(entry.get("name"), str):
            continue
        name = entry["name"]
        # The kubelet's order (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables): a non-empty
        # value wins, else valueFrom; null is pruned by the API server, so it is the empty string.
        raw = entry.get("value")
        value = "" if raw is None else raw if isinstance(raw, str) else str(raw)
        if value == "" and entry.get("valueFrom") is not None:
            resolved = _value_from(entry["valueFrom"], namespace, cms)
            if resolved is None:
                # An optional reference to a missing key is skipped: whatever envFrom set stays.
                continue
            result[name] = resolved
        elif "$" in value:
            result[name] = _expand(value, result)
        else:
            result[name] = EnvValue(value, "env")
        explicit.add(name)
    return result if opaque else dict(result)


def _expand(value: str, env: dict[str, EnvValue]) -> EnvValue:
    """``$(VAR)`` references in an env ``value``, expanded as the kubelet does.

    Source: kubernetes third_party/forked/golang/expansion/expand.go (``Expand``,
    ``MappingFuncFor``): ``$(NAME)`` becomes the value of a variable defined before it (by
    ``envFrom`` or an earlier ``env`` entry), ``$$`` becomes ``$``, and a reference to an undefined
    variable, or an unclosed ``$(``, stays as written. A reference to a variable whose value
    cannot be read makes this one unreadable too.
    """
    out: list[str] = []
    checkpoint = i = 0
    while i < len(value):
        if value[i] == "$" and i + 1 < len(value):
            out.append(value[checkpoint:i])
            nxt = value[i + 1]
            close = value.find(")", i + 2) if nxt == "(" else -1
            if nxt == "$":
                out.append("$")
            elif close != -1:
                name = value[i + 2 : close]
                ref = env.get(name)
                if ref is not None and ref.value is None:
                    return EnvValue(None, "env", f"it refers to $({name}), which cannot be verified: {ref.unresolved}")
                out.append(f"$({name})" if ref is None else ref.value or "")
                i = close - 1  # the loop's step lands after ")"
            else:
                out.append("$" + nxt)  # "$(" without ")", or "$x": kept
            i += 1
            checkpoint = i + 1
        i += 1
    out.append(value[checkpoint:])
    return EnvValue("".join(out), "env")


class _OpaqueEnv(dict[str, EnvValue]):
    """An effective env with unresolvable ``envFrom`` sources: a lookup of a variable that no
    ``env`` entry sets, and that no resolvable source sets *after* the last opaque one, is
    unresolved."""

    def __init__(self, known: dict[str, EnvValue], opaque: list[tuple[str, str]], opaque_at: dict[str, int], explicit: set[str]) -> None:
        super().__init__(known)
        self._opaque = opaque
        self._opaque_at = opaque_at
        self._explicit = explicit

    def _overriding(self, name: str) -> str:
        """The last unreadable source that may set ``name`` after what is known of it, or ``""``."""
        if name in self._explicit:
            return ""
        # A resolvable envFrom source set it after opaque[k-1]; later opaque sources may override,
        # but only those whose prefix the name starts with.
        for what, prefix in reversed(self._opaque[self._opaque_at.get(name, 0):]):
            if name.startswith(prefix):
                return what
        return ""

    def _maybe_overridden(self, name: str) -> bool:
        return bool(self._overriding(name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (super().__contains__(name) or self._maybe_overridden(name))

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        what = self._overriding(name)
        if what:
            return EnvValue(None, what, "it may come from " + what)
        return super().get(name, default)

    def __getitem__(self, name: str) -> EnvValue:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value
