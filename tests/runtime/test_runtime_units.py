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
    never = decide(child_code=1, started={}, failures={}, last_trace={}, hard_stopped=set(), signalled=None,
                   log_tail=["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"])
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
def test_a_budget_lowered_by_the_flush_takes_effect_at_once() -> None:
    """The learned budgets are set from the watchdog's own flush: a budget lowered there during a
    stall must fire at the new deadline, not one period (a quarter) of the old budget later."""
    from k8sddp.runtime.budgets import LearningHeartbeat

    fired: list[tuple[Stall, float]] = []
    done = threading.Event()
    hb = LearningHeartbeat({"step": 40.0}, 40.0, 0)
    hb.beat(1, "step")
    stalled_at = hb.last
    flushes: list[float] = []

    def on_flush(entries: list[tuple[int, str, float]]) -> None:
        flushes.append(time.monotonic())
        if len(flushes) == 1:
            hb.set_budget("step", 0.5)  # what BudgetLearner.update does once warmed up

    def on_stall(stall: Stall) -> None:
        fired.append((stall, time.monotonic()))
        done.set()

    wd = Watchdog(hb, on_stall=on_stall, on_flush=on_flush, hard_stop=False, exit_on_stall=False).start()
    try:
        assert done.wait(5.0)  # the old budget's period alone is 10 s
    finally:
        wd.stop()
    stall, at = fired[0]
    assert stall.budget_s == 0.5
    assert 0.5 <= at - stalled_at < 0.5 + 0.5


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
    # a command that fails before any worker started, not for a network reason: final
    assert main(["launch", "--", sys.executable, "-c", "raise SystemExit(1)"]) == ec.TASK_ERROR
    # ... and for one (torchrun's rendezvous, say): retryable
    rdzv = "import sys; sys.exit('RendezvousConnectionError: connection refused')"
    assert main(["launch", "--", sys.executable, "-c", rdzv]) == ec.NOT_STARTED


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


# -- review of issue 3 -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["K8SDDP_WATCHDOG_TIMEOUT_SECONDS", "K8SDDP_PG_TIMEOUT_SECONDS"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e12", "604801"])
def test_timeouts_must_be_finite_and_at_most_7_days(tmp_path: Path, name: str, value: str) -> None:
    env = guard_env(tmp_path, **{name: value})
    (problem,) = check_guard_env(env)
    assert name in problem
    with pytest.raises(UsageError, match=name):
        RuntimeConfig.from_env(env)
    assert check_guard_env(guard_env(tmp_path, **{name: "604800"})) == []


def test_optional_knobs_and_relative_artifact_dir_are_refused_by_launch(tmp_path: Path) -> None:
    assert "K8SDDP_STOP_GRACE_SECONDS" in " ".join(
        check_guard_env(guard_env(tmp_path, K8SDDP_STOP_GRACE_SECONDS="inf")))
    assert "K8SDDP_PHASE_TIMEOUTS" in " ".join(
        check_guard_env(guard_env(tmp_path, K8SDDP_PHASE_TIMEOUTS="eval=nan")))
    (problem,) = check_guard_env(guard_env(tmp_path, K8SDDP_ARTIFACT_DIR="art"))
    assert "absolute" in problem


# -- review of issue 12 ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["K8SDDP_AUTOGUARD", "K8SDDP_LEARN_BUDGETS"])
@pytest.mark.parametrize("value", ["false", "off", "no", "maybe"])
def test_on_off_knobs_refuse_values_that_would_silently_mean_on(tmp_path: Path, name: str, value: str) -> None:
    (problem,) = check_guard_env(guard_env(tmp_path, **{name: value}))
    assert name in problem and "0 (off) or 1 (on)" in problem
    for ok in ("0", "1", ""):
        assert check_guard_env(guard_env(tmp_path, **{name: ok})) == []


def test_learn_factor_out_of_range_is_not_called_seconds_or_7_days(tmp_path: Path) -> None:
    (problem,) = check_guard_env(guard_env(tmp_path, K8SDDP_LEARN_FACTOR="1e9"))
    assert "<= 1000" in problem and "7 days" not in problem
    (problem,) = check_guard_env(guard_env(tmp_path, K8SDDP_LEARN_FACTOR="nan"))
    assert "seconds" not in problem
    (problem,) = check_guard_env(guard_env(tmp_path, K8SDDP_STOP_GRACE_SECONDS="1e9"))
    assert "7 days" in problem


