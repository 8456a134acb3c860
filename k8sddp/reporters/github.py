"""GitHub Actions workflow commands: each finding becomes an inline annotation on the PR.

Format: https://docs.github.com/actions/reference/workflow-commands-for-github-actions
"""

from __future__ import annotations

from ..findings import Report

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(report: Report, *, tool: str) -> str:
    """``::error file=F,line=L,col=C,title=RULE::message`` per finding."""
    out = []
    for f in report.findings:
        level = "notice" if f.exempted_by else _LEVEL[f.severity.value]
        props = [f"file={_escape_prop(f.file)}"]
        if f.line:
            props.append(f"line={f.line}")
        if f.column:
            props.append(f"col={f.column}")
        props.append(f"title={_escape_prop(f.rule_id)}")
        msg = f.message + (f" [{f.path}]" if f.path else "")
        if f.exempted_by:
            msg = f"exempted ({f.exempted_by}): {msg}"
        out.append(f"::{level} {','.join(props)}::{_escape_data(msg)}")
    return "\n".join(out) + ("\n" if out else "")
