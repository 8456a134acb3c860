"""k8sddp.ray with real Ray Train on CPU: two workers, gloo (slow: Ray starts a cluster)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train.torch")

from k8sddp import guardvars as gv  # noqa: E402

from . import raytrain_loops  # noqa: E402

# Ray starts a local cluster (about 30 s on an idle 2-core machine) and restarts a worker group.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

POD_ENV = {
    gv.ASYNC_ERROR_HANDLING: "3",
    gv.FAULTHANDLER: "1",
    gv.PG_TIMEOUT: "120",
    gv.WATCHDOG_TIMEOUT: "4",
    gv.MAX_HANG_RESTARTS: "1",
    "MY_POD_ONLY": "pod",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One local Ray for the module; the 'pod env' is the env Ray's processes inherit."""
    root = tmp_path_factory.mktemp("ray")
    saved = dict(os.environ)
    os.environ.update(POD_ENV)
    os.environ[gv.ARTIFACT_DIR] = str(root / "artifacts")
    os.environ[gv.FR_DUMP_TEMP_FILE] = str(root / "artifacts" / "fr" / "rank-")
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


def _fit(root: Path, name: str, config: dict[str, object]) -> tuple[object, Path]:
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    from k8sddp.ray import trainer_kwargs

    out = root / name
    out.mkdir()
    kwargs = trainer_kwargs(backend="gloo", storage_path=root / "storage")
    kwargs["run_config"].name = name
    trainer = TorchTrainer(raytrain_loops.loop, train_loop_config={"out": str(out), **config}, scaling_config=ScalingConfig(num_workers=2, use_gpu=False), **kwargs)
    return trainer.fit(), out


def _attempts(out: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("attempt-*.json"))]


def _failures(root: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in (root / "artifacts" / "runs").glob("ray-*/failure-rank*.json")]


def test_clean_run_env_propagation_and_no_false_alarm(cluster: Path) -> None:
    before = len(_failures(cluster))
    result, out = _fit(cluster, "clean", {"steps": 3})
    assert result.metrics["step"] == 3  # type: ignore[attr-defined]
    attempts = _attempts(out)
    assert len(attempts) == 2  # one attempt per rank: no restart
    for a in attempts:
        env = a["env"]
        assert env[gv.ASYNC_ERROR_HANDLING] == "1"  # the runtime env won over the pod's 3
        assert env["MY_POD_ONLY"] == "pod" and env[gv.FAULTHANDLER] == "1"
    assert len(_failures(cluster)) == before


def test_stalled_rank_is_dumped_aborted_and_restarted_from_checkpoint(cluster: Path) -> None:
    result, out = _fit(cluster, "stall", {"steps": 6, "stall_at": 3})
    assert (out / "stalled").exists()
    assert result.metrics["step"] == 6  # type: ignore[attr-defined]
    starts = sorted(int(a["start"]) for a in _attempts(out))  # type: ignore[call-overload]
    assert starts[:2] == [0, 0] and starts[2:] and min(starts[2:]) >= 3, starts  # the restart resumed from the checkpoint
    hangs = [f for f in _failures(cluster) if f["kind"] == "hang"]
    assert hangs and all(float(f["since_beat_s"]) >= 4 for f in hangs)  # type: ignore[arg-type]
    stalled_pid = int((out / "stalled").read_text())
    stacks = list((cluster / "artifacts" / "runs").glob(f"ray-{stalled_pid}/stacks-rank*.txt")) + list(
        (cluster / "artifacts" / "runs").glob(f"ray-{stalled_pid}/stacks-rank*")
    )
    assert stacks, sorted(str(p) for p in (cluster / "artifacts" / "runs").rglob("*"))
    text = stacks[0].read_text()
    assert "time.sleep" in text or "raytrain_loops.py" in text