def test_launch_refuses_a_missing_training_script_with_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(os, "environ", guard_env(tmp_path / "a"))
    monkeypatch.chdir(tmp_path)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "nosuch.py"]
    assert main(["launch", "--", *cmd]) == ec.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "nosuch.py: no such training script" in err and "Traceback" not in err
    assert not (tmp_path / "a" / "runs").exists() or not any((tmp_path / "a" / "runs").iterdir())


def test_launch_warns_when_the_zero_code_guard_armed_no_worker(tmp_path: Path, monkeypatch, capsys) -> None:
    # a worker bootstrap that failed (another interpreter's k8sddp) left an exit 0 that looked guarded
    fake = tmp_path / "bin" / "torchrun"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    (tmp_path / "train.py").write_text("")
    monkeypatch.setattr(os, "environ", guard_env(tmp_path / "a"))
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--", str(fake), "--nproc-per-node=2", "train.py"]) == ec.SUCCESS
    assert "armed no worker" in capsys.readouterr().err
    (record,) = (tmp_path / "a" / "runs").glob("*/run-node*.json")
    assert json.loads(record.read_text())["autoguard_armed"] is False


def test_launch_refuses_nonfinite_timeout_with_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(os, "environ", guard_env(tmp_path / "a", K8SDDP_WATCHDOG_TIMEOUT_SECONDS="inf"))
    assert main(["launch", "--", sys.executable, "-c", "pass"]) == ec.CONFIG_ERROR
    assert "finite" in capsys.readouterr().err


NO_TASK_TAIL = (Path(__file__).parent / "torchrun_no_task.txt").read_text().splitlines()


@pytest.mark.parametrize(("code", "tail", "want", "words"), [
    # torchrun -m k8sddp train (no --task): the workers' argparse exits 2 (real torchrun output)
    (1, NO_TASK_TAIL, ec.CONFIG_ERROR, "required: --task"),
    (2, ["run.py: error: unrecognized arguments: --bogus-flag"], ec.CONFIG_ERROR, "--bogus-flag"),
    (1, ["ValueError: invalid literal for int() with base 10: 'abc'"], ec.TASK_ERROR, "ValueError"),
    (5, [], ec.TASK_ERROR, "exited 5"),
    (-9, [], ec.WORKER_KILLED, "signal 9"),
    (1, ["  exitcode  : 1 (pid: 7)", "  exitcode  : 1 (pid: 8)"], ec.TASK_ERROR, "exited 1, 1"),
    (1, ["  exitcode  : -9 (pid: 7)"], ec.WORKER_KILLED, "-9"),
    (1, ["torch.distributed.DistNetworkError: The client socket has timed out"], ec.NOT_STARTED, "rendezvous"),
    (1, ["socket.gaierror: [Errno -2] Name or service not known"], ec.NOT_STARTED, "Name or service"),
    (0, [], ec.SUCCESS, "the command exited 0"),
])
def test_decide_when_no_worker_started(code: int, tail: list[str], want: int, words: str) -> None:
    out = decide(child_code=code, started={}, failures={}, last_trace={}, hard_stopped=set(),
                 signalled=None, log_tail=tail)
    assert out.code == want and words in out.reason, out.reason


def test_config_reason_names_the_workers_message() -> None:
    out = decide(child_code=1, started={}, failures={0: {"kind": "config", "message": "--task 'x': boom"}},
                 last_trace={}, hard_stopped=set(), signalled=None)
    assert out.code == ec.CONFIG_ERROR and out.reason == "rank 0 refused its configuration: --task 'x': boom"


def test_streak_messages_and_malformed_state() -> None:
    def lost():
        return decide(child_code=-9, started={}, failures={}, last_trace={}, hard_stopped=set(),
                      signalled=None)

    out, state = apply_hang_streak(lost(), None, max_restarts=1, progress_step=22)
    assert "retry 1 of 1" in out.reason and "without progress" not in out.reason  # it progressed
    out, state = apply_hang_streak(lost(), state, max_restarts=1, progress_step=22)
    assert out.code == ec.HANG_LIMIT and "failed 2 times in a row without progress beyond step 22" in out.reason
    assert "hang" not in out.reason
    out, _ = apply_hang_streak(lost(), {"streak": 5, "best_step": -1}, max_restarts=9, progress_step=-1)
    assert "beyond step" not in out.reason and "step -1" not in out.reason
    for bad in ({"streak": "x", "best_step": None}, {"streak": True, "best_step": 1}, [1, 2], "x"):
        out, state = apply_hang_streak(lost(), bad, max_restarts=1, progress_step=3)  # type: ignore[arg-type]
        assert out.code == ec.WORKER_KILLED and state == {"streak": 1, "best_step": 3, "last_code": 137}


