"""The launcher's view: this node's attempt plus, on a shared artifact volume, the other nodes'
newest attempts (stdlib only; used by ``k8sddp launch`` for its summary and run record).

On a volume every node mounts (the multi-node layout render writes) the other nodes' launchers
write their folders next to this one. The launcher waits at most ``wait_s`` seconds for them to
settle (a finished run record, or a failure record for every started rank), then analyses all
of them together, so node 0 no longer blames its own rank for a stall on node 1. A volume that
holds no other node's folder is not shared: the diagnosis then says that it is one node's view.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from .analyze import analyse
from .load import Attempt, Generation, find_attempt_dirs, node_of, read_attempt
from .model import Diagnosis

POLL_S = 0.2


def _settled(a: Attempt) -> bool:
    if (a.record or {}).get("status") == "finished":
        return True
    started = [r for r in a.ranks.values() if r.has_started]
    return bool(started) and all(r.failure is not None for r in started)


def _newest_per_node(runs: Path, own: Path, node: int) -> dict[int, Path]:
    out: dict[int, Path] = {}
    try:
        dirs = find_attempt_dirs(runs.parent) if runs.is_dir() else []
    except FileNotFoundError:
        dirs = []
    for d in dirs:
        n = node_of(d)
        if n is None or n == node or d == own:
            continue
        if n not in out or d.name > out[n].name:
            out[n] = d
    return out


def launcher_view(own: Path, *, node: int, nnodes: int, log_tail: Sequence[str], wait_s: float) -> Diagnosis:
    """Diagnose this node's attempt ``own`` (``<artifact>/runs/<attempt>``) together with the other
    nodes' newest attempts, waiting at most ``wait_s`` seconds for them (``nnodes`` > 1 only)."""
    mine = read_attempt(own)
    attempts = [mine]
    note = ""
    if nnodes > 1:
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            others = {n: read_attempt(p) for n, p in _newest_per_node(own.parent, own, node).items()}
            if len(others) >= nnodes - 1 and all(_settled(a) for a in others.values()):
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        attempts += [others[n] for n in sorted(others)]
        missing = sorted(set(range(nnodes)) - {node} - set(others))
        unsettled = sorted(n for n, a in others.items() if not _settled(a))
        if not others:
            note = (f"view of node {node} only: the artifact volume holds no other node's attempt folder "
                    "(not a shared volume?)")
        elif missing:
            note = f"no attempt folder of node(s) {', '.join(map(str, missing))} within {wait_s:g} s"
        elif unsettled:
            note = (f"node(s) {', '.join(map(str, unsettled))} had not finished their records within "
                    f"{wait_s:g} s")
    diag = analyse(Generation(0, attempts), root=str(own.parent.parent), logs={node: list(log_tail)},
                   finished_nodes={node})
    if note:
        diag.notes.insert(0, note)
    return diag
