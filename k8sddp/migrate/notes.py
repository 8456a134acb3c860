"""Notes and errors of a migration, and the helpers that keep a value's comments and input line."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ruamel.yaml.comments import CommentedMap

__all__ = ["CannotMigrate", "INFO", "JobNotes", "LOST", "Note", "plain", "put"]

INFO, LOST = "info", "lost"


@dataclasses.dataclass(frozen=True)
class Note:
    """What migrate did with one field, or what it could not keep.

    Attributes:
        line: 1-based line of the field in the input, or None.
        path: the field's path in the PyTorchJob (``spec.runPolicy.cleanPodPolicy``).
        message: what happened, and what to do.
        level: ``info`` (mapped, or dropped because v2 does it itself) or ``lost`` (no v2
            equivalent: the TrainJob behaves differently; exit 1).
    """

    line: int | None
    path: str
    message: str
    level: str = INFO


class CannotMigrate(Exception):
    """A PyTorchJob that cannot be turned into a TrainJob at all (``path``, 1-based ``line``)."""

    def __init__(self, message: str, path: str, line: int | None) -> None:
        super().__init__(message)
        self.message, self.path, self.line = message, path, line


def plain(value: Any) -> Any:
    """``value`` as plain JSON data (no comments, no ruamel types)."""
    return json.loads(json.dumps(value, default=str))


class JobNotes:
    """The notes of one conversion, located in the input.

    Args:
        first_line: 0-based line where the job's document starts in the file (ruamel's marks
            count from the document's own text).
    """

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.notes: list[Note] = []

    def line(self, node: Any, key: Any = None) -> int | None:
        """1-based input line of ``node[key]`` (or of ``node``)."""
        lc = getattr(node, "lc", None)
        if lc is None:
            return None
        try:
            where = (lc.key(key) if isinstance(node, CommentedMap) else lc.item(key)) if key is not None else (lc.line, lc.col)
        except (KeyError, IndexError, TypeError):
            return None
        return self.first_line + where[0] + 1 if where and where[0] is not None else None

    def note(self, node: Any, key: Any, path: str, message: str, level: str = INFO) -> None:
        """Add a note about ``node[key]`` (``path`` in the PyTorchJob; ``level`` INFO or LOST)."""
        self.notes.append(Note(self.line(node, key), path, message, level))

    def fail(self, node: Any, key: Any, path: str, message: str) -> CannotMigrate:
        """The error to raise for ``node[key]``: the job cannot be migrated."""
        return CannotMigrate(message, path, self.line(node, key))


def put(dst: CommentedMap, key: str, src: CommentedMap, src_key: str) -> None:
    """``dst[key] = src[src_key]``, with the comments ruamel keeps beside the key."""
    dst[key] = src[src_key]
    if src_key in src.ca.items:
        dst.ca.items[key] = src.ca.items[src_key]
