"""The text form of a diagnosis, for people: the culprit first, then its evidence with the
stalled frame's file:line, the matching decision-table row, then what every other rank did."""

from __future__ import annotations

from ..catalogue import DECISIONS, RULES
from .model import Diagnosis

_MAX_OTHERS = 32


def render_text(d: Diagnosis) -> str:
    """The report as text (ends with a newline)."""
    out = [f"k8sddp diagnose: {d.verdict}"]
    for c in d.culprits:
        who = f"rank {c.rank}" if c.rank is not None else "no rank"
        node = f" on node {c.node}" if c.node is not None else ""
        out.append(f"culprit: {who}{node}: {c.kind}, phase {c.phase or 'unknown'}, step {c.step} (confidence {c.confidence})")
        if c.frame:
            out.append(f"  stalled frame: {c.frame}")
        if c.collective and c.collective.get("seq") is not None:
            col = c.collective
            out.append(f"  parting collective: #{col['seq']} {col.get('op')} {col.get('sizes')}"
                       + (f" at {col['site']}" if col.get("site") else ""))
        if c.signal:
            out.append(f"  signal: {c.signal}")
        out.append("  evidence:")
        out += [f"    - {e}" for e in c.evidence]
        row = next((r for r in DECISIONS if r.trigger == c.decision), None)
        if row is not None:
            guards = ", ".join(f"{g} ({RULES[g].name})" for g in row.guardrails)
            out.append(f"  decision [{row.trigger}]: {row.signature} -> {row.hypothesis} -> guardrails {guards} "
                       f"-> {row.action} (exit {row.exit_code})")
    others = [s for s in d.ranks if s.role != "culprit"]
    if others:
        out.append("other ranks:")
        for s in others[:_MAX_OTHERS]:
            node = f" on node {s.node}" if s.node is not None else ""
            out.append(f"  rank {s.rank}{node}: {s.role} ({s.record}, step {s.step}, phase {s.phase})"
                       + (f": {s.detail}" if s.detail else ""))
        if len(others) > _MAX_OTHERS:
            roles: dict[str, int] = {}
            for s in others[_MAX_OTHERS:]:
                roles[s.role] = roles.get(s.role, 0) + 1
            out.append(f"  ... {len(others) - _MAX_OTHERS} more: "
                       + ", ".join(f"{n} {role}" for role, n in sorted(roles.items())))
    if d.notes:
        out.append("notes:")
        out += [f"  - {n}" for n in d.notes]
    out.append(f"restart {d.restart} of {d.restarts} (0 = newest); attempt folders: " + ", ".join(d.attempts))
    return "\n".join(out) + "\n"
