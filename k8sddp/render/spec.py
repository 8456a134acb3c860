"""Load a DDPJob spec: parse, apply ``--set`` overrides, check against ``schemas/ddpjob.schema.json``.

Errors are :class:`k8sddp.errors.SpecError` with the file, line and JSON path of each problem.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

import jsonschema_rs
import yaml

from ..errors import SpecError, UsageError
from ..resources import load_schema
from ..validate.envchecks import hide_credential_values
from ..validate.rawfinding import json_path
from ..validate.yamlio import Locator, load_documents

__all__ = ["apply_sets", "check_spec", "load_spec"]

#: A map key (``\.`` is a dot inside it, as helm reads ``--set``: ``vpc\.amazonaws\.com/efa``) or a
#: list index.
_SEGMENT = re.compile(r"((?:[^.\[\]\\]|\\.)+)|\[(\d+)\]")
_ESCAPE = re.compile(r"\\(.)")


def _read(source: str) -> tuple[str, str]:
    if source == "-":
        import sys

        text = sys.stdin.read()
        if not text.strip():
            raise UsageError("-: no input on standard input (did the command before the pipe fail?)")
        return text, "<stdin>"
    try:
        with open(source, encoding="utf-8") as fh:
            return fh.read(), source
    except OSError as exc:
        raise UsageError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 text: {exc}", file=source) from exc


def load_spec(source: str, *, sets: Iterable[str] = (), set_strings: Iterable[str] = ()) -> dict[str, Any]:
    """Read the spec at ``source`` (a path, or ``-`` for stdin), apply ``sets`` and check it.

    Args:
        source: file path or ``-``.
        sets: ``PATH=VALUE`` overrides (``spec.nodes=4``; the value is read as a YAML scalar; ``\\.``
            is a dot inside a key: ``spec.resources.limits.vpc\\.amazonaws\\.com/efa=32``).
        set_strings: ``PATH=VALUE`` overrides whose value is always a string (``spec.torchVersion=2.10``).

    Returns:
        The spec as a dict (defaults are applied later, by the model).

    Raises:
        UsageError: the file cannot be read, or a ``--set`` is malformed.
        SpecError: not YAML, not one document, or not a valid DDPJob (every problem listed).
    """
    text, name = _read(source)
    docs, problems = load_documents(text)
    if problems:
        p = problems[0]
        raise SpecError(p.message, file=name, line=p.line)
    docs = [d for d in docs if d.data is not None]
    if len(docs) != 1:
        raise SpecError(f"expected exactly one YAML document, found {len(docs)}", file=name)
    spec = whole_numbers(apply_sets(apply_sets(docs[0].data, sets), set_strings, as_string=True))
    check_spec(spec, file=name, locator=Locator(text), doc_index=docs[0].index)
    return spec


def whole_numbers(value: Any) -> Any:
    """``value`` with every whole float (``2.0``, ``8.0``, ``1.0e3``) made an int, at any depth.

    JSON Schema's ``integer`` accepts ``2.0``, so ``nodes: 2.0`` or ``--set spec.procsPerNode=8.0``
    passed the schema and rendered ``replicas: 1.0``, ``nprocPerNode: "8.0"`` and
    ``--nproc-per-node=8.0`` (which torchrun cannot parse) or ``K8SDDP_SEED=7.0``. No DDPJob or pod
    field is a float, so the value is the same number."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def _parse_path(path: str) -> list[str | int]:
    parts: list[str | int] = []
    pos = 0
    for m in _SEGMENT.finditer(path):
        if m.start() != pos and path[pos:m.start()] != ".":
            raise UsageError(f"--set {path!r}: malformed path")
        parts.append(int(m.group(2)) if m.group(2) is not None else _ESCAPE.sub(r"\1", m.group(1)))
        pos = m.end()
    if not parts or pos != len(path):
        raise UsageError(f"--set {path!r}: malformed path; expected e.g. spec.nodes or spec.env[0].value")
    return parts


def apply_sets(spec: Any, sets: Iterable[str], *, as_string: bool = False) -> Any:
    """Return a copy of ``spec`` with each ``PATH=VALUE`` applied (missing maps are created);
    VALUE is read as a YAML scalar, or kept as a string when ``as_string``.

    Raises:
        UsageError: no ``=``, a malformed path, or a path through a non-container.
    """
    spec = copy.deepcopy(spec)
    for item in sets:
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected PATH=VALUE")
        path, raw = item.split("=", 1)
        try:
            value = raw if as_string else (yaml.safe_load(raw) if raw.strip() else "")
        except yaml.YAMLError as exc:
            raise UsageError(f"--set {item!r}: value is not YAML: {exc}") from exc
        parts = _parse_path(path.strip())
        node = spec
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(part, int):
                if not isinstance(node, list) or part >= len(node):
                    raise UsageError(f"--set {item!r}: {json_path(parts[: i + 1])} is not an existing list item")
                if last:
                    node[part] = value
                else:
                    node = node[part]
            else:
                if not isinstance(node, dict):
                    raise UsageError(f"--set {item!r}: {json_path(parts[:i]) or '(top)'} is not a mapping")
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
    return spec


def check_spec(spec: Any, *, file: str = "<spec>", locator: Locator | None = None, doc_index: int = 0) -> None:
    """Check ``spec`` against the DDPJob schema.

    Raises:
        SpecError: with every problem, one per line, each ``file:line: path: message``.
    """
    validator = jsonschema_rs.validator_for(load_schema("ddpjob.schema.json"))
    errors = sorted(validator.iter_errors(spec), key=lambda e: [str(p) for p in e.instance_path])
    if not errors:
        return
    lines = []
    first_line = 0
    for err in errors:
        path = list(err.instance_path)
        line = locator.locate(doc_index, path)[0] if locator else 0
        first_line = first_line or line
        message = hide_credential_values(spec, path, err.message)
        if path == ["spec"] and "is not allowed for" in message and "elastic" in message:
            body = spec.get("spec") if isinstance(spec, dict) else None
            if not (isinstance(body, dict) and "nodes" in body and "elastic" in body):
                continue  # the not-both rule also fails on a spec that is no mapping: its type error says it
            message = "use either spec.nodes (Master + Workers) or spec.elastic (Worker-only, elastic), not both"
        lines.append(f"{file}{':' + str(line) if line else ''}: {json_path(path) or '(top)'}: {message}")
    raise SpecError(
        "not a valid DDPJob spec (schema schemas/ddpjob.schema.json):\n  " + "\n  ".join(lines),
        file=None,
    )
