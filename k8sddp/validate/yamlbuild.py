"""Turn libyaml's nodes into Python values fast, refusing duplicate keys and cycles.

PyYAML's ``CSafeLoader`` parses and composes in C but constructs values with generic Python
machinery (generators, per-node bookkeeping) and resolves every scalar's tag with a regular
expression: three quarters of validate's time (cProfile on ``bench/validate_bench.py``'s corpus).
:class:`Builder` builds values from the composed nodes in one tight recursive pass, following
PyYAML's ``SafeConstructor`` for every tag (str/null/bool/map/seq inline, the rare tags through
PyYAML itself), so the values are the same; :class:`FastLoader` makes the resolver callbacks libyaml
makes per node cheaper. Used by :mod:`.yamlio`.
"""

from __future__ import annotations

from typing import Any

import yaml

BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping has the same key twice (YAML forbids it; parsers disagree on which wins)."""


class _Loader(BaseLoader):  # type: ignore[misc,valid-type]
    """``CSafeLoader`` that refuses duplicate keys among a mapping's own (non-merged) keys."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[str, str]] = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    ident = (key_node.tag, key_node.value)
                    if ident in seen:
                        raise DuplicateKeyError(
                            "while constructing a mapping",
                            node.start_mark,
                            f"found duplicate key {key_node.value!r}",
                            key_node.start_mark,
                        )
                    seen.add(ident)
        return super().construct_mapping(node, deep=deep)


def _construct_map(loader: _Loader, node: Any) -> Any:
    # Two-step, as PyYAML's own construct_yaml_map: the empty dict exists before its members, so
    # a mapping that contains itself through an alias is built (and reported as KDP003) instead of
    # failing as "found unconstructable recursive node".
    data: dict[Any, Any] = {}
    yield data
    data.update(loader.construct_mapping(node))


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)

_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_BOOL_VALUES: dict[str, bool] = yaml.constructor.SafeConstructor.bool_values
_SCALAR = yaml.ScalarNode

#: Tags of plain scalars already resolved, shared by every file a process reads: manifests repeat
#: the same keys and values, and PyYAML's resolver runs a regular expression per scalar.
_RESOLVED: dict[tuple[str, Any], str] = {}
_RESOLVED_MAX = 65_536
_RESOLVED_LEN = 100  # longer values are resolved every time (so the memo stays under ~10 MB)


class FastLoader(_Loader):
    """:class:`_Loader` with cheaper resolver callbacks (libyaml calls them for every node).

    The safe loader has no path resolvers (``yaml_path_resolvers`` is empty), so an untagged
    collection is always a map or a seq and ``descend_resolver``/``ascend_resolver`` do nothing:
    they are replaced by C callables that do nothing faster; scalar tags are memoised.
    """

    descend_resolver: Any = {}.get  # (node, index) -> index: a no-op implemented in C
    ascend_resolver: Any = tuple  # () -> (): likewise

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """The tag of an untagged node (PyYAML's ``Resolver.resolve``, memoised for short scalars)."""
        if kind is yaml.ScalarNode:
            if len(value) > _RESOLVED_LEN:  # a script or a certificate: rare, and not kept in memory
                return super().resolve(kind, value, implicit)
            key = (value, implicit)
            tag = _RESOLVED.get(key)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(_RESOLVED) < _RESOLVED_MAX:
                    _RESOLVED[key] = tag
            return tag
        return _MAP if kind is yaml.MappingNode else _SEQ


assert not FastLoader.yaml_path_resolvers, "the resolver shortcuts assume no path resolvers"


class RecursiveAliasError(ValueError):
    """A node contains itself through an alias (KDP003)."""


class Builder:
    """Build Python values from one document's nodes, as PyYAML's SafeConstructor would.

    Collections are memoised by node identity, so an alias is the same object as its anchor and a
    billion-laughs document costs one pass over its distinct nodes. A node reached again while it
    is being built is a cycle: :class:`RecursiveAliasError`. Mappings refuse duplicate own keys
    (:class:`DuplicateKeyError`); merge keys (``<<``) are applied as PyYAML does (own keys win).
    """

    def __init__(self, loader: _Loader) -> None:
        self._loader = loader
        self._done: dict[int, Any] = {}
        self._active: set[int] = set()

    def build(self, node: Any) -> Any:
        """The value of ``node`` and everything under it.

        Raises:
            DuplicateKeyError: a mapping repeats one of its own keys.
            RecursiveAliasError: a node contains itself.
            yaml.YAMLError: a tag PyYAML cannot construct, an unhashable key, a bad merge.
            RecursionError: nested too deeply for Python's stack.
        """
        cls, tag = node.__class__, node.tag
        if cls is yaml.ScalarNode:
            if tag == _STR:
                return node.value
            if tag == _NULL:
                return None
            if tag == _BOOL:
                return _BOOL_VALUES[node.value.lower()]
            if tag == _TIMESTAMP:
                # The API server's YAML decoder (go-yaml v2 into interface{}) keeps a plain
                # timestamp such as 2024-01-01 a string "for backward compatibility"; a date
                # object would also crash the JSON Schema validator.
                return node.value
            return self._loader.construct_object(node, deep=True)  # int, float, timestamp, !!binary...
        key = id(node)
        if key in self._done:
            return self._done[key]
        if key in self._active:
            raise RecursiveAliasError("recursive alias: the document contains itself")
        if cls is yaml.SequenceNode and tag == _SEQ:
            self._active.add(key)
            value: Any = [
                child.value if child.__class__ is _SCALAR and child.tag == _STR else self.build(child) for child in node.value
            ]
        elif cls is yaml.MappingNode and tag == _MAP:
            self._active.add(key)
            value = self._mapping(node)
        else:
            return self._loader.construct_object(node, deep=True)  # !!set, !!omap, unknown tags (an error)
        self._active.discard(key)
        self._done[key] = value
        return value

    def _key(self, node: Any) -> Any:
        if node.__class__ is yaml.ScalarNode and node.tag == _STR:
            return node.value
        key = self.build(node)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", None, "found unhashable key", node.start_mark
            ) from None
        return key

    def _mapping(self, node: Any) -> dict[Any, Any]:
        pairs = node.value
        out: dict[Any, Any] = {}
        for key_node, value_node in pairs:
            # Plain string keys and values (most of a manifest) inline: a call per node is a third
            # of the building time.
            if key_node.__class__ is _SCALAR and key_node.tag == _STR:
                key = key_node.value
            elif key_node.tag == _MERGE:
                break
            else:
                key = self._key(key_node)
            out[key] = value_node.value if value_node.__class__ is _SCALAR and value_node.tag == _STR else self.build(value_node)
        else:
            if len(out) == len(pairs):
                return out  # the common case: no merge key, no duplicate
        # Rare: a merge key, or fewer keys than pairs (a duplicate, or equal values such as yes/true).
        seen: set[tuple[str, str]] = set()
        for key_node, _ in pairs:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE:
                ident = (key_node.tag, key_node.value)
                if ident in seen:
                    raise DuplicateKeyError(
                        "while constructing a mapping", node.start_mark, f"found duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add(ident)
        self._loader.flatten_mapping(node)  # PyYAML's merge: merged pairs first, own keys after
        out = {}
        for key_node, value_node in node.value:
            out[self._key(key_node)] = self.build(value_node)
        return out
