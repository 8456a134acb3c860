"""Generate ``docs/rules.md`` (the rules table) and ``docs/decisions.md`` (the post-mortem
decision table) from the rule catalogue.

Regenerate with ``python -m k8sddp.docgen`` (``tests/test_docs.py`` fails when either is stale).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .catalogue import CATALOGUE_VERSION, DECISIONS, LAYERS, PROFILES, RULES, rules_for

DOC = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
DECISIONS_DOC = DOC.with_name("decisions.md")

_LAYER_TEXT = {
    "input": "Input: documents that cannot be read as Kubernetes objects (always checked).",
    "structure": "Structure: what the API server and the Kubeflow operator accept (always checked).",
    "baseline": "Guardrails, profile `baseline` (the default).",
    "strict": "Guardrails, profile `strict` (baseline plus these).",
    "lint": "Lint: hang-prone patterns in training scripts (`k8sddp lint`).",
    "runtime": "Runtime guards: what `k8sddp launch` and `k8sddp train` do while a job runs (not checked by "
               "validate or lint; named by the decision table, [decisions.md](decisions.md)).",
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


def render_decisions_md() -> str:
    """The Markdown text of ``docs/decisions.md``: one row per :data:`k8sddp.catalogue.DECISIONS`."""
    out = [
        "# k8sddp post-mortem decision table",
        "",
        f"Generated from `k8sddp/catalogue.py` (catalogue {CATALOGUE_VERSION}) by `python -m k8sddp.docgen`; do not edit.",
        "The same table: `k8sddp rules [--format json]`. `k8sddp diagnose` prints the row that matches its",
        "culprit (`decision [trigger]`); the launcher gives the exit code of the last column",
        "(>= 128 retryable under `restartPolicy: ExitCode`, 1-127 final). The first matching row wins.",
        "",
        "| trigger | diagnose sees | root-cause hypothesis | guardrails | then |",
        "|---|---|---|---|---|",
    ]
    for d in DECISIONS:
        when = d.kind + (f", phase {'/'.join(d.phases)}" if d.phases else "") + (f", {'/'.join(d.signals)}" if d.signals else "")
        guards = ", ".join(f"{g} `{RULES[g].name}` ({RULES[g].layer})" for g in d.guardrails)
        out.append(f"| `{d.trigger}` ({when}) | {_cell(d.signature)} | {_cell(d.hypothesis)} | {guards} | "
                   f"{d.action} (exit {d.exit_code}) |")
    out.append("")
    return "\n".join(out)


def main() -> int:
    """Write ``docs/rules.md`` and ``docs/decisions.md`` atomically."""
    from .atomic import write_text_atomic

    DOC.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((DOC, render_rules_md()), (DECISIONS_DOC, render_decisions_md())):
        write_text_atomic(path, text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
