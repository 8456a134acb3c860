"""Machine-readable report: one JSON object with the findings and the counts."""

from __future__ import annotations

import json

from .._version import __version__
from ..catalogue import CATALOGUE_VERSION
from ..findings import Report


def render(report: Report, *, tool: str) -> str:
    """A JSON document ``{"tool", "version", "catalogue", "summary", "findings": [...]}``.

    For ``lint`` the YAML-only fields (``summary.documents``, each finding's ``path``,
    ``document`` and ``object_ref``) are left out."""
    lint = tool == "lint"  # Python files have no YAML documents, object paths or object refs
    summary: dict[str, object] = {
        "files": report.files,
        "documents": report.documents,
        "checked": report.checked,
        "skipped": dict(sorted(report.skipped.items())),
        "errors": sum(1 for f in report.findings if not f.exempted_by and f.severity.value == "error"),
        "warnings": sum(1 for f in report.findings if not f.exempted_by and f.severity.value == "warning"),
        "exempted": sum(1 for f in report.findings if f.exempted_by),
    }
    findings = [f.to_dict() for f in report.findings]
    if lint:
        del summary["documents"]
        for item in findings:
            for key in ("path", "document", "object_ref"):
                del item[key]
    doc = {
        "tool": f"k8sddp {tool}",
        "version": __version__,
        "catalogue": CATALOGUE_VERSION,
        "summary": summary,
        "findings": findings,
    }
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"
