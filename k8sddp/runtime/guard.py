"""One rank's guard: heartbeat, watchdog with its hard stop, signals, records (torch-free import).

The single piece every guarded mode is built on (``docs/runtime.md``, "Guard"):

* ``k8sddp train`` (the Task loop, :mod:`.worker`) creates one with its own SIGTERM controller;
* zero-code mode (:mod:`.autoguard`, injected by ``k8sddp launch``) creates one before the
  script runs and beats it from torch's global hooks;
* the explicit API :mod:`k8sddp.guard` creates one on ``start()`` (or reuses the zero-code one).

What :meth:`Guard.start` installs, in this order (as :mod:`.worker` always did): SIGALRM back to
its default action (the hard stop's kill), ``faulthandler.register`` for SIGTERM (``chain=True``:
dump every thread's stack, then the previous handler) and SIGUSR1 (dump only), the watchdog
thread (phase ``init``, budget ``max(pg timeout, watchdog timeout)``) with the interpreter's
signal wakeup fd, and the learned budgets (:mod:`.budgets`) when ``K8SDDP_LEARN_BUDGETS`` is not 0.

Started outside the main thread (``k8sddp.ray``: Ray Train runs ``train_loop_per_worker`` in a
thread of the worker actor), ``signal.signal`` and ``signal.set_wakeup_fd`` cannot be called
(CPython allows them in the main thread only): the guard then installs no Python handler and no
wakeup fd, keeps the faulthandler registrations (C-level ``sigaction``, allowed from any thread),
writes ``--- k8sddp rank R: training thread 0x... ---`` into the stacks file so that
``k8sddp diagnose`` reads that thread's frames as the rank's (:mod:`k8sddp.diagnose.stacks`), and
arms the hard stop with the kernel timer only where SIGALRM is still at its default action (else
faulthandler's own ``exit=True`` timer, which exits 1). ``on_stalled`` replaces the watchdog's
``os._exit(142)`` after the records (``k8sddp.ray``: ``os.abort``).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import exitcodes as ec
from .artifacts import RunDir
from .budgets import PUBLISH_EVERY_S, BudgetLearner, LearningHeartbeat
from .config import RuntimeConfig
from .failures import classify
from .report import Reporter
from .watchdog import Heartbeat, Stall, Watchdog

_PHASE_NAME = re.compile(r"\w+")


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


def _noop_handler(signum: int, frame: Any) -> None:
    """Python-level SIGTERM handler of a guarded script that has none: it only makes the
    interpreter write the signal to the wakeup fd, where the watchdog thread acts on it."""


class Guard:
    """One rank's guard; see the module docstring.

    Args:
        env: the environment (default ``os.environ``).
        mode: ``"task"`` (``k8sddp train``), ``"autoguard"`` (zero-code), ``"api"`` or ``"ray"``;
            recorded.
        rank, local_rank, world: this worker's place (default: torchrun's ``RANK``,
            ``LOCAL_RANK``, ``WORLD_SIZE``; ``k8sddp.ray`` passes Ray Train's context).
        node: the node rank, recorded in every record when given (Ray: one attempt folder holds
            the ranks of every node).
        run_dir: the attempt folder (default: :attr:`RuntimeConfig.run_dir`).
        budgets_scope: a sub-folder of ``budgets/`` for the learned budgets (default none: the
            volume's own; ``k8sddp.ray``: one per Ray Train experiment).
        on_stalled: called after the stall records instead of the watchdog's ``os._exit(142)``
            (it is expected not to return; if it does, the watchdog thread just ends).

    Raises:
        UsageError: a malformed ``K8SDDP_*`` variable (:meth:`RuntimeConfig.from_env`).
    """

    def __init__(self, env: Mapping[str, str] | None = None, *, mode: str = "api", rank: int | None = None,
                 local_rank: int | None = None, world: int | None = None, node: int | None = None,
                 run_dir: Path | None = None, budgets_scope: str | None = None,
                 on_stalled: Callable[[], None] | None = None) -> None:
        self.env = os.environ if env is None else env
        self.mode = mode
        self.rank = _int_env(self.env, "RANK", 0) if rank is None else rank
        self.local_rank = _int_env(self.env, "LOCAL_RANK", 0) if local_rank is None else local_rank
        self.world = _int_env(self.env, "WORLD_SIZE", 1) if world is None else world
        self.cfg = RuntimeConfig.from_env(self.env)
        run_path = run_dir if run_dir is not None else self.cfg.run_dir
        self.run = RunDir(run_path) if run_path else None
        self.reporter = Reporter(self.run, rank=self.rank, local_rank=self.local_rank, world_size=self.world)
        self.reporter.node = node
        self.budgets_scope = budgets_scope
        self._stalled = on_stalled
        #: the thread that runs the training (the main thread, or Ray Train's training thread)
        self.thread_ident: int | None = None
        #: how the hard stop ends the process: ``"SIGALRM"`` or ``"faulthandler exit 1"``
        self.hard_stop = "SIGALRM"
        self.hb: Heartbeat = LearningHeartbeat(self.cfg.budgets, self.cfg.watchdog_timeout_s,
                                               self.cfg.trace_interval_s)
        self.reporter.hb = self.hb
        self.learner: BudgetLearner | None = None
        self.watchdog: Watchdog | None = None
        self.info: dict[str, Any] = {"guard_mode": mode}
        self._pinned: set[str] = set()
        self._own_sigterm = False
        self._grace_armed = False
        self.active = False

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, *, on_signal: Callable[[int], None] | None = None) -> Guard:
        """Install signals and start the watchdog (main thread; see the module docstring).

        Args:
            on_signal: called in the watchdog thread on SIGTERM/SIGINT (default: the zero-code
                behaviour of :meth:`_on_signal`: a ``terminated`` record and exit 143 when
                torchrun tears the rank down, a ``preempted`` record when the launcher was
                signalled). A caller passing its own also installs its own Python handlers.
        """
        if self.active:
            return self
        in_main = threading.current_thread() is threading.main_thread()
        self.thread_ident = threading.get_ident()
        if in_main:
            if on_signal is None and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _noop_handler)
                self._own_sigterm = True
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
        elif signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
            self.hard_stop = "faulthandler exit 1"  # the kernel timer's SIGALRM would not kill
        # fatal signals (SIGABRT of a gloo size-mismatch abort, SIGSEGV) dump into the rank's own
        # stacks file, where k8sddp diagnose finds the frame that issued the collective
        faulthandler.enable(file=self.reporter.stacks, all_threads=True)
        faulthandler.register(signal.SIGTERM, file=self.reporter.stacks, all_threads=True, chain=True)
        faulthandler.register(signal.SIGUSR1, file=self.reporter.stacks, all_threads=True, chain=False)
        if self.cfg.learn and isinstance(self.hb, LearningHeartbeat):
            self.learner = BudgetLearner(self.hb, self.cfg.budgets, artifact_dir=self.cfg.artifact_dir,
                                         rank=self.rank, scope=self.budgets_scope, factor=self.cfg.learn_factor,
                                         warmup=self.cfg.learn_warmup, floor_s=self.cfg.min_budget_s)
            self.reporter.budget_info = self._budget_info
        if not in_main:
            with contextlib.suppress(OSError, ValueError):
                self.reporter.stacks.write(f"--- k8sddp rank {self.rank}: training thread "
                                           f"0x{self.thread_ident:016x} ---\n")
                self.reporter.stacks.flush()
        self.watchdog = Watchdog(self.hb, on_stall=self._on_stall, stacks_file=self.reporter.stacks,
                                 on_signal=(on_signal or self._on_signal) if in_main else None,
                                 on_flush=self._on_flush, install_wakeup_fd=in_main, stall_exit_code=ec.HANG,
                                 exit_on_stall=self._stalled is None,
                                 max_period_s=PUBLISH_EVERY_S if self.learner is not None else None,
                                 alarm=self.hard_stop == "SIGALRM")
        self.watchdog.start()
        self.active = True
        return self

    def stop(self) -> None:
        """Stop the watchdog and cancel the hard stop; the trace is flushed (main thread)."""
        if not self.active or self.watchdog is None:
            return
        self.active = False
        self.hb.beat(self.hb.step, "stop")
        self.watchdog.stop()
        if self.learner is not None:
            with contextlib.suppress(Exception):
                self.learner.update(force=False)
        self.reporter.flush()

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker) is not this rank: drop the inherited
        registrations. The threads (watchdog, faulthandler's timer) and the interval timer are
        not inherited (POSIX ``fork``); ``cancel_dump_traceback_later`` must not be called here
        (it would wait for the parent's timer thread)."""
        self.active = False
        with contextlib.suppress(Exception):
            faulthandler.unregister(signal.SIGTERM)
            faulthandler.unregister(signal.SIGUSR1)
            signal.set_wakeup_fd(-1)
            if self._own_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)

    # -- beats ----------------------------------------------------------------------------------
    def beat(self, step: int | None = None, phase: str = "step") -> None:
        """Progress: ``step`` (int; ``None`` keeps the last one) in ``phase``."""
        hb = self.hb
        hb.beat(hb.step if step is None else step, phase)

    @contextlib.contextmanager
    def phase(self, name: str, budget: float | None = None) -> Iterator[None]:
        """Run the body in phase ``name`` (its own budget), then return to the previous phase.

        Args:
            name: a phase name (letters, digits, ``_``), e.g. ``"eval"``, ``"checkpoint"``.
            budget: seconds allowed without a beat inside the body (default: the phase's
                configured budget, ``K8SDDP_PHASE_TIMEOUTS``; an explicit one is never learned).

        Raises:
            ValueError: a malformed name or a budget that is not > 0.
        """
        if not _PHASE_NAME.fullmatch(name):
            raise ValueError(f"phase name {name!r}: letters, digits and _ only")
        hb = self.hb
        if budget is not None:
            if not budget > 0:
                raise ValueError(f"phase {name!r}: budget must be > 0 seconds, got {budget!r}")
            self._pinned.add(name)
            if isinstance(hb, LearningHeartbeat):
                hb.set_budget(name, float(budget))
            if self.learner is not None:
                self.learner.fixed.pop(name, None)
        step, before = hb.step, hb.phase
        hb.beat(step, name)
        try:
            yield
        finally:
            hb.beat(hb.step, before)

    # -- records --------------------------------------------------------------------------------
    def record_started(self, **info: Any) -> None:
        """(Re)write ``started-rank<R>.json`` with ``info`` merged into what was recorded before."""
        self.info.update(info)
        self.info.setdefault("budgets", dict(self.cfg.budgets))
        self.info.setdefault("watchdog_timeout_s", self.cfg.watchdog_timeout_s)
        self.info.setdefault("seed", self.cfg.seed)
        self.info.setdefault("code_version", self.env.get("K8SDDP_CODE_VERSION"))
        self.info.setdefault("restart_count", self.env.get("TORCHELASTIC_RESTART_COUNT"))
        self.info.setdefault("python", sys.version.split()[0])
        ident = self.thread_ident or threading.main_thread().ident
        self.info.setdefault("main_thread", f"0x{ident:016x}" if ident is not None else None)
        with contextlib.suppress(OSError):
            self.reporter.started(self.info)

    def _budget_info(self, phase: str) -> dict[str, Any]:
        if phase in self._pinned:
            return {"budget_source": "explicit"}
        return self.learner.describe(phase) if self.learner is not None else {"budget_source": "fixed"}

    # -- watchdog thread ------------------------------------------------------------------------
    def _on_flush(self, entries: list[tuple[int, str, float]]) -> None:
        self.reporter.write_trace(entries)
        if self.learner is not None:
            with contextlib.suppress(Exception):
                self.learner.update()

    def _on_stall(self, stall: Stall) -> None:
        if self.learner is not None:
            with contextlib.suppress(Exception):
                self.learner.fired(stall.phase)
        try:
            self.reporter.on_stall(stall)
        finally:
            if self._stalled is not None:
                self._stalled()
                if self.watchdog is not None:  # it returned: the caller chose to live on
                    self.watchdog.disarm_hard()

    def is_preemption(self) -> bool:
        """``True`` when the launcher dropped its ``preempt`` marker, or there is no launcher."""
        return self.run is None or self.run.preempt_marker.exists()

    def _on_signal(self, signum: int) -> None:
        rep = self.reporter
        if not self.is_preemption():  # torchrun tears this rank down: another one failed
            rep.failure("terminated", exit_code=ec.PREEMPTED,
                        message=f"signal {signum}: torn down after another rank failed")
            rep.dump_flight_recorder()
            rep.flush()
            os._exit(ec.PREEMPTED)
        if self._own_sigterm and signal.getsignal(signal.SIGTERM) is _noop_handler:
            rep.failure("preempted", exit_code=ec.PREEMPTED, checkpoint_step=None,
                        message=f"signal {signum}: preempted; the script handles no SIGTERM, so no "
                                "final checkpoint")
            rep.flush()
            os._exit(ec.PREEMPTED)
        if not self._grace_armed and self.watchdog is not None:  # the script's handler checkpoints
            self._grace_armed = True
            grace = self.cfg.stop_grace_s

            def expired() -> None:
                rep.dump_stacks("stop grace expired")
                rep.failure("preempted", exit_code=ec.PREEMPTED, checkpoint_step=None,
                            message=f"the script did not exit within {grace:g} s of SIGTERM")
                rep.flush()
                os._exit(ec.PREEMPTED)

            import time
            self.watchdog.call_at(time.monotonic() + grace, expired)

    # -- exit records (zero-code and API modes) -------------------------------------------------
    def install_exit_records(self) -> None:
        """An uncaught exception writes an ``exception`` (or ``comm``: exit 142) record;
        an interpreter exit without one writes ``exited`` (``sys.exit``, end of script), so the
        launcher never mistakes a script's own exit for a vanished rank."""
        previous = sys.excepthook
        guard = self

        def hook(tp: type[BaseException], exc: BaseException, tb: Any) -> None:
            kind = "exception"
            if "torch.distributed" in sys.modules:
                with contextlib.suppress(Exception):
                    kind = classify(exc)
            code = ec.HANG if kind == "comm" else ec.TASK_ERROR
            if kind == "comm":
                guard.reporter.dump_flight_recorder()
            guard.reporter.failure(kind, exit_code=code, message=f"{tp.__name__}: {exc}", exc=exc)
            guard.reporter.flush()
            previous(tp, exc, tb)
            if kind == "comm":
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                if guard.watchdog is not None:
                    guard.watchdog.disarm_hard()
                os._exit(code)

        sys.excepthook = hook
        import atexit

        def at_exit() -> None:
            if threading.current_thread() is not threading.main_thread():
                return
            guard.reporter.failure("exited", exit_code=None, message="the script ended through the "
                                   "interpreter (end of script or sys.exit); its exit status is torchrun's")
            if guard.active:
                guard.stop()

        atexit.register(at_exit)


def run_dir_of(env: Mapping[str, str]) -> Path | None:
    """The attempt folder the launcher passed (``K8SDDP_RUN_DIR``), or ``None``."""
    raw = env.get("K8SDDP_RUN_DIR", "").strip()
    return Path(raw) if raw else None
