"""YAML composed into nodes with the edges that anchors and aliases share, for :mod:`k8sddp.fix`.

PyYAML's composer turns an alias (``*env``) into the very node its anchor (``&env``) named, and
forgets where the alias stood. An in-place editor needs both facts: a node reached from two places
is edited for both (so fix may change it only when every place wants the same change), and the text
of an alias (``env: *env``) is not at the node's marks. :func:`compose` records, for every node, the
edges into it (parent node and key or index) and, for every edge written as an alias, the alias'
own end mark. :func:`paths_to` turns the edges into data paths (``(doc, "spec", ..., 0, "env")``).

Also here: the parse checks fix needs before it edits anything (YAML 1.1 as PyYAML reads it, no
duplicate keys, every document constructible).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from .findings import Finding, Severity

__all__ = ["Composed", "Unparseable", "compose", "paths_to"]

#: A key in a data path: a mapping key (the key's scalar text) or a sequence index.
PathKey = str | int


class Unparseable(Exception):
    """The text cannot be edited safely; ``finding`` is the located KDP001/KDP002 finding."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


@dataclasses.dataclass
class Composed:
    """The documents of one text and the edges between their nodes.

    Attributes:
        docs: the root nodes of the documents that are not empty (not null), in order.
        parents: ``id(node)`` -> ``[(parent node, key), ...]``, one entry per place the node is
            written or aliased (a key is a mapping key's text, or a sequence index).
        alias_ends: ``(id(parent), key)`` -> end mark of the alias token written there.
    """

    docs: list[yaml.Node]
    parents: dict[int, list[tuple[yaml.Node, PathKey]]]
    alias_ends: dict[tuple[int, PathKey], yaml.Mark]

    def alias_end(self, parent: yaml.Node, key: PathKey) -> yaml.Mark | None:
        """End mark of the alias written as ``parent[key]``, or None when the value is written there."""
        return self.alias_ends.get((id(parent), key))


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer records every edge and where each alias was written."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.edges: dict[int, list[tuple[yaml.Node, PathKey]]] = {}
        self.alias_marks: dict[tuple[int, PathKey], yaml.Mark] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:  # type: ignore[override]
        alias_end = self.peek_event().end_mark if self.check_event(yaml.AliasEvent) else None
        node: yaml.Node = super().compose_node(parent, index)  # type: ignore[arg-type,assignment]
        # A sequence item's index is an int; a mapping value's is its key node; a key's is None.
        if parent is not None and index is not None:
            key: PathKey = index if isinstance(index, int) else (
                index.value if isinstance(index, yaml.ScalarNode) else f"<key@{id(index)}>")
            self.edges.setdefault(id(node), []).append((parent, key))
            if alias_end is not None:
                self.alias_marks[(id(parent), key)] = alias_end
        return node


def _check_duplicates(node: yaml.Node, file: str, seen: set[int]) -> None:
    stack = [node]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in keys:
                        raise Unparseable(Finding(
                            "KDP002", Severity.ERROR,
                            f"duplicate key {k.value!r}: parsers disagree on which one wins; "
                            "file left unchanged",
                            file=file, line=k.start_mark.line + 1, column=k.start_mark.column + 1))
                    keys.add(k.value)
                stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def compose(text: str, file: str) -> Composed:
    """Compose ``text`` (every document) and check that fix may edit it.

    Args:
        text: the YAML or JSON text (no BOM).
        file: its name, for findings.

    Returns:
        The documents and their edges.

    Raises:
        Unparseable: a YAML error (KDP001, located), a value that composes but cannot be
            constructed, such as Helm's ``{{ x }}`` (KDP001), or a duplicate key (KDP002).
    """
    loader = _Loader(text)
    try:
        docs: list[yaml.Node] = []
        while loader.check_node():
            node = loader.get_node()
            # An empty document (`---` with nothing, or `null`) loads as None: not a document here.
            if node is not None and not (isinstance(node, yaml.ScalarNode)
                                         and node.tag == "tag:yaml.org,2002:null"):
                docs.append(node)
        for _ in yaml.safe_load_all(text):  # constructs too: `{{ x }}` composes but cannot load
            pass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise Unparseable(Finding(
            "KDP001", Severity.ERROR,
            f"cannot parse YAML: {exc.problem or exc.context}; file left unchanged", file=file,
            line=mark.line + 1 if mark else 0, column=mark.column + 1 if mark else 0)) from exc
    except (yaml.YAMLError, RecursionError) as exc:
        raise Unparseable(Finding("KDP001", Severity.ERROR,
                                  f"cannot parse YAML: {exc}; file left unchanged", file=file)) from exc
    finally:
        loader.dispose()
    seen: set[int] = set()
    for n in docs:
        _check_duplicates(n, file, seen)
    return Composed(docs, loader.edges, loader.alias_marks)


def paths_to(node: yaml.Node, composed: Composed, *, limit: int = 64) -> list[tuple[PathKey, ...]] | None:
    """Every data path (``(doc index, key, ...)``) at which ``node`` appears, aliases included.

    Args:
        node: a node of ``composed``.
        composed: from :func:`compose`.
        limit: the most paths worth listing.

    Returns:
        The paths, or None when there are more than ``limit`` or an alias makes a cycle (a node
        inside itself): such a node is never edited.
    """
    roots = {id(d): i for i, d in enumerate(composed.docs)}
    memo: dict[int, list[tuple[PathKey, ...]] | None] = {}

    def up(n: yaml.Node, visiting: frozenset[int]) -> list[tuple[PathKey, ...]] | None:
        if id(n) in memo:
            return memo[id(n)]
        if id(n) in visiting:
            return None
        out: list[tuple[PathKey, ...]] = []
        if id(n) in roots:
            out.append((roots[id(n)],))
        for parent, key in composed.parents.get(id(n), []):
            above = up(parent, visiting | {id(n)})
            if above is None:
                return None
            out += [p + (key,) for p in above]
            if len(out) > limit:
                return None
        memo[id(n)] = out
        return out

    return up(node, frozenset())
