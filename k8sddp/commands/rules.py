"""``k8sddp rules [--format text|json]``: the post-mortem decision table from the rule catalogue.

Each row: trigger signature (what ``k8sddp diagnose`` sees) -> root-cause hypothesis -> guardrail
(the validate, lint or runtime rule that prevents it) -> retry or stop. Exit 0; 2 on usage.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..catalogue import CATALOGUE_VERSION, DECISIONS, RULES


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``rules`` subcommand."""
    p = subparsers.add_parser(
        "rules",
        help="print the post-mortem decision table (trigger -> hypothesis -> guardrail -> retry/stop)",
        description="The decision table generated from the rule catalogue (docs/decisions.md): what "
        "'k8sddp diagnose' sees, the root cause it suggests, the rules that prevent it, and whether the "
        "launcher retries (exit >= 128) or stops (1-127).",
    )
    p.add_argument("--format", default="text", choices=["text", "json"], help="output format (default: text)")
    p.set_defaults(handler=run)


def table() -> list[dict[str, object]]:
    """The decision table as JSON-ready rows (guardrails with their layer and title)."""
    return [{
        "trigger": d.trigger, "kind": d.kind, "phases": list(d.phases), "signals": list(d.signals),
        "signature": d.signature, "hypothesis": d.hypothesis,
        "guardrails": [{"id": g, "name": RULES[g].name, "layer": RULES[g].layer, "title": RULES[g].title}
                       for g in d.guardrails],
        "action": d.action, "exit_code": d.exit_code,
    } for d in DECISIONS]


def render_text() -> str:
    """The table as text, one block per row."""
    out = [f"k8sddp decision table (catalogue {CATALOGUE_VERSION}; docs/decisions.md)"]
    for d in DECISIONS:
        out += [f"{d.trigger} ({d.kind}{', phases ' + '/'.join(d.phases) if d.phases else ''}"
                f"{', ' + '/'.join(d.signals) if d.signals else ''})",
                f"  sees:       {d.signature}",
                f"  hypothesis: {d.hypothesis}",
                "  guardrails: " + ", ".join(f"{g} {RULES[g].name} ({RULES[g].layer})" for g in d.guardrails),
                f"  then:       {d.action} (exit {d.exit_code})"]
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    """Handler: print the table."""
    if args.format == "json":
        sys.stdout.write(json.dumps({"catalogue_version": CATALOGUE_VERSION, "decisions": table()}, indent=2) + "\n")
    else:
        sys.stdout.write(render_text())
    return 0