def test_launch_survives_a_malformed_state_file(tmp_path: Path, monkeypatch, capsys) -> None:
    art = tmp_path / "a"
    art.mkdir()
    (art / "launcher-state-node0.json").write_text('{"streak": "x", "best_step": null}')
    monkeypatch.setattr(os, "environ", guard_env(art))
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert main(["launch", "--", sys.executable, "-c", kill]) == ec.WORKER_KILLED
    assert "ignoring malformed hang-streak state" in capsys.readouterr().err
    assert json.loads((art / "launcher-state-node0.json").read_text())["streak"] == 1
    (attempt,) = (art / "runs").iterdir()
    rec = json.loads((attempt / "run-node0.json").read_text())
    assert rec["status"] == "finished" and rec["exit_code"] == ec.WORKER_KILLED


def test_launcher_records_an_internal_error(tmp_path: Path, monkeypatch) -> None:
    from k8sddp.runtime import launcher

    def broken(*args, **kwargs):
        raise TypeError("a bug in the launcher")

    monkeypatch.setattr(launcher, "decide", broken)
    env = guard_env(tmp_path / "a")
    assert launcher.Launcher([sys.executable, "-c", "pass"], env).run() == ec.TASK_ERROR
    (attempt,) = (tmp_path / "a" / "runs").iterdir()
    rec = json.loads((attempt / "run-node0.json").read_text())
    assert (rec["status"], rec["exit_code"], rec["exit_name"]) == ("finished", 1, "launcher-error")
    assert "a bug in the launcher" in rec["launcher_traceback"]


def test_launch_record_details(tmp_path: Path, monkeypatch, capsys) -> None:
    from k8sddp.runtime.launcher import torchrun_flag

    cmd = ["torchrun", "--nnodes", "1", "--nproc_per_node=2", "-m", "k8sddp", "train", "--nnodes=9"]
    assert (torchrun_flag(cmd, "--nnodes"), torchrun_flag(cmd, "--nproc-per-node")) == ("1", "2")
    assert torchrun_flag(["true", "--nnodes=3"], "--nnodes") is None
    assert main(["launch"]) == ec.CONFIG_ERROR
    assert "k8sddp launch: no command given" in capsys.readouterr().err
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setattr(os, "environ", guard_env(tmp_path / "a", TORCH_FR_DUMP_TEMP_FILE=str(afile / "x" / "rank-")))
    assert main(["launch", "--", sys.executable, "-c", "pass"]) == ec.CONFIG_ERROR
    assert "TORCH_FR_DUMP_TEMP_FILE" in capsys.readouterr().err


