"""Human-readable report: one line per finding, as compilers print them, then a summary."""

from __future__ import annotations

from ..findings import Report


def _summary_head(report: Report, tool: str) -> str:
    """``N file(s), M document(s), K objects checked`` (validate) or ``N file(s) checked`` (lint:
    a Python file is one document and one checked unit, unless it did not parse)."""
    if tool == "lint":
        head = f"{report.checked} file(s) checked"
        if report.files != report.checked:
            head += f" ({report.files - report.checked} did not parse)"
        return head
    noun = "objects" if tool == "validate" else "files"
    return f"{report.files} file(s), {report.documents} document(s), {report.checked} {noun} checked"


def render(report: Report, *, tool: str, show_exempted: bool = True) -> str:
    """``file:line:col: severity RULE [path] message`` per finding, and a summary line.

    Args:
        report: the findings and counts.
        tool: the command (``validate``, ``lint``); sets the summary's wording.
        show_exempted: print each exempted finding; when False only the summary counts them
            (``k8sddp lint`` without ``--show-exempted``, as ruff and flake8 do with ``noqa``).
    """
    lines = []
    for f in report.findings:
        if f.exempted_by and not show_exempted:
            continue
        sev = f"exempted ({f.exempted_by})" if f.exempted_by else f.severity.value
        at = f" [{f.path}]" if f.path else ""
        obj = f" {f.object_ref}:" if f.object_ref else ""
        lines.append(f"{f.location()}: {sev} {f.rule_id}{at}{obj} {f.message}")
    errors = sum(1 for f in report.findings if not f.exempted_by and f.severity.value == "error")
    warnings = sum(1 for f in report.findings if not f.exempted_by and f.severity.value == "warning")
    exempted = sum(1 for f in report.findings if f.exempted_by)
    summary = f"{tool}: {_summary_head(report, tool)}; {errors} error(s), {warnings} warning(s), {exempted} exempted"
    if exempted and not show_exempted:
        summary += " (not listed; --show-exempted lists them)"
    if report.skipped:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.skipped.items()))
        summary += f"; skipped {sum(report.skipped.values())} ({kinds})"
    lines.append(summary)
    return "\n".join(lines) + "\n"
