"""Comparing ranks' collectives: where flight recorders disagree, and who is the odd one out (stdlib)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from .flightrec import FRInfo
from .stacks import Frame


def first_disagreement(ok: Mapping[int, FRInfo]) -> int | None:
    """The lowest sequence number at which two ranks' entries differ in op or input sizes."""
    if len(ok) < 2:
        return None
    ref_rank = max(ok, key=lambda r: len(ok[r].entries))
    ref = {e.seq: e for e in ok[ref_rank].entries}
    best: int | None = None
    for rank, f in ok.items():
        if rank == ref_rank:
            continue
        for e in f.entries:
            o = ref.get(e.seq)
            if o is not None and (o.op != e.op or o.in_sizes != e.in_sizes):
                if best is None or e.seq < best:
                    best = e.seq
                break
    return best


def odd_ones(sites: Mapping[int, tuple[Frame | None, str, str]], ok: Mapping[int, FRInfo]) -> list[int]:
    """The ranks whose collective differs from a strict majority's (needs three ranks or more)."""
    if len(sites) < 3:
        return []
    keys = {r: (s.where() if s else None, op, sz) for r, (s, op, sz) in sites.items()}
    counts = Counter(keys.values())
    top, n = counts.most_common(1)[0]
    if n * 2 <= len(keys):
        return []
    return sorted(r for r, k in keys.items() if k != top)