def test_task_import_and_factory_errors_are_usage_errors_with_cause(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    from k8sddp.runtime.task import load_task

    (tmp_path / "rt_badsyntax.py").write_text("def task(:\n")
    (tmp_path / "rt_raises.py").write_text("raise RuntimeError('at import')\n")
    (tmp_path / "rt_factory.py").write_text("def task():\n    raise ValueError('factory says no')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec, words, cause in (("rt_badsyntax:task", "SyntaxError", SyntaxError),
                               ("rt_raises:task", "RuntimeError: at import", RuntimeError),
                               ("rt_factory:task", "ValueError: factory says no", ValueError)):
        with pytest.raises(UsageError, match=words) as info:
            load_task(spec)
        assert isinstance(info.value.__cause__, cause)


def test_trace_drain_always_ends_at_the_latest_beat() -> None:
    hb = Heartbeat({"step": 5.0, "data": 5.0}, 5.0, trace_every_s=3600)
    for step in range(1, 6):
        hb.beat(step, "data")
        hb.beat(step, "step")
    entries = hb.drain()
    assert [(s, p) for s, p, _ in entries] == [(0, "init"), (5, "step")]  # was: the init entry only
    assert hb.drain() == []  # nothing new since
    hb.beat(6, "data")
    assert [(s, p) for s, p, _ in hb.drain()] == [(6, "data")]


SOFT_STALLS_CHILD = textwrap.dedent("""
    import sys, time
    from k8sddp.runtime.watchdog import Heartbeat, Watchdog
    stacks = open(sys.argv[1], "a")
    hb = Heartbeat({"step": 1.0}, 1.0)
    hb.beat(1, "step")

    def on_stall(stall):
        print("soft path started", flush=True)
        sum(range(10**11))  # the soft path itself starves (GIL held in C), as in review item 6

    Watchdog(hb, on_stall=on_stall, stacks_file=stacks, hard_margin_s=0.5).start()
    time.sleep(600)
""")


def test_a_stalled_soft_path_does_not_push_the_hard_stop_out(tmp_path: Path) -> None:
    # was: the soft path re-armed the hard stop to a fixed 10 s (fire_grace_s) whatever the budget
    stacks = tmp_path / "stacks.txt"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", SOFT_STALLS_CHILD, str(stacks)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode == -14 and "soft path started" in proc.stdout, proc.stderr
    assert "Timeout (" in stacks.read_text()
    # budget 1 + period 0.25 + margin 0.5 + kill 0.5 = 2.25 s after the beat, + interpreter startup
    assert elapsed < 8.0, elapsed


def test_hard_stopped_rank_reports_the_soft_headers_step(tmp_path: Path) -> None:
    from k8sddp.runtime.artifacts import RunDir
    from k8sddp.runtime.launcher import _stall_header

    run = RunDir(tmp_path)
    run.stacks(0).write_text(
        "--- k8sddp rank 0: watchdog: no heartbeat for 3.11 s in phase 'hook' at step 4 (budget 3 s) "
        "at 2026-01-01T00:00:00 ---\nThread 0x1 (most recent call first):\nTimeout (0:00:04)!\n")
    assert _stall_header(run, 0) == {"step": 4, "phase": "hook"}
    assert _stall_header(run, 1) is None


def test_hook_phase_tells_the_stuck_rank_from_the_waiting_one() -> None:
    # review item 9: rank 0 sleeps in its on_step_end at step 5, rank 1 waits in step 6's
    # all-reduce; both beat step 5 now, rank 0 in phase hook (was: "step 4, phase step")
    assert RuntimeConfig.from_env({"K8SDDP_WATCHDOG_TIMEOUT_SECONDS": "7"}).budgets["hook"] == 7
    out = decide(child_code=1, started={0: {}, 1: {}},
                 failures={0: _rec("terminated", 5, "hook"), 1: _rec("hang", 5, "step")},
                 last_trace={}, hard_stopped=set(), signalled=None)
    assert out.suspects == [0]


# -- checkpoints: identity, fallback, retention, another world size (review items 5, 7, 8) -----
def test_prune_counts_only_good_checkpoints_and_spares_other_tasks(tmp_path: Path) -> None:
    for step in (50, 60, 64):
        write_checkpoint_bytes(tmp_path, step, b"x" * step, {"task": "mine", "model_fingerprint": "aa"})
    write_checkpoint_bytes(tmp_path, 90, b"other", {"task": "theirs"})
    (tmp_path / "ckpt-000000070.pt").mkdir()  # the reviewer's bogus entry
    (tmp_path / "ckpt-000000070.json").write_text("[]")
    write_checkpoint_bytes(tmp_path, 66, b"y" * 66, {"task": "mine"})
    payload_path(tmp_path, 66).write_bytes(b"z" * 66)  # same size, other bytes: bit rot
    deleted = prune(tmp_path, keep=3, task="mine", model_fingerprint="aa")
    assert manifest_steps(tmp_path) == [90, 64, 60, 50]  # the good 50 survives; 90 is not ours
    assert {p.name for p in deleted} == {"ckpt-000000070.json", "ckpt-000000066.json", "ckpt-000000066.pt"}


def _torch_ckpt(folder: Path, step: int, model, task: str = "t", *, fp: str | None = "auto") -> None:
    import io

    import torch

    from k8sddp.runtime.checkpoint import FORMAT, model_fingerprint

    fp = model_fingerprint(model) if fp == "auto" else fp
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "step": step, "task": task, "model_fingerprint": fp,
                "model": model.state_dict()}, buf)
    write_checkpoint_bytes(folder, step, buf.getvalue(), {"task": task, "model_fingerprint": fp})


