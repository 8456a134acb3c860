"""The progress display: a live line on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io
from typing import Any

from k8sddp.jobstatus import Progress, job_state, pods_summary

JOB = {"metadata": {"name": "demo"}, "status": {
    "conditions": [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "created"},
                   {"type": "Running", "status": "False", "reason": "PyTorchJobRunning", "message": "was running"},
                   {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "boom"}],
    "replicaStatuses": {"Worker": {"failed": 1}, "Master": {"active": 1}}}}


def test_state_is_the_last_true_condition() -> None:
    state = job_state(JOB)
    assert (state.condition, state.reason, state.message, state.final) == ("Failed", "PyTorchJobFailed", "boom", True)
    assert state.line() == "demo: Failed (PyTorchJobFailed) | Master 1 active; Worker 1 failed"
    assert job_state({"metadata": {"name": "x"}}).condition == "Pending"


def test_terminal_redraws_one_line() -> None:
    out = io.StringIO()
    p = Progress(out, tty=True)
    p.update(job_state(JOB))
    p.update(job_state(JOB))  # same line, within a second: not redrawn
    assert out.getvalue().count("\n") == 0 and out.getvalue().count("\r\x1b[2K") == 0
    p.update(job_state({"metadata": {"name": "demo"}}))  # changed: redrawn in place
    assert out.getvalue().count("\n") == 0 and out.getvalue().count("\r\x1b[2K") == 1
    assert out.getvalue().endswith("demo: Pending  [00:00]")
    p.finish(job_state(JOB))
    assert out.getvalue().endswith("demo: Failed (PyTorchJobFailed): boom\n")


def test_plain_lines_only_on_change() -> None:
    out = io.StringIO()
    p = Progress(out, tty=False)
    p.update(job_state(JOB))
    p.update(job_state(JOB))
    assert out.getvalue() == "demo: Failed (PyTorchJobFailed) | Master 1 active; Worker 1 failed\n"
    assert "\r" not in out.getvalue()


def test_pod_lines() -> None:
    pod = {"metadata": {"name": "demo-worker-0"}, "status": {"phase": "Running", "containerStatuses": [
        {"name": "pytorch", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}
    assert pods_summary([pod]) == ["demo-worker-0  Running  restarts=2  waiting: CrashLoopBackOff  last exit 137 (OOMKilled)"]


def test_a_trainjob_without_conditions_runs_only_once_a_child_job_is_ready() -> None:
    """JobSet's ``active`` counts Jobs whose pods may all be Pending; ``ready`` says they run."""
    from k8sddp.jobstatus import job_state

    def tj(**counts: int) -> dict[str, Any]:
        return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tj"},
                "status": {"jobsStatus": [{"name": "node", "succeeded": 0, "failed": 0, "suspended": 0, **counts}]}}

    assert job_state(tj(active=1, ready=0)).condition == "Pending"
    assert job_state(tj(active=1, ready=1)).condition == "Running"
    assert job_state({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tj"}}).condition == "Pending"
