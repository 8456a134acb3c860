"""SIGTERM in a worker: a final checkpoint at a step boundary all ranks agree on, or a fast exit.

Two cases, told apart by the launcher's ``preempt`` marker in the attempt folder:

* **preemption** (the launcher received SIGTERM, or there is no launcher): every rank proposes the
  step boundary at which it can stop and writes it to the process group's store; all stop at the
  largest proposal, rank 0 writes the checkpoint, every rank exits 143. The main loop proposes
  the boundary it is at; the watchdog thread (woken through the signal wakeup fd, also when the
  main thread is blocked inside a collective) proposes the last boundary the loop checked + 2,
  which the loop has not passed yet. The first proposal of a rank is final. If the agreement or
  the checkpoint does not finish within ``K8SDDP_STOP_GRACE_SECONDS`` the rank writes a
  ``preempted`` record without a checkpoint and exits 143.
* **teardown** (torchrun stops the surviving workers after another one failed): the rank writes a
  ``terminated`` record with its step and phase (the launcher's diagnosis uses it), dumps its
  flight recorder and exits 143 at once, even when its main thread is stuck.

The main loop's cost when no signal came: one attribute store and one attribute read per step.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import time
from typing import Any

from . import exitcodes as ec
from .artifacts import RunDir
from .report import Reporter
from .watchdog import Watchdog

_KEY = "k8sddp/stop/"


class StopController:
    """See the module docstring.

    Args:
        run: the attempt folder (``None``: no launcher; SIGTERM is then a preemption).
        rank, world_size: this worker's place.
        grace_s: seconds from the signal to giving up on the final checkpoint.
        reporter: writes the records.
    """

    def __init__(self, run: RunDir | None, *, rank: int, world_size: int, grace_s: float,
                 reporter: Reporter) -> None:
        self.run = run
        self.rank = rank
        self.world = world_size
        self.grace_s = grace_s
        self.reporter = reporter
        self.store: Any | None = None
        self.watchdog: Watchdog | None = None
        #: set by the signal handler; read by the loop at every step boundary
        self.requested = False
        #: the last step boundary the loop checked
        self.checked = 0
        self.stop_at: int | None = None
        self.agreed = False
        self.signalled_at: float | None = None
        self._proposed: int | None = None
        self._thread_seen = False
        self._lock = threading.Lock()

    # -- signal side ----------------------------------------------------------------------------
    def handle(self, signum: int, _frame: Any) -> None:
        """Python-level handler for SIGTERM/SIGINT (main thread, when it gets to run)."""
        self.requested = True
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()

    def is_preemption(self) -> bool:
        """``True`` when the launcher dropped its marker, or when there is no launcher."""
        return self.run is None or self.run.preempt_marker.exists()

    def on_signal_thread(self, signum: int) -> None:
        """Called by the watchdog thread when SIGTERM/SIGINT arrived (see the module docstring)."""
        self.requested = True
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()
        if self._thread_seen:
            return
        self._thread_seen = True
        if not self.is_preemption():
            self.reporter.failure("terminated", exit_code=ec.PREEMPTED,
                                  message=f"signal {signum}: torn down after another rank failed")
            self.reporter.dump_flight_recorder()
            self.reporter.flush()
            os._exit(ec.PREEMPTED)
        self.propose(self.checked + 2)
        if self.watchdog is not None:
            self.watchdog.call_at(self.signalled_at + self.grace_s, self._grace_expired)

    def _grace_expired(self) -> None:
        self.reporter.dump_stacks("stop grace expired")
        self.reporter.failure("preempted", exit_code=ec.PREEMPTED, checkpoint_step=None,
                              message=f"no final checkpoint within {self.grace_s:g} s of SIGTERM")
        self.reporter.flush()
        os._exit(ec.PREEMPTED)

    # -- agreement ------------------------------------------------------------------------------
    def propose(self, boundary: int) -> None:
        """Publish this rank's stop boundary (the first proposal wins)."""
        with self._lock:
            if self._proposed is not None:
                return
            self._proposed = boundary
            if self.store is not None and self.world > 1:
                with contextlib.suppress(Exception):
                    self.store.set(f"{_KEY}{self.rank}", str(boundary))

    def at_boundary(self, step: int) -> bool:
        """Main loop, after step ``step`` when :attr:`requested`: ``True`` when it must stop now.

        The first call agrees on :attr:`stop_at` through the store (waiting at most half the
        remaining grace); without an answer from every rank it stops here, alone
        (:attr:`agreed` stays ``False``: the final checkpoint then uses no collective).
        """
        if self.stop_at is None:
            self.propose(step)
            if self.store is None or self.world <= 1:
                self.stop_at, self.agreed = max(step, self._proposed or step), True
            else:
                started = self.signalled_at or time.monotonic()
                left = max(0.5, (started + self.grace_s - time.monotonic()) / 2)
                keys = [f"{_KEY}{r}" for r in range(self.world)]
                try:
                    self.store.wait(keys, dt.timedelta(seconds=left))
                    self.stop_at = max(int(self.store.get(k)) for k in keys)
                    self.agreed = True
                except Exception:
                    self.stop_at, self.agreed = step, False
        return step >= self.stop_at
