"""Phase-aware heartbeat and its watchdog thread, backed by a C-level hard stop (torch-free).

The training loop calls :meth:`Heartbeat.beat` once per phase change (``data`` then ``step`` every
step, ``eval``/``checkpoint`` around long work). A beat is three attribute stores, one monotonic
clock read, a dict lookup and a comparison (``bench/runtime_overhead.py`` measures it in ns).

:class:`Watchdog` runs one thread that sleeps (``select`` on a pipe, with a deadline; never a
fixed polling interval) until ``last_beat + budget(phase)``. If no beat arrived by then it calls
``on_stall`` (dump stacks, flight recorder, failure record, exit) within the budget plus thread
wake-up latency (measured, ``bench/``). It wakes at most every quarter budget to re-arm the hard
stop, and at once when a beat enters a phase with another budget or a signal arrives (the pipe is
also the interpreter's ``signal.set_wakeup_fd``, so SIGTERM reaches this thread even while the
main thread is blocked inside a collective).

Hard stop: a Python thread starves while the main thread holds the GIL inside C code
(measured with torch 2.13: starved 4.6 s; ``bench/runtime_overhead.py`` measures the hard stop). So every (re-)arm also sets
``faulthandler.dump_traceback_later`` (a C thread: dumps every thread's stack without the GIL) and
a kernel interval timer (``setitimer(ITIMER_REAL)``) half a second later. SIGALRM is left at its
default action, so the kernel ends the process with SIGALRM: exit status 128 + 14 = 142, the same
retryable code as the soft path. (``dump_traceback_later(exit=True)`` would exit 1, which the
operator's ``ExitCode`` policy treats as a permanent failure.)
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

_mono = time.monotonic

#: Signals whose arrival the watchdog thread reports to ``on_signal``.
WAKE_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds between the hard stop's stack dump and the SIGALRM that ends the process.
KILL_AFTER_DUMP_S = 0.5


@dataclass(frozen=True)
class Stall:
    """What the watchdog saw when it fired.

    Attributes:
        step: the step number of the last beat.
        phase: the phase of the last beat.
        since_beat_s: seconds from the last beat to detection.
        budget_s: the phase's budget (seconds).
    """

    step: int
    phase: str
    since_beat_s: float
    budget_s: float


class Heartbeat:
    """The loop's beat: the latest step, phase and monotonic time, plus a sampled trace buffer.

    Args:
        budgets: seconds allowed between beats, per phase.
        default_budget: budget of a phase missing from ``budgets`` (seconds).
        trace_every_s: at most one same-budget beat per this many seconds is kept for the trace
            (0 keeps every beat); a beat into a phase with another budget is always kept.
    """

    __slots__ = ("step", "phase", "last", "budget", "_budgets", "_default", "_trace",
                 "_trace_every", "_traced", "on_budget_change")

    def __init__(self, budgets: dict[str, float], default_budget: float, trace_every_s: float = 1.0) -> None:
        self._budgets = dict(budgets)
        self._default = float(default_budget)
        self.step = 0
        self.phase = "init"
        self.last = _mono()
        self.budget = self._budgets.get("init", self._default)
        self._trace: list[tuple[int, str, float]] = [(0, "init", self.last)]
        self._trace_every = float(trace_every_s)
        self._traced = self.last
        #: Called (in the beating thread) after a beat that changed the budget.
        self.on_budget_change: Callable[[], None] | None = None

    def beat(self, step: int, phase: str = "step") -> None:
        """Record progress: ``step`` (int), ``phase`` (a name from ``config.PHASES``)."""
        now = _mono()
        self.step = step
        self.phase = phase
        self.last = now
        budget = self._budgets.get(phase, self._default)
        if budget != self.budget:
            self.budget = budget
            self._trace.append((step, phase, now))
            self._traced = now
            cb = self.on_budget_change
            if cb is not None:
                cb()
        elif now - self._traced >= self._trace_every:
            self._trace.append((step, phase, now))
            self._traced = now

    def budget_of(self, phase: str) -> float:
        """The budget of ``phase`` (seconds)."""
        return self._budgets.get(phase, self._default)

    def drain(self) -> list[tuple[int, str, float]]:
        """Take the buffered trace entries ``(step, phase, monotonic)``, plus the latest beat when
        the sampling skipped it (so the trace always ends at the last beat before a hang; at most
        one extra line per call; the watchdog calls this once per wake-up)."""
        buf = self._trace
        self._trace = []
        last = self.last  # beat() stores step, phase, last: read last first, then re-check it
        step, phase = self.step, self.phase
        if last > self._traced and last == self.last:
            buf.append((step, phase, last))
            self._traced = last
        return buf


class Watchdog:
    """Watches a :class:`Heartbeat` from a daemon thread; see the module docstring.

    Args:
        heartbeat: the beat to watch.
        on_stall: called in the watchdog thread when a budget is exceeded; expected to end the
            process (if it returns, the process exits with ``stall_exit_code``).
        stacks_file: open file for the hard stop's stack dump (kept open by the caller).
        on_signal: called in the watchdog thread with the signal number when SIGTERM or SIGINT
            arrives (only when ``install_wakeup_fd``).
        on_flush: called with the drained trace entries (possibly none) at each wake-up.
        hard_margin_s: seconds beyond the re-arm horizon before the hard stop (default
            ``max(1, budget / 10)``).
        install_wakeup_fd: make the thread's pipe the interpreter's signal wakeup fd (the
            constructor must then run in the main thread).
        stall_exit_code: the exit code when ``on_stall`` returns.
        fire_grace_s: at most this many seconds for ``on_stall`` to finish its dumps; never
            later than the hard stop already armed (at least 1 s), so a soft path that itself
            stalls (GIL starvation) does not push the hard stop out.
        hard_stop: arm the C-level hard stop (``False``: the soft watchdog only).
        exit_on_stall: ``os._exit(stall_exit_code)`` after ``on_stall`` (``False``: the thread
            just ends; for embedding and tests).
        max_period_s: wake at least this often (seconds; default: only the quarter budget). The
            guard passes the learned budgets' publishing interval, so that a budget learned
            after the warm-up applies within seconds, not a quarter of the fixed budget later.
        alarm: end the process with the kernel timer's SIGALRM (its default action must be in
            place); ``False``: with ``faulthandler.dump_traceback_later(exit=True)`` (exit 1),
            where SIGALRM has a handler that a thread other than the main one cannot reset.
    """

    def __init__(
        self,
        heartbeat: Heartbeat,
        *,
        on_stall: Callable[[Stall], None],
        stacks_file: IO[str] | None = None,
        on_signal: Callable[[int], None] | None = None,
        on_flush: Callable[[list[tuple[int, str, float]]], None] | None = None,
        hard_margin_s: float | None = None,
        install_wakeup_fd: bool = False,
        stall_exit_code: int = 142,
        fire_grace_s: float = 10.0,
        hard_stop: bool = True,
        exit_on_stall: bool = True,
        max_period_s: float | None = None,
        alarm: bool = True,
    ) -> None:
        self.hb = heartbeat
        self._on_stall = on_stall
        self._on_signal = on_signal
        self._on_flush = on_flush
        self._stacks = stacks_file
        self._margin = hard_margin_s
        self._exit_code = stall_exit_code
        self._fire_grace = fire_grace_s
        self._hard = hard_stop
        self._exit_on_stall = exit_on_stall
        self._alarm = alarm
        self._max_period = max_period_s
        self._lock = threading.Lock()
        self._stopping = False
        self._timer: tuple[float, Callable[[], None]] | None = None
        self._hard_deadline = float("inf")  # monotonic time of the armed hard stop
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._old_wakeup: int | None = None
        if install_wakeup_fd:
            self._old_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._run, name="k8sddp-watchdog", daemon=True)

    # -- control (main thread) ------------------------------------------------------------------
    def start(self) -> Watchdog:
        """Arm the hard stop and start the thread."""
        self.hb.on_budget_change = self._budget_changed
        self._arm_hard(_mono(), self.hb.budget)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, cancel the hard stop, restore the wakeup fd (main thread)."""
        self._stopping = True
        self.hb.on_budget_change = None
        self._poke()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        self.disarm_hard()
        if self._old_wakeup is not None:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None
        self._flush()

    def call_at(self, when_mono: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` in the watchdog thread at monotonic time ``when_mono`` (one slot)."""
        self._timer = (when_mono, callback)
        self._poke()

    def disarm_hard(self) -> None:
        """Cancel the hard stop (the C dump timer and the interval timer)."""
        with self._lock:
            if self._hard:
                faulthandler.cancel_dump_traceback_later()
                if self._alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)

    def extend_hard(self, seconds: float) -> None:
        """Re-arm the hard stop ``seconds`` from now (used while a failure is being reported)."""
        self._arm_at(seconds)

    # -- internals ------------------------------------------------------------------------------
    def _poke(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._w, b"\0")

    def _period(self, budget: float) -> float:
        period = max(0.05, budget / 4.0)
        return min(period, self._max_period) if self._max_period is not None else period

    def _arm_at(self, delay: float) -> None:
        if not self._hard:
            return
        with self._lock:
            self._hard_deadline = _mono() + delay
            exit_now = not self._alarm
            if self._stacks is not None:
                faulthandler.dump_traceback_later(delay, repeat=False, file=self._stacks, exit=exit_now)
            else:
                faulthandler.dump_traceback_later(delay, repeat=False, exit=exit_now)
            if self._alarm:
                signal.setitimer(signal.ITIMER_REAL, delay + KILL_AFTER_DUMP_S)

    def _arm_hard(self, now: float, budget: float) -> None:
        # The thread re-arms at the latest one period from now; a stall that begins just before
        # that still gets its full budget before the hard stop.
        margin = self._margin if self._margin is not None else max(1.0, budget / 10.0)
        self._arm_at(self._period(budget) + budget + margin)
        del now

    def _budget_changed(self) -> None:
        # Runs in the beating (main) thread, synchronously: the hard stop must follow a longer
        # budget before the main thread can hold the GIL in a long C call.
        self._arm_hard(_mono(), self.hb.budget)
        self._poke()

    def _flush(self) -> None:
        # called at every wake-up, also with no new entries (the learned budgets update here)
        if self._on_flush is not None:
            entries = self.hb.drain()
            with contextlib.suppress(Exception):
                self._on_flush(entries)

    def _wait(self, timeout: float) -> None:
        try:
            ready, _, _ = select.select([self._r], [], [], max(0.0, timeout))
        except (OSError, ValueError):
            return
        if not ready:
            return
        try:
            data = os.read(self._r, 512)
        except (BlockingIOError, OSError):
            return
        if self._on_signal is not None:
            for signum in sorted(set(data) & {int(s) for s in WAKE_SIGNALS}):
                self._on_signal(signum)

    def _run(self) -> None:
        while not self._stopping:
            hb = self.hb
            last, budget = hb.last, hb.budget
            now = _mono()
            timer = self._timer
            if timer is not None and now >= timer[0]:
                self._timer = None
                timer[1]()
                continue
            deadline = last + budget
            if now >= deadline:
                if hb.last == last and not self._stopping:
                    self._fire(Stall(hb.step, hb.phase, now - last, budget))
                    return
                continue
            self._arm_hard(now, budget)
            self._flush()
            if hb.budget != budget:
                # the flush set a new budget (a learned one, :mod:`.budgets`): plan with it now,
                # not one period of the old budget later (measured under Ray: a learned 10 s
                # budget fired 24 s after the last beat, the old 60 s budget's period late)
                continue
            wake = min(deadline, now + self._period(budget))
            if timer is not None:
                wake = min(wake, timer[0])
            self._wait(wake - now)

    def _fire(self, stall: Stall) -> None:
        # bounded by the hard stop already armed (last beat + budget + period + margin at most)
        self._arm_at(min(self._fire_grace, max(1.0, self._hard_deadline - _mono())))
        try:
            self._on_stall(stall)
        finally:
            if self._exit_on_stall:
                os._exit(self._exit_code)
