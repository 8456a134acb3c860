"""Learned heartbeat budgets (torch-free): k x the longest interval seen on any rank, clamped.

A fixed budget is either slow to catch a hang (300 s by default) or a false alarm on a job whose
steps are long. After a warm-up of ``K8SDDP_LEARN_WARMUP`` intervals, each budget group's budget
becomes ``factor x`` the longest interval between two beats seen so far on any rank (and in
earlier attempts), clamped to ``[K8SDDP_WATCHDOG_MIN_SECONDS, the group's fixed budget]`` (the
fixed budget of ``data``/``step``/``hook`` is ``K8SDDP_WATCHDOG_TIMEOUT_SECONDS``).

Groups: ``data``, ``step`` and ``hook`` share the ``step`` group's budget (so that the data -> step
alternation of every batch is never a budget change, which would re-arm the hard stop on every
beat); ``eval`` and ``checkpoint`` are learned each on its own; ``init`` and ``stop`` never are.

Agreement goes through the artifact volume, never through collectives on the training process
group (they would shift the flight recorder's sequence numbers and could themselves mismatch):
each rank writes ``budgets/learned-rank<R>.json`` atomically (at most every
:data:`PUBLISH_EVERY_S` seconds, from its watchdog thread) and reads every rank's file; the
budget is computed from the maximum over all of them. The files stay on the volume, so a
restarted attempt starts with the budgets learned before. A learned budget that fired is counted
in the file (``fired``); the next attempt doubles that group's factor per earlier fire, so a
false alarm cannot repeat itself forever under the same budget.

Defaults (``docs/runtime.md``, "Learned budgets", from ``bench/guard_bench.py``): factor 5,
warm-up 20 intervals, floor 60 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .artifacts import write_json_atomic
from .config import DEFAULT_LEARN_FACTOR, DEFAULT_LEARN_WARMUP, DEFAULT_WATCHDOG_MIN_SECONDS
from .watchdog import Heartbeat

#: phase -> the budget group it is learned in (phases not listed keep their fixed budget).
GROUPS: dict[str, str] = {"data": "step", "step": "step", "hook": "step",
                          "eval": "eval", "checkpoint": "checkpoint"}
DEFAULT_FACTOR = DEFAULT_LEARN_FACTOR
DEFAULT_WARMUP = DEFAULT_LEARN_WARMUP
DEFAULT_MIN_SECONDS = DEFAULT_WATCHDOG_MIN_SECONDS
#: seconds between two writes/reads of the budget files by one rank.
PUBLISH_EVERY_S = 5.0
FOLDER = "budgets"
_FILE = re.compile(r"learned-rank(\d+)\.json")


class LearningHeartbeat(Heartbeat):
    """A :class:`~k8sddp.runtime.watchdog.Heartbeat` that also keeps, per phase, the longest
    interval from a beat in that phase to the next beat (seconds) and how many intervals it saw.

    The extra cost per beat is one subtraction, one dict lookup and compare, and one counter
    increment (``bench/runtime_overhead.py`` measures the beat).
    """

    __slots__ = ("longest", "count")

    def __init__(self, budgets: dict[str, float], default_budget: float, trace_every_s: float = 1.0) -> None:
        super().__init__(budgets, default_budget, trace_every_s)
        self.longest: dict[str, float] = {}
        self.count: dict[str, int] = {}

    def beat(self, step: int, phase: str = "step") -> None:
        """Record progress (see :meth:`Heartbeat.beat`) and the interval that ended here."""
        prev = self.phase
        now = time.monotonic()
        gap = now - self.last
        if gap > self.longest.get(prev, 0.0):
            self.longest[prev] = gap
        self.count[prev] = self.count.get(prev, 0) + 1
        Heartbeat.beat(self, step, phase)

    def set_budget(self, phase: str, seconds: float) -> None:
        """Change one phase's budget (the watchdog re-reads it at its next wake-up)."""
        self._budgets[phase] = seconds
        if self.phase == phase:
            self.budget = seconds


