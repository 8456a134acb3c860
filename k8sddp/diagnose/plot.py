"""``k8sddp diagnose --plot FILE``: a timeline of every rank's phases with the divergence marked
(matplotlib, imported here only; the ``diagnose`` extra).

Ranks are aligned by step, not by wall clock (node clocks drift): each rank's own monotonic beats
are shifted so that 0 is where that rank began the last step every rank began. A rank's last
phase is drawn up to its failure record (``since_beat_s`` after the last beat); the culprit's
stall is hatched and labelled.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ..atomic import write_bytes_atomic
from .load import Generation
from .model import Diagnosis

PHASE_COLOURS = {"init": "#bbbbbb", "data": "#8fbbd9", "step": "#4c72b0", "hook": "#dd8452",
                 "eval": "#55a868", "checkpoint": "#8172b3", "stop": "#937860"}
#: At most this many ranks get a row (culprits first, then the lowest ranks).
MAX_ROWS = 24


def _segments(trace: list[dict[str, Any]], tail_s: float) -> list[tuple[float, float, str, int]]:
    out = []
    for a, b in zip(trace, trace[1:], strict=False):
        out.append((float(a["mono"]), float(b["mono"]), str(a.get("phase")), int(a["step"])))
    if trace:
        last = trace[-1]
        out.append((float(last["mono"]), float(last["mono"]) + max(tail_s, 0.05), str(last.get("phase")),
                    int(last["step"])))
    return out


def write_plot(diag: Diagnosis, gen: Generation, path: Path, *, seconds: float = 30.0) -> None:
    """Draw the timeline to ``path`` (``.png`` or ``.svg``, atomically).

    Raises:
        OSError: ``path`` cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ranks = gen.ranks
    culprits = [c.rank for c in diag.culprits if c.rank is not None]
    order = [r for r in culprits if r in ranks] + [r for r in sorted(ranks) if r not in culprits]
    rows = order[:MAX_ROWS]
    traces = {r: [e for e in ranks[r].trace() if isinstance(e.get("mono"), (int, float))] for r in rows}
    # align by step: the last step every plotted rank began
    common = min((max((e["step"] for e in t), default=0) for t in traces.values() if t), default=0)
    zero: dict[int, float] = {}
    for r, t in traces.items():
        hits = [e["mono"] for e in t if e["step"] == common]
        zero[r] = float(hits[0]) if hits else (float(t[-1]["mono"]) if t else 0.0)
    fig, ax = plt.subplots(figsize=(11, 2.4 + 0.45 * len(rows)))
    end_max = 0.0
    for y, r in enumerate(rows):
        rec = ranks[r].failure or {}
        tail = float(rec.get("since_beat_s") or 0.0)
        for a, b, phase, _step in _segments(traces[r], tail):
            a, b = a - zero[r], b - zero[r]
            end_max = max(end_max, b)
            stall = r in culprits and tail > 0 and a == float(traces[r][-1]["mono"]) - zero[r]
            ax.barh(y, b - a, left=a, height=0.6, color=PHASE_COLOURS.get(phase, "#999999"),
                    edgecolor="#c0392b" if stall else "none", hatch="//" if stall else None,
                    linewidth=1.5 if stall else 0)
        if not traces[r]:
            ax.text(0, y, "  no trace", va="center", fontsize=8, color="#666666")
    # start where training started (a long init: torch import, rendezvous), at most `seconds` back
    trained = [float(e["mono"]) - zero[r] for r in rows for e in traces[r] if e.get("phase") != "init"]
    starts = [a - zero[r] for r in rows for a, *_ in _segments(traces[r], 0)]
    left = max(-seconds, min(trained) - 0.5 if trained else min(starts, default=0.0)) - 0.2
    ax.set_xlim(left, end_max + 0.6 * (end_max - left) + 0.5)  # room for the divergence label
    labels = []
    for r in rows:
        d = ranks[r]
        node = f" n{d.node}" if d.node is not None else ""
        role = next((s.role for s in diag.ranks if s.rank == r), "")
        labels.append(f"rank {r}{node} ({role})")
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    for c in diag.culprits:
        if c.rank is None or c.rank not in traces or not traces[c.rank]:
            continue
        y = rows.index(c.rank)
        x = float(traces[c.rank][-1]["mono"]) - zero[c.rank]
        ax.axvline(x, color="#c0392b", linestyle="--", linewidth=1)
        x_end = x + float((ranks[c.rank].failure or {}).get("since_beat_s") or 0.0)  # label past the stall
        where = f"at {c.frame.rsplit('/', 1)[-1]}" if c.frame else ""
        col = c.collective or {}
        parted = f"; peers in #{col['seq']} {col.get('op')}" if col.get("seq") is not None else ""
        ax.annotate(f"divergence: rank {c.rank} {c.kind} in {c.phase or 'an unknown phase'} (step {c.step})\n{where}{parted}",
                    xy=(x_end, y), xytext=(6, 0), textcoords="offset points", fontsize=7, color="#c0392b",
                    va="center")
    ax.set_xlabel(f"seconds, each rank's own clock, 0 = its start of step {common} (aligned by step, not wall clock)")
    fig.suptitle(f"k8sddp diagnose: {diag.verdict[:120]}", fontsize=9)
    ax.legend(handles=[Patch(color=c, label=p) for p, c in PHASE_COLOURS.items()], loc="lower left",
              fontsize=7, ncol=len(PHASE_COLOURS), bbox_to_anchor=(0, 1.0), frameon=False)
    ax.grid(axis="x", alpha=0.3)
    if len(order) > len(rows):
        ax.text(1, 1.01, f"{len(order) - len(rows)} more ranks not drawn", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    buf = io.BytesIO()
    fig.savefig(buf, format="svg" if path.suffix.lower() == ".svg" else "png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
