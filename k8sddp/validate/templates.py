"""Unrendered templates: Go/Helm actions (KDP010) and shell placeholders (KDP011).

A Helm chart's ``templates/*.yaml`` or an ``envsubst`` template is not what the cluster gets: its
``{{ ... }}`` actions make the YAML unreadable, or its ``$VAR`` stands where the CRD wants a
number, a name or an object. Instead of a parser message or a pattern dump, the file or object
gets one located finding that says what it is and how to check what it renders to.

Shell variables are normal in ``command``, ``args`` and ``env[].value`` (a shell in the container
expands them, and ``$(VAR)`` is Kubernetes' own expansion there): those places are never judged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..catalogue import RULES
from .jobparts import get
from .rawfinding import RawFinding, json_path

__all__ = ["GO_ACTION", "SHELL_PLACEHOLDER", "go_action_line", "in_shell_position", "template_findings"]

#: A Go text/template action, ``{{ .Values.x }}``, ``{{- toYaml . | nindent 4 }}``.
GO_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
#: ``$VAR`` or ``${VAR}`` (with envsubst/shell ``${VAR:-default}`` forms); never ``$(VAR)``.
SHELL_PLACEHOLDER = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*(?::?[-=?+][^}]*)?\}|[A-Za-z_][A-Za-z0-9_]*)")

_HELM_HOW = "render it and check the output: `helm template RELEASE CHART | k8sddp validate -`"
_SHELL_HOW = "substitute first and check the output: `envsubst < FILE | k8sddp validate -`"


def go_action_line(text: str) -> tuple[int, int, str] | None:
    """``(line, column, action)`` (1-based) of the first Go template action outside a YAML comment
    line, or ``None``."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        m = GO_ACTION.search(line)
        if m:
            return number, m.start() + 1, m.group(0)
    return None


def helm_message(action: str, more: int = 0) -> str:
    """The KDP010 message for ``action`` (``more``: further actions found)."""
    also = f" (and {more} more)" if more else ""
    return f"Go/Helm template action {_short(action)}{also}: this is an unrendered template, not a manifest; {_HELM_HOW}"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def in_shell_position(path: tuple[Any, ...]) -> bool:
    """Whether ``path`` is in a container's ``command`` or ``args``, or is an ``env[].value``:
    places where ``$VAR`` is expanded by a shell or by Kubernetes (``$(VAR)``)."""
    for i, part in enumerate(path):
        if part in ("command", "args") and i > 0 and isinstance(path[i - 1], int):
            return True
        if part == "env" and i + 2 < len(path) and isinstance(path[i + 1], int) and path[i + 2] == "value":
            return True
    return False


def _wanted(finding: RawFinding) -> str:
    """What the schema wants where a placeholder stands, in words."""
    m = re.search(r'is not of type "(\w+)"', finding.message)
    if m:
        return {"integer": "a number", "number": "a number", "object": "an object", "array": "a list", "boolean": "true or false"}.get(m.group(1), m.group(1))
    if finding.path and finding.path[0] == "metadata" or finding.rule_id in ("KDP102", "KDP103"):
        return "a name"
    return "a value of another form"


def template_findings(obj: Mapping[str, Any], raw: list[RawFinding]) -> list[RawFinding]:
    """``raw`` (one object's findings) with template text reported as what it is.

    A structure finding about a value (outside ``command``/``args``/``env[].value``) that holds
    a Go/Helm action becomes part of one KDP010 finding, one that holds a shell placeholder part
    of one KDP011 finding; each names the placeholders and what the CRD wants there, at the first
    of them. A placeholder where the CRD takes any string (an annotation, an image) is left alone:
    the template is the place to judge it, and the rendered output is checked by validating it.

    Args:
        obj: the object the findings are about.
        raw: its findings (paths from ``obj``'s root).
    """
    out: list[RawFinding] = []
    found: dict[str, dict[tuple[Any, ...], tuple[RawFinding, str]]] = {"KDP010": {}, "KDP011": {}}
    for f in raw:
        value = get(obj, *f.path)
        if not isinstance(value, str) or RULES[f.rule_id].layer != "structure" or in_shell_position(f.path):
            out.append(f)
        elif (m := GO_ACTION.search(value)) is not None:
            found["KDP010"].setdefault(f.path, (f, m.group(0)))
        elif (m := SHELL_PLACEHOLDER.search(value)) is not None:
            found["KDP011"].setdefault(f.path, (f, m.group(0)))
        else:
            out.append(f)
    head: list[RawFinding] = []
    for rule_id, seen in found.items():
        if not seen:
            continue
        first, name = next(iter(seen.values()))
        others = [f"{n} at {json_path(f.path)} ({_wanted(f)})" for f, n in list(seen.values())[1:]]
        also = f"; also {', '.join(others[:5])}{' ...' if len(others) > 5 else ''}" if others else ""
        if rule_id == "KDP010":
            message = f"Go/Helm template action {_short(name)} where the CRD wants {_wanted(first)}{also}: this is an unrendered template; {_HELM_HOW}"
        else:
            message = f"unsubstituted shell placeholder {name} where the CRD wants {_wanted(first)}{also}: this looks like an envsubst template; {_SHELL_HOW}"
        head.append(RawFinding(rule_id, first.path, message))
    return head + out
