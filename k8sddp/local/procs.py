"""The processes of a local run: one process group per pod, their logs, stopping, signals.

:class:`PodRunner` is what every local runner shares (:class:`k8sddp.local.runner.LocalJob` applies
the Kubeflow operator's policy to a PyTorchJob's pods, :class:`k8sddp.local.jobset.LocalTrainJob`
the JobSet's to a TrainJob's): it starts a pod's command in a session of its own (stdout and stderr
to ``<local-dir>/logs/<pod>.log`` and, prefixed ``[pod]``, to the run's output), stops it as the
kubelet does (SIGTERM, SIGKILL after ``terminationGracePeriodSeconds``; every process of the pod
with it), keeps ``<local-dir>/status.json`` current, and turns SIGINT/SIGTERM to k8sddp into a
stop of every pod (:class:`StoppedError`); a watcher process (:mod:`k8sddp.local.reaper`) kills the
pods if k8sddp itself is killed.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, TextIO

from ..errors import StoppedError, UsageError
from ..jobstatus import JobState, Progress, job_state
from .podspec import PodPlan
from .reaper import Reaper

__all__ = ["LocalOptions", "POLL_SECONDS", "PodRunner"]

POLL_SECONDS = 0.1


@dataclasses.dataclass
class LocalOptions:
    """Settings of a local run.

    Attributes:
        local_dir: folder for volumes, logs and status (default ``./.k8sddp-local/<job>``).
        max_restarts: cap on pod restarts (in place and recreations together), >= 0.
        timeout: seconds the whole run may take (None: no bound).
        restart_backoff: first in-place restart delay (seconds; kubelet: 10, doubling to 300).
        out: where pod logs are echoed (default stdout); ``None`` in the echo means silence.
        progress: where conditions and pod states go (default: a :class:`Progress` on stderr).
        echo_logs: echo pod output to ``out``.
    """

    local_dir: str | None = None
    max_restarts: int = 10
    timeout: float | None = None
    restart_backoff: float | None = None
    out: TextIO | None = None
    progress: Progress | None = None
    echo_logs: bool = True


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class _Pod:
    plan: PodPlan
    proc: subprocess.Popen[bytes] | None = None
    phase: str = "Pending"  # Pending, Running, BackOff (Running, container waiting), Succeeded, Failed
    restarts: int = 0  # in-place restarts of this pod (container restartCount)
    attempt: int = 0  # pod incarnation (recreations)
    start_at: float = 0.0  # monotonic time of the next (re)start
    last_exit: int | None = None
    reader: threading.Thread | None = None



class PodRunner(abc.ABC):
    """Pods of one job on this machine. Subclasses set :attr:`pods`, and implement
    :meth:`as_object` (the job with its status), :meth:`_fail` (mark the job Failed) and
    :meth:`_run` (the policy loop); :meth:`run` runs it with signals handled.

    Args:
        name: the job's name.
        options: the run's settings.

    Raises:
        UsageError: a back-off or timeout that is not a finite positive number.
    """

    def __init__(self, name: str, options: LocalOptions) -> None:
        self.name = name
        self.options = options
        backoff = options.restart_backoff
        if backoff is not None and not (math.isfinite(backoff) and backoff >= 0):
            raise UsageError(f"restart back-off must be finite and >= 0 seconds, not {backoff!r}")
        if options.timeout is not None and not (math.isfinite(options.timeout) and options.timeout > 0):
            raise UsageError(f"timeout must be finite and > 0 seconds, not {options.timeout!r}")
        self.dir = Path(options.local_dir or Path(".k8sddp-local") / self.name).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        self.reused = _previous_files(self.dir / "pvc")
        self.pods: list[_Pod] = []
        self.conditions: list[dict[str, str]] = []
        self.restarts_total = 0
        self.progress = options.progress or Progress(sys.stderr)
        self.out = options.out or sys.stdout
        self._out_lock = threading.Lock()
        #: the first failed write of the pods' echoed output (a full disk, a closed pipe): the
        #: pods are still drained into their log files; run() raises it after the job ends
        self._out_error: OSError | None = None
        self.start_time = _now()
        self.completion_time: str | None = None
        self._reaper: Reaper | None = None

    def note_reused(self) -> None:
        """Say that the local "PVCs" hold files of a previous run (the job resumes from them)."""
        if self.reused:
            self.progress.event(
                f"{self.name}: note: {self.dir / 'pvc'} keeps {self.reused} file(s) of a previous run, as a PVC "
                f"would: the job resumes from its checkpoints there. For a fresh start delete {self.dir} "
                "or pass another --local-dir"
            )

    @abc.abstractmethod
    def as_object(self) -> dict[str, Any]:
        """The job with its current ``status``, as the API would show it."""

    @abc.abstractmethod
    def _fail(self, reason_message: tuple[str, str]) -> None:
        """Mark the job Failed with ``(reason, message)``."""

    @abc.abstractmethod
    def _on_exit(self, pod: _Pod, code: int) -> None:
        """Apply the policy to ``pod``, whose container exited with ``code``."""

    @abc.abstractmethod
    def _run(self, start: float) -> JobState:
        """The policy loop, from ``start`` (monotonic seconds) to the end; returns the final state."""

    def _write_status(self) -> None:
        data = json.dumps(self.as_object(), indent=2).encode()
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".status.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.dir / "status.json")

    def state(self) -> JobState:
        """The job's current :class:`JobState`."""
        return job_state(self.as_object())

    def _pod_lines(self) -> list[str]:
        lines = []
        for p in self.pods:
            phase = "Running  waiting: CrashLoopBackOff" if p.phase == "BackOff" else p.phase
            text = f"{p.plan.name}  {phase}  restarts={p.restarts}"
            if p.attempt:
                text += f"  recreated={p.attempt}"
            if p.last_exit is not None:
                text += f"  last exit {p.last_exit}"
            lines.append(text)
        return lines

    # -- processes -------------------------------------------------------------------------------
    def _start(self, pod: _Pod) -> None:
        for d in pod.plan.empty_dirs:
            d.mkdir(parents=True, exist_ok=True)
        log_path = self.dir / "logs" / f"{pod.plan.name}.log"
        log = log_path.open("ab")
        log.write(f"--- {pod.plan.name} attempt {pod.attempt} restart {pod.restarts} at {_now()} ---\n".encode())
        log.flush()
        try:
            pod.proc = subprocess.Popen(
                pod.plan.argv, env=pod.plan.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as exc:
            # The container runtime cannot start the command: the container exits 127/126.
            log.write(f"cannot start {pod.plan.argv[0]!r}: {exc}\n".encode())
            log.close()
            self.progress.event(f"{pod.plan.name}: cannot start {pod.plan.argv[0]!r}: {exc}")
            pod.proc = None
            pod.phase = "Running"
            pod.last_exit = 127 if isinstance(exc, FileNotFoundError) else 126
            self._on_exit(pod, pod.last_exit)
            return
        if self._reaper is not None:
            self._reaper.add(pod.proc.pid)
        pod.phase = "Running"
        assert pod.proc.stdout is not None
        pod.reader = threading.Thread(target=self._pump, args=(pod.plan.name, pod.proc.stdout, log), daemon=True)
        pod.reader.start()

    def _pump(self, name: str, stream: IO[bytes], log: IO[bytes]) -> None:
        prefix = f"[{name}] "
        with log:
            for raw in iter(stream.readline, b""):
                log.write(raw)
                log.flush()
                if self.options.echo_logs and self._out_error is None:
                    with self._out_lock:
                        if self._out_error is not None:
                            continue
                        self.progress.clear_live()
                        try:
                            self.out.write(prefix + raw.decode("utf-8", "replace").rstrip("\n") + "\n")
                            self.out.flush()
                        except (OSError, ValueError) as exc:
                            # Keep reading: a pod whose pipe is not drained blocks on its next write.
                            self._out_error = exc if isinstance(exc, OSError) else OSError(str(exc))
                            self.progress.event(
                                f"{self.name}: standard output cannot be written ({exc}): the pods' output "
                                f"goes on in {self.dir / 'logs'} only")

    def _stop(self, pod: _Pod, *, grace: float | None = None) -> None:
        proc = pod.proc
        if proc is None or proc.poll() is not None:
            return
        wait = pod.plan.grace_seconds if grace is None else grace
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._reap(pod)

    def _reap(self, pod: _Pod) -> None:
        # As when a container's main process ends: the rest of its processes (e.g. torchrun's
        # workers) are killed with it; then the output pipe closes and the reader finishes.
        if pod.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pod.proc.pid, signal.SIGKILL)
            if self._reaper is not None:
                self._reaper.discard(pod.proc.pid)
        if pod.reader is not None:
            pod.reader.join(timeout=5)
            pod.reader = None

    # -- policy ----------------------------------------------------------------------------------
    # -- running --------------------------------------------------------------------------------
    def run(self) -> JobState:
        """Run to the end.

        Returns:
            The final state when the job Succeeded.

        Raises:
            JobFailedError: the job Failed (exit 4).
            WaitTimeoutError: ``timeout`` passed (exit 5); every pod is stopped first.
            StoppedError: SIGINT or SIGTERM to this process (exit 130 or 143); every pod is
                stopped first and the job marked Failed (reason ``Stopped``).
            OSError: the job Succeeded but its pods' output could not be echoed to ``out``
                (``BrokenPipeError`` for a closed pipe); the log files have all of it.
        """
        start = time.monotonic()
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            # the pods run in sessions of their own: signals to k8sddp reach them through us
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[int(sig)] = signal.signal(sig, _interrupt)
        self._reaper = Reaper()
        try:
            state = self._run(start)
            if self._out_error is not None:
                raise self._out_error  # the CLI: exit 2 for a full disk, a quiet 0 for a closed pipe
            return state
        finally:
            for num, handler in previous.items():
                signal.signal(num, handler)
            if self._reaper is not None:
                self._reaper.close()
            self._reaper = None

    def _stopped(self, signum: int) -> None:
        """Stop every pod after SIGINT/SIGTERM, record the end, raise :class:`StoppedError`."""
        name = signal.Signals(signum).name
        running = [p for p in self.pods if p.proc is not None and p.proc.poll() is None]
        names = ", ".join(p.plan.name for p in running) or "none was running"
        graces = sorted({p.plan.grace_seconds for p in running})
        grace = f"; grace {'/'.join(f'{g:g}' for g in graces)} s (terminationGracePeriodSeconds)" if graces else ""
        self.progress.event(f"{self.name}: {name}: stopping {len(running)} pod(s): {names}{grace}; "
                            "a second signal kills them at once")
        try:
            self._stop_all(grace=None)
        except KeyboardInterrupt:
            self.progress.event(f"{self.name}: second signal: killing the pods now")
            self._stop_all(grace=0.0)
        for pod in self.pods:
            if pod.phase in ("Running", "Pending", "BackOff"):
                pod.phase = "Failed"
        self._fail(("Stopped", f"local run of {self.name} was stopped by {name} to k8sddp"))
        self._write_status()
        state = self.state()
        self.progress.update(state, self._pod_lines())
        self.progress.finish(state)
        raise StoppedError(f'job "{self.name}" stopped by {name}: stopped {len(running)} pod(s) ({names}); '
                           f"final status in {self.dir / 'status.json'}", signum=signum)

    def _stop_all(self, *, grace: float | None, settle: float = 0.0) -> None:
        end = time.monotonic() + settle
        for pod in self.pods:
            if pod.proc is not None and pod.proc.poll() is None and settle > 0:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    pod.proc.wait(timeout=max(0.0, end - time.monotonic()))
        threads = [threading.Thread(target=self._stop, args=(p,), kwargs={"grace": grace}, daemon=True)
                   for p in self.pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for pod in self.pods:
            if pod.proc is not None:
                self._reap(pod)


def _previous_files(pvc: Path) -> int:
    """How many files the local "PVCs" under ``pvc`` already hold (0 when there are none)."""
    if not pvc.is_dir():
        return 0
    return sum(1 for p in pvc.rglob("*") if p.is_file())


class _Signalled(KeyboardInterrupt):
    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _interrupt(signum: int, frame: Any) -> None:
    raise _Signalled(signum)


