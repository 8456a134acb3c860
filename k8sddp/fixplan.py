"""The plan :mod:`k8sddp.fix` builds for one file: text edits, their data effect, and notes.

Each planned :class:`Change` is a text edit (:mod:`k8sddp.yamledit`) at a node, the data operation
that predicts its effect, the data path of the node it edits, and the notes it makes true. Before
anything is spliced, :meth:`Plan.resolve` settles YAML anchors and aliases: a node may be written
once and reached from several places (``env: &env`` and ``env: *env``; ``template: *tpl``), and an
edit of it changes every place. So an edit is kept only when fix planned the very same edit for
every path at which its node appears (then it is applied once); otherwise it is dropped, with
every edit that shares a note with it (a ``/dev/shm`` mount never goes in without its volume), and
its notes become "left" notes that name the other place. Nothing is guessed.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import yaml

from .yamledit import AddKey, AppendItems, Edit, FillNull
from .yamlgraph import Composed, PathKey, paths_to

__all__ = ["Change", "Note", "Plan", "predict"]

#: A data operation: (path, "set" | "extend" | "addkey", payload); see :func:`predict`.
DataOp = tuple[tuple[Any, ...], str, Any]


@dataclasses.dataclass(frozen=True)
class Note:
    """One thing fix did (``changed``) or left for a person (not ``changed``).

    Attributes:
        where: ``Kind/namespace/name Replica`` (``PyTorchJob/ml/train Worker``) or the object.
        text: what was done, or what needs doing and why fix did not.
        rule_id: the catalogue rule it concerns.
        line: 1-based line in the original file of the place concerned.
        changed: True for a change, False for something left as is.
        unresolved: True for a left item whose rule the file still breaks (a guard still missing,
            a structure fix cannot repair); ``k8sddp fix`` then exits 1. False for changes and for
            things fix merely did not check (``valueFrom``, ``envFrom``).
    """

    where: str
    text: str
    rule_id: str
    line: int
    changed: bool
    unresolved: bool = False


@dataclasses.dataclass
class Change:
    """One planned edit.

    Attributes:
        edit: the text edit.
        at: data path of the node the edit changes (``(doc, "spec", ..., "env")``).
        op: the data operation predicting its effect.
        notes: indexes into :attr:`Plan.notes` of the notes this change makes true.
    """

    edit: Edit
    at: tuple[PathKey, ...]
    op: DataOp
    notes: list[int] = dataclasses.field(default_factory=list)


def _target(edit: Edit) -> yaml.Node:
    return edit.node


def _signature(change: Change) -> tuple[Any, ...]:
    e = change.edit
    payload: Any
    if isinstance(e, AppendItems):
        payload = e.items
    elif isinstance(e, (AddKey, FillNull)):
        payload = (e.key, e.value)
    else:
        payload = e.value
    return type(e).__name__, id(_target(e)), json.dumps(payload, sort_keys=True, default=str)


def _show(path: tuple[PathKey, ...]) -> str:
    out = ""
    for k in path[1:]:
        out += f"[{k}]" if isinstance(k, int) else (("." if out else "") + str(k))
    return out or "the document"


@dataclasses.dataclass
class Plan:
    """Changes and notes for one file, in document order."""

    changes: list[Change] = dataclasses.field(default_factory=list)
    notes: list[Note] = dataclasses.field(default_factory=list)

    def add(self, edit: Edit, at: tuple[PathKey, ...], op: DataOp) -> int:
        """Plan ``edit`` (at data path ``at``, effect ``op``); returns its index for :meth:`note`."""
        self.changes.append(Change(edit, at, op))
        return len(self.changes) - 1

    def note(self, note: Note, changes: tuple[int, ...] | list[int] = ()) -> None:
        """Record ``note``, made true by the planned ``changes`` (indexes from :meth:`add`)."""
        self.notes.append(note)
        for c in changes:
            self.changes[c].notes.append(len(self.notes) - 1)

    def resolve(self, composed: Composed) -> tuple[list[Edit], list[DataOp]]:
        """The edits safe to apply (each once) and the data operations predicting them.

        A change is refused when its node appears at a path (through an anchor and alias) for
        which fix did not plan the same change, or at more paths than can be listed; and then
        every change sharing a note or a node with it is refused too. Refused changes turn their
        notes into left, unresolved notes that say why. A kept ``set`` is predicted at every path
        (a loaded scalar is not shared between them; a list or mapping is, so an ``extend`` or
        ``addkey`` is predicted once).
        """
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, c in enumerate(self.changes):
            groups.setdefault(_signature(c), []).append(i)
        by_node: dict[int, list[int]] = {}
        for i, c in enumerate(self.changes):
            by_node.setdefault(id(_target(c.edit)), []).append(i)
        reasons: dict[int, str] = {}
        for members in groups.values():
            first = self.changes[members[0]]
            node = _target(first.edit)
            want = paths_to(node, composed)
            have = {self.changes[i].at for i in members}
            if want is None:
                reason = (f"the node at line {node.start_mark.line + 1} is reached through YAML aliases "
                          "from too many places (or from inside itself)")
            else:
                other = [p for p in want if p not in have]
                if not other:
                    continue
                reason = (f"line {node.start_mark.line + 1} is shared through a YAML anchor/alias with "
                          f"{_show(other[0])}, which would change too; change it by hand or un-alias it")
            for i in members:
                reasons[i] = reason
        # A refusal spreads to every change sharing a note (or a node) with a refused one.
        todo = list(reasons)
        while todo:
            i = todo.pop()
            linked = {j for n in self.changes[i].notes for j, c in enumerate(self.changes) if n in c.notes}
            linked |= set(by_node[id(_target(self.changes[i].edit))])
            for j in linked - set(reasons):
                reasons[j] = reasons[i]
                todo.append(j)
        for i, reason in reasons.items():
            for n in self.changes[i].notes:
                old = self.notes[n]
                if old.changed:
                    self.notes[n] = dataclasses.replace(
                        old, text=f"would have {old.text}, but {reason}", changed=False, unresolved=True)
        edits: list[Edit] = []
        ops: list[DataOp] = []
        done: set[tuple[Any, ...]] = set()
        for i, c in enumerate(self.changes):
            if i in reasons:
                continue
            sig = _signature(c)
            if sig not in done:
                done.add(sig)
                edits.append(c.edit)
                ops.append(c.op)
            elif c.op[1] == "set":
                ops.append(c.op)
        return edits, ops


def predict(data: list[Any], ops: list[DataOp]) -> list[Any]:
    """Apply data operations to loaded documents (aliases shared as the loader shares them).

    ``("extend", items)`` extends the list at the path, ``("addkey", (key, value))`` sets a key of
    the mapping at the path, ``("set", value)`` replaces the value at the path; sets go last, as
    list indexes in their paths refer to the original lists.
    """
    for path, op, payload in ops:
        target: Any = data
        for part in path:
            target = target[part]
        if op == "extend":
            target.extend(payload)
        elif op == "addkey":
            target[payload[0]] = payload[1]
    for path, op, payload in ops:
        if op == "set":
            target = data
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = payload
    return data