def test_resume_falls_back_past_unloadable_and_foreign_checkpoints(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from k8sddp.runtime.checkpoint import choose_resume, model_fingerprint

    mine, wide = torch.nn.Linear(4, 2), torch.nn.Linear(4, 8)
    _torch_ckpt(tmp_path, 50, mine)
    write_checkpoint_bytes(tmp_path, 60, os.urandom(3000), {"task": "t"})  # checksum ok, not a pickle
    _torch_ckpt(tmp_path, 70, wide)  # same task name, another architecture
    _torch_ckpt(tmp_path, 80, wide, task="t", fp=None)  # an older checkpoint without a fingerprint
    _torch_ckpt(tmp_path, 90, mine, task="other")
    said: list[str] = []
    path, state = choose_resume(tmp_path, task="t", model_fp=model_fingerprint(mine),
                                device=torch.device("cpu"), warn=said.append)
    assert path == payload_path(tmp_path, 50) and state is not None and state["step"] == 50
    text = "\n".join(said)
    assert "ckpt-000000090: written by task 'other'" in text
    assert "ckpt-000000080: model fingerprint" in text and "ckpt-000000070: model fingerprint" in text
    assert "ckpt-000000060: its checksum matches but it does not load" in text


def test_resume_refuses_when_only_another_models_checkpoints_exist(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from k8sddp.runtime.checkpoint import choose_resume, model_fingerprint

    _torch_ckpt(tmp_path, 60, torch.nn.Linear(4, 8), task="mytask")
    with pytest.raises(UsageError, match="another task or model.*ckpt-000000060: written by task 'mytask'"):
        choose_resume(tmp_path, task="demo", model_fp=model_fingerprint(torch.nn.Linear(4, 2)),
                      device=torch.device("cpu"), warn=lambda m: None)
    write_checkpoint_bytes(tmp_path / "bad", 5, b"junk", {})
    (tmp_path / "bad" / "ckpt-000000005.pt").write_bytes(b"junK")  # only a corrupt one: start fresh
    assert choose_resume(tmp_path / "bad", task="demo", model_fp="x", device=torch.device("cpu"),
                         warn=lambda m: None) == (None, None)


@pytest.mark.parametrize(("old", "new"), [(2, 3), (2, 1), (3, 2), (1, 4)])
def test_reshard_continues_at_the_same_global_sample(old: int, new: int) -> None:
    pytest.importorskip("torch")
    from k8sddp.runtime.loop import ResumableSampler, reshard_start

    data, bs, batches = list(range(100)), 4, 5

    def order(world: int) -> list[list[int]]:
        return [list(ResumableSampler(data, num_replicas=world, rank=r, shuffle=True, seed=3))
                for r in range(world)]

    seen = {i for part in order(old) for i in part[:batches * bs]}
    start = reshard_start(batches * bs * old, new)
    rest: list[int] = []
    for r in range(new):
        s = ResumableSampler(data, num_replicas=new, rank=r, shuffle=True, seed=3)
        s.start = start
        want = len(s)
        got = list(s)
        assert want == len(got)
        rest += got
    padding = -(-len(data) // new) * new - len(data)  # DistributedSampler repeats this many anyway
    assert len(seen & set(rest)) <= padding  # nothing else seen twice
    assert len(set(data) - seen - set(rest)) <= new - 1  # at most W - 1 skipped at the boundary
    s = ResumableSampler(data, num_replicas=3, rank=0)
    s.start = 10**6  # was: __len__() < 0, ValueError in the loop (review item 5)
    assert len(s) == 0 and list(s) == []


def test_waiting_in_collective_reads_the_main_threads_top_frame(tmp_path: Path) -> None:
    from k8sddp.runtime.artifacts import RunDir
    from k8sddp.runtime.launcher import waiting_in_collective

    site = "/usr/lib/python3.11/site-packages/torch"
    main_thread = ('Thread 0x00007f01 (most recent call first):\n'
                   '  File "{top}", line 10 in {fn}\n'
                   '  File "/tmp/mytask.py", line 40 in on_step_end\n'
                   '  File "/src/k8sddp/runtime/loop.py", line 380 in run\n'
                   '  File "/src/k8sddp/runtime/worker.py", line 150 in run_worker\n')
    watchdog = ('Current thread 0x00007f02 (most recent call first):\n'
                f'  File "{site}/distributed/whatever.py", line 1 in x\n'
                '  File "/src/k8sddp/runtime/watchdog.py", line 270 in _run\n')
    run = RunDir(tmp_path)
    run.stacks(0).write_text("--- k8sddp rank 0: old dump ---\n" + main_thread.format(
        top=f"{site}/distributed/distributed_c10d.py", fn="all_reduce") + "\n"
        "--- k8sddp rank 0: watchdog: ... ---\n" + watchdog + "\n"
        + main_thread.format(top="/tmp/mytask.py", fn="on_step_end"))
    run.stacks(1).write_text("--- k8sddp rank 1: SIGTERM ---\n" + main_thread.format(
        top=f"{site}/distributed/c10d_logger.py", fn="wrapper") + "\n" + watchdog)
    assert waiting_in_collective(run, 0) is False  # its last dump: sleeping in the task's code
    assert waiting_in_collective(run, 1) is True
    assert waiting_in_collective(run, 2) is None


def test_run_record_reads_nproc_and_nnodes_from_torchrun_flags(tmp_path: Path) -> None:
    from k8sddp.runtime.artifacts import RunDir
    from k8sddp.runtime.launcher import Launcher

    env = guard_env(tmp_path, PET_NNODES="4", PET_NPROC_PER_NODE="8")
    cmd = ["torchrun", "--nproc-per-node=2", "-m", "k8sddp", "train", "--task", "x:y"]
    rec = Launcher(cmd, env)._record_base(RunDir(tmp_path / "r"), 0)
    assert (rec["nproc_per_node"], rec["nnodes"]) == ("2", "4")  # the flag wins; PET_* otherwise


def test_prune_hashes_only_what_it_keeps(tmp_path: Path, monkeypatch) -> None:
    from k8sddp.runtime import checkpoint_files as cf

    for step in (1, 2, 3, 4, 5):
        write_checkpoint_bytes(tmp_path, step, b"x" * 100, {"task": "mine"})
    write_checkpoint_bytes(tmp_path, 9, b"y" * 100, {"task": "theirs"})
    cf._VERIFIED.clear()  # a new process: nothing known yet
    read: list[str] = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self.name) or real(self))
    prune(tmp_path, keep=2, task="mine")
    assert sorted(read) == ["ckpt-000000004.pt", "ckpt-000000005.pt"]
    assert manifest_steps(tmp_path) == [9, 5, 4]


def test_a_node_that_succeeded_does_not_wait_for_its_peers(tmp_path: Path) -> None:
    """Multi-node (PET_NNODES=2) with no other node's folder on the volume: a command that exits 0
    is diagnosed at once; one that fails waits K8SDDP_PEER_WAIT_SECONDS for the peers' records."""
    from k8sddp.diagnose.live import launcher_view
    from k8sddp.runtime.launcher import Launcher

    seen: list[float] = []

    def analyse(*args, **kwargs):  # the real view, recording the wait it was given
        seen.append(kwargs["wait_s"])
        return launcher_view(*args, **kwargs)

    for code, art in ((0, "ok"), (3, "bad")):
        env = guard_env(tmp_path / art, PET_NNODES="2", K8SDDP_PEER_WAIT_SECONDS="1.5")
        started = time.monotonic()
        Launcher([sys.executable, "-c", f"raise SystemExit({code})"], env, analyse=analyse).run()
        took = time.monotonic() - started
        assert code == 0 or took >= 1.5, took  # it waited out the peers that never came
    assert seen == [0.0, 1.5]


def test_a_second_failure_call_returns_only_after_the_first_record_is_written(tmp_path: Path) -> None:
    """The watchdog thread's "terminated" record races the main thread's "comm" one; the loser's
    caller os._exit()s as soon as failure() returns, so it must not return before the winner wrote
    (seen: a rank that printed "terminated" but left no record, diagnosed as died by SIGALRM)."""
    from k8sddp.runtime.artifacts import RunDir
    from k8sddp.runtime.report import Reporter

    run = RunDir(tmp_path / "r")
    rep = Reporter(run, rank=0, local_rank=0, world_size=2)
    entered = threading.Event()

    def slow_info(phase: str) -> dict:
        entered.set()
        time.sleep(0.5)  # the winner is slow to write (a loaded node)
        return {"budget_source": "default"}

    rep.budget_info = slow_info
    rep.hb = None
    winner = threading.Thread(target=lambda: rep.failure("terminated", exit_code=ec.PREEMPTED, message="x",
                                                         phase="step"))
    winner.start()
    assert entered.wait(10)
    rep.failure("comm", exit_code=ec.HANG, message="y")  # the loser
    assert run.failure(0).exists(), "the loser returned before the winner's record was written"
    assert json.loads(run.failure(0).read_text())["kind"] == "terminated"
    winner.join(10)
