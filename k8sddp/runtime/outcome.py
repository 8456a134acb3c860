"""Turn one attempt's worker records into the pod's exit code (torch-free).

torchrun exits 1 whatever its workers did (measured with torch 2.13: a worker exiting 142 gives
torchrun exit 1), so the launcher reads
what each worker left in its attempt folder (:class:`k8sddp.runtime.artifacts.RunDir`) instead:

1. the command exited 0 -> 0; else the launcher received SIGTERM/SIGINT -> preempted (143) /
   interrupted (130);
2. a ``config`` record -> 2 (final); an ``exception`` record -> 1 (final, a bug);
3. a rank that started and died without any record and without a hard-stop dump (SIGKILL, OOM
   killer) -> 137 (retryable; the other ranks' collective errors follow from it);
4. a ``hang`` or ``comm`` record, or a rank that died without a record after a hard-stop dump
   (``Timeout (`` in its stacks file) -> 142 (retryable);
5. no worker ever started -> 147 (retryable);
6. then :func:`apply_hang_streak` turns a retryable hang-class code final (10) once more than
   ``K8SDDP_MAX_HANG_RESTARTS`` of them came in a row without training progress.

``terminated`` records (a rank torn down by torchrun after another rank failed) are never causes;
they are used for the diagnosis: the suspected stuck rank is the one furthest behind (lowest step),
preferring a rank outside the ``step`` phase (a rank in ``step`` is usually waiting in the
collective for the stuck one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import exitcodes as ec

#: Record kinds a worker writes (``docs/runtime.md``).
HANG_KINDS = ("hang", "hang-hard", "comm")
#: Codes that count toward the hang streak (retryable, not a preemption).
STREAK_CODES = (ec.HANG, ec.WORKER_KILLED, ec.NOT_STARTED)


@dataclass
class Outcome:
    """The verdict on one attempt.

    Attributes:
        code: the pod's exit code (:mod:`k8sddp.runtime.exitcodes`).
        reason: one line for people.
        causes: ``{rank: kind}`` of the records that decided the code.
        suspects: ranks suspected of being stuck (hang-class outcomes only).
        max_step: the highest step any rank of this attempt reached (-1: unknown).
        ranks: ``{rank: {kind, step, phase, since_beat_s}}`` per rank, for the run record.
    """

    code: int
    reason: str
    causes: dict[int, str] = field(default_factory=dict)
    suspects: list[int] = field(default_factory=list)
    max_step: int = -1
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)


def _suspects(ranks: dict[int, dict[str, Any]]) -> list[int]:
    known = {r: v for r, v in ranks.items() if isinstance(v.get("step"), int)}
    if not known:
        return []
    low = min(v["step"] for v in known.values())
    behind = sorted(r for r, v in known.items() if v["step"] == low)
    outside = [r for r in behind if known[r].get("phase") != "step"]
    return outside or behind


def decide(
    *,
    child_code: int,
    started: dict[int, dict[str, Any]],
    failures: dict[int, dict[str, Any]],
    last_trace: dict[int, dict[str, Any] | None],
    hard_stopped: set[int],
    signalled: int | None,
) -> Outcome:
    """Classify an attempt.

    Args:
        child_code: the wrapped command's exit status (negative: killed by that signal).
        started: ``{rank: start record}``.
        failures: ``{rank: failure record}``.
        last_trace: ``{rank: last heartbeat-trace entry}`` for ranks without a record.
        hard_stopped: ranks whose stacks file holds a hard-stop dump (``Timeout (``).
        signalled: the signal the launcher received and forwarded, or ``None``.
    """
    ranks: dict[int, dict[str, Any]] = {}
    for rank in sorted(set(started) | set(failures)):
        rec = failures.get(rank)
        if rec is not None:
            ranks[rank] = {k: rec.get(k) for k in ("kind", "step", "phase", "since_beat_s")}
            continue
        entry = last_trace.get(rank) or {}
        kind = "hang-hard" if rank in hard_stopped else ("done" if child_code == 0 else "vanished")
        ranks[rank] = {"kind": kind, "step": entry.get("step"), "phase": entry.get("phase"),
                       "since_beat_s": None}
    steps = [v["step"] for v in ranks.values() if isinstance(v.get("step"), int)]
    max_step = max(steps) if steps else -1

    def out(code: int, reason: str, kinds: tuple[str, ...] = (), suspects: bool = False) -> Outcome:
        causes = {r: v["kind"] for r, v in ranks.items() if v["kind"] in kinds}
        return Outcome(code, reason, causes, _suspects(ranks) if suspects else [], max_step, ranks)

    if child_code == 0:
        return out(ec.SUCCESS, "training finished")
    if signalled is not None:
        code = ec.INTERRUPTED if signalled == 2 else ec.PREEMPTED
        return out(code, f"the launcher received signal {signalled}; forwarded to the workers",
                   ("preempted",))
    by_kind = {v["kind"] for v in ranks.values()}
    if "config" in by_kind:
        return out(ec.CONFIG_ERROR, "a worker refused its configuration", ("config",))
    if "exception" in by_kind:
        which = ", ".join(str(r) for r, v in ranks.items() if v["kind"] == "exception")
        return out(ec.TASK_ERROR, f"the task raised an exception on rank(s) {which}", ("exception",))
    if "vanished" in by_kind:  # the peers' comm errors and watchdog fires follow from it
        which = ", ".join(str(r) for r, v in ranks.items() if v["kind"] == "vanished")
        return out(ec.WORKER_KILLED, f"rank(s) {which} died without a record (SIGKILL, OOM killer?)",
                   ("vanished",))
    if by_kind & set(HANG_KINDS):
        return out(ec.HANG, "hang: a watchdog, the hard stop or a collective timed out",
                   HANG_KINDS, suspects=True)
    if not started:
        if child_code == 127 or child_code == 126:
            return out(child_code, "the command could not be run")
        return out(ec.NOT_STARTED, f"the command exited {child_code} before any worker started")
    return out(ec.WORKER_KILLED, f"the command exited {child_code}; workers left no failure record")


def apply_hang_streak(
    outcome: Outcome, state: dict[str, Any] | None, *, max_restarts: int, progress_step: int
) -> tuple[Outcome, dict[str, Any] | None]:
    """Count consecutive hang-class exits without progress; past the limit the exit is final.

    Args:
        outcome: from :func:`decide`.
        state: the node's saved streak ``{"streak": n, "best_step": s}`` or ``None``.
        max_restarts: ``K8SDDP_MAX_HANG_RESTARTS`` (restarts allowed for the same hang).
        progress_step: the highest step this attempt reached (records, newest checkpoint).

    Returns:
        the (possibly final) outcome and the state to save (``None``: delete it).
        A streak starts at 1; an attempt counts as progress when it got beyond the best step of
        the streak so far, which restarts the streak at 1. A streak above ``max_restarts`` makes
        the code :data:`k8sddp.runtime.exitcodes.HANG_LIMIT`. Success clears the state;
        preemption and final codes leave it as it is.
    """
    if outcome.code == ec.SUCCESS:
        return outcome, None
    if outcome.code not in STREAK_CODES:
        return outcome, state
    prev_best = int((state or {}).get("best_step", -1))
    streak = int((state or {}).get("streak", 0))
    streak = 1 if (state is None or progress_step > prev_best) else streak + 1
    new_state = {"streak": streak, "best_step": max(prev_best, progress_step),
                 "last_code": outcome.code}
    if streak > max_restarts:
        outcome.reason = (f"{outcome.reason}; {streak} consecutive failures without progress beyond "
                          f"step {new_state['best_step']} (K8SDDP_MAX_HANG_RESTARTS={max_restarts}): final")
        outcome.code = ec.HANG_LIMIT
    else:
        outcome.reason = f"{outcome.reason}; retry {streak} of {max_restarts} without progress"
    return outcome, new_state
