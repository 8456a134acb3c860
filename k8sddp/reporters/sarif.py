"""SARIF 2.1.0 report, for GitHub code scanning and any other SARIF consumer.

One run whose ``tool.driver.rules`` are the catalogue's rules for the command (validate: the input,
structure, baseline and strict layers; lint: the lint layer) plus any other catalogue rule a finding
names; each finding becomes a ``result`` pointing at its rule by ``ruleId`` and ``ruleIndex``, with
its level, message and ``file:line:column`` region. An exempted finding keeps its rule's level and
carries a ``suppressions`` entry (``inSource`` for a manifest annotation, ``external`` for a
``--config`` file) whose justification names the exemption, so consumers hide it but keep the record.

Format: OASIS SARIF 2.1.0 (errata 01), https://docs.oasis-open.org/sarif/sarif/v2.1.0/ ; the tests
validate the output against the published JSON schema (``tests/data/sarif-schema-2.1.0.json``).
GitHub's subset: https://docs.github.com/code-security/code-scanning/integrating-with-code-scanning/sarif-support-for-code-scanning
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from .._version import __version__
from ..catalogue import CATALOGUE_VERSION, RULES, VALIDATOR_LAYERS, Layer, Rule, rules_for
from ..findings import Finding, Report, Severity

__all__ = ["SARIF_SCHEMA", "SARIF_VERSION", "render", "render_failed"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)

#: Catalogue layers whose rules a command reports (``tool`` argument of :func:`render`).
_TOOL_LAYERS: dict[str, tuple[Layer, ...]] = {
    "validate": VALIDATOR_LAYERS,
    "lint": ("lint",),
}

#: SARIF ``level`` for each severity (SARIF 2.1.0 section 3.27.10: error, warning, note, none).
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _rule_descriptor(rule: Rule) -> dict[str, Any]:
    help_text = f"{rule.title}\n\nWhy: {rule.why}\n\nSource: {rule.source}"
    help_md = f"**{rule.title}**\n\n*Why:* {rule.why}\n\n*Source:* {rule.source}"
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.why},
        "help": {"text": help_text, "markdown": help_md},
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {"tags": ["k8sddp", rule.layer], "layer": rule.layer, "source": rule.source},
    }


def artifact_uri(file: str, *, root: Path | None = None) -> tuple[str, bool]:
    """The SARIF ``artifactLocation.uri`` of an input name.

    Args:
        file: the finding's file as given on the command line (``<stdin>`` for standard input).
        root: the folder relative URIs are relative to (default: the current directory), the
            repository root in CI, where the SARIF consumer resolves them.

    Returns:
        ``(uri, relative)``: a percent-encoded relative reference (``relative`` true, to be read
        against ``%SRCROOT%``) for a file under ``root``, else an absolute ``file://`` URI; for
        ``<stdin>`` and other non-files the encoded name (``%3Cstdin%3E``) as a relative reference.
    """
    if not file or (file.startswith("<") and file.endswith(">")):
        return quote(file or "<input>", safe=""), True
    base = (root or Path.cwd()).resolve()
    path = Path(file)
    absolute = path if path.is_absolute() else base / path
    absolute = Path(os.path.normpath(absolute))
    try:
        rel = absolute.relative_to(base)
    except ValueError:
        return absolute.as_uri(), False
    return quote(PurePosixPath(*rel.parts).as_posix()), True


def _fingerprint(f: Finding) -> str:
    # Stable across edits that only move lines: rule, file, object and path inside it.
    key = "\x1f".join((f.rule_id, f.file, f.object_ref, f.path, str(f.document)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _result(f: Finding, rule_index: dict[str, int], root: Path | None) -> dict[str, Any]:
    rule = RULES.get(f.rule_id)
    # A suppressed result keeps its rule's level (SARIF 3.35: suppression is separate from level).
    level = _LEVEL[rule.severity] if f.exempted_by and rule is not None else _LEVEL[f.severity]
    text = f.message
    if f.object_ref:
        text = f"{f.object_ref}: {text}"
    if f.path:
        text += f" [{f.path}]"
    uri, relative = artifact_uri(f.file, root=root)
    artifact: dict[str, Any] = {"uri": uri}
    if relative:
        artifact["uriBaseId"] = "%SRCROOT%"
    region: dict[str, Any] = {"startLine": max(f.line, 1)}
    if f.line and f.column:
        region["startColumn"] = f.column
    result: dict[str, Any] = {"ruleId": f.rule_id}
    if f.rule_id in rule_index:
        result["ruleIndex"] = rule_index[f.rule_id]
    result.update(
        {
            "level": level,
            "message": {"text": text},
            "locations": [{"physicalLocation": {"artifactLocation": artifact, "region": region}}],
            "partialFingerprints": {"k8sddpFinding/v1": _fingerprint(f)},
        }
    )
    props: dict[str, Any] = {}
    if f.path:
        props["path"] = f.path
    if f.object_ref:
        props["object"] = f.object_ref
    if f.document >= 0:
        props["document"] = f.document
    if props:
        result["properties"] = props
    if f.exempted_by:
        kind = "external" if f.exempted_by.startswith("config") else "inSource"
        result["suppressions"] = [
            {"kind": kind, "status": "accepted", "justification": f.exempted_by}
        ]
    return result


def build(report: Report, *, tool: str, root: Path | None = None) -> dict[str, Any]:
    """The SARIF log as a JSON-ready dict (see :func:`render`)."""
    rules = list(rules_for(_TOOL_LAYERS.get(tool, ())))
    known = {r.id for r in rules}
    for f in report.findings:
        if f.rule_id not in known and f.rule_id in RULES:
            rules.append(RULES[f.rule_id])
            known.add(f.rule_id)
    rule_index = {r.id: i for i, r in enumerate(rules)}
    driver: dict[str, Any] = {
        "name": "k8sddp",
        "fullName": f"k8sddp {tool}",
        "version": __version__,
        "semanticVersion": __version__,
        "rules": [_rule_descriptor(r) for r in rules],
        "properties": {"catalogue": CATALOGUE_VERSION},
    }
    run: dict[str, Any] = {
        "tool": {"driver": driver},
        "automationDetails": {"id": f"k8sddp/{tool}/"},
        "columnKind": "unicodeCodePoints",
        "invocations": [{"executionSuccessful": True}],
        "results": [_result(f, rule_index, root) for f in report.findings],
        "properties": {
            "files": report.files,
            "documents": report.documents,
            "checked": report.checked,
            "skipped": dict(sorted(report.skipped.items())),
        },
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def render(report: Report, *, tool: str) -> str:
    """A SARIF 2.1.0 log with one run (JSON text, ends in a newline).

    Args:
        report: the findings and counts of one run.
        tool: the command (``validate`` or ``lint``); picks the catalogue layers listed as rules
            and names the run (``automationDetails.id`` ``k8sddp/<tool>/``).

    File names become URIs relative to the current directory (``uriBaseId`` ``%SRCROOT%``), which
    is the repository root when the CLI runs there (the GitHub Action does); files outside it
    become absolute ``file://`` URIs. Unknown lines are reported as line 1 (SARIF consumers such as
    GitHub need a region).
    """
    return json.dumps(build(report, tool=tool), indent=2, ensure_ascii=False) + "\n"


def render_failed(message: str, *, tool: str) -> str:
    """A SARIF 2.1.0 log for a run that could not check anything (exit 2: usage, unreadable input).

    One run with no results whose only invocation has ``executionSuccessful: false`` and an error
    ``toolExecutionNotifications`` entry carrying ``message`` (SARIF 2.1.0 sections 3.20.14 and
    3.20.21), so a consumer shows a failed analysis rather than a clean one, or an unreadable file.

    Args:
        message: what went wrong, as validate printed it.
        tool: the command (``validate`` or ``lint``), as for :func:`render`.
    """
    log = build(Report(), tool=tool)
    run = log["runs"][0]
    run["invocations"] = [{
        "executionSuccessful": False,
        "toolExecutionNotifications": [{"level": "error", "message": {"text": message or "k8sddp failed"}}],
    }]
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"
