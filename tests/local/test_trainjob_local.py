"""``submit --local`` of a Trainer v2 TrainJob: the rendered TrainJob and the guarded runtime run as
the Trainer v2.3.0 controller and JobSet v0.12.0 would run them (PET_* env, the Job's
podFailurePolicy and backoffLimit, the JobSet's failurePolicy), on real processes."""

from __future__ import annotations

import copy
import io
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.errors import JobFailedError, UsageError
from k8sddp.jobstatus import Progress
from k8sddp.local.jobset import LocalTrainJob
from k8sddp.local.runner import LocalOptions

REPO = Path(__file__).resolve().parents[2]


def rendered(tmp_path: Path, cli: Any, *, max_restarts: int = 3) -> tuple[dict[str, Any], dict[str, Any]]:
    """The bundled example rendered as a 2-node x 1-process CPU TrainJob, and the guarded runtime,
    both by the CLI (``render --target trainjob``, ``runtime render``)."""
    tj, rt = tmp_path / "tj.yaml", tmp_path / "rt.yaml"
    res = cli("render", "--target", "trainjob", str(REPO / "examples" / "ddpjob.yaml"), "--set", "spec.procsPerNode=1",
              "--set", "spec.cpu=1", "--set", "spec.memory=2Gi", "--set", "spec.shmSize=1Gi", "--out", str(tj))
    assert res.code == 0, res.err
    res = cli("runtime", "render", "--max-restarts", str(max_restarts), "--out", str(rt))
    assert res.code == 0, res.err
    return yaml.safe_load(tj.read_text()), yaml.safe_load(rt.read_text())


def options(tmp_path: Path, err: io.StringIO, out: io.StringIO | None = None) -> LocalOptions:
    return LocalOptions(local_dir=str(tmp_path / "run"), out=out or io.StringIO(), progress=Progress(err, tty=False),
                        timeout=240, restart_backoff=0.2)


def test_pods_get_the_torch_plugin_env(tmp_path: Path, cli: Any) -> None:
    job, runtime = rendered(tmp_path, cli)
    run = LocalTrainJob(job, configmaps=[], runtimes=[runtime], options=options(tmp_path, io.StringIO()))
    assert [p.plan.name for p in run.pods] == ["demo-node-0-0", "demo-node-0-1"]
    envs = [p.plan.pod_env for p in run.pods]
    for rank, env in enumerate(envs):
        # v2.3.0 torch.go EnforceMLPolicy: numNodes, numProcPerNode, the completion index as the rank;
        # the master's address and port point at this machine
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_NODE_RANK"]) == ("2", "1", str(rank))
        assert env["PET_MASTER_ADDR"] == "127.0.0.1" and env["PET_MASTER_PORT"] == envs[0]["PET_MASTER_PORT"] != "29500"
        assert env["JOB_COMPLETION_INDEX"] == str(rank)
        # the runtime's guards reach the pod, the TrainJob's env wins (its artifact dir is the checkpoint claim)
        assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3" and env["PYTHONFAULTHANDLER"] == "1"
        assert env["K8SDDP_ARTIFACT_DIR"] == str(tmp_path / "run" / "pvc" / "demo-checkpoints" / "k8sddp")
    assert run.plan.failure_policy is not None and run.plan.failure_policy["maxRestarts"] == 3
    assert run.plan.jobs[0].backoff_limit == 0 and run.plan.jobs[0].restart_policy == "Never"
    argv = run.pods[0].plan.argv
    assert argv[:6] == [sys.executable, "-m", "k8sddp", "launch", "--", "torchrun"] and "--nproc-per-node=1" in argv
    assert not run.state().final and run.state().replicas == {"node": {"active": 1, "succeeded": 0, "failed": 0}}


def test_a_runtime_missing_from_the_input_is_refused(tmp_path: Path, cli: Any) -> None:
    job, runtime = rendered(tmp_path, cli)
    (tmp_path / "tj-only.yaml").write_text(yaml.safe_dump(job))
    res = cli("submit", "--local", "--local-dir", str(tmp_path / "run"), str(tmp_path / "tj-only.yaml"))
    assert res.code == 1 and "KDP230" in res.err and "k8sddp-torch" in res.err


