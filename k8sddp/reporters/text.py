"""Human-readable report: one line per finding, as compilers print them, then a summary."""

from __future__ import annotations

from ..findings import Report


def render(report: Report, *, tool: str) -> str:
    """``file:line:col: severity RULE [path] message`` per finding, and a summary line."""
    lines = []
    for f in report.findings:
        sev = f"exempted ({f.exempted_by})" if f.exempted_by else f.severity.value
        at = f" [{f.path}]" if f.path else ""
        obj = f" {f.object_ref}:" if f.object_ref else ""
        lines.append(f"{f.location()}: {sev} {f.rule_id}{at}{obj} {f.message}")
    errors = sum(1 for f in report.findings if not f.exempted_by and f.severity.value == "error")
    warnings = sum(1 for f in report.findings if not f.exempted_by and f.severity.value == "warning")
    exempted = sum(1 for f in report.findings if f.exempted_by)
    noun = "objects" if tool == "validate" else "files"
    summary = (
        f"{tool}: {report.files} file(s), {report.documents} document(s), {report.checked} {noun} checked; "
        f"{errors} error(s), {warnings} warning(s), {exempted} exempted"
    )
    if report.skipped:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.skipped.items()))
        summary += f"; skipped {sum(report.skipped.values())} ({kinds})"
    lines.append(summary)
    return "\n".join(lines) + "\n"
