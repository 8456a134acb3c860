"""``k8sddp submit --local`` for a TrainJob: its JobSet's pods on this machine, with the JobSet's failure handling.

The pods are the trainer Job's (:func:`k8sddp.kinds.trainerlocal.plan`): ``numNodes`` pods
``<job>-node-0-<rank>``, each running the effective ``node`` container (the runtime's, with the
TrainJob's overrides and the ``PET_*`` variables the torch plugin sets), ``PET_NODE_RANK`` read
from the pod's completion-index annotation as the kubelet would, ``JOB_COMPLETION_INDEX`` set as
the Job controller does; ``PET_MASTER_ADDR`` is ``127.0.0.1`` and ``PET_MASTER_PORT`` a free port of
this machine (the controller's ``<job>-node-0-0.<job>:29500``). Initializer Jobs are not run.

A failed pod is judged by its Job's ``podFailurePolicy`` and ``backoffLimit``
(:mod:`k8sddp.local.jobsetpolicy`): with the guarded runtime (``k8sddp runtime render``) an exit
1-127 of ``node`` fails the Job (``PodFailurePolicy``) and the JobSet rule ``FailJobSet`` fails the
TrainJob for good; any other failure (exit >= 128, a signal) exceeds ``backoffLimit: 0``
(``BackoffLimitExceeded``), which no rule matches, so the JobSet restarts: every pod is stopped
and all are created again (``emptyDir`` volumes empty, the "PVCs" kept), while ``maxRestarts``
allows; then ``ReachedMaxRestarts`` fails it. A pod that the policy recreates (``Ignore``, or
within ``backoffLimit``) is started again after the Job controller's back-off (10 s doubling; the
``--restart-backoff`` option sets the first). Conditions are the TrainJob's: ``Complete`` (reason
``AllJobsCompleted``) or ``Failed`` with the JobSet's reason; ``activeDeadlineSeconds`` fails it
with ``DeadlineExceeded``. The local runner's own caps (``--max-restarts`` pod recreations and set
restarts together, ``--timeout``) and stopping are as for a PyTorchJob (:mod:`k8sddp.local.runner`).
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import time
from typing import Any

from ..errors import JobFailedError, UsageError, WaitTimeoutError
from ..jobstatus import JobState
from ..kinds import trainerlocal as tl
from .jobsetpolicy import (
    REASON_BACKOFF_LIMIT,
    REASON_POD_FAILURE_POLICY,
    jobset_decision,
    pod_failure,
)
from .podspec import base_env, free_port, plan_pod
from .policy import exit_code, kubelet_backoff
from .procs import POLL_SECONDS, LocalOptions, PodRunner, _now, _Pod

__all__ = ["LocalTrainJob"]


@dataclasses.dataclass
class _Job:
    plan: tl.JobPlan
    failed: int = 0  # pod failures counted against backoffLimit
    done: str = ""  # "", "Complete" or "Failed"
    reason: str = ""


class LocalTrainJob(PodRunner):
    """One TrainJob run locally, as its JobSet. Build, then :meth:`run`.

    Args:
        job: the TrainJob (validated).
        configmaps: ConfigMaps of the input (env sources).
        runtimes: the input's training runtimes (the TrainJob's must be among them).
        options: the run's settings.

    Raises:
        UsageError: the runtime is missing or unusable, a container without command, an env source
            a local run cannot read, more GPUs than this machine has.
    """

    def __init__(self, job: dict[str, Any], *, configmaps: list[dict[str, Any]], runtimes: list[dict[str, Any]],
                 options: LocalOptions) -> None:
        meta = job.get("metadata") or {}
        super().__init__(str(meta.get("name") or "trainjob"), options)
        self.job = job
        self.configmaps = configmaps
        try:
            self.plan = tl.plan(job, runtimes, str(meta.get("namespace") or "default"))
        except ValueError as exc:
            raise UsageError(f"TrainJob {self.name}: {exc}") from None
        for skipped in self.plan.skipped:
            self.progress.event(f"{self.name}: note: replicatedJob {skipped}")
        self._check_gpus()
        self.jobs = [_Job(p) for p in self.plan.jobs]
        self.restarts = 0  # JobSet restarts counted against maxRestarts
        self.all_restarts = 0
        self._build_pods()
        self.note_reused()

    def _check_gpus(self) -> None:
        """Refuse a run whose pods ask for more GPUs than this machine has (every pod runs here).

        Raises:
            UsageError: with the way to run it on CPU.
        """
        from ..validate.strictchecks import GPU_RESOURCES

        wanted = 0
        for job in self.plan.jobs:
            container = next(c for c in job.pod_spec.get("containers") or [] if c.get("name") == job.container)
            limits = (container.get("resources") or {}).get("limits") or {}
            per_pod = sum(int(str(limits.get(r))) for r in GPU_RESOURCES if str(limits.get(r, "")).isdigit())
            wanted += per_pod * job.completions
        if not wanted:
            return
        try:
            import torch

            have = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
        except ImportError:
            have = 0
        if wanted > have:
            raise UsageError(
                f"TrainJob {self.name}: --local runs every pod on this machine, which has {have} GPU(s) visible to torch; "
                f"the pods ask for {wanted}. Run it on CPU: --set spec.gpusPerNode=0 for a DDPJob spec, or remove the GPU "
                "limits from spec.trainer.resourcesPerNode"
            )

    def _build_pods(self) -> None:
        """(Re)create every pod of the set: new ports, the restart attempt in the labels."""
        base = base_env()
        port = str(free_port())
        self.pods = []
        self.job_of: dict[str, _Job] = {}
        for job in self.jobs:
            container = next(c for c in job.plan.pod_spec.get("containers") or [] if c.get("name") == job.plan.container)
            names = {e.get("name") for e in container.get("env") or [] if isinstance(e, dict)}
            local = {"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": port}
            for index in range(job.plan.completions):
                pod = f"{self.name}-{job.plan.name}-{index}"
                labels = {tl.JOBSET_NAME: self.name, tl.REPLICATED_JOB_NAME: job.plan.replicated_job,
                          tl.JOB_INDEX: str(job.plan.job_index), tl.RESTART_ATTEMPT: str(self.all_restarts),
                          tl.COMPLETION_INDEX: str(index)}
                env = [(k, v) for k, v in local.items() if k in names and k in self.plan.address_env]
                if tl.JOB_COMPLETION_INDEX not in names:
                    env.append((tl.JOB_COMPLETION_INDEX, str(index)))
                plan = plan_pod(
                    pod=pod, replica_type=job.plan.replicated_job, index=index, pod_spec=dict(job.plan.pod_spec),
                    container=container, labels=labels, annotations={tl.COMPLETION_INDEX: str(index)},
                    namespace=self.plan.namespace, configmaps=self.configmaps, local_dir=self.dir, controller_env=env,
                    restart_policy=job.plan.restart_policy, base=base,
                )
                self.pods.append(_Pod(plan=plan))
                self.job_of[pod] = job

    # -- status ----------------------------------------------------------------------------------
    def _condition(self, ctype: str, reason: str, message: str) -> None:
        if self._final():
            return
        self.completion_time = _now()
        self.conditions = [{"type": ctype, "status": "True", "reason": reason, "message": message,
                            "lastTransitionTime": self.completion_time}]
        self._write_status()

    def _fail(self, reason_message: tuple[str, str]) -> None:
        self._condition("Failed", *reason_message)

    def _final(self) -> bool:
        return any(c["status"] == "True" for c in self.conditions)

    def as_object(self) -> dict[str, Any]:
        """The TrainJob with ``status.conditions`` and ``status.jobsStatus`` as the controller writes them."""
        counts: dict[str, dict[str, int]] = {}
        for job in self.jobs:
            c = counts.setdefault(job.plan.replicated_job, {"name": 0, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0})
            pods = [p for p in self.pods if self.job_of.get(p.plan.name) is job]
            if job.done == "Complete":
                c["succeeded"] += 1
            elif job.done == "Failed":
                c["failed"] += 1
            elif any(p.phase in ("Pending", "Running", "BackOff") for p in pods):
                c["active"] += 1
                c["ready"] += int(all(p.phase in ("Running", "Succeeded") for p in pods))
        jobs_status = [{**c, "name": name} for name, c in counts.items()]
        status: dict[str, Any] = {"jobsStatus": jobs_status}
        if self.conditions:
            status["conditions"] = self.conditions
        return {**self.job, "status": status}

    # -- policy ----------------------------------------------------------------------------------
    def _on_exit(self, pod: _Pod, code: int) -> None:
        pod.last_exit = code
        job = self.job_of[pod.plan.name]
        if code == 0:
            pod.phase = "Succeeded"
            self.progress.event(f"{pod.plan.name}: exited with code 0")
            return
        pod.phase = "Failed"
        verdict = pod_failure(job.plan.pod_failure_rules, job.plan.container, code)
        where = f"rule {verdict.rule} of podFailurePolicy" if verdict.rule is not None else "no podFailurePolicy rule"
        self.progress.event(f"{pod.plan.name}: exited with code {code} ({where}: {verdict.action})")
        if verdict.action == "FailJob":
            self._job_failed(job, REASON_POD_FAILURE_POLICY)
            return
        if verdict.action != "Ignore":
            job.failed += 1
            if job.failed > job.plan.backoff_limit:
                self._job_failed(job, REASON_BACKOFF_LIMIT)
                return
        if self._capped():
            return
        pod.attempt += 1
        pod.phase = "Pending"
        for d in pod.plan.empty_dirs:
            shutil.rmtree(d, ignore_errors=True)
        base = 10.0 if self.options.restart_backoff is None else self.options.restart_backoff
        delay = kubelet_backoff(max(1, job.failed), base=base)
        pod.start_at = time.monotonic() + delay
        self.progress.event(f"{pod.plan.name}: recreated by the Job controller in {delay:g} s ({job.failed} of backoffLimit {job.plan.backoff_limit})")

    def _capped(self) -> bool:
        """The local runner's own cap on restarts: fail the job once it is reached."""
        if self.restarts_total >= self.options.max_restarts:
            cap = self.options.max_restarts
            self._fail(("LocalRestartCapReached", f"local run of {self.name} stopped after {cap} restart{'' if cap == 1 else 's'} "
                        "(--max-restarts; the JobSet has no such cap)"))
            return True
        self.restarts_total += 1
        return False

    def _job_failed(self, job: _Job, reason: str) -> None:
        job.done, job.reason = "Failed", reason
        full = f"{self.name}-{job.plan.name}"
        self.progress.event(f"{self.name}: Job {full} failed ({reason})")
        self._stop_all(grace=None)  # the Job controller deletes the Job's other pods; a set decision follows
        decision = jobset_decision(self.plan.failure_policy, job=full, replicated_job=job.plan.replicated_job,
                                   reason=reason, restarts=self.restarts)
        if not decision.restart:
            self._fail((decision.reason, decision.message))
            return
        if self._capped():
            return
        self.restarts += int(decision.counts)
        self.all_restarts += 1
        limit = (self.plan.failure_policy or {}).get("maxRestarts", 0)
        self.progress.event(f"{self.name}: JobSet Restarting ({decision.reason}): {decision.message}; "
                            f"restart {self.all_restarts}" + (f", {self.restarts} of maxRestarts {limit}" if decision.counts else ""))
        for j in self.jobs:
            j.done, j.reason, j.failed = "", "", 0
        for p in self.pods:
            for d in p.plan.empty_dirs:
                shutil.rmtree(d, ignore_errors=True)
        self._build_pods()
        now = time.monotonic()
        for p in self.pods:
            p.start_at = now

    def _check_done(self) -> None:
        for job in self.jobs:
            pods = [p for p in self.pods if self.job_of.get(p.plan.name) is job]
            if not job.done and pods and all(p.phase == "Succeeded" for p in pods):
                job.done = "Complete"
        if self.jobs and all(j.done == "Complete" for j in self.jobs):
            self._condition("Complete", "AllJobsCompleted", "jobset completed successfully")

    # -- main loop -------------------------------------------------------------------------------
    def _run(self, start: float) -> JobState:
        self.progress.event(f"{self.name}: JobSet with {sum(j.plan.completions for j in self.jobs)} pod(s) "
                            f"({', '.join(f'{j.plan.name} x{j.plan.completions}' for j in self.jobs)})")
        for pod in self.pods:
            pod.start_at = start
        try:
            while not self._final():
                now = time.monotonic()
                if self.options.timeout is not None and now - start >= self.options.timeout:
                    self._stop_all(grace=None)
                    state = self.state()
                    self.progress.finish(state)
                    raise WaitTimeoutError(f"local run of TrainJob {self.name} did not finish within "
                                           f"{self.options.timeout:g} s; it was {state.condition}")
                if self.plan.deadline is not None and now - start >= self.plan.deadline:
                    self._stop_all(grace=None)
                    self._fail(("DeadlineExceeded", f"TrainJob {self.name} was active longer than its activeDeadlineSeconds ({self.plan.deadline:g} s)"))
                    break
                for pod in list(self.pods):
                    if pod.phase == "Pending" and now >= pod.start_at:
                        self._start(pod)
                    elif pod.phase == "Running" and pod.proc is not None and pod.proc.poll() is not None:
                        self._reap(pod)
                        self._on_exit(pod, exit_code(pod.proc.returncode))
                    if self._final() or pod not in self.pods:
                        break
                if not self._final():
                    self._check_done()
                self.progress.update(self.state(), self._pod_lines())
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt as exc:
            self._stopped(getattr(exc, "signum", signal.SIGINT))
        except BaseException:
            self._stop_all(grace=None)
            raise
        state = self.state()
        self._stop_all(grace=None)
        self._write_status()
        self.progress.update(state, self._pod_lines())
        self.progress.finish(state)
        if state.failed:
            raise JobFailedError(f'TrainJob "{self.name}" Failed ({state.reason}): {state.message}')
        return state
