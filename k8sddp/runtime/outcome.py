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
5. no worker ever wrote a start record (:func:`_never_started`): torchrun's summary names the
   workers' exit codes -> 2 when they all exited 2 (their argparse), 137 when a signal killed one,
   else 1 (an import-time crash); without worker codes, 147 (retryable) only when the output shows
   a rendezvous or network failure (plausibly transient: the master's Service not resolvable
   yet), else 2 for a command exiting 2 (torchrun's usage error) and 1 otherwise (final: the same
   command would fail the same way);
6. then :func:`apply_hang_streak` turns a retryable code (137, 142, 147) final (10) once more than
   ``K8SDDP_MAX_HANG_RESTARTS`` of them came in a row without training progress.

``terminated`` records (a rank torn down by torchrun after another rank failed) are never causes;
they are used for the diagnosis: the suspected stuck rank is the one furthest behind (lowest step),
preferring a rank outside the ``step`` phase (a rank in ``step`` is usually waiting in the
collective for the stuck one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import exitcodes as ec

#: Record kinds a worker writes (``docs/runtime.md``).
HANG_KINDS = ("hang", "hang-hard", "comm")
#: Codes that count toward the hang streak (retryable, not a preemption).
STREAK_CODES = (ec.HANG, ec.WORKER_KILLED, ec.NOT_STARTED)
#: Output of a command that failed before any worker started for a plausibly transient reason:
#: torchrun's rendezvous errors (torch/distributed/elastic/rendezvous/api.py), c10d store and
#: socket errors, DNS of a master Service that does not resolve yet.
TRANSIENT_PATTERNS = ("Rendezvous", "DistNetworkError", "DistStoreError", "TCPStore",
                      "Connection refused", "Connection reset", "timed out", "Timed out",
                      "Name or service not known", "Temporary failure in name resolution",
                      "No route to host", "Network is unreachable", "Address already in use")
#: torchrun's failure summary: one ``exitcode  : N (pid: P)`` line per failed worker
#: (torch/distributed/elastic/multiprocessing/errors/__init__.py, ``ChildFailedError``).
_WORKER_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


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
    #: ``[{rank, node, phase, step, kind, frame}]`` named by the shared analysis (:func:`refine`).
    culprits: list[dict[str, Any]] = field(default_factory=list)


def _suspects(ranks: dict[int, dict[str, Any]]) -> list[int]:
    known = {r: v for r, v in ranks.items() if isinstance(v.get("step"), int)}
    if not known:
        return []
    low = min(v["step"] for v in known.values())
    behind = sorted(r for r, v in known.items() if v["step"] == low)
    outside = [r for r in behind if known[r].get("phase") != "step"]
    return outside or behind


def _error_line(tail: Sequence[str]) -> str:
    """The last line of ``tail`` that looks like an error message (for the reason), or ``""``;
    torchrun's own summary lines (``ChildFailedError``, ``error_file``, traceback frames) are
    skipped, so a worker's ``error: ...`` or exception line is what is named."""
    for line in reversed(tail):
        text = line.strip()
        if (not text or "ChildFailedError" in text or text.startswith(("error_file", "File ", "traceback"))
                or "errors.html" in text):
            continue
        if "Error" in text or "error:" in text or "Exception" in text:
            return text[:300]
    return ""


def _never_started(child_code: int, tail: Sequence[str], make: Any) -> Outcome:
    """Step 5 of the module docstring: no worker wrote a start record."""
    hint = _error_line(tail)
    said = f": {hint}" if hint else " (see failure_log_tail)"
    if child_code in (ec.NOT_FOUND, ec.NOT_EXECUTABLE):
        return make(child_code, "the command could not be run" + said)
    codes = [int(m.group(1)) for line in tail if (m := _WORKER_EXIT.match(line))]
    if codes:
        shown = ", ".join(str(c) for c in codes)
        if any(c < 0 for c in codes):
            return make(ec.WORKER_KILLED, f"worker(s) killed by a signal ({shown}) before they "
                        "started (OOM killer?)" + said)
        if all(c == ec.CONFIG_ERROR for c in codes):
            return make(ec.CONFIG_ERROR, "the workers exited 2 before they started (their command "
                        "line or configuration)" + said)
        return make(ec.TASK_ERROR, f"the workers exited {shown} before they started (a crash while "
                    "starting up: the same command fails the same way)" + said)
    if child_code < 0:
        return make(ec.WORKER_KILLED, f"the command was killed by signal {-child_code} before any "
                    "worker started" + said)
    text = "\n".join(tail)
    if any(p in text for p in TRANSIENT_PATTERNS):
        return make(ec.NOT_STARTED, f"the command exited {child_code} before any worker started "
                    "(rendezvous or network)" + said)
    if child_code == ec.CONFIG_ERROR:
        return make(ec.CONFIG_ERROR, "the command exited 2 before any worker started (a usage "
                    "error)" + said)
    return make(ec.TASK_ERROR, f"the command exited {child_code} before any worker started, not "
                "for a rendezvous or network failure" + said)


def decide(
    *,
    child_code: int,
    started: dict[int, dict[str, Any]],
    failures: dict[int, dict[str, Any]],
    last_trace: dict[int, dict[str, Any] | None],
    hard_stopped: set[int],
    signalled: int | None,
    log_tail: Sequence[str] = (),
) -> Outcome:
    """Classify an attempt.

    Args:
        child_code: the wrapped command's exit status (negative: killed by that signal).
        started: ``{rank: start record}``.
        failures: ``{rank: failure record}``.
        last_trace: ``{rank: last heartbeat-trace entry}`` for ranks without a record.
        hard_stopped: ranks whose stacks file holds a hard-stop dump (``Timeout (``).
        signalled: the signal the launcher received and forwarded, or ``None``.
        log_tail: the last lines of the command's output (torchrun's failure summary; used only
            when no worker started).
    """
    ranks: dict[int, dict[str, Any]] = {}
    for rank in sorted(set(started) | set(failures)):
        rec = failures.get(rank)
        if rec is not None:
            ranks[rank] = {k: rec.get(k) for k in ("kind", "step", "phase", "since_beat_s")}
            if child_code == 0 and rec.get("kind") == "exited":  # zero-code: a normal end
                ranks[rank]["kind"] = "done"
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
        return out(ec.SUCCESS, "training finished" if started else "the command exited 0")
    if signalled is not None:
        code = ec.INTERRUPTED if signalled == 2 else ec.PREEMPTED
        return out(code, f"the launcher received signal {signalled}; forwarded to the workers",
                   ("preempted",))
    by_kind = {v["kind"] for v in ranks.values()}
    if "config" in by_kind:
        first = min(r for r, v in ranks.items() if v["kind"] == "config")
        why = (failures.get(first) or {}).get("message") or "see its failure record"
        return out(ec.CONFIG_ERROR, f"rank {first} refused its configuration: {why}", ("config",))
    if "exception" in by_kind:
        which = ", ".join(str(r) for r, v in ranks.items() if v["kind"] == "exception")
        return out(ec.TASK_ERROR, f"the task raised an exception on rank(s) {which}", ("exception",))
    if "vanished" in by_kind:  # the peers' comm errors and watchdog fires follow from it
        which = ", ".join(str(r) for r, v in ranks.items() if v["kind"] == "vanished")
        return out(ec.WORKER_KILLED, f"rank(s) {which} died without a record (killed by a signal?)",
                   ("vanished",))
    if by_kind & set(HANG_KINDS):
        return out(ec.HANG, "hang: a watchdog, the hard stop or a collective timed out",
                   HANG_KINDS, suspects=True)
    if "exited" in by_kind:  # zero-code: the script itself ended (sys.exit with a non-zero status)
        which = ", ".join(str(r) for r, v in ranks.items() if v["kind"] == "exited")
        return out(ec.TASK_ERROR, f"rank(s) {which} ended through the interpreter (sys.exit?) and the "
                   f"command exited {child_code}: the script's own decision", ("exited",))
    if not started:
        return _never_started(child_code, log_tail, out)
    return out(ec.WORKER_KILLED, f"the command exited {child_code}; workers left no failure record")


def valid_state(state: Any) -> dict[str, Any] | None:
    """``state`` when it is a well-formed streak ``{"streak": int >= 0, "best_step": int, ...}``,
    else ``None`` (a hand-edited or foreign file is treated as absent, never trusted)."""
    if not isinstance(state, dict):
        return None
    streak, best = state.get("streak"), state.get("best_step")
    if type(streak) is not int or type(best) is not int or streak < 0:
        return None
    return state


def apply_hang_streak(
    outcome: Outcome, state: dict[str, Any] | None, *, max_restarts: int, progress_step: int
) -> tuple[Outcome, dict[str, Any] | None]:
    """Count consecutive retryable exits without progress; past the limit the exit is final.

    Args:
        outcome: from :func:`decide`.
        state: the node's saved streak ``{"streak": n, "best_step": s}`` or ``None`` (malformed
            states are treated as ``None``, :func:`valid_state`).
        max_restarts: ``K8SDDP_MAX_HANG_RESTARTS`` (restarts allowed for the same failure).
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
    checked = valid_state(state)
    prev_best = checked["best_step"] if checked else -1
    streak = 1 if (checked is None or progress_step > prev_best) else checked["streak"] + 1
    best = max(prev_best, progress_step)
    new_state = {"streak": streak, "best_step": best, "last_code": outcome.code}
    since = f" beyond step {best}" if best >= 0 else ""
    if streak > max_restarts:
        outcome.reason = (f"{outcome.reason}; failed {streak} times in a row without progress{since} "
                          f"(K8SDDP_MAX_HANG_RESTARTS={max_restarts}): final")
        outcome.code = ec.HANG_LIMIT
    elif streak == 1:
        outcome.reason = f"{outcome.reason}; retry 1 of {max_restarts}"
    else:
        outcome.reason = (f"{outcome.reason}; retry {streak} of {max_restarts}: failed {streak} "
                          f"times in a row without progress{since}")
    return outcome, new_state


#: Culprit kinds whose rank is reported as the suspected stuck rank.
_STUCK_KINDS = ("hang", "gil-starved")


def refine(outcome: Outcome, diagnosis: Any) -> Outcome:
    """Sharpen :func:`decide`'s verdict with ``k8sddp diagnose``'s analysis of every node's records
    (:func:`k8sddp.diagnose.live.launcher_view`; a :class:`k8sddp.diagnose.model.Diagnosis`).

    * a collective mismatch (gloo's size-mismatch abort, flight-recorder entries that differ) is a
      deterministic bug: 137 or 142 becomes final 1, the mismatch named;
    * a rank that died is named with the signal that ended it (SIGABRT is not SIGKILL); an NCCL
      asynchronous-error teardown (SIGABRT after NCCL's watchdog message) stays retryable: 142;
    * for a hang the suspects are the culprits across all nodes (not this node's furthest-behind
      rank), each with its node, phase, step and stalled frame.
    Success, preemption and configuration errors are left as they are.
    """
    if outcome.code in (ec.SUCCESS, ec.PREEMPTED, ec.INTERRUPTED, ec.CONFIG_ERROR) or not diagnosis.culprits:
        return outcome
    culprits = diagnosis.culprits
    first = culprits[0]
    outcome.culprits = [{"rank": c.rank, "node": c.node, "phase": c.phase, "step": c.step, "kind": c.kind,
                         "frame": c.frame, "confidence": c.confidence} for c in culprits]
    if first.kind == "collective-mismatch" and outcome.code in (ec.WORKER_KILLED, ec.HANG):
        outcome.code = ec.TASK_ERROR
        outcome.reason = f"{first.summary} (a deterministic bug: final)"
        outcome.causes = {c.rank: "collective-mismatch" for c in culprits if c.rank is not None}
        return outcome
    if outcome.code == ec.WORKER_KILLED:
        if first.kind == "died":
            outcome.reason = "; ".join(c.summary for c in culprits if c.kind == "died")
        elif first.kind in ("comm", "hang"):  # the vanished rank was an NCCL teardown: it only waited
            outcome.code = ec.HANG
            outcome.reason = ("NCCL asynchronous-error teardown (SIGABRT after a failed or timed-out "
                              f"collective): {first.summary}")
    if outcome.code == ec.HANG and first.kind in ("died", "exception"):  # on another node
        outcome.reason = f"{outcome.reason}; cause: {first.summary}"
    if outcome.code == ec.HANG and first.kind in _STUCK_KINDS:
        outcome.suspects = [c.rank for c in culprits if c.rank is not None and c.kind in _STUCK_KINDS]
    return outcome
