"""Generate ``docs/rules.md``, the rules table, from the rule catalogue.

Regenerate with ``python -m k8sddp.docgen`` (``tests/test_docs.py`` fails when it is stale).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .catalogue import CATALOGUE_VERSION, LAYERS, PROFILES, rules_for

DOC = Path(__file__).resolve().parent.parent / "docs" / "rules.md"

_LAYER_TEXT = {
    "input": "Input: documents that cannot be read as Kubernetes objects (always checked).",
    "structure": "Structure: what the API server and the Kubeflow operator accept (always checked).",
    "baseline": "Guardrails, profile `baseline` (the default).",
    "strict": "Guardrails, profile `strict` (baseline plus these).",
    "lint": "Lint: hang-prone patterns in training scripts (`k8sddp lint`).",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_rules_md() -> str:
    """The Markdown text of ``docs/rules.md``."""
    out = [
        "# k8sddp rules",
        "",
        f"Generated from `k8sddp/catalogue.py` (catalogue {CATALOGUE_VERSION}) by `python -m k8sddp.docgen`; do not edit.",
        "",
        "Profiles: " + "; ".join(f"`{p}` = {', '.join(layers)}" for p, layers in PROFILES.items()) + ".",
        "Exempt a guardrail rule with the annotations `k8sddp.dev/exempt: \"KDP201\"` and "
        "`k8sddp.dev/exempt-reason: \"...\"`, or a `--config` file; exemptions are always reported.",
        "",
    ]
    for layer in LAYERS:
        rules = rules_for((layer,))
        if not rules:
            continue
        out += [f"## {_LAYER_TEXT[layer]}", "", "| id | name | severity | checks | why | source |", "|---|---|---|---|---|---|"]
        for r in rules:
            out.append(f"| {r.id} | `{r.name}` | {r.severity.value} | {_cell(r.title)} | {_cell(r.why)} | {_cell(r.source)} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    """Write ``docs/rules.md`` atomically."""
    from .atomic import write_text_atomic

    DOC.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(DOC, render_rules_md())
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
