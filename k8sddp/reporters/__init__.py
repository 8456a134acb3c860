"""Output formats for a :class:`k8sddp.findings.Report`: one module per format, one registry.

Each reporter is a function ``(report, *, tool) -> str``; ``tool`` names the command
(``validate``, ``lint``) for formats that record it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..findings import Report
from . import github, json_report, junit, sarif, text

Reporter = Callable[..., str]

REPORTERS: dict[str, Reporter] = {
    "text": text.render,
    "json": json_report.render,
    "github": github.render,
    "sarif": sarif.render,
    "junit": junit.render,
}

__all__ = ["REPORTERS", "Reporter", "render"]


def render(report: Report, fmt: str, *, tool: str) -> str:
    """Render ``report`` in format ``fmt`` (a key of :data:`REPORTERS`).

    Raises:
        KeyError: unknown format.
    """
    return REPORTERS[fmt](report, tool=tool)
