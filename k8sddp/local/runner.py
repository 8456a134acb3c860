"""``k8sddp submit --local``: run a PyTorchJob on this machine as the Kubeflow operator would.

(:func:`run_jobs` runs each job by its kind's ``local_runner``: a TrainJob as its JobSet would,
:mod:`k8sddp.local.jobset`; the processes themselves are :mod:`k8sddp.local.procs`'.)

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
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from ..errors import JobFailedError, UsageError, WaitTimeoutError
from ..jobstatus import JobState
from .podspec import build_pods, free_port
from .policy import POLICIES, Action, Messages, decide, exit_code, kubelet_backoff
from .procs import POLL_SECONDS, LocalOptions, PodRunner, _now, _Pod

__all__ = ["LocalJob", "LocalOptions", "run_jobs"]


class LocalJob(PodRunner):
    """One PyTorchJob run locally. Build, then :meth:`run` (:class:`~k8sddp.local.procs.PodRunner`).

    Args:
        job: the PyTorchJob (validated).
        configmaps: ConfigMaps of the input (env sources).
        options: the run's settings.

    Raises:
        UsageError: a restart policy the operator would not accept, a container without command, an
            env source a local run cannot read.
    """

    def __init__(self, job: dict[str, Any], *, configmaps: list[dict[str, Any]], options: LocalOptions) -> None:
        super().__init__(str((job.get("metadata") or {}).get("name") or "job"), options)
        self.job = job
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
        self._ever_running = False
        self.note_reused()

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

def run_jobs(jobs: list[dict[str, Any]], *, configmaps: list[dict[str, Any]], options: LocalOptions,
             runtimes: list[dict[str, Any]] | None = None) -> int:
    """Run each job in turn (one local dir each), by its kind's local runner (``Kind.local_runner``:
    a PyTorchJob as its operator would, a TrainJob as its JobSet would); stop at the first that
    does not succeed.

    Args:
        jobs: the jobs (validated).
        configmaps: the input's ConfigMaps.
        options: the run's settings.
        runtimes: the input's training runtimes (a TrainJob's must be among them).

    Returns:
        0 when every job succeeded.

    Raises:
        JobFailedError, WaitTimeoutError, StoppedError, UsageError: as the runners.
    """
    from ..jobstatus import kind_of
    from .jobset import LocalTrainJob

    for job in jobs:
        opts = options
        if options.local_dir and len(jobs) > 1:
            name = str((job.get("metadata") or {}).get("name") or "job")
            opts = dataclasses.replace(options, local_dir=str(Path(options.local_dir) / name))
        kind = kind_of(job)
        runner: PodRunner
        if kind.local_runner == "jobset":
            runner = LocalTrainJob(job, configmaps=configmaps, runtimes=list(runtimes or []), options=opts)
        elif kind.local_runner == "operator":
            runner = LocalJob(job, configmaps=configmaps, options=opts)
        else:
            raise UsageError(f"submit --local cannot run a {kind.kind}")
        runner.run()
    return 0
