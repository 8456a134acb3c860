"""Where each rank stood and how it ended, read from its records: the facts the analysis
(:mod:`k8sddp.diagnose.analyze`) reasons over (stdlib only)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .load import Generation, RankData
from .model import CONFIDENCE

__all__ = ["FR_ALL_LIMIT", "FR_SAMPLE", "OUTSIDE_PHASES", "RankEnd", "classify_ranks", "file_name", "lower", "place",
           "world_of"]

#: Up to this many ranks every flight-recorder dump is read; beyond it, the suspects' dumps and
#: :data:`FR_SAMPLE` others (a dump costs ~1 ms per 100 entries to unpickle).
FR_ALL_LIMIT = 256
FR_SAMPLE = 4
#: Phases in which a rank runs no collective of the loop's (``docs/runtime.md``, "The watchdog").
OUTSIDE_PHASES = ("data", "hook", "eval", "checkpoint")


@dataclass
class RankEnd:
    """One rank: its records, how it ended (``kind``), the step and phase it stood at, its exit code."""

    d: RankData
    kind: str
    step: int | None
    phase: str | None
    exit: int | None

    @property
    def rank(self) -> int:
        return self.d.rank


def place(d: RankData) -> tuple[int | None, str | None]:
    """The step and phase a rank stood at: its failure record's, the hard stop's, else its last beat's."""
    rec = d.failure or {}
    if isinstance(rec.get("step"), int):
        return rec["step"], rec.get("phase")
    if d.stacks is not None and d.stacks.hard_stop and d.stacks.soft:
        return d.stacks.soft[1], d.stacks.soft[0]
    last = d.last or {}
    step = last.get("step")
    return (step if isinstance(step, int) else None), last.get("phase")


def world_of(d: RankData) -> int:
    """The world size a rank saw: its failure record's (no extra read), else its start record's."""
    for rec in (d.failure, d.started if not (d.failure or {}).get("world_size") else None):
        value = (rec or {}).get("world_size")
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            return int(value)
    return 0


def lower(conf: str, steps: int = 1) -> str:
    """``conf`` lowered by ``steps`` levels of :data:`~k8sddp.diagnose.model.CONFIDENCE`."""
    return CONFIDENCE[max(0, CONFIDENCE.index(conf) - steps)]


def file_name(d: RankData, what: str, ext: str) -> str:
    """The name of a rank's ``what`` file (``stacks-rank3.txt``), as evidence names it."""
    return f"{what}-rank{d.rank}.{ext}"


def classify_ranks(gen: Generation, exits: Mapping[int, int], node_records: Mapping[int | None, dict],
                   finished: set[int | None]) -> dict[int, RankEnd]:
    """How each rank that started (or left a failure record) ended, and where it stood.

    Args:
        gen: the generation's records.
        exits: rank -> exit code, from torchrun's log lines (:func:`~k8sddp.diagnose.torchrun.worker_exits`).
        node_records: node -> that node's launcher run record (``{}`` when absent).
        finished: the nodes known to have finished (their launcher ended).

    Returns:
        rank -> :class:`RankEnd`; ``kind`` is the failure record's kind, ``done``, ``hang-hard``
        (ended by the hard stop), ``unreadable`` (a truncated record), ``vanished`` (died without
        a record) or ``running``.
    """
    out: dict[int, RankEnd] = {}
    for rank, d in sorted(gen.ranks.items()):
        if not d.has_started and d.failure is None:
            continue
        step, phase = place(d)
        rec = node_records.get(d.node, {})
        code = exits.get(rank)
        if d.failure is not None:
            kind = str(d.failure.get("kind", "unknown"))
            if kind == "exited" and d.failure.get("exit_code") == 0:  # k8sddp.ray: the loop returned
                kind = "done"
        elif d.stacks is not None and d.stacks.hard_stop:
            kind = "hang-hard"
        elif "failure" in d.paths:  # a record it wrote, now truncated: it did not die without one
            kind = "unreadable"
        elif code is not None and code != 0:
            kind = "vanished"
        elif code == 0 or rec.get("exit_code") == 0 or rec.get("child_exit_code") == 0:
            kind = "done"
        elif rec.get("status") == "finished" or d.node in finished:
            kind = "vanished"
        else:
            kind = "running"
        out[rank] = RankEnd(d, kind, step, phase, code)
    return out
