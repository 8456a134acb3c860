"""The explicit API k8sddp.guard, in a real process (its watchdog ends the process on a stall)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from k8sddp.runtime import exitcodes as ec

from .helpers import REPO, guard_env

SCRIPT = r"""
import sys, time, torch
from k8sddp import guard
g = guard.start(seed=7, code_version="abc123")
assert guard.load_checkpoint() is None
for step in range(1, 4):
    guard.beat(step)
    guard.save_checkpoint({"w": torch.full((3,), float(step)), "step": step}, step=step)
with guard.phase("eval", budget=5):      # longer than the 1 s step budget: must not fire
    time.sleep(1.6)
newest = sorted((g.cfg.artifact_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
newest.write_bytes(b"garbage")           # a torn newest checkpoint: the previous one is used
state = guard.load_checkpoint()
print("RESUMED", state["step"], state["w"].tolist(), flush=True)
if sys.argv[1] == "stall":
    with guard.phase("checkpoint", budget=1):
        time.sleep(30)                   # API-STALL
guard.stop()
"""


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    artifacts = tmp_path / "artifacts"
    env = guard_env(artifacts, K8SDDP_WATCHDOG_TIMEOUT_SECONDS="1",
                    K8SDDP_RUN_DIR=str(artifacts / "runs" / "api"))
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_guard_api_checkpoints_phases_and_records(tmp_path: Path) -> None:
    p = _run(tmp_path, "ok")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "RESUMED 2 [2.0, 2.0, 2.0]" in p.stdout
    assert "skipping checkpoint ckpt-000000003" in p.stderr
    run = tmp_path / "artifacts" / "runs" / "api"
    started = json.loads((run / "started-rank0.json").read_text())
    assert started["seed"] == 7 and started["code_version"] == "abc123"
    assert started["guard_mode"] == "api"
    assert not (run / "failure-rank0.json").exists() or \
        json.loads((run / "failure-rank0.json").read_text())["kind"] == "exited"


def test_a_stall_in_an_explicit_phase_fires_its_budget(tmp_path: Path) -> None:
    p = _run(tmp_path, "stall")
    assert p.returncode == ec.HANG, p.stderr[-3000:]
    fail = json.loads((tmp_path / "artifacts" / "runs" / "api" / "failure-rank0.json").read_text())
    assert fail["kind"] == "hang" and fail["phase"] == "checkpoint"
    assert fail["budget_s"] == 1 and fail["budget_source"] == "explicit"
    stacks = (tmp_path / "artifacts" / "runs" / "api" / "stacks-rank0.txt").read_text()
    line = next(i for i, t in enumerate(SCRIPT.splitlines(), 1) if "API-STALL" in t)
    assert f'File "<string>", line {line} in <module>' in stacks
