"""A finding before it is placed in a file: rule, JSON path inside the object, message."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class RawFinding:
    """One rule violation inside one object.

    Attributes:
        rule_id: catalogue id.
        path: keys and list indices from the object's root (``("spec", "runPolicy")``).
        message: names what is missing or wrong and the value expected.
    """

    rule_id: str
    path: tuple[Any, ...]
    message: str


def json_path(path: tuple[Any, ...] | list[Any]) -> str:
    """``("spec", "containers", 0, "env")`` -> ``spec.containers[0].env`` (kubectl's JSONPath style)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
