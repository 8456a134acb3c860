"""Strategic merge patch of a pod template, as the API server and ``kubectl patch --type=strategic``
apply it (k8s.io/apimachinery/pkg/util/strategicpatch, ``StrategicMergePatch`` with
``MergeOptions{MergeParallelList: true, IgnoreUnmatchedNulls: true}``).

What it does, as the library does:
    - maps merge key by key; a ``null`` value deletes the key;
    - lists of the fields the Kubernetes types tag ``patchStrategy:"merge"`` merge item by item on
      their ``patchMergeKey`` (:data:`MERGE_KEYS`: containers, volumes and env by ``name``,
      volumeMounts by ``mountPath``, ports by ``containerPort``, ...); items the original lacks are
      placed first, in patch order (the library's ``mergeSortedSlice``), the others keep their order;
      every other list is replaced by the patch's;
    - directives: ``$patch: replace`` (a map or list replaced, not merged), ``$patch: delete`` (a
      map emptied; a list item removed by its merge key), ``$retainKeys`` (keys of the original not
      listed are dropped), ``$deleteFromPrimitiveList/<field>`` (values removed from a merged list of
      scalars such as ``finalizers``).

Refused with :class:`SmpError` (where the library errors too): an unknown ``$patch`` value,
``$patch: merge`` in a list, a list item without its merge key, and ``$setElementOrder/<field>``,
which k8sddp does not implement (write the items in the order wanted, or ``$patch: replace``).

Values the patch adds where the original has nothing (or holds another type) are taken as they
are, nulls dropped and every map holding ``$patch`` removed (the library's ``removeDirectives``); the rendered result is then validated, so what the API server would refuse is
refused before it leaves ``render``.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["MERGE_KEYS", "SmpError", "patch_pod_template"]

DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
DELETE_FROM_PRIMITIVE = "$deleteFromPrimitiveList/"
SET_ELEMENT_ORDER = "$setElementOrder/"

#: Struct type -> field -> (merge key, or "" for a merged list of scalars; element type). Fields
#: not listed: maps merge recursively as an untyped struct, lists are replaced. From the
#: ``patchStrategy:"merge" patchMergeKey:...`` tags of k8s.io/api core/v1 types.go (ObjectMeta
#: from apimachinery meta/v1).
MERGE_KEYS: dict[str, dict[str, tuple[str, str]]] = {
    "PodTemplateSpec": {},
    "ObjectMeta": {"finalizers": ("", ""), "ownerReferences": ("uid", "")},
    "PodSpec": {
        "volumes": ("name", ""),
        "initContainers": ("name", "Container"),
        "containers": ("name", "Container"),
        "ephemeralContainers": ("name", "Container"),
        "imagePullSecrets": ("name", ""),
        "hostAliases": ("ip", ""),
        "topologySpreadConstraints": ("topologyKey", ""),
        "resourceClaims": ("name", ""),
        "schedulingGates": ("name", ""),
    },
    "Container": {
        "ports": ("containerPort", ""),
        "env": ("name", ""),
        "volumeMounts": ("mountPath", ""),
        "volumeDevices": ("devicePath", ""),
    },
}
#: Map fields whose value is a typed struct (others: untyped).
_MAP_TYPES = {("PodTemplateSpec", "metadata"): "ObjectMeta", ("PodTemplateSpec", "spec"): "PodSpec"}


class SmpError(ValueError):
    """A patch the strategic-merge rules refuse; ``path`` is the JSON path in the patch."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def patch_pod_template(template: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply ``patch`` (a PodTemplateSpec-shaped strategic-merge patch) to ``template``.

    Args:
        template: ``{"metadata": {...}, "spec": {...}}``; not modified.
        patch: the patch; not modified.

    Returns:
        The patched template (a new object).

    Raises:
        SmpError: a directive or list the strategic-merge rules refuse (located in the patch).
    """
    return _merge_map(copy.deepcopy(template), copy.deepcopy(patch), "PodTemplateSpec", "")


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _discard_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        for key in [k for k, v in value.items() if v is None]:
            del value[key]
        for v in value.values():
            _discard_nulls(v)
    elif isinstance(value, list):
        for v in value:
            _discard_nulls(v)
    return value


def _remove_directives(value: Any) -> tuple[Any, bool]:
    """strategicpatch's ``removeDirectives``, applied to a value taken whole from the patch (the
    original lacks the key, or holds another type): a map holding ``$patch`` is dropped, in a map
    (the key goes) or a list (the item goes), at any depth. Returns (value, keep it)."""
    if isinstance(value, dict):
        if DIRECTIVE in value:
            return None, False
        for key in list(value):
            value[key], keep = _remove_directives(value[key])
            if not keep:
                del value[key]
        return value, True
    if isinstance(value, list):
        return [v for v, keep in map(_remove_directives, value) if keep], True
    return value, True


def _merge_map(original: dict[str, Any], patch: dict[str, Any], kind: str, path: str) -> dict[str, Any]:
    if DIRECTIVE in patch:
        directive = patch[DIRECTIVE]
        if directive == "replace":
            del patch[DIRECTIVE]
            return patch
        if directive == "delete":
            return {}
        raise SmpError(f"unknown $patch directive {directive!r} (replace or delete)", f"{path}.$patch")
    if RETAIN_KEYS in patch:
        keep = patch.pop(RETAIN_KEYS)
        if not isinstance(keep, list):
            raise SmpError("$retainKeys must be a list of keys", f"{path}.$retainKeys")
        for key in [k for k in original if k not in keep]:
            del original[key]
    fields = MERGE_KEYS.get(kind, {})
    for key, value in patch.items():
        here = f"{path}.{key}"
        if key.startswith(SET_ELEMENT_ORDER):
            raise SmpError("$setElementOrder is not supported by k8sddp: list the items in the order wanted, "
                           "or replace the list with $patch: replace", here)
        if key.startswith(DELETE_FROM_PRIMITIVE):
            field = key[len(DELETE_FROM_PRIMITIVE):]
            current = original.get(field)
            if isinstance(current, list) and isinstance(value, list):
                original[field] = [v for v in current if v not in value]
            continue
        if key.startswith("$"):
            raise SmpError(f"unknown directive {key!r}", here)
        if value is None:
            original.pop(key, None)
            continue
        if key not in original or type(original[key]) is not type(value):
            kept, keep = _remove_directives(_discard_nulls(value))
            if keep:
                original[key] = kept
            else:
                original.pop(key, None)
            continue
        if isinstance(value, dict):
            original[key] = _merge_map(original[key], value, _MAP_TYPES.get((kind, key), ""), here)
        elif isinstance(value, list):
            merge = fields.get(key)
            original[key] = value if merge is None else _merge_list(original[key], value, merge, here)
        else:
            original[key] = value
    return original


def _merge_list(original: list[Any], patch: list[Any], merge: tuple[str, str], path: str) -> list[Any]:
    key, item_kind = merge
    if not original and not patch:
        return original
    if all(_is_scalar(v) for v in original + patch):
        merged: list[Any] = []
        for v in original + patch:
            if v not in merged:
                merged.append(v)
        in_patch = [v for v in merged if v in patch]
        server_only = [v for v in merged if v not in patch]
        return _interleave(server_only, sorted(in_patch, key=patch.index), original, lambda v: v)
    if not key or not all(isinstance(v, dict) for v in original + patch):
        raise SmpError("a list merged by key must hold objects only", path)
    # special elements: $patch: delete / replace items
    plain: list[dict[str, Any]] = []
    replace = False
    for i, item in enumerate(patch):
        if DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[DIRECTIVE]
        if directive == "delete":
            if key not in item:
                raise SmpError(f"a $patch: delete item needs its merge key {key!r}", f"{path}[{i}]")
            original = [o for o in original if o.get(key) != item[key]]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise SmpError("merging lists cannot yet be specified in the patch", f"{path}[{i}].$patch")
        else:
            raise SmpError(f"unknown $patch directive {directive!r} (replace or delete)", f"{path}[{i}].$patch")
    if replace:
        return plain
    merged_maps = list(original)
    for i, item in enumerate(plain):
        if key not in item:
            raise SmpError(f"every item needs its merge key {key!r}", f"{path}[{i}]")
        found = next((j for j, o in enumerate(merged_maps) if o.get(key) == item[key]), None)
        if found is None:
            merged_maps.append(item)
        else:
            merged_maps[found] = _merge_map(merged_maps[found], item, item_kind, f"{path}[{i}]")
    patch_keys = [p[key] for p in plain]
    in_patch = sorted((m for m in merged_maps if m.get(key) in patch_keys), key=lambda m: patch_keys.index(m.get(key)))
    server_only = [m for m in merged_maps if m.get(key) not in patch_keys]
    return _interleave(server_only, in_patch, original, lambda m: m.get(key))


def _interleave(left: list[Any], right: list[Any], server_order: list[Any], ident: Any) -> list[Any]:
    """strategicpatch's ``mergeSortedSlice``: insert the server-only items (``left``) among the
    patch's items (``right``), both kept in their order, by their positions in the original."""
    order = [ident(v) for v in server_order]

    def position(v: Any) -> int:
        i = ident(v)
        return order.index(i) if i in order else -1

    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li, ri = position(left[i]), position(right[j])
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out
