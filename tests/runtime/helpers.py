"""Helpers for the runtime tests: the guard environment and a real ``k8sddp launch``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def guard_env(artifacts: Path, **extra: str) -> dict[str, str]:
    """The pod environment render bakes in, with short test timeouts."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("K8SDDP_", "RT_", "TORCH_NCCL", "TORCHELASTIC")):
            del env[name]
    env.update({
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "PYTHONFAULTHANDLER": "1",
        "K8SDDP_PG_TIMEOUT_SECONDS": "30",
        "K8SDDP_WATCHDOG_TIMEOUT_SECONDS": "4",
        "K8SDDP_MAX_HANG_RESTARTS": "1",
        "K8SDDP_ARTIFACT_DIR": str(artifacts),
        "TORCH_FR_DUMP_TEMP_FILE": str(artifacts / "fr" / "rank-"),
        "K8SDDP_TRACE_INTERVAL_SECONDS": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")]),
    })
    env.update(extra)
    return env


def torchrun(module_args: list[str], nproc: int = 2) -> list[str]:
    """torchrun on one node; ``--standalone`` binds its store to a free port itself, so parallel
    test runs on the machine cannot race for a port picked in advance."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc-per-node={nproc}", *module_args]


def launch_cmd(task: str, nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "k8sddp", "launch", "--",
            *torchrun(["-m", "k8sddp", "train", "--task", task], nproc)]


class Run:
    """A started ``k8sddp launch`` (or any command) with its output captured to a file."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._fh = log.open("wb")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.elapsed: float | None = None

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the launcher and everything it started
            self.proc.wait()
            raise AssertionError(f"did not end within {timeout} s; log:\n{self.output()[-4000:]}") from None
        self.elapsed = time.monotonic() - self.t0
        self._fh.close()
        return rc

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def run_dirs(artifacts: Path) -> list[Path]:
    runs = artifacts / "runs"
    return sorted(runs.iterdir()) if runs.is_dir() else []


def run_record(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run-node0.json").read_text())


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


