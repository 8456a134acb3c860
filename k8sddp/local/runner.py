"""``k8sddp submit --local``: run a PyTorchJob on this machine as the Kubeflow operator would.

One process group per pod (Master and Worker replicas), each running the ``pytorch`` container's
command with the env of :mod:`k8sddp.local.podspec`, in the current Python environment. The
restart policy is applied per pod by :mod:`k8sddp.local.policy`: when one pod fails and is
recreated, only that pod is recreated, as the operator does; its peers learn of it through their
own collectives or rendezvous (with torchrun they fail too, and each is then handled by the same
policy). The job's conditions (Created, Running, Restarting, Succeeded, Failed) are shown like a
cluster job's and written to ``<local-dir>/status.json``; each pod's output goes to
``<local-dir>/logs/<pod>.log`` and, prefixed ``[pod]``, to standard output.

Own limits, which the operator does not have: ``max_restarts`` pod restarts in all (then the job
Fails with reason ``LocalRestartCapReached``), and ``timeout`` seconds (then
:class:`WaitTimeoutError`, exit 5). When the job ends, pods still running are stopped (SIGTERM,
then SIGKILL after ``terminationGracePeriodSeconds``): a local run leaves no process behind,
whatever ``cleanPodPolicy`` says.

SIGINT (Ctrl-C) or SIGTERM to k8sddp stops every pod the same way (each with its own
``terminationGracePeriodSeconds``; a second signal kills them at once), marks the job Failed with
reason ``Stopped``, writes the final ``status.json`` and ends with :class:`StoppedError` (exit 130
or 143). If k8sddp itself is killed (SIGKILL), a watcher process (:mod:`k8sddp.local.reaper`)
kills the pods.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, TextIO

from ..errors import JobFailedError, StoppedError, UsageError, WaitTimeoutError
from ..jobstatus import JobState, Progress, job_state
from .podspec import PodPlan, build_pods, free_port
from .policy import POLICIES, Action, Messages, decide, exit_code, kubelet_backoff
from .reaper import Reaper

__all__ = ["LocalJob", "LocalOptions", "run_jobs"]

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


class LocalJob:
    """One PyTorchJob run locally. Build, then :meth:`run`.

    Args:
        job: the PyTorchJob (validated).
        configmaps: ConfigMaps of the input (env sources).
        options: the run's settings.

    Raises:
        UsageError: a restart policy the operator would not accept, a container without command, an
            env source a local run cannot read.
    """

    def __init__(self, job: dict[str, Any], *, configmaps: list[dict[str, Any]], options: LocalOptions) -> None:
        self.job = job
        self.name = str((job.get("metadata") or {}).get("name") or "job")
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
        for rtype, rspec in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
            policy = str((rspec or {}).get("restartPolicy") or "OnFailure")
            if policy not in POLICIES:
                raise UsageError(f"job {self.name}: replica {rtype} has restartPolicy {policy!r}; "
                                 f"the operator knows {', '.join(POLICIES)}")
        plans = build_pods(job, configmaps=configmaps, local_dir=self.dir, master_port=free_port(),
                           rdzv_port=free_port())
        self.pods = [_Pod(plan=p) for p in plans]
        run_policy = (job.get("spec") or {}).get("runPolicy") or {}
        self.backoff_limit: int | None = run_policy.get("backoffLimit")
        self.deadline_seconds: float | None = run_policy.get("activeDeadlineSeconds")
        self.has_master = any(p.plan.replica_type == "Master" for p in self.pods)
        self.msg = Messages(self.name)
        self.conditions: list[dict[str, str]] = []
        self.restarts_total = 0
        self.progress = options.progress or Progress(sys.stderr)
        self.out = options.out or sys.stdout
        self._out_lock = threading.Lock()
        self.start_time = _now()
        self.completion_time: str | None = None
        self._reaper: Reaper | None = None
        self._ever_running = False
        if self.reused:
            self.progress.event(
                f"{self.name}: note: {self.dir / 'pvc'} keeps {self.reused} file(s) of a previous run, as a PVC "
                f"would: the job resumes from its checkpoints there. For a fresh start delete {self.dir} "
                "or pass another --local-dir"
            )

    # -- conditions (the operator's setCondition / filterOutCondition) -----------------------------
    def _set_condition(self, ctype: str, reason: str, message: str) -> None:
        if any(c["type"] == "Failed" and c["status"] == "True" for c in self.conditions):
            return
        current = next((c for c in self.conditions if c["type"] == ctype), None)
        if current and current["status"] == "True" and current["reason"] == reason:
            return
        kept = []
        for c in self.conditions:
            if c["type"] == ctype or {ctype, c["type"]} == {"Running", "Restarting"}:
                continue
            if ctype in ("Failed", "Succeeded") and c["type"] == "Running":
                c = {**c, "status": "False"}
            kept.append(c)
        now = _now()
        kept.append({"type": ctype, "status": "True", "reason": reason, "message": message,
                     "lastUpdateTime": now, "lastTransitionTime": now})
        self.conditions = kept
        if ctype not in ("Succeeded", "Failed"):  # finish() prints the final one
            self.progress.event(f"{self.name}: {ctype} ({reason}): {message}")
        self._write_status()

    def as_object(self) -> dict[str, Any]:
        """The job with its current ``status``, as the API would show it."""
        replicas: dict[str, dict[str, int]] = {}
        for pod in self.pods:
            counts = replicas.setdefault(pod.plan.replica_type, {"active": 0, "succeeded": 0, "failed": 0})
            key = {"Running": "active", "Pending": "active", "BackOff": "active", "Succeeded": "succeeded",
                   "Failed": "failed"}[pod.phase]
            counts[key] += 1
        status: dict[str, Any] = {"conditions": self.conditions, "replicaStatuses": replicas, "startTime": self.start_time}
        if self.completion_time:
            status["completionTime"] = self.completion_time
        return {**self.job, "status": status}

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
                if self.options.echo_logs:
                    with self._out_lock:
                        self.progress.clear_live()
                        self.out.write(prefix + raw.decode("utf-8", "replace").rstrip("\n") + "\n")
                        self.out.flush()

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
    def _fail(self, reason_message: tuple[str, str]) -> None:
        self.completion_time = _now()
        self._set_condition("Failed", *reason_message)

    def _on_exit(self, pod: _Pod, code: int) -> None:
        pod.last_exit = code
        with contextlib.suppress(OSError), (self.dir / "logs" / f"{pod.plan.name}.log").open("ab") as log:
            log.write(f"--- exited with code {code} at {_now()} ---\n".encode())
        rtype = pod.plan.replica_type
        action = decide(pod.plan.restart_policy, code)
        label = action.value
        if self.backoff_limit == 0 and action in (Action.RECREATE, Action.RESTART_IN_PLACE):
            label = "no restart, backoffLimit 0"
        self.progress.event(f"{pod.plan.name}: exited with code {code} ({pod.plan.restart_policy}: {label})")
        if action is Action.SUCCEEDED:
            pod.phase = "Succeeded"
            return
        if action is Action.FAIL_JOB:
            pod.phase = "Failed"
            if self.backoff_limit == 0:
                self._fail(self.msg.backoff_limit())
            elif pod.plan.restart_policy == "ExitCode":
                self._fail(self.msg.failed_exit_code(rtype))
            else:
                failed = sum(1 for p in self.pods if p.plan.replica_type == rtype and p.phase == "Failed")
                self._fail(self.msg.failed_never(failed, rtype))
            return
        if self.restarts_total >= self.options.max_restarts:
            pod.phase = "Failed"
            self._fail(self.msg.local_cap(self.options.max_restarts))
            return
        self.restarts_total += 1
        if action is Action.RECREATE:
            pod.phase = "Failed"
            if self.backoff_limit == 0:
                self._fail(self.msg.backoff_limit())
                return
            self._set_condition("Restarting", *self.msg.restarting(rtype))
            for d in pod.plan.empty_dirs:
                shutil.rmtree(d, ignore_errors=True)
            pod.attempt += 1
            pod.restarts = 0
            pod.phase = "Pending"
            pod.start_at = time.monotonic()
            return
        # RESTART_IN_PLACE: the pod stays Running; the kubelet waits out its back-off.
        pod.restarts += 1
        if self.backoff_limit is not None:
            total = sum(p.restarts for p in self.pods if p.phase in ("Running", "BackOff"))
            if (self.backoff_limit == 0 and total > 0) or (self.backoff_limit > 0 and total >= self.backoff_limit):
                self._fail(self.msg.backoff_limit())
                return
        base = 10.0 if self.options.restart_backoff is None else self.options.restart_backoff
        delay = kubelet_backoff(pod.restarts, base=base)
        pod.phase = "BackOff"
        pod.start_at = time.monotonic() + delay
        self.progress.event(f"{pod.plan.name}: restarting in place in {delay:g} s (restart {pod.restarts})")

    def _final(self) -> bool:
        return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in self.conditions)

    def _check_success(self) -> None:
        masters = [p for p in self.pods if p.plan.replica_type == "Master"]
        group = masters if self.has_master else [p for p in self.pods if p.plan.replica_type == "Worker"]
        if group and all(p.phase == "Succeeded" for p in group):
            self.completion_time = _now()
            self._set_condition("Succeeded", *self.msg.succeeded())

    def _check_running(self) -> None:
        all_up = all(p.phase in ("Running", "Succeeded") for p in self.pods)
        # the first Running comes with the Master (as the operator sets it); after a Restarting,
        # Running returns only once every pod runs again
        first = not self._ever_running and any(
            p.phase == "Running" and (p.plan.replica_type == "Master" or not self.has_master) for p in self.pods
        )
        if (all_up or first) and any(p.phase == "Running" for p in self.pods):
            self._ever_running = True
            self._set_condition("Running", *self.msg.running())

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> JobState:
        """Run to the end.

        Returns:
            The final state when the job Succeeded.

        Raises:
            JobFailedError: the job Failed (exit 4).
            WaitTimeoutError: ``timeout`` passed (exit 5); every pod is stopped first.
            StoppedError: SIGINT or SIGTERM to this process (exit 130 or 143); every pod is
                stopped first and the job marked Failed (reason ``Stopped``).
        """
        start = time.monotonic()
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            # the pods run in sessions of their own: signals to k8sddp reach them through us
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[int(sig)] = signal.signal(sig, _interrupt)
        self._reaper = Reaper()
        try:
            return self._run(start)
        finally:
            for num, handler in previous.items():
                signal.signal(num, handler)
            if self._reaper is not None:
                self._reaper.close()
            self._reaper = None

    def _run(self, start: float) -> JobState:
        self._set_condition("Created", *self.msg.created())
        for pod in self.pods:
            pod.start_at = start
        try:
            while not self._final():
                now = time.monotonic()
                if self.options.timeout is not None and now - start >= self.options.timeout:
                    self._stop_all(grace=None)
                    state = self.state()
                    self.progress.finish(state)
                    raise WaitTimeoutError(f"local run of job {self.name} did not finish within "
                                           f"{self.options.timeout:g} s; it was {state.condition}")
                if self.deadline_seconds is not None and now - start >= float(self.deadline_seconds):
                    self._stop_all(grace=None)
                    self._fail(self.msg.deadline())
                    break
                for pod in self.pods:
                    if pod.phase in ("Pending", "BackOff") and now >= pod.start_at:
                        self._start(pod)
                    elif pod.phase == "Running" and pod.proc is not None and pod.proc.poll() is not None:
                        self._reap(pod)
                        self._on_exit(pod, exit_code(pod.proc.returncode))
                    if self._final():
                        break
                if not self._final():
                    self._check_success()
                if not self._final():
                    self._check_running()
                self.progress.update(self.state(), self._pod_lines())
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt as exc:
            self._stopped(getattr(exc, "signum", signal.SIGINT))
        except BaseException:
            self._stop_all(grace=None)
            raise
        # The job is over: give pods that are finishing on their own a moment, then stop the rest.
        state = self.state()
        self._stop_all(grace=None, settle=5.0 if state.condition == "Succeeded" else 0.0)
        if state.condition == "Succeeded":
            # as the operator does once a job succeeded: pods still active count as succeeded
            for pod in self.pods:
                if pod.phase in ("Running", "Pending", "BackOff"):
                    pod.phase = "Succeeded"
            state = self.state()
        self._write_status()
        self.progress.update(state, self._pod_lines())
        self.progress.finish(state)
        if state.condition == "Failed":
            raise JobFailedError(f'job "{self.name}" Failed ({state.reason}): {state.message}')
        return state

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


def run_jobs(jobs: list[dict[str, Any]], *, configmaps: list[dict[str, Any]], options: LocalOptions) -> int:
    """Run each job in turn (one local dir each); stop at the first that does not succeed.

    Returns:
        0 when every job Succeeded.

    Raises:
        JobFailedError, WaitTimeoutError, UsageError: as :meth:`LocalJob.run` and its constructor.
    """
    for job in jobs:
        opts = options
        if options.local_dir and len(jobs) > 1:
            name = str((job.get("metadata") or {}).get("name") or "job")
            opts = dataclasses.replace(options, local_dir=str(Path(options.local_dir) / name))
        LocalJob(job, configmaps=configmaps, options=opts).run()
    return 0
