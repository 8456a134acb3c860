"""Incident records: ``k8sddp incident new DIR`` and ``k8sddp incident check DIR``.

A record is a Markdown file whose YAML front matter (between ``---`` lines) is validated by
``schemas/incident.schema.json``: trigger, hypothesis, guardrails (rule ids of the catalogue),
action, the culprit, the evidence, code version, image, seed, torch/NCCL versions. The body
holds the summary, every rank's part and an excerpt of the failure log with secrets and tokens
redacted (:mod:`.redact`). Needs PyYAML and jsonschema-rs (base dependencies).
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from .._version import __version__
from ..catalogue import CATALOGUE_VERSION, DECISIONS, RULES
from .load import Generation
from .model import Diagnosis
from .redact import redact

SCHEMA = "incident.schema.json"  # in schemas/ (k8sddp.resources.load_schema)
#: Lines of the failure log kept in a record.
LOG_LINES = 40
_FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def _first(values: list[Any]) -> Any:
    return next((v for v in values if v not in (None, "")), None)


def front_matter(diag: Diagnosis, gen: Generation, *, today: dt.date | None = None) -> dict[str, Any]:
    """The record's front matter for ``diag`` (the newest culprit first)."""
    records = [a.record or {} for a in gen.attempts]
    started = [d.started or {} for d in gen.ranks.values()]
    c = diag.culprits[0] if diag.culprits else None
    row = next((r for r in DECISIONS if c is not None and r.trigger == c.decision), None)
    day = today or dt.datetime.now(dt.timezone.utc).date()
    kind = c.kind if c else "none"
    rank = c.rank if c is not None and c.rank is not None else "none"
    phase = (c.phase if c is not None else None) or ""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{kind}-rank{rank}-{phase}".lower()).strip("-")
    seed = _first([r.get("seed") for r in records] + [s.get("seed") for s in started])
    return {
        "id": f"{day.strftime('%Y%m%d')}-{slug}",
        "date": day.isoformat(),
        "title": (c.summary if c else diag.verdict)[:200],
        "status": "open",
        "trigger": row.trigger if row else None,
        "kind": kind,
        "hypothesis": row.hypothesis if row else "",
        "guardrails": list(row.guardrails) if row else [],
        "action": row.action if row else "none",
        "exit_code": c.exit_code if c else None,
        "culprit": {"rank": c.rank if c else None, "node": c.node if c else None,
                    "phase": c.phase if c else None, "step": c.step if c else None,
                    "frame": c.frame if c else None, "signal": c.signal if c else None,
                    "collective": c.collective if c else None},
        "evidence": [redact(e) for e in (c.evidence if c else [])],
        "confidence": c.confidence if c else "low",
        "notes": list(diag.notes),
        "attempts": [Path(a).name for a in diag.attempts],
        "environment": {
            "code_version": _first([r.get("code_version") for r in records]),
            "image": _first([r.get("image") for r in records]),
            "seed": seed if isinstance(seed, int) else None,
            "torch_version": _first([r.get("torch_version") for r in records] + [s.get("torch_version") for s in started]),
            "nccl_version": _first([r.get("nccl_version") for r in records] + [s.get("nccl_version") for s in started]),
            "backend": _first([s.get("backend") for s in started]),
            "world_size": diag.world_size,
            "k8sddp_version": _first([r.get("k8sddp_version") for r in records]) or __version__,
            "catalogue_version": CATALOGUE_VERSION,
        },
    }


def render_record(diag: Diagnosis, gen: Generation, *, today: dt.date | None = None) -> tuple[str, str]:
    """``(file name, text)`` of a new record."""
    import yaml

    fm = front_matter(diag, gen, today=today)
    body = [f"# {fm['title']}", "", "## What happened", "", diag.verdict, ""]
    if fm["trigger"]:
        guards = ", ".join(f"{g} ({RULES[g].name})" for g in fm["guardrails"])
        body += ["## Decision", "", f"`{fm['trigger']}`: {fm['hypothesis']}. Guardrails: {guards}. "
                 f"Action: {fm['action']} (exit {fm['exit_code']}).", ""]
    body += ["## Evidence", ""] + [f"- {e}" for e in fm["evidence"]] + [""]
    body += ["## Every rank", ""] + [
        f"- rank {s.rank} (node {s.node}): {s.role}, {s.record}, step {s.step}, phase {s.phase}"
        + (f": {redact(s.detail)}" if s.detail else "") for s in diag.ranks] + [""]
    tail: list[str] = []
    for a in gen.attempts:
        lines = a.log_tail[-LOG_LINES:]
        if lines:
            tail += [f"# node {a.node} ({a.path.name})", *lines]
    body += ["## Failure log (excerpt, secrets redacted)", "", "```text", *[redact(x) for x in tail], "```", "",
             "## Follow-up", "", "- [ ] root cause confirmed", "- [ ] guardrail added or exemption justified", ""]
    text = "---\n" + yaml.safe_dump(fm, sort_keys=False, allow_unicode=True, width=1000) + "---\n\n" + "\n".join(body)
    return fm["id"] + ".md", text


def check_record(path: Path) -> list[str]:
    """Problems with one record file, each ``path[:line]: message`` (empty: valid)."""
    import jsonschema_rs
    import yaml

    from ..resources import load_schema

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{path}: cannot read: {exc}"]
    m = _FRONT.match(text)
    if not m:
        return [f"{path}:1: no YAML front matter (the file must start with '---')"]
    try:
        data = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return [f"{path}:{(mark.line + 2) if mark else 1}: front matter is not YAML: {' '.join(str(exc).split())}"]
    problems = []
    validator = jsonschema_rs.validator_for(load_schema(SCHEMA))
    for err in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.instance_path]):
        where = "/".join(str(p) for p in err.instance_path) or "(top)"
        problems.append(f"{path}: {where}: {err.message}")
    if isinstance(data, dict):
        for g in data.get("guardrails") or []:
            if isinstance(g, str) and g not in RULES:
                problems.append(f"{path}: guardrails: {g} is not a rule of the catalogue")
    return problems
