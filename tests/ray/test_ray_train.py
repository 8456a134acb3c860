"""k8sddp.ray with real Ray Train on CPU: two workers, gloo, a tiny DDP model (slow: Ray starts a
cluster and, in the stall test, a second worker group).

The guard's knobs come in through the trainer's ``worker_runtime_env`` (one artifact folder per
test); the pod env is the env Ray's processes inherit, the job's runtime env overrides it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train.torch")

from k8sddp import guardvars as gv  # noqa: E402
from k8sddp.runtime import config as rc  # noqa: E402

from . import raytrain_loops  # noqa: E402

# Ray starts a local cluster (about 30 s on an idle 2-core machine) and restarts a worker group.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

POD_ENV = {
    gv.ASYNC_ERROR_HANDLING: "3",
    gv.FAULTHANDLER: "1",
    gv.PG_TIMEOUT: "300",  # phase init's budget: DDP's first start-up took 63 s on the loaded machine
    gv.MAX_HANG_RESTARTS: "1",
    "MY_POD_ONLY": "pod",
}
#: Budgets in seconds: a 60 s ceiling, learned budgets (5 x the longest interval, at least 3 s)
#: after 6 intervals; the checkpoint phase (every 3rd step) stays below the warm-up, so the rank
#: waiting in a checkpointing report keeps the ceiling while the stalled rank's step budget is learned.
GUARD_ENV = {
    gv.WATCHDOG_TIMEOUT: "60",
    rc.WATCHDOG_MIN: "3",
    rc.LEARN_WARMUP: "6",
    rc.LEARN_FACTOR: "5",
}
CEILING_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One local Ray for the module."""
    root = tmp_path_factory.mktemp("ray")
    saved = dict(os.environ)
    os.environ.update(POD_ENV)
    # Ray's workers import the loop as tests.ray.raytrain_loops.
    repo = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])
    # The runtime env wins over the pod env (as a RayJob's runtimeEnvYAML does).
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {gv.ASYNC_ERROR_HANDLING: "1"}})
    try:
        yield root
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def _fit(root: Path, name: str, config: dict[str, object]) -> tuple[Any, Path, Path]:
    """Run ``raytrain_loops.train``; returns the result, the loop's out folder and the artifact dir."""
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    from k8sddp.ray import trainer_kwargs

    out, artifacts = root / name, root / name / "artifacts"
    out.mkdir()
    env = {**GUARD_ENV, gv.ARTIFACT_DIR: str(artifacts), gv.FR_DUMP_TEMP_FILE: str(artifacts / "fr" / "rank-")}
    kwargs = trainer_kwargs({**POD_ENV, **env}, backend="gloo")  # storage: <artifacts>/ray, the default
    kwargs["run_config"].name = name
    kwargs["run_config"].worker_runtime_env = {"env_vars": env}
    trainer = TorchTrainer(raytrain_loops.train, train_loop_config={"out": str(out), "ckpt_every": 3, **config},
                           scaling_config=ScalingConfig(num_workers=2, use_gpu=False), **kwargs)
    return trainer.fit(), out, artifacts


def _attempts(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("attempt-*.json"))]


def _records(artifacts: Path, what: str) -> list[tuple[Path, dict[str, Any]]]:
    return [(p, json.loads(p.read_text())) for p in sorted((artifacts / "runs").glob(f"ray-*/{what}-rank*.json"))]


def _diagnose(path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "k8sddp", "diagnose", str(path), "--format", "json", *extra],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_clean_run_env_propagation_and_no_false_alarm(cluster: Path) -> None:
    result, out, artifacts = _fit(cluster, "clean", {"steps": 9})
    assert result.metrics["step"] == 9
    attempts = _attempts(out)
    assert len(attempts) == 2  # one attempt per rank: no restart
    for a in attempts:
        env = a["env"]
        assert env[gv.ASYNC_ERROR_HANDLING] == "1"  # the runtime env won over the pod's 3
        assert env["MY_POD_ONLY"] == "pod" and env[gv.FAULTHANDLER] == "1"
        assert env[gv.WATCHDOG_TIMEOUT] == "60"  # the trainer's worker runtime env reached the worker
    ends = _records(artifacts, "failure")
    assert sorted(r["rank"] for _, r in ends) == [0, 1]
    assert all(r["kind"] == "exited" and r["exit_code"] == 0 for _, r in ends), ends  # no false alarm
    started = [r for _, r in _records(artifacts, "started")]
    assert {r["guard_mode"] for r in started} == {"ray"} and all(r["report_beats"] for r in started)
    # the learned budgets were in force: the step group got past its warm-up on both ranks
    learned = sorted((artifacts / "budgets" / "ray-clean").glob("learned-rank*.json"))
    assert len(learned) == 2
    assert all(json.loads(p.read_text())["groups"]["step"]["count"] >= 6 for p in learned)
    _, diag = _diagnose(artifacts)
    assert diag["culprits"] == [] and "finished" in diag["verdict"]


def test_stall_learned_budget_dump_restart_and_diagnose(cluster: Path) -> None:
    result, out, artifacts = _fit(cluster, "stall", {"steps": 9, "stall_at": 5})
    assert (out / "stalled").exists()
    assert result.metrics["step"] == 9
    starts = sorted(int(a["start"]) for a in _attempts(out))
    assert starts == [0, 0, 3, 3], starts  # the restart resumed from the checkpoint of step 3
    hangs = [(p, r) for p, r in _records(artifacts, "failure") if r["kind"] == "hang"]
    assert len(hangs) == 1, hangs
    path, hang = hangs[0]
    assert hang["rank"] == 1 and hang["phase"] == "step" and hang["step"] == 6
    # caught by the learned budget (5 x the longest interval, at least the 3 s floor), before the
    # 60 s ceiling would have caught it
    assert hang["budget_source"] == "learned" and hang["learned"]["intervals"] >= 6, hang
    assert CEILING_S > hang["budget_s"] >= 3.0
    assert hang["budget_s"] == pytest.approx(max(3.0, 5 * hang["learned"]["longest_s"]), rel=1e-3)
    assert hang["budget_s"] <= hang["since_beat_s"] < hang["budget_s"] + 5  # at the learned deadline
    stalled_pid = int((out / "stalled").read_text())
    assert hang["pid"] == stalled_pid
    stacks = (path.parent / "stacks-rank1.txt").read_text()
    assert "training thread 0x" in stacks and "raytrain_loops.py" in stacks and "Fatal Python error: Aborted" in stacks
    assert (path.parent / "trace-rank1.jsonl").stat().st_size > 0

    # k8sddp diagnose: the newest restart finished; the one before names rank 1 stalled in phase step
    _, newest = _diagnose(artifacts)
    assert newest["culprits"] == [] and newest["restarts"] == 2
    _, diag = _diagnose(artifacts, "--restart", "1")
    (culprit,) = diag["culprits"]
    assert {k: culprit[k] for k in ("kind", "rank", "node", "phase", "step")} == {
        "kind": "hang", "rank": 1, "node": 0, "phase": "step", "step": 6}
    assert culprit["confidence"] in ("high", "medium", "low") and culprit["evidence"]
    assert any("raytrain_loops.py" in e for e in culprit["evidence"])
    # Ray's storage path (trainer_kwargs' default sits inside the volume) finds the same folders
    assert (artifacts / "ray" / "stall").is_dir()
    _, again = _diagnose(artifacts / "ray" / "stall", "--restart", "1")
    assert again["culprits"][0]["rank"] == 1
