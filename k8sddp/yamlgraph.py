"""YAML composed into nodes with the edges that anchors and aliases share, for :mod:`k8sddp.fix`.

PyYAML's composer turns an alias (``*env``) into the very node its anchor (``&env``) named, and
forgets where the alias stood. An in-place editor needs both facts: a node reached from two places
is edited for both (so fix may change it only when every place wants the same change), and the text
of an alias (``env: *env``) is not at the node's marks. :func:`compose` records, for every node, the
edges into it (parent node and key or index) and, for every edge written as an alias, the alias'
own end mark. :func:`paths_to` turns the edges into data paths (``(doc, "spec", ..., 0, "env")``).

Also here: the parse checks fix needs before it edits anything (YAML 1.1 as PyYAML reads it, with
libyaml as the validator reads it; no duplicate keys; every document constructible), and
:func:`load_all` / :func:`construct` for the self-check of the edited text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from .findings import Finding, Severity

__all__ = ["Composed", "Unparseable", "compose", "construct", "load_all", "paths_to"]

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


#: libyaml's parser when PyYAML has it (as the validator uses: same verdicts, and 10-20 times
#: faster than the pure-Python one); its marks count code points like the pure parser's.
_FastLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()


class _Composer:
    """PyYAML's composer rebuilt on parser events, recording every edge and where aliases stand.

    PyYAML's own composer forgets an alias' position, and libyaml's C composer cannot be hooked;
    events carry both. Tags are resolved as SafeLoader resolves them.
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.anchors: dict[str, yaml.Node] = {}
        self.edges: dict[int, list[tuple[yaml.Node, PathKey]]] = {}
        self.alias_marks: dict[tuple[int, PathKey], yaml.Mark] = {}

    def documents(self) -> list[yaml.Node]:
        loader = self.loader
        loader.get_event()  # StreamStart
        docs: list[yaml.Node] = []
        while not loader.check_event(yaml.StreamEndEvent):
            loader.get_event()  # DocumentStart
            self.anchors = {}
            docs.append(self.node(None, None))
            loader.get_event()  # DocumentEnd
        loader.get_event()
        return docs

    def _end(self) -> yaml.Mark:
        mark: Any = self.loader.get_event().end_mark
        return mark  # type: ignore[no-any-return]

    def node(self, parent: yaml.Node | None, key: PathKey | None) -> yaml.Node:
        loader = self.loader
        event: Any = loader.get_event()
        start: Any = event.start_mark  # libyaml's marks are another class with the same fields
        end: Any = event.end_mark
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in self.anchors:
                raise yaml.composer.ComposerError(None, None, f"found undefined alias {event.anchor!r}",
                                                  start)
            node = self.anchors[event.anchor]
            if parent is not None and key is not None:
                self.alias_marks[(id(parent), key)] = end
        else:
            anchor = event.anchor
            if anchor is not None and anchor in self.anchors:
                raise yaml.composer.ComposerError(
                    "found duplicate anchor; first occurrence", self.anchors[anchor].start_mark,
                    "second occurrence", start)
            tag = event.tag
            if isinstance(event, yaml.ScalarEvent):
                if tag is None or tag == "!":
                    tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)
                node = yaml.ScalarNode(tag, event.value, start, end, style=event.style)
                if anchor is not None:
                    self.anchors[anchor] = node
            elif isinstance(event, yaml.SequenceStartEvent):
                if tag is None or tag == "!":
                    tag = _RESOLVER.resolve(yaml.SequenceNode, None, event.implicit)
                seq = yaml.SequenceNode(tag, [], start, None, flow_style=event.flow_style)
                if anchor is not None:
                    self.anchors[anchor] = seq
                i = 0
                while not loader.check_event(yaml.SequenceEndEvent):
                    seq.value.append(self.node(seq, i))
                    i += 1
                seq.end_mark = self._end()
                node = seq
            else:  # MappingStartEvent
                if tag is None or tag == "!":
                    tag = _RESOLVER.resolve(yaml.MappingNode, None, event.implicit)
                mapping = yaml.MappingNode(tag, [], start, None, flow_style=event.flow_style)
                if anchor is not None:
                    self.anchors[anchor] = mapping
                while not loader.check_event(yaml.MappingEndEvent):
                    k = self.node(None, None)
                    name: PathKey = k.value if isinstance(k, yaml.ScalarNode) else f"<key@{id(k)}>"
                    mapping.value.append((k, self.node(mapping, name)))
                mapping.end_mark = self._end()
                node = mapping
        if parent is not None and key is not None:
            self.edges.setdefault(id(node), []).append((parent, key))
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


