"""Exit codes of ``k8sddp launch`` (the pod's) and ``k8sddp train`` (a worker's).

The operator's ``restartPolicy: ExitCode`` reads the exit code of the ``pytorch`` container:
>= 128 recreates the pod (retryable), 1-127 fails the job for good (kubeflow/trainer v1.9.4,
pkg/util/train/train_util.go, pkg/controller.v1/common/pod.go). torchrun itself exits 1 whatever
its workers did, so ``k8sddp launch`` derives the pod's code from the workers' failure records.
The table is repeated, with the evidence behind each code, in ``docs/runtime.md``.
"""

from __future__ import annotations

SUCCESS = 0
#: Final. The task raised an exception (a bug): retrying would fail the same way.
TASK_ERROR = 1
#: Final. Usage or configuration: missing or invalid guard variables, a ``--task`` that cannot be
#: imported, bad flags (the CLI's usage code).
CONFIG_ERROR = 2
#: Final. More than ``K8SDDP_MAX_HANG_RESTARTS`` consecutive retryable failures (hang, lost
#: worker, workers never started) without training progress: a deterministic hang.
HANG_LIMIT = 10
#: Final. The wrapped command exists but cannot be executed (shell convention).
NOT_EXECUTABLE = 126
#: Final. The wrapped command was not found (shell convention).
NOT_FOUND = 127
#: Retryable. SIGINT reached the launcher (128 + 2).
INTERRUPTED = 130
#: Retryable. A worker died without a word (SIGKILL: OOM killer, eviction; 128 + 9).
WORKER_KILLED = 137
#: Retryable. A hang: the heartbeat watchdog fired, the C-level hard stop fired (the worker dies by
#: SIGALRM, 128 + 14 = 142), or a collective failed or timed out.
HANG = 142
#: Retryable. SIGTERM (preemption, pod deletion): a final checkpoint was attempted (128 + 15).
#: Never 0: a Master that exits 0 marks the whole PyTorchJob Succeeded.
PREEMPTED = 143
#: Retryable. The command failed before any worker started (rendezvous, torchrun itself).
NOT_STARTED = 147


def is_retryable(code: int) -> bool:
    """``True`` for codes the operator's ``ExitCode`` policy retries (>= 128)."""
    return code >= 128


#: Human names for the run record and the docs.
NAMES: dict[int, str] = {
    SUCCESS: "success",
    TASK_ERROR: "task-error",
    CONFIG_ERROR: "config-error",
    HANG_LIMIT: "hang-limit",
    NOT_EXECUTABLE: "not-executable",
    NOT_FOUND: "not-found",
    INTERRUPTED: "interrupted",
    WORKER_KILLED: "worker-killed",
    HANG: "hang",
    PREEMPTED: "preempted",
    NOT_STARTED: "not-started",
}
