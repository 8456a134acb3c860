"""Minimal, format-keeping edits of YAML text, located with PyYAML's node marks.

``k8sddp fix`` must keep a manifest's comments, key order, quoting and indentation style, also where
one file mixes styles (``env:`` items at the key's column, ``command:`` items indented, as Kubeflow's
own examples do) — which a load-and-dump round trip (ruamel.yaml included) cannot promise, since it
re-emits a whole document with one indentation setting. So nothing is re-emitted: the YAML is
composed into nodes (with their line, column and character offsets), and each change is a text
splice at a node's position:

* :class:`AppendItems` adds items at the end of a sequence (block: new ``- `` lines at the existing
  items' dash and key columns; flow/JSON: ``, {...}`` after the last item);
* :class:`AddKey` adds a key at the end of a mapping (block: at its keys' column; flow/JSON:
  ``, "key": ...`` after the last value);
* :class:`ReplaceScalar` replaces one scalar's text (an anchor on it is kept, a tag dropped);
* :class:`FillNull` gives a key written with no value (``env:``, ``env: null``, ``env: ~``) one.

Anchors, aliases and tags: a node's marks start at its anchor or tag (``env: &env``), so columns
are taken from the items' dashes and the keys themselves, never from a node's start; an alias
(``env: *env``) has the anchored node's marks, so where an alias ends a collection, the caller's
``alias_end`` says where its text is. Whether a node reached through an alias may be edited at all
is the caller's decision (:mod:`k8sddp.fix` edits it only when every place wants the same change).

New values are written block style below block collections and as JSON in flow collections
(valid YAML and, for a JSON file, valid JSON); strings are always double-quoted, so ``"3"`` stays
a string as an env value must (``../shared/reference/NOTES.md``, YAML 1.1). Line endings follow the
file (``\\r\\n`` or ``\\n``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

import yaml

__all__ = ["AddKey", "AliasEnd", "AppendItems", "Edit", "FillNull", "ReplaceScalar", "Style",
           "apply_edits", "detect_style", "is_plain_null"]

#: ``alias_end(parent, key)``: the end mark of the alias written as ``parent[key]`` (``key`` a
#: mapping key's text or a sequence index), or None when the value is written there.
AliasEnd = Callable[[yaml.Node, "str | int"], "yaml.Mark | None"]


@dataclasses.dataclass
class AppendItems:
    """Append ``items`` (JSON-like values) to the sequence ``node``."""

    node: yaml.SequenceNode
    items: list[Any]


@dataclasses.dataclass
class AddKey:
    """Add ``key: value`` at the end of the mapping ``node`` (the key must be absent)."""

    node: yaml.MappingNode
    key: str
    value: Any


@dataclasses.dataclass
class ReplaceScalar:
    """Replace the scalar ``node``'s text with ``value`` written as a double-quoted string."""

    node: yaml.ScalarNode
    value: str


@dataclasses.dataclass
class FillNull:
    """Give ``key`` of the mapping ``parent``, whose value is the null scalar ``node``, ``value``.

    Only for a null written without anchor or tag (see :func:`is_plain_null`).
    """

    parent: yaml.MappingNode
    key: str
    node: yaml.ScalarNode
    value: Any


Edit = AppendItems | AddKey | ReplaceScalar | FillNull

_NULL_WORDS = ("", "~", "null", "Null", "NULL")


def is_plain_null(node: yaml.Node | None) -> bool:
    """True for a null scalar written as nothing, ``~`` or ``null`` (no anchor, no tag)."""
    return (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"
            and node.value in _NULL_WORDS
            and node.end_mark.index - node.start_mark.index == len(node.value))


@dataclasses.dataclass(frozen=True)
class Style:
    """Indentation used for new block collections (detected per document by the caller).

    Attributes:
        map_step: columns a nested mapping's keys sit right of their parent key (2 or 4).
        seq_offset: columns a block sequence's dash sits right of its parent key (0 or 2).
        item_step: columns an item's keys sit right of its dash (normally 2).
    """

    map_step: int = 2
    seq_offset: int = 2
    item_step: int = 2


_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
#: Plain scalars YAML 1.1 would read as something other than a string.
_SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _scalar(value: Any, *, quote: bool = True) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if not quote and _PLAIN.fullmatch(text) and text.lower() not in _SPECIAL:
        return text
    return json.dumps(text, ensure_ascii=False)


def _key(key: str) -> str:
    plain = key.replace("_", "").replace("-", "").replace(".", "").replace("/", "").isalnum()
    return key if plain and not key[0].isdigit() else json.dumps(key)