@pytest.mark.slow
def test_rendered_trainjob_runs_two_nodes_with_real_torchrun(tmp_path: Path, cli: Any) -> None:
    pytest.importorskip("torch")
    job, runtime = rendered(tmp_path, cli)
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump_all([runtime, job]))
    res = cli("submit", "--local", "--local-dir", str(tmp_path / "run"), "--timeout", "240", str(path))
    assert res.code == 0, res.err
    assert "[demo-node-0-0] k8sddp train: rank 0: done" in res.out and "[demo-node-0-1] k8sddp train: rank 1: done" in res.out
    assert "demo: Complete (AllJobsCompleted): jobset completed successfully" in res.err
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["kind"] == "TrainJob" and status["status"]["conditions"][0]["type"] == "Complete"
    assert status["status"]["jobsStatus"] == [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}]


# Counts its own attempts on the artifact "PVC" and exits with the code CODES[rank][attempt]
# (the last one repeats).
SCRIPT = textwrap.dedent("""
    import os, pathlib, sys, time
    rank = int(os.environ["PET_NODE_RANK"])
    p = pathlib.Path(os.environ["K8SDDP_ARTIFACT_DIR"]) / f"attempts-{rank}"
    p.parent.mkdir(parents=True, exist_ok=True)
    n = int(p.read_text()) if p.exists() else 0
    p.write_text(str(n + 1))
    codes = {codes}[rank]
    code = codes[min(n, len(codes) - 1)]
    print("rank", rank, "attempt", n, "exits", code, flush=True)
    time.sleep(0.5 if code == 0 else 0)
    sys.exit(code)
""")


def scripted(job: dict[str, Any], codes: list[list[int]]) -> dict[str, Any]:
    out = copy.deepcopy(job)
    out["spec"]["trainer"]["command"] = ["python", "-c", SCRIPT.replace("{codes}", repr(codes))]
    return out


def attempts(tmp_path: Path, rank: int) -> int:
    return int((tmp_path / "run" / "pvc" / "demo-checkpoints" / "k8sddp" / f"attempts-{rank}").read_text())


def test_exit_1_fails_the_trainjob_without_a_restart(tmp_path: Path, cli: Any) -> None:
    job, runtime = rendered(tmp_path, cli)
    err = io.StringIO()
    run = LocalTrainJob(scripted(job, [[0], [1]]), configmaps=[], runtimes=[runtime], options=options(tmp_path, err))
    with pytest.raises(JobFailedError, match=r"FailJobSetFailurePolicyAction.*first failed job: demo-node-0"):
        run.run()
    assert "demo-node-0-1: exited with code 1 (rule 1 of podFailurePolicy: FailJob)" in err.getvalue()
    assert "Restarting" not in err.getvalue() and attempts(tmp_path, 1) == 1
    assert run.state().condition == "Failed" and run.state().reason == "FailJobSetFailurePolicyAction"


def test_exit_142_restarts_the_whole_jobset_within_max_restarts(tmp_path: Path, cli: Any) -> None:
    job, runtime = rendered(tmp_path, cli)
    err = io.StringIO()
    run = LocalTrainJob(scripted(job, [[0], [142, 0]]), configmaps=[], runtimes=[runtime], options=options(tmp_path, err))
    state = run.run()
    text = err.getvalue()
    assert state.condition == "Complete" and state.reason == "AllJobsCompleted", text
    assert "demo-node-0-1: exited with code 142 (no podFailurePolicy rule: Count)" in text
    assert "Job demo-node-0 failed (BackoffLimitExceeded)" in text
    assert "JobSet Restarting (DefaultFailurePolicy)" in text and "1 of maxRestarts 3" in text
    # the whole set was recreated: rank 0 ran again although it had not failed
    assert attempts(tmp_path, 0) == 2 and attempts(tmp_path, 1) == 2


def test_retryable_exits_past_max_restarts_fail_the_trainjob(tmp_path: Path, cli: Any) -> None:
    job, runtime = rendered(tmp_path, cli, max_restarts=1)
    err = io.StringIO()
    run = LocalTrainJob(scripted(job, [[0], [142]]), configmaps=[], runtimes=[runtime], options=options(tmp_path, err))
    with pytest.raises(JobFailedError, match="ReachedMaxRestarts"):
        run.run()
    assert attempts(tmp_path, 1) == 2 and err.getvalue().count("JobSet Restarting") == 1


def test_more_gpus_than_this_machine_has_is_refused(tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    job, runtime = rendered(tmp_path, cli)
    job["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = 4
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match=r"has 0 GPU\(s\) visible to torch; the pods ask for 8"):
        LocalTrainJob(job, configmaps=[], runtimes=[runtime], options=options(tmp_path, io.StringIO()))
