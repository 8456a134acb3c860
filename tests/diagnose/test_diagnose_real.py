"""Every case of issue 13 produced for real (``k8sddp launch`` + torchrun + 2 gloo ranks on CPU),
then diagnosed: diagnose must name the planted culprit (``dg_tasks``), the waiting rank as
waiting, and the launcher must give the code the decision table says.

Slow: each run starts three Python processes that import torch (about 15-40 s each on two busy
cores); budgets are 2 s (``K8SDDP_WATCHDOG_TIMEOUT_SECONDS``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from k8sddp.cli import main  # noqa: E402
from k8sddp.diagnose import diagnose_dir  # noqa: E402
from tests.runtime.helpers import Run, free_port, guard_env, launch_cmd, run_dirs, wait_for  # noqa: E402

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


def env_for(artifacts: Path, **extra: str) -> dict[str, str]:
    env = guard_env(artifacts, K8SDDP_WATCHDOG_TIMEOUT_SECONDS="2", K8SDDP_MAX_HANG_RESTARTS="3", **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    return env


def launch(tmp_path: Path, task: str, **extra: str) -> tuple[int, Path, str]:
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir(exist_ok=True)
    run = Run(launch_cmd(task), env_for(artifacts, **extra), tmp_path / "log.txt")
    code = run.wait(150)
    return code, artifacts, run.output()


def record(artifacts: Path) -> dict:
    (attempt,) = run_dirs(artifacts)
    return json.loads((attempt / "run-node0.json").read_text())


def roles(diag) -> dict[int, str]:  # type: ignore[no-untyped-def]
    return {s.rank: s.role for s in diag.ranks}


@pytest.mark.parametrize(("task", "phase", "env"), [
    ("dg_tasks:own_code", "hook", {}),
    ("dg_tasks:in_phase", "eval", {"DG_PHASE": "eval", "DG_RANK": "0"}),
    ("dg_tasks:in_phase", "data", {"DG_PHASE": "data"}),
])
def test_one_rank_stalled_outside_a_collective(tmp_path: Path, task: str, phase: str, env: dict[str, str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    culprit = int(env.get("DG_RANK", "1"))
    code, artifacts, out = launch(tmp_path, task, **env)
    assert code == 142, out[-3000:]
    diag = diagnose_dir(artifacts)
    (c,) = diag.culprits
    assert (c.kind, c.rank, c.node, c.phase, c.step) == ("hang", culprit, 0, phase, 3), c
    assert c.frame and "dg_tasks.py" in c.frame, c.frame  # the stalled frame, file:line
    assert c.collective and c.collective["not_entered_by"] == [culprit]
    assert roles(diag)[1 - culprit] in ("waiting", "torn-down")
    assert c.confidence == "high"
    rec = record(artifacts)
    assert rec["suspected_stuck_ranks"] == [culprit]
    assert rec["diagnosis"]["culprits"][0]["rank"] == culprit
    # the command: text puts the culprit first, json has the contract's fields, the plot is drawn
    assert main(["diagnose", str(artifacts), "--format", "json", "--plot", str(tmp_path / "t.png")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"rank", "node", "phase", "step", "kind", "evidence", "confidence"} <= set(doc["culprits"][0])
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["diagnose", str(artifacts)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[1].startswith(f"culprit: rank {culprit} on node 0: hang, phase {phase}")
    assert "dg_tasks.py:" in text and "decision [" in text


def test_extra_collective_is_a_final_mismatch(tmp_path: Path) -> None:
    code, artifacts, out = launch(tmp_path, "dg_tasks:extra_collective")
    assert code == 1, out[-3000:]  # final, not 137 "SIGKILL, OOM killer?"
    assert "Received data size doesn't match expected size" in out
    rec = record(artifacts)
    assert "collective mismatch" in rec["exit_reason"] and "SIGKILL" not in rec["exit_reason"]
    (c,) = diagnose_dir(artifacts).culprits
    assert (c.kind, c.rank) == ("collective-mismatch", 1)
    assert c.frame and "dg_tasks.py" in c.frame and "_extra" in c.frame
    assert c.collective and isinstance(c.collective["seq"], int)
    assert c.decision == "collective-mismatch"


def test_rank_killed_by_sigkill_died(tmp_path: Path) -> None:
    code, artifacts, out = launch(tmp_path, "dg_tasks:die")
    assert code == 137, out[-3000:]
    diag = diagnose_dir(artifacts)
    assert len(diag.culprits) == 1, "\n".join([c.summary + " " + str(c.evidence) for c in diag.culprits]
                                             + diag.notes + [out[-3000:]])
    (c,) = diag.culprits
    assert (c.kind, c.rank, c.signal) == ("died", 1, "SIGKILL")
    assert roles(diag)[0] in ("waiting", "torn-down")  # its collective failed, or torchrun's SIGTERM came first
    assert "SIGKILL" in record(artifacts)["exit_reason"]


def test_exception_on_one_rank(tmp_path: Path) -> None:
    code, artifacts, out = launch(tmp_path, "dg_tasks:boom")
    assert code == 1, out[-3000:]
    (c,) = diagnose_dir(artifacts).culprits
    assert (c.kind, c.rank, c.step) == ("exception", 1, 3)
    assert c.frame and "dg_tasks.py" in c.frame and "_boom" in c.frame


def test_gil_starved_rank_ended_by_the_hard_stop(tmp_path: Path) -> None:
    code, artifacts, out = launch(tmp_path, "dg_tasks:gil")
    assert code == 142, out[-3000:]
    diag = diagnose_dir(artifacts)
    (c,) = diag.culprits
    assert (c.kind, c.rank, c.signal) == ("gil-starved", 1, "SIGALRM")
    assert c.frame and "dg_tasks.py" in c.frame
    assert record(artifacts)["suspected_stuck_ranks"] == [1]


def test_preemption_is_nobodys_fault(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    run = Run(launch_cmd("dg_tasks:slow"), env_for(artifacts), tmp_path / "log.txt")
    wait_for(lambda: any(p.stat().st_size > 300 for d in run_dirs(artifacts) for p in d.glob("trace-rank*.jsonl")),
             120, "training steps")
    os.kill(run.proc.pid, signal.SIGTERM)
    assert run.wait(90) == 143, run.output()[-3000:]
    (c,) = diagnose_dir(artifacts).culprits
    assert (c.kind, c.rank) == ("preempted", None)


def test_two_nodes_sharing_the_volume_blame_the_other_node(tmp_path: Path) -> None:
    """Two launchers of one rank each (nodes 0 and 1, torchrun --nnodes=2 on loopback) on one
    artifact folder; rank 1 on node 1 stalls in evaluation. Node 0's launcher must name rank 1 on
    node 1, not its own rank 0 (issue 13)."""
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    port = free_port()
    runs = []
    for node in (0, 1):
        env = env_for(artifacts, DG_PHASE="eval", K8SDDP_PEER_WAIT_SECONDS="30", PET_NODE_RANK=str(node))
        cmd = [sys.executable, "-m", "k8sddp", "launch", "--", sys.executable, "-m", "torch.distributed.run",
               "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=1", "--master-addr=127.0.0.1",
               f"--master-port={port}", "-m", "k8sddp", "train", "--task", "dg_tasks:in_phase"]
        runs.append(Run(cmd, env, tmp_path / f"node{node}.log"))
    codes = [r.wait(150) for r in runs]
    assert codes == [142, 142], [r.output()[-2000:] for r in runs]
    node0 = next(d for d in run_dirs(artifacts) if "-node0-" in d.name)
    rec = json.loads((node0 / "run-node0.json").read_text())
    assert rec["suspected_stuck_ranks"] == [1], rec["exit_reason"]
    culprit = rec["diagnosis"]["culprits"][0]
    assert (culprit["rank"], culprit["node"], culprit["phase"]) == (1, 1, "eval")
    assert "rank 1 on node 1" in runs[0].output().splitlines()[-1]
    (c,) = diagnose_dir(artifacts).culprits
    assert (c.rank, c.node, c.phase, c.kind) == (1, 1, "eval", "hang")