def _flow(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _block_value(key_col: int, value: Any, style: Style) -> list[str]:
    """Lines for the value of a key at ``key_col`` (the key's own line excluded)."""
    if isinstance(value, dict):
        lines: list[str] = []
        for k, v in value.items():
            lines += _block_pair(key_col + style.map_step, k, v, style)
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            lines += _block_item(key_col + style.seq_offset, style.item_step, item, style)
        return lines
    raise TypeError(value)


def _block_pair(col: int, key: str, value: Any, style: Style) -> list[str]:
    if isinstance(value, (dict, list)):
        if not value:
            return [f"{' ' * col}{_key(key)}: {_flow(value)}"]
        return [f"{' ' * col}{_key(key)}:"] + _block_value(col, value, style)
    # Env values always double-quoted ("3" must stay a string); names, paths and words plain.
    return [f"{' ' * col}{_key(key)}: {_scalar(value, quote=key == 'value')}"]


def _block_item(dash_col: int, item_step: int, item: Any, style: Style) -> list[str]:
    if not isinstance(item, dict) or not item:
        text = _flow(item) if isinstance(item, (dict, list)) else _scalar(item)
        return [f"{' ' * dash_col}- {text}"]
    key_col = dash_col + item_step
    lines: list[str] = []
    for k, v in item.items():
        lines += _block_pair(key_col, k, v, style)
    first = lines[0]
    lines[0] = " " * dash_col + "-" + " " * (item_step - 1) + first[key_col:]
    return lines


def _no_alias(parent: yaml.Node, key: str | int) -> yaml.Mark | None:
    return None


def _last_child(node: yaml.Node) -> tuple[yaml.Node, str | int]:
    if isinstance(node, yaml.MappingNode):
        k, v = node.value[-1]
        return v, k.value if isinstance(k, yaml.ScalarNode) else f"<key@{id(k)}>"
    return node.value[-1], len(node.value) - 1


def _last_end(node: yaml.Node, alias_end: AliasEnd) -> yaml.Mark:
    """End of the text of ``node``'s last leaf (an alias' own end where the leaf is an alias)."""
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        child, key = _last_child(node)
        mark = alias_end(node, key)
        if mark is not None:
            return mark
        node = child
    return node.end_mark


def _after_line(text: str, node: yaml.Node, nl: str, alias_end: AliasEnd) -> tuple[int, str]:
    """Offset where new lines go after ``node``'s last line, and the prefix they need."""
    end = _last_end(node, alias_end)
    if end.column == 0 and end.index > 0:  # a block scalar's end: the start of the next line
        return end.index, ""
    cut = text.find("\n", end.index)
    if cut < 0:
        return len(text), nl
    return cut + 1, ""


def _flow_insert(text: str, node: yaml.Node, piece: str, alias_end: AliasEnd) -> tuple[int, str]:
    """Offset and text to add ``piece`` as the last entry of the flow collection ``node``."""
    if node.value:
        last, key = _last_child(node)
        mark = alias_end(node, key)
        return (mark or last.end_mark).index, ", " + piece
    close = node.end_mark.index - 1
    return close, piece


_PROPERTY = re.compile(r"(?:&[^\s,\[\]{}]+|!<[^>]*>|![^\s,\[\]{}]*)")
_GAP = re.compile(r"(?:[ \t\r\n]|#[^\n]*)*")


def _properties(text: str, start: int) -> tuple[int, str]:
    """Skip the anchor and tag written at ``start``: (offset of the content, the anchor or "")."""
    anchor = ""
    at = start
    while m := _PROPERTY.match(text, at):
        if m.group().startswith("&"):
            anchor = m.group()
        at = _GAP.match(text, m.end()).end()  # type: ignore[union-attr]
    return at, anchor


def _dash_col(text: str, seq: yaml.SequenceNode, alias_end: AliasEnd) -> int:
    """Column of the ``-`` before the first item of the block sequence ``seq``."""
    mark = alias_end(seq, 0)
    at = (mark.index if mark is not None else seq.value[0].start_mark.index) - 1
    if mark is not None:  # back over the alias' name to its `*`
        while at >= 0 and text[at] != "*":
            at -= 1
        at -= 1
    while at >= 0 and text[at] in " \t":
        at -= 1
    if at < 0 or text[at] != "-":
        raise ValueError(f"no '-' before the first item of the sequence at line {seq.start_mark.line + 1}")
    return at - (text.rfind("\n", 0, at) + 1)


def _item_step(seq: yaml.SequenceNode, dash_col: int, alias_end: AliasEnd) -> int:
    """Columns from an item's dash to its keys, from the first block mapping item written in place."""
    for i, item in enumerate(seq.value):
        if (isinstance(item, yaml.MappingNode) and not item.flow_style and item.value
                and alias_end(seq, i) is None):
            return max(item.value[0][0].start_mark.column - dash_col, 2)
    return 2


def _gap(text: str, start: int, end: int) -> str:
    """A space before a value put where an empty scalar (no text) stands right after ``key:``."""
    return " " if start == end and start > 0 and text[start - 1] not in " \t" else ""


def _fill_null(text: str, edit: FillNull, style: Style, nl: str) -> list[tuple[int, int, str]]:
    node = edit.node
    if not is_plain_null(node):
        raise ValueError(f"line {node.start_mark.line + 1}: the null value has an anchor or tag")
    start, end = node.start_mark.index, node.end_mark.index
    if edit.parent.flow_style:
        return [(start, end, _gap(text, start, end) + _flow(edit.value))]
    key = next(k for k, v in edit.parent.value if v is node)
    if not isinstance(edit.value, (dict, list)) or not edit.value:
        return [(start, end, _gap(text, start, end) + _flow(edit.value))]
    while start > 0 and text[start - 1] in " \t":  # `env: ~` -> `env:`, then the block below
        start -= 1
    cut = text.find("\n", end)
    at, prefix = (len(text), nl) if cut < 0 else (cut + 1, "")
    lines = _block_value(key.start_mark.column, edit.value, style)
    return [(start, end, ""), (at, at, prefix + nl.join(lines) + nl)]


def _splice(text: str, edit: Edit, style: Style, nl: str, alias_end: AliasEnd) -> list[tuple[int, int, str]]:
    """``[(start, end, replacement), ...]`` for one edit."""
    if isinstance(edit, ReplaceScalar):
        start, end = edit.node.start_mark.index, edit.node.end_mark.index
        anchor = _properties(text, start)[1]
        new = _scalar(edit.value)
        if anchor:  # keep the anchor (aliases name it); drop a tag (`!!int 3` -> `"3"`)
            new = f"{anchor} {new}"
        # An empty (null) scalar has no text: ``value:`` needs a space before the new one.
        return [(start, end, _gap(text, start, end) + new)]
    if isinstance(edit, FillNull):
        return _fill_null(text, edit, style, nl)
    node = edit.node
    if node.flow_style:
        if isinstance(edit, AppendItems):
            piece = ", ".join(_flow(i) for i in edit.items)
        else:
            piece = f"{json.dumps(edit.key)}: {_flow(edit.value)}"
        at, new = _flow_insert(text, node, piece, alias_end)
        return [(at, at, new)]
    if isinstance(edit, AppendItems):
        seq = edit.node
        if not seq.value:
            raise ValueError("cannot append to an empty block sequence")
        dash_col = _dash_col(text, seq, alias_end)
        step = _item_step(seq, dash_col, alias_end)
        lines: list[str] = []
        for item in edit.items:
            lines += _block_item(dash_col, step, item, style)
    else:
        if not node.value:
            raise ValueError("cannot add a key to an empty block mapping")
        key_col = node.value[0][0].start_mark.column
        lines = _block_pair(key_col, edit.key, edit.value, style)
    at, prefix = _after_line(text, node, nl, alias_end)
    return [(at, at, prefix + nl.join(lines) + nl)]


def apply_edits(text: str, edits: list[Edit], style: Style, *, alias_end: AliasEnd | None = None) -> str:
    """Apply ``edits`` (positions taken from nodes composed from ``text``) and return the new text.

    Args:
        text: the text the edits' nodes were composed from.
        edits: the changes; several at one offset keep their list order.
        style: indentation for new block collections.
        alias_end: where aliases were written (:meth:`k8sddp.yamlgraph.Composed.alias_end`);
            default: the text has no aliases.

    Raises:
        ValueError: an edit the splicer cannot express (appending to an empty block sequence,
            adding to an empty block mapping, filling a null with an anchor or tag); callers plan
            around those.
    """
    nl = "\r\n" if "\r\n" in text else "\n"
    if not text.endswith("\n"):  # new lines may land after the last one: end it first
        text += nl
    where = alias_end or _no_alias
    splices = [(*s, i) for i, e in enumerate(edits) for s in _splice(text, e, style, nl, where)]
    # Apply from the end so earlier offsets stay valid; equal offsets in reverse list order.
    for start, end, new, _ in sorted(splices, key=lambda s: (s[0], s[3]), reverse=True):
        text = text[:start] + new + text[end:]
    return text


def detect_style(doc: yaml.Node) -> Style:
    """Indentation of new blocks, taken from the document's own block mappings and sequences:
    the first nested block mapping gives ``map_step``, the first block sequence on its own line
    below its key gives ``seq_offset`` (2 and 2 when the document has none)."""
    map_step, seq_offset = 2, 2
    stack = [doc]
    found_map = found_seq = False
    while stack and not (found_map and found_seq):
        node = stack.pop()
        if isinstance(node, yaml.MappingNode) and not node.flow_style:
            for k, v in node.value:
                if isinstance(v, yaml.MappingNode) and not v.flow_style and v.value and not found_map:
                    step = v.value[0][0].start_mark.column - k.start_mark.column
                    if step > 0 and v.start_mark.line > k.start_mark.line:
                        map_step, found_map = step, True
                if (isinstance(v, yaml.SequenceNode) and not v.flow_style and v.value and not found_seq
                        and v.start_mark.line > k.start_mark.line):
                    seq_offset, found_seq = v.start_mark.column - k.start_mark.column, True
                stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return Style(map_step=map_step, seq_offset=max(seq_offset, 0))
