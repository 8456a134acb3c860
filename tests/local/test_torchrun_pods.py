"""Two local pods (Master + Worker) rendezvous with real torchrun and gloo, wired only by the env
the operator injects (PET_NNODES, PET_NODE_RANK, MASTER_ADDR/PORT) as the bundled render uses it."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from k8sddp.errors import JobFailedError
from k8sddp.jobstatus import Progress
from k8sddp.local.runner import LocalJob, LocalOptions

pytest.importorskip("torch")

SCRIPT = textwrap.dedent("""
    import datetime, os, sys, torch, torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    print("rank", dist.get_rank(), "of", dist.get_world_size(), "sum", int(t.item()), flush=True)
    if os.environ.get("FAIL") and dist.get_rank() == 1:
        raise SystemExit(3)
    dist.destroy_process_group()
""")


def job(script: Path, policy: str, *, fail: bool = False) -> dict:
    container = {"name": "pytorch", "image": "x",
                 "command": ["torchrun", "--nproc-per-node=1", "--master-addr=$(MASTER_ADDR)",
                             "--master-port=$(MASTER_PORT)", str(script)],
                 "env": [{"name": "FAIL", "value": "1" if fail else ""}]}
    rspec = {"replicas": 1, "restartPolicy": policy,
             "template": {"spec": {"terminationGracePeriodSeconds": 5, "containers": [container]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "tr"},
            "spec": {"nprocPerNode": "1", "pytorchReplicaSpecs": {"Master": rspec, "Worker": rspec}}}


@pytest.mark.slow
def test_two_pods_all_reduce_over_the_operator_env(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out, err = io.StringIO(), io.StringIO()
    LocalJob(job(script, "ExitCode"), configmaps=[], options=LocalOptions(
        local_dir=str(tmp_path / "run"), out=out, progress=Progress(err, tty=False), timeout=240)).run()
    assert "[tr-master-0] rank 0 of 2 sum 3" in out.getvalue()
    assert "[tr-worker-0] rank 1 of 2 sum 3" in out.getvalue()


@pytest.mark.slow
def test_plain_torchrun_turns_any_worker_failure_into_a_final_exit(tmp_path: Path) -> None:
    # NOTES.md: torchrun exits 1 whatever its worker's code, so under ExitCode a plain-torchrun
    # container fails the job for good; this is why the render wraps torchrun in `k8sddp launch`.
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    err = io.StringIO()
    with pytest.raises(JobFailedError, match='"Worker" replica'):
        LocalJob(job(script, "ExitCode", fail=True), configmaps=[], options=LocalOptions(
            local_dir=str(tmp_path / "run"), out=io.StringIO(), progress=Progress(err, tty=False), timeout=240)).run()
    assert "tr-worker-0: exited with code 1 (ExitCode: fail-job)" in err.getvalue()
