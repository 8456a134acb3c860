"""The whole chain on this machine: render the bundled example spec -> validate -> submit --local
-> the guarded runtime (`k8sddp launch` / `k8sddp train`) -> checkpoints on the local "PVC".

Needs the runtime (k8sddp.runtime, the launch/train commands) and torch; skipped without them.
Slow: real torchrun, gloo, 2 pods x 1 process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from k8sddp.cli import COMMAND_MODULES

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif("launch" not in COMMAND_MODULES or "train" not in COMMAND_MODULES,
                       reason="needs the runtime (k8sddp launch/train)"),
]


def submit(cli, tmp_path: Path, task: str, *extra: str):
    return cli(
        "submit", "--local", "--local-dir", str(tmp_path / "run"), "--timeout", "600",
        "--set", "spec.nodes=2", "--set", "spec.procsPerNode=1", "--set", f"spec.command.task={task}",
        "--set", "spec.timeouts.watchdogSeconds=5", "--set", "spec.maxHangRestarts=2",
        # the example's `--epochs 3` is for the demo task's factory; these test tasks take none
        "--set", "spec.command.args=[]",
        *extra, str(REPO / "examples" / "ddpjob.yaml"),
    )


@pytest.fixture(autouse=True)
def importable_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytest.importorskip("k8sddp.runtime.task")


def artifacts(tmp_path: Path) -> Path:
    return tmp_path / "run" / "pvc" / "demo-checkpoints" / "k8sddp"


def test_bundled_example_trains_to_success(cli, tmp_path: Path) -> None:
    res = submit(cli, tmp_path, "tests.local.chain_tasks:ok")
    assert res.code == 0, res.err[-3000:]
    assert "demo: Succeeded (PyTorchJobSucceeded)" in res.err
    assert artifacts(tmp_path).is_dir()


def test_watchdog_exit_is_retried_and_the_job_resumes_from_its_checkpoint(cli, tmp_path: Path) -> None:
    res = submit(cli, tmp_path, "tests.local.chain_tasks:stall_once")
    assert res.code == 0, res.err[-3000:]
    assert "exited with code 142 (ExitCode: recreate)" in res.err  # the watchdog's retryable exit
    assert "Restarting (PyTorchJobRestarting)" in res.err
    first_steps = [int(line.split()[1]) for line in (artifacts(tmp_path) / "steps-rank0.txt").read_text().split("\n") if line]
    assert len(first_steps) >= 2 and first_steps[-1] > 1  # the later attempt started past step 1


def test_deterministic_hang_ends_final(cli, tmp_path: Path) -> None:
    # one hang restart allowed (the later --set wins): the first hang is retried, the second is
    # final; with the other tests' 2 a third attempt (two more torchruns) showed nothing new
    res = submit(cli, tmp_path, "tests.local.chain_tasks:stall_always", "--set", "spec.maxHangRestarts=1")
    assert res.code == 4, res.err[-3000:]
    assert "exited with code 142 (ExitCode: recreate)" in res.err  # the first hang: retried
    assert "exited with code 10 (ExitCode: fail-job)" in res.err  # HANG_LIMIT: final
    assert "Failed (PyTorchJobFailed)" in res.err


def test_the_bundled_demo_task_as_rendered(cli, tmp_path: Path) -> None:
    # exactly the README's command: the example spec, its demo task and its arguments
    res = cli("submit", "--local", "--local-dir", str(tmp_path / "run"), "--timeout", "600",
              "--set", "spec.nodes=2", "--set", "spec.procsPerNode=1", str(REPO / "examples" / "ddpjob.yaml"))
    assert res.code == 0, res.err[-3000:]
    assert "[demo-master-0] k8sddp launch: exit 0" in res.out
    assert list((artifacts(tmp_path) / "checkpoints").glob("ckpt-*.pt"))
