"""Fast tests of the runtime's parts on real inputs: env checks, verdicts, checkpoint files,
the watchdog (in-process and, for the hard stop, in a real child process), the rank-0 IO guard
over a real TCPStore on loopback, and the launcher's refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from k8sddp.cli import main
from k8sddp.errors import UsageError
from k8sddp.runtime import exitcodes as ec
from k8sddp.runtime.checkpoint_files import (
    manifest_steps,
    newest_complete_step,
    newest_valid,
    payload_path,
    prune,
    write_checkpoint_bytes,
)
from k8sddp.runtime.config import RuntimeConfig, check_guard_env, parse_phase_timeouts
from k8sddp.runtime.outcome import apply_hang_streak, decide
from k8sddp.runtime.watchdog import Heartbeat, Stall, Watchdog
from tests.runtime.helpers import REPO, guard_env


# -- configuration ---------------------------------------------------------------------------
def test_guard_env_complete_passes(tmp_path: Path) -> None:
    assert check_guard_env(guard_env(tmp_path)) == []


def test_guard_env_names_every_missing_variable(tmp_path: Path) -> None:
    env = guard_env(tmp_path)
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "K8SDDP_ARTIFACT_DIR", "TORCH_FR_DUMP_TEMP_FILE"):
        del env[name]
    (problem,) = check_guard_env(env)
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "K8SDDP_ARTIFACT_DIR", "TORCH_FR_DUMP_TEMP_FILE"):
        assert name in problem


def test_guard_env_rejects_bad_values(tmp_path: Path) -> None:
    env = guard_env(tmp_path, TORCH_NCCL_ASYNC_ERROR_HANDLING="0", K8SDDP_WATCHDOG_TIMEOUT_SECONDS="soon",
                    TORCH_NCCL_DUMP_ON_TIMEOUT="0")
    text = " | ".join(check_guard_env(env))
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING='0'" in text
    assert "K8SDDP_WATCHDOG_TIMEOUT_SECONDS='soon'" in text
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT=0" in text


def test_legacy_async_name_accepted_only_without_new_name(tmp_path: Path) -> None:
    env = guard_env(tmp_path)
    del env["TORCH_NCCL_ASYNC_ERROR_HANDLING"]
    env["NCCL_ASYNC_ERROR_HANDLING"] = "1"
    assert check_guard_env(env) == []


def test_runtime_config_budgets_and_defaults() -> None:
    cfg = RuntimeConfig.from_env({"K8SDDP_WATCHDOG_TIMEOUT_SECONDS": "10",
                                  "K8SDDP_PHASE_TIMEOUTS": "eval=100"})
    assert cfg.pg_timeout_s == 1800 and cfg.budgets["step"] == 10 and cfg.budgets["data"] == 10
    assert cfg.budgets["eval"] == 100 and cfg.budgets["checkpoint"] == 30
    assert cfg.budgets["init"] == 1800 and cfg.artifact_dir is None
    with pytest.raises(UsageError, match="K8SDDP_PHASE_TIMEOUTS"):
        parse_phase_timeouts("lunch=5")


# -- verdicts --------------------------------------------------------------------------------
def _rec(kind: str, step: int, phase: str) -> dict:
    return {"kind": kind, "step": step, "phase": phase, "since_beat_s": 1.0}


def test_decide_names_the_rank_outside_the_collective() -> None:
    out = decide(child_code=1, started={0: {}, 1: {}},
                 failures={0: _rec("terminated", 3, "checkpoint"), 1: _rec("hang", 3, "step")},
                 last_trace={}, hard_stopped=set(), signalled=None)
    assert (out.code, out.suspects, out.causes) == (ec.HANG, [0], {1: "hang"})


def test_decide_priorities() -> None:
    base = {"child_code": 1, "started": {0: {}, 1: {}}, "last_trace": {}, "hard_stopped": set()}
    bug = decide(**base, failures={1: _rec("exception", 3, "step"), 0: _rec("terminated", 3, "step")},
                 signalled=None)
    assert bug.code == ec.TASK_ERROR
    lost = decide(**base, failures={0: _rec("comm", 5, "step")}, signalled=None)
    assert lost.code == ec.WORKER_KILLED and lost.ranks[1]["kind"] == "vanished"
    hard = decide(**{**base, "hard_stopped": {1}}, failures={0: _rec("terminated", 5, "step")},
                  signalled=None)
    assert hard.code == ec.HANG and hard.causes == {1: "hang-hard"}
    pre = decide(**base, failures={}, signalled=15)
    assert pre.code == ec.PREEMPTED
    never = decide(child_code=1, started={}, failures={}, last_trace={}, hard_stopped=set(), signalled=None)
    assert never.code == ec.NOT_STARTED


def test_hang_streak_limit_and_progress_reset() -> None:
    def hang():
        return decide(child_code=1, started={0: {}}, failures={0: _rec("hang", 3, "step")},
                      last_trace={}, hard_stopped=set(), signalled=None)

    out, state = apply_hang_streak(hang(), None, max_restarts=2, progress_step=3)
    assert out.code == ec.HANG and state == {"streak": 1, "best_step": 3, "last_code": ec.HANG}
    out, state = apply_hang_streak(hang(), state, max_restarts=2, progress_step=3)
    assert out.code == ec.HANG and state["streak"] == 2
    out, state2 = apply_hang_streak(hang(), state, max_restarts=2, progress_step=3)
    assert out.code == ec.HANG_LIMIT and state2["streak"] == 3
    out, state3 = apply_hang_streak(hang(), state, max_restarts=2, progress_step=9)  # progress
    assert out.code == ec.HANG and state3["streak"] == 1
    ok = decide(child_code=0, started={0: {}}, failures={}, last_trace={}, hard_stopped=set(), signalled=None)
    assert apply_hang_streak(ok, state2, max_restarts=2, progress_step=9)[1] is None


# -- checkpoint files ------------------------------------------------------------------------
def test_corrupt_and_partial_checkpoints_are_never_chosen(tmp_path: Path) -> None:
    for step in (2, 4, 6):
        write_checkpoint_bytes(tmp_path, step, os.urandom(1000 + step))
    payload_path(tmp_path, 8).write_bytes(b"half a payload, no manifest")  # writer killed
    data = bytearray(payload_path(tmp_path, 6).read_bytes())
    data[100] ^= 0xFF
    payload_path(tmp_path, 6).write_bytes(bytes(data))  # bit rot
    step, path, skipped = newest_valid(tmp_path)
    assert (step, path) == (4, payload_path(tmp_path, 4))
    assert skipped == ["ckpt-000000006: payload sha256 differs from the manifest"]
    with payload_path(tmp_path, 4).open("r+b") as fh:
        fh.truncate(10)
    assert newest_valid(tmp_path)[0] == 2
    assert newest_complete_step(tmp_path) == 6  # size-only check (the launcher's progress probe)


def test_prune_keeps_newest_complete_and_drops_leftovers(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        write_checkpoint_bytes(tmp_path, step, b"x" * step)
    (tmp_path / ".ckpt-000000005.pt.abc.tmp").write_bytes(b"partial")
    payload_path(tmp_path, 5).write_bytes(b"orphan")
    prune(tmp_path, keep=2)
    assert manifest_steps(tmp_path) == [4, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000003.json", "ckpt-000000003.pt", "ckpt-000000004.json", "ckpt-000000004.pt"]


# -- watchdog --------------------------------------------------------------------------------
def test_watchdog_fires_within_budget_plus_wakeup_and_not_while_beating() -> None:
    fired: list[tuple[Stall, float]] = []
    done = threading.Event()
    hb = Heartbeat({"step": 1.0, "checkpoint": 3.0}, 1.0)
    hb.beat(0, "step")

    def on_stall(stall: Stall) -> None:
        fired.append((stall, time.monotonic()))
        done.set()

    wd = Watchdog(hb, on_stall=on_stall, hard_stop=False, exit_on_stall=False).start()
    try:
        end = time.monotonic() + 1.2
        step = 0
        while time.monotonic() < end:  # beating keeps it quiet
            step += 1
            hb.beat(step, "step")
            time.sleep(0.05)
        hb.beat(step, "checkpoint")  # a long phase: 3 s allowed, more than the step budget
        time.sleep(1.8)
        assert not fired
        hb.beat(step + 1, "step")  # back to the short budget, then stall
        stalled_at = hb.last
        assert done.wait(5.0)
    finally:
        wd.stop()
    stall, at = fired[0]
    assert (stall.step, stall.phase, stall.budget_s) == (step + 1, "step", 1.0)
    assert 1.0 <= at - stalled_at < 1.0 + 0.5


HARD_STOP_CHILD = textwrap.dedent("""
    import sys, time
    from k8sddp.runtime.watchdog import Heartbeat, Watchdog
    stacks = open(sys.argv[1], "a")
    hb = Heartbeat({"step": 1.0}, 1.0)
    hb.beat(1, "step")
    Watchdog(hb, on_stall=lambda s: None, stacks_file=stacks, hard_margin_s=0.5).start()
    print("hogging", flush=True)
    sum(range(10**11))  # one C call holding the GIL: the watchdog thread starves
