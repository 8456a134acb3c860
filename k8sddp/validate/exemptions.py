"""Exemptions (``../shared/CONTRACT.md``): by annotation on the object, or by a ``--config`` file.

An exemption needs a reason and names known rules; it turns a finding into a reported, exempted
one, never into silence. Only guardrail rules (layers ``baseline`` and ``strict``) can be exempted:
the API server and the operator refuse structure violations whatever k8sddp says.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema_rs

from ..catalogue import RULES
from ..errors import UsageError
from ..resources import load_schema
from .rawfinding import RawFinding
from .yamlio import decode, load_documents

EXEMPT_ANNOTATION = "k8sddp.dev/exempt"
REASON_ANNOTATION = "k8sddp.dev/exempt-reason"
EXEMPTABLE_LAYERS = ("baseline", "strict")


@dataclasses.dataclass(frozen=True)
class PathExemption:
    """One ``exemptions`` entry of a config file."""

    patterns: tuple[str, ...]
    rules: frozenset[str] | None  # None: every guardrail rule
    reason: str


@dataclasses.dataclass(frozen=True)
class Config:
    """A repository configuration.

    Attributes:
        root: the folder the path patterns are relative to (the config file's folder).
        profile: default profile, or ``None``.
        exemptions: path exemptions in file order.
        exclude: fnmatch patterns of files not to read at all (non-manifest YAML: Helm values, CI files).
        source: the config file itself (never read as a manifest).
    """

    root: Path
    profile: str | None = None
    exemptions: tuple[PathExemption, ...] = ()
    exclude: tuple[str, ...] = ()
    source: Path | None = None

    def excluded(self, file: str) -> bool:
        """Whether ``file`` is the config file itself or matches an ``exclude`` pattern."""
        if self.source is not None and os.path.abspath(file) == str(self.source):
            return True
        try:
            rel = os.path.relpath(os.path.abspath(file), self.root).replace(os.sep, "/")
        except ValueError:
            rel = file
        return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(file, p) for p in self.exclude)

    def exempted(self, file: str, rule_id: str) -> str:
        """The exemption text for ``rule_id`` in ``file``, or ``""``."""
        if RULES.get(rule_id) is None or RULES[rule_id].layer not in EXEMPTABLE_LAYERS:
            return ""
        try:
            rel = os.path.relpath(os.path.abspath(file), self.root).replace(os.sep, "/")
        except ValueError:
            rel = file
        for ex in self.exemptions:
            if ex.rules is not None and rule_id not in ex.rules:
                continue
            if any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(file, p) for p in ex.patterns):
                return f"config: {ex.reason}"
        return ""


def load_config(path: str) -> Config:
    """Read and check a ``--config`` file (schema ``schemas/k8sddp-config.schema.json``).

    Raises:
        UsageError: unreadable, not YAML, or not matching the schema (with the JSON path).
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    # The manifests' reader: duplicate keys, alias bombs and deep nesting are errors, not hangs.
    docs, problems = load_documents(decode(raw))
    if problems:
        p = problems[0]
        raise UsageError(f"config {path} is not valid YAML: line {p.line}, column {p.column}: {p.message}")
    if len(docs) > 1:
        raise UsageError(f"config {path}: one YAML document expected, found {len(docs)}")
    data = (docs[0].data if docs else None) or {}
    validator = jsonschema_rs.validator_for(load_schema("k8sddp-config.schema.json"))
    errors = list(validator.iter_errors(data))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.instance_path) or "(top)"
        raise UsageError(f"config {path}: {where}: {err.message}")
    for i, entry in enumerate(data.get("exemptions", [])):
        for rule_id in entry.get("rules", []):
            if rule_id not in RULES or RULES[rule_id].layer not in EXEMPTABLE_LAYERS:
                raise UsageError(f"config {path}: exemptions[{i}].rules: {rule_id} is not a guardrail rule that can be exempted")
    return Config(
        root=Path(path).resolve().parent,
        profile=data.get("profile"),
        exclude=tuple(data.get("exclude", [])),
        source=Path(path).resolve(),
        exemptions=tuple(
            PathExemption(
                tuple(e["paths"]),
                frozenset(e["rules"]) if e.get("rules") else None,
                e["reason"],
            )
            for e in data.get("exemptions", [])
        ),
    )


def annotation_exemptions(obj: Mapping[str, Any]) -> tuple[dict[str, str], list[RawFinding]]:
    """Exemptions an object grants itself.

    Returns:
        ``(rule id -> exemption text, problems)``; problems are KDP005 findings (no reason, an
        unknown rule, a rule that cannot be exempted), and their exemptions are not applied.
    """
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or EXEMPT_ANNOTATION not in annotations:
        return {}, []
    path = ("metadata", "annotations", EXEMPT_ANNOTATION)
    raw = annotations.get(EXEMPT_ANNOTATION)
    reason = annotations.get(REASON_ANNOTATION)
    if not isinstance(reason, str) or not reason.strip():
        return {}, [RawFinding("KDP005", path, f"{EXEMPT_ANNOTATION} needs a non-empty {REASON_ANNOTATION} annotation; exemption not applied")]
    granted: dict[str, str] = {}
    problems = []
    for rule_id in (p.strip() for p in str(raw).split(",")):
        if not rule_id:
            continue
        rule = RULES.get(rule_id)
        if rule is None:
            problems.append(RawFinding("KDP005", path, f"{EXEMPT_ANNOTATION} names unknown rule {rule_id!r}"))
        elif rule.layer not in EXEMPTABLE_LAYERS:
            problems.append(RawFinding("KDP005", path, f"{rule_id} ({rule.layer}) cannot be exempted: the API server or the operator refuses such objects anyway"))
        else:
            granted[rule_id] = f"annotation: {reason.strip()}"
    return granted, problems