def _helm_hint(text: str) -> str:
    if "{{" in text and "}}" in text:
        return " (this looks like a Helm or Go template: render it with `helm template` and check the output)"
    return ""


def _go_action(text: str) -> tuple[int, int, str] | None:
    """``(line, column, KDP010 message)`` of the first Go/Helm action, as validate reports it."""
    from .validate.templates import GO_ACTION, go_action_line, helm_message

    found = go_action_line(text)
    if found is None:
        return None
    more = sum(len(GO_ACTION.findall(t)) for t in text.splitlines() if not t.lstrip().startswith("#")) - 1
    return found[0], found[1], helm_message(found[2], more)


def _alias_problem(data: Any) -> str:
    from .validate.yamlio import alias_problem as check  # (validate's package imports the kinds)

    return check(data)


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
    loader = _FastLoader(text)
    composer = _Composer(loader)
    try:
        # An empty document (`---` with nothing, or `null`) loads as None: not a document here.
        docs = [n for n in composer.documents()
                if not (isinstance(n, yaml.ScalarNode) and n.tag == "tag:yaml.org,2002:null")]
        for data in yaml.load_all(text, Loader=_FastLoader):  # constructs: `{{ x }}` composes, cannot load
            # An alias bomb constructs cheaply (aliases share objects) but every walk of it
            # expands it: refuse it here, before any edit is planned (KDP003).
            bomb = _alias_problem(data)
            if "alias bomb" in bomb:  # (a cycle is refused later, where a plan would walk it)
                raise Unparseable(Finding("KDP003", Severity.ERROR, f"{bomb}; file left unchanged", file=file))
    except yaml.MarkedYAMLError as exc:
        action = _go_action(text)
        if action is not None:  # an unrendered Helm template: said as validate says it (KDP010)
            raise Unparseable(Finding("KDP010", Severity.ERROR, f"{action[2]}; file left unchanged", file=file,
                                      line=action[0], column=action[1])) from exc
        mark = exc.problem_mark or exc.context_mark
        text_of = "; ".join(p for p in (exc.context, exc.problem) if p) or str(exc)  # as validate says
        raise Unparseable(Finding(
            "KDP001", Severity.ERROR, f"{text_of}{_helm_hint(text)}; file left unchanged", file=file,
            line=mark.line + 1 if mark else 0, column=mark.column + 1 if mark else 0)) from exc
    except (yaml.YAMLError, RecursionError) as exc:
        first = (str(exc).splitlines() or ["document nested too deeply"])[0]
        raise Unparseable(Finding("KDP001", Severity.ERROR,
                                  f"{first}{_helm_hint(text)}; file left unchanged", file=file)) from exc
    finally:
        loader.dispose()
    seen: set[int] = set()
    for n in docs:
        _check_duplicates(n, file, seen)
    return Composed(docs, composer.edges, composer.alias_marks)


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


def load_all(text: str) -> list[Any]:
    """The data of every non-empty document of ``text`` (libyaml when present), for comparisons.

    Raises:
        yaml.YAMLError: the text does not parse.
    """
    return [d for d in yaml.load_all(text, Loader=_FastLoader) if d is not None]


def construct(docs: list[yaml.Node]) -> list[Any]:
    """The data of composed documents, aliases shared as a loader shares them.

    Note: merge keys (``<<``) are flattened into the nodes (PyYAML does so in place); construct
    only nodes that are not used afterwards.
    """
    constructor = yaml.constructor.SafeConstructor()
    return [constructor.construct_document(d) for d in docs]
