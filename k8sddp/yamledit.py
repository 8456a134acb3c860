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
* :class:`ReplaceScalar` replaces one scalar's text.

New values are written block style below block collections and as JSON in flow collections
(valid YAML and, for a JSON file, valid JSON); strings are always double-quoted, so ``"3"`` stays
a string as an env value must (``../shared/reference/NOTES.md``, YAML 1.1). Line endings follow the
file (``\\r\\n`` or ``\\n``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import yaml

__all__ = ["AddKey", "AppendItems", "Edit", "ReplaceScalar", "Style", "apply_edits"]


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


Edit = AppendItems | AddKey | ReplaceScalar


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


def _last_leaf(node: yaml.Node) -> yaml.Node:
    while True:
        if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
            node = node.value[-1][1]
        elif isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
            node = node.value[-1]
        else:
            return node


def _after_line(text: str, node: yaml.Node, nl: str) -> tuple[int, str]:
    """Offset where new lines go after ``node``'s last line, and the prefix they need."""
    end = _last_leaf(node).end_mark
    if end.column == 0 and end.index > 0:  # a block scalar's end: the start of the next line
        return end.index, ""
    cut = text.find("\n", end.index)
    if cut < 0:
        return len(text), nl
    return cut + 1, ""


def _flow_insert(text: str, node: yaml.Node, piece: str) -> tuple[int, str]:
    """Offset and text to add ``piece`` as the last entry of the flow collection ``node``."""
    if node.value:
        last = node.value[-1][1] if isinstance(node, yaml.MappingNode) else node.value[-1]
        return last.end_mark.index, ", " + piece
    close = node.end_mark.index - 1
    return close, piece


def _splice(text: str, edit: Edit, style: Style, nl: str) -> tuple[int, int, str]:
    """``(start, end, replacement)`` for one edit."""
    if isinstance(edit, ReplaceScalar):
        start, end = edit.node.start_mark.index, edit.node.end_mark.index
        # An empty (null) scalar has no text: ``value:`` needs a space before the new one.
        return start, end, (" " if start == end else "") + _scalar(edit.value)
    node = edit.node
    if node.flow_style:
        if isinstance(edit, AppendItems):
            piece = ", ".join(_flow(i) for i in edit.items)
        else:
            piece = f"{json.dumps(edit.key)}: {_flow(edit.value)}"
        at, new = _flow_insert(text, node, piece)
        return at, at, new
    if isinstance(edit, AppendItems):
        if not node.value:
            raise ValueError("cannot append to an empty block sequence")
        dash_col = node.start_mark.column
        first = node.value[0]
        step = first.start_mark.column - dash_col if isinstance(first, yaml.MappingNode) else 2
        lines: list[str] = []
        for item in edit.items:
            lines += _block_item(dash_col, max(step, 2), item, style)
    else:
        key_col = node.value[0][0].start_mark.column
        lines = _block_pair(key_col, edit.key, edit.value, style)
    at, prefix = _after_line(text, node, nl)
    return at, at, prefix + nl.join(lines) + nl


def apply_edits(text: str, edits: list[Edit], style: Style) -> str:
    """Apply ``edits`` (positions taken from nodes composed from ``text``) and return the new text.

    Several edits at one offset keep their list order. Raises ``ValueError`` for an edit the
    splicer cannot express (appending to an empty block sequence, adding to an empty block
    mapping); callers plan around those.
    """
    nl = "\r\n" if "\r\n" in text else "\n"
    if not text.endswith("\n"):  # new lines may land after the last one: end it first
        text += nl
    splices = [(*_splice(text, e, style, nl), i) for i, e in enumerate(edits)]
    # Apply from the end so earlier offsets stay valid; equal offsets in reverse list order.
    for start, end, new, _ in sorted(splices, key=lambda s: (s[0], s[3]), reverse=True):
        text = text[:start] + new + text[end:]
    return text