def _merge(into: dict[str, dict[str, float]], phases: Any) -> None:
    if not isinstance(phases, dict):
        return
    for group, v in phases.items():
        if group not in GROUPS.values() or not isinstance(v, dict):
            continue
        longest, count = v.get("longest_s"), v.get("count")
        if not isinstance(longest, (int, float)) or not isinstance(count, int):
            continue
        cur = into.setdefault(group, {"longest_s": 0.0, "count": 0, "ranks": 0, "fired": 0})
        cur["longest_s"] = max(cur["longest_s"], float(longest))
        cur["count"] = max(cur["count"], count)
        cur["ranks"] += 1
        fired = v.get("fired", 0)
        cur["fired"] = max(cur["fired"], fired if isinstance(fired, int) else 0)


class BudgetLearner:
    """Learns one rank's budgets; see the module docstring.

    Args:
        hb: the rank's heartbeat (its phase budgets are changed in place).
        fixed: the fixed budget per phase (seconds): the ceiling of each learned budget.
        artifact_dir: the artifact volume (``None``: this rank's intervals only, nothing kept).
        rank: this rank.
        factor: budget = ``factor`` x the longest interval (doubled per earlier fire).
        warmup: intervals of a group to see (this attempt and earlier ones) before learning it.
        floor_s: ``K8SDDP_WATCHDOG_MIN_SECONDS``, the lowest learned budget (seconds).
        scope: a sub-folder of ``budgets/`` (``k8sddp.ray``: one per Ray Train experiment, so
            that runs sharing a volume do not learn from each other); ``None``: ``budgets/``.
    """

    def __init__(self, hb: LearningHeartbeat, fixed: Mapping[str, float], *, artifact_dir: Path | None,
                 rank: int, factor: float = DEFAULT_FACTOR, warmup: int = DEFAULT_WARMUP,
                 floor_s: float = DEFAULT_MIN_SECONDS, scope: str | None = None) -> None:
        self.hb = hb
        self.fixed = dict(fixed)
        self.folder = artifact_dir / FOLDER if artifact_dir is not None else None
        if self.folder is not None and scope:
            self.folder = self.folder / scope
        self.rank = rank
        self.factor = factor
        self.warmup = warmup
        self.floor = floor_s
        self._next = 0.0
        #: group -> what the budget in force was learned from (for the failure record).
        self.learned: dict[str, dict[str, Any]] = {}
        self._previous: dict[str, dict[str, float]] = {}
        self._remote: dict[str, dict[str, float]] = {}
        self._fired_before: dict[str, int] = {}
        if self.folder is not None:
            self._previous = self._read(own=True)
            self._fired_before = {g: int(v.get("fired", 0)) for g, v in self._previous.items()}
        self.update(force=True)

    # -- files ----------------------------------------------------------------------------------
    def _read(self, *, own: bool) -> dict[str, dict[str, float]]:
        merged: dict[str, dict[str, float]] = {}
        if self.folder is None or not self.folder.is_dir():
            return merged
        for entry in self.folder.iterdir():
            m = _FILE.fullmatch(entry.name)
            if not m or (not own and int(m.group(1)) == self.rank):
                continue
            with contextlib.suppress(OSError, ValueError):
                _merge(merged, json.loads(entry.read_text()).get("groups"))
        return merged

    def _local(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        longest, count = dict(self.hb.longest), dict(self.hb.count)
        for phase, group in GROUPS.items():
            if phase not in count:
                continue
            cur = out.setdefault(group, {"longest_s": 0.0, "count": 0})
            cur["longest_s"] = max(cur["longest_s"], longest.get(phase, 0.0))
            cur["count"] += count[phase]
        for group, prev in self._previous.items():  # earlier attempts count too
            cur = out.setdefault(group, {"longest_s": 0.0, "count": 0})
            cur["longest_s"] = max(cur["longest_s"], prev["longest_s"])
            cur["count"] += int(prev["count"])
        return out

    def _publish(self, local: dict[str, dict[str, float]], fired: str | None = None) -> None:
        if self.folder is None:
            return
        groups: dict[str, dict[str, Any]] = {}
        for g, v in local.items():
            groups[g] = {"longest_s": round(v["longest_s"], 6), "count": int(v["count"]),
                         "fired": self._fired_before.get(g, 0) + (1 if g == fired else 0)}
        if fired is not None and fired not in groups:
            groups[fired] = {"longest_s": 0.0, "count": 0, "fired": self._fired_before.get(fired, 0) + 1}
        with contextlib.suppress(OSError):
            write_json_atomic(self.folder / f"learned-rank{self.rank}.json",
                              {"rank": self.rank, "pid": os.getpid(), "groups": groups,
                               "factor": self.factor, "warmup": self.warmup, "floor_s": self.floor})

    # -- learning -------------------------------------------------------------------------------
    def update(self, *, force: bool = False) -> None:
        """Set the learned budgets from this rank's intervals and the other ranks' last read
        (watchdog thread, every wake-up); publish this rank's and read the others' files at most
        once per :data:`PUBLISH_EVERY_S` unless ``force``."""
        now = time.monotonic()
        local = self._local()
        if force or now >= self._next:  # the files: at most every PUBLISH_EVERY_S
            self._next = now + PUBLISH_EVERY_S
            self._publish(local)
            self._remote = self._read(own=False)
        merged = dict(local)
        for g, v in self._remote.items():
            cur = merged.setdefault(g, {"longest_s": 0.0, "count": 0})
            merged[g] = {**cur, "longest_s": max(cur["longest_s"], v["longest_s"]),
                         "count": max(int(cur["count"]), int(v["count"])),
                         "ranks": int(v.get("ranks", 0)) + 1}
        for group, v in merged.items():
            if int(v["count"]) < self.warmup or v["longest_s"] <= 0:
                continue
            factor = self.factor * (2.0 ** self._fired_before.get(group, 0))
            for phase in (p for p, g in GROUPS.items() if g == group):
                ceiling = self.fixed.get(phase)
                if ceiling is None:
                    continue
                budget = min(ceiling, max(min(self.floor, ceiling), factor * v["longest_s"]))
                if self.hb.budget_of(phase) != budget:
                    self.hb.set_budget(phase, budget)
            self.learned[group] = {
                "longest_s": round(v["longest_s"], 6), "intervals": int(v["count"]),
                "ranks_seen": int(v.get("ranks", 1)), "factor": factor, "floor_s": self.floor,
                "ceiling_s": self.fixed.get(group), "budget_s": self.hb.budget_of(group),
                "from_earlier_attempts": bool(self._previous.get(group, {}).get("count")),
            }

    def describe(self, phase: str) -> dict[str, Any]:
        """For the failure record: whether ``phase``'s budget is learned, and from what."""
        group = GROUPS.get(phase)
        if group is None or group not in self.learned:
            return {"budget_source": "fixed", "budget_group": group}
        learned = dict(self.learned[group])
        ceiling = learned.get("ceiling_s")
        if ceiling is not None and learned.get("budget_s", 0.0) >= ceiling:
            # clamped to the fixed budget (k x longest above it, or a floor above it): the budget
            # that fired is the fixed one, and a fire must not loosen the next attempt's factor
            return {"budget_source": "fixed", "budget_group": group, "learned": learned}
        return {"budget_source": "learned", "budget_group": group, "learned": learned}

    def fired(self, phase: str) -> None:
        """Count a fire of ``phase``'s learned budget on the volume (the next attempt doubles
        that group's factor)."""
        group = GROUPS.get(phase)
        if group is not None and self.describe(phase)["budget_source"] == "learned":
            self._publish(self._local(), fired=group)