""")


def test_hard_stop_ends_a_gil_starved_process_with_sigalrm(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks.txt"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", HARD_STOP_CHILD, str(stacks)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode == -14, proc.stderr  # SIGALRM: the shell and the kubelet see 142
    assert ec.HANG == 128 + 14
    text = stacks.read_text()
    assert "Timeout (" in text and "<module>" in text
    assert elapsed < 1.0 + 0.25 + 0.5 + 0.5 + 8.0  # budget + period + margin + kill delay + startup


# -- rank-0 IO guard ---------------------------------------------------------------------------
def test_rank0_io_error_reaches_every_rank_promptly() -> None:
    from datetime import timedelta

    torch = pytest.importorskip("torch")
    from torch.distributed import TCPStore

    from k8sddp.runtime.ioguard import Rank0IO, Rank0IOError

    server = TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=10), wait_for_workers=False)
    results: dict[int, BaseException | None] = {}

    def rank(r: int) -> None:
        store = server if r == 0 else TCPStore("127.0.0.1", server.port, 2, False, timedelta(seconds=10))
        hb = Heartbeat({"checkpoint": 30.0}, 30.0)
        guard = Rank0IO(rank=r, world_size=2, store=store, heartbeat=hb)
        try:
            with guard("checkpoint") as writer:  # first use: fine
                pass
            with guard("checkpoint") as writer:
                if writer:
                    raise OSError("disk full")
            results[r] = None
        except BaseException as exc:  # noqa: BLE001
            results[r] = exc

    t0 = time.monotonic()
    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert time.monotonic() - t0 < 10  # not the 30 s phase budget, not forever
    assert isinstance(results[0], OSError)
    assert isinstance(results[1], Rank0IOError) and "disk full" in str(results[1])
    del torch


# -- launcher --------------------------------------------------------------------------------
def test_launch_refuses_to_start_naming_missing_variables(tmp_path: Path, monkeypatch, capsys) -> None:
    env = guard_env(tmp_path / "a")
    for name in ("PYTHONFAULTHANDLER", "K8SDDP_MAX_HANG_RESTARTS"):
        env.pop(name)
    monkeypatch.setattr(os, "environ", env)
    marker = tmp_path / "ran"
    assert main(["launch", "--", "touch", str(marker)]) == ec.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "PYTHONFAULTHANDLER" in err and "K8SDDP_MAX_HANG_RESTARTS" in err
    assert not marker.exists()


def test_launch_missing_command_is_final_127(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(os, "environ", guard_env(tmp_path / "a"))
    assert main(["launch", "--", "no-such-command-k8sddp"]) == ec.NOT_FOUND
    (attempt,) = (tmp_path / "a" / "runs").iterdir()
    assert json.loads((attempt / "run-node0.json").read_text())["exit_code"] == 127


def test_launch_plain_command_outcomes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(os, "environ", guard_env(tmp_path / "a"))
    assert main(["launch", "--", sys.executable, "-c", "pass"]) == ec.SUCCESS
    # a command that fails before any worker started (torchrun's rendezvous, say): retryable
    assert main(["launch", "--", sys.executable, "-c", "raise SystemExit(1)"]) == ec.NOT_STARTED


def test_load_task_passes_arguments_to_factories() -> None:
    pytest.importorskip("torch")
    from k8sddp.runtime.task import load_task

    task = load_task("k8sddp.runtime.demo:task", ["--epochs", "3", "--batch-size", "16"])
    assert (task.epochs, task.batch_size) == (3, 16)
    with pytest.raises(UsageError, match="bad task arguments"):
        load_task("k8sddp.runtime.demo:task", ["--epoch", "3"])
    with pytest.raises(UsageError, match="cannot import"):
        load_task("no.such.module:task")
    with pytest.raises(UsageError, match="MODULE:ATTR"):
        load_task("k8sddp.runtime.demo")


def test_launcher_side_never_imports_torch() -> None:
    # `k8sddp launch` is the pod's main process: it must start fast and work without the extra
    code = ("import sys, k8sddp.cli as c; c.build_parser(); import k8sddp.runtime, "
            "k8sddp.runtime.launcher, k8sddp.runtime.outcome, k8sddp.runtime.checkpoint_files; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
