"""The restart policy, as the Kubeflow training operator (v1.9) and the kubelet apply it.

Sources: training-operator pkg/controller.v1/common/pod.go (ReconcilePods), job.go
(ReconcileJobs: backoff limit, active deadline), pkg/core PastBackoffLimit, pytorch
pytorchjob_controller.go (UpdateJobStatus), pkg/util/train IsRetryableExitCode;
../shared/reference/NOTES.md.

- ``ExitCode``: the pod's own policy becomes ``Never``; the operator reads the ``pytorch``
  container's exit code: >= 128 -> it deletes the pod and creates it again (the job shows
  Restarting); 1-127 -> the job Fails for good. These recreations do not count against
  ``backoffLimit`` (it counts container restarts of running pods), except that
  ``backoffLimit: 0`` fails the job at the first failed pod.
- ``OnFailure`` (the default): the kubelet restarts the container in place, after a back-off of
  10 s doubling to 300 s (kubelet's CrashLoopBackOff), and the pod stays Running; the restarts of
  running pods are summed, and when the sum reaches ``backoffLimit`` (exceeds 0 for a limit of 0) the
  job Fails.
- ``Always``: as ``OnFailure``, and a container that exits 0 is restarted too.
- ``Never``: a failed pod fails the job.
- A Master that succeeds makes the job Succeeded; without a Master, all Workers must.
- ``activeDeadlineSeconds`` from the job's start: past it, every pod is deleted and the job Fails.

A container killed by signal N exits 128 + N (the container runtime's convention), so a local
process's negative return code ``-N`` is read as ``128 + N``.
"""

from __future__ import annotations

import enum

__all__ = ["Action", "Messages", "POLICIES", "decide", "exit_code", "kubelet_backoff"]

POLICIES = ("OnFailure", "ExitCode", "Never", "Always")


class Action(str, enum.Enum):
    """What happens to a pod whose container exited."""

    SUCCEEDED = "succeeded"  #: the pod is done (phase Succeeded)
    RESTART_IN_PLACE = "restart-in-place"  #: the kubelet restarts the container (OnFailure/Always)
    RECREATE = "recreate"  #: the operator deletes and recreates the pod (ExitCode, >= 128)
    FAIL_JOB = "fail-job"  #: the pod Failed and so does the job (ExitCode 1-127, Never)


def exit_code(returncode: int) -> int:
    """A container's exit code from a process return code (``-N`` -> ``128 + N``)."""
    return 128 - returncode if returncode < 0 else returncode


def decide(policy: str, code: int) -> Action:
    """The action for a container of a replica with ``policy`` that exited with ``code``.

    Raises:
        ValueError: an unknown policy (the API server would refuse the pod).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown restartPolicy {policy!r} (expected one of {', '.join(POLICIES)})")
    if policy == "Always":
        return Action.RESTART_IN_PLACE
    if code == 0:
        return Action.SUCCEEDED
    if policy == "OnFailure":
        return Action.RESTART_IN_PLACE
    if policy == "ExitCode":
        return Action.RECREATE if code >= 128 else Action.FAIL_JOB
    return Action.FAIL_JOB


def kubelet_backoff(restarts: int, base: float = 10.0, cap: float = 300.0) -> float:
    """Seconds before in-place restart number ``restarts`` (1-based): base, 2x base, ... capped."""
    return float(min(cap, base * (2 ** max(0, restarts - 1))))


class Messages:
    """The operator's condition reasons and messages for job ``name`` (pytorchjob_controller.go,
    common/pod.go, common/job.go)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def created(self) -> tuple[str, str]:
        """Condition Created: ``PyTorchJobCreated``."""
        return "PyTorchJobCreated", f"PyTorchJob {self.name} is created."

    def running(self) -> tuple[str, str]:
        """Condition Running: the Master (or, without one, a Worker) runs."""
        return "PyTorchJobRunning", f"PyTorchJob {self.name} is running."

    def restarting(self, rtype: str) -> tuple[str, str]:
        """Condition Restarting: a pod of ``rtype`` is recreated (ExitCode, code >= 128)."""
        return "PyTorchJobRestarting", f"job {self.name} is restarting because {rtype} replica(s) failed."

    def failed_exit_code(self, rtype: str) -> tuple[str, str]:
        """Condition Failed: a pod of ``rtype`` exited 1-127 under ExitCode."""
        return "PyTorchJobFailed", f'job "{self.name}" is failing because "{rtype}" replica(s) failed.'

    def failed_never(self, failed: int, rtype: str) -> tuple[str, str]:
        """Condition Failed: ``failed`` pods of ``rtype`` failed under Never."""
        return "PyTorchJobFailed", f"PyTorchJob {self.name} is failed because {failed} {rtype} replica(s) failed."

    def succeeded(self) -> tuple[str, str]:
        """Condition Succeeded: the Master (or every Worker) succeeded."""
        return "PyTorchJobSucceeded", f"PyTorchJob {self.name} is successfully completed."

    def backoff_limit(self) -> tuple[str, str]:
        """Condition Failed: the restarts reached ``backoffLimit``."""
        return "PyTorchJobFailed", f"Job {self.name} has failed because it has reached the specified backoff limit"

    def deadline(self) -> tuple[str, str]:
        """Condition Failed: ``activeDeadlineSeconds`` passed."""
        return "PyTorchJobFailed", f"Job {self.name} has failed because it was active longer than specified deadline"

    def local_cap(self, cap: int) -> tuple[str, str]:
        """Condition Failed: the local runner's own restart cap (``--max-restarts``)."""
        return "LocalRestartCapReached", (
            f"local run of {self.name} stopped after {cap} pod restart{'' if cap == 1 else 's'} (--max-restarts; the operator has no such cap)"
        )
