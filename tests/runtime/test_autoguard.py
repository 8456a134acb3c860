"""Zero-code mode (k8sddp/runtime/autoguard.py) and learned budgets (budgets.py).

Units first; then real ``k8sddp launch`` + torchrun + 2 gloo workers running an ordinary script
with no k8sddp import (tests/runtime/zc/plain_train.py), marked slow.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from k8sddp.runtime import exitcodes as ec
from k8sddp.runtime.autoguard import PostImportHook, runs_target, should_arm, target_of
from k8sddp.runtime.budgets import BudgetLearner, LearningHeartbeat

from .helpers import HERE, Run, guard_env, load_json, run_dirs, run_record

SCRIPT = HERE / "zc" / "plain_train.py"


# -- units --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("command", "target"), [
    (["torchrun", "--nproc-per-node=2", "train.py", "--lr", "1"], "script:train.py"),
    (["torchrun", "--nproc-per-node", "2", "-m", "pkg.train", "x.py"], "module:pkg.train"),
    ([sys.executable, "-m", "torch.distributed.run", "--standalone", "a/b.py"], "script:a/b.py"),
    (["torchrun", "-m", "k8sddp", "train", "--task", "m:t"], None),  # the Task loop guards itself
    (["torchrun", "--no-python", "bash", "x.py"], None),
    (["python", "train.py"], None),  # not torchrun
])
def test_target_of_reads_only_torchruns_arguments(command: list[str], target: str | None) -> None:
    assert target_of(command) == target


def test_only_the_worker_running_the_target_arms(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    env = {"K8SDDP_AUTOGUARD_ARM": f"script:{script}", "TORCHELASTIC_RUN_ID": "x", "LOCAL_RANK": "0",
           "RANK": "0"}
    assert should_arm(env, ["python", "-u", str(script), "--x"]) == f"script:{script}"
    # a multiprocessing spawn child, a compile worker, pip: other command lines
    assert should_arm(env, ["python", "-c", "from multiprocessing.spawn import spawn_main"]) is None
    assert should_arm(env, ["python", "-m", "pip", "install", str(script)]) is None
    assert should_arm({k: v for k, v in env.items() if k != "LOCAL_RANK"}, ["python", str(script)]) is None
    assert runs_target("module:pkg.train", ["python", "-u", "-m", "pkg.train", "a"])
    assert not runs_target("module:pkg.train", ["python", "-m", "pkg.other"])


def test_bootstrap_imports_the_launchers_k8sddp_not_another_on_the_workers_path(tmp_path: Path) -> None:
    # torchrun from PATH (a pyenv shim, the system one next to a venv's k8sddp) runs the workers
    # under another interpreter: a k8sddp there (older, or a stray folder) must not be the one armed
    import os
    import subprocess

    from k8sddp.runtime.autoguard import BOOTSTRAP_DIR

    stray = tmp_path / "stray"
    (stray / "k8sddp").mkdir(parents=True)
    (stray / "k8sddp" / "__init__.py").write_text("")
    script = tmp_path / "train.py"
    script.write_text("import k8sddp.runtime; print(k8sddp.runtime.__file__)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BOOTSTRAP_DIR), str(stray)]),
           "K8SDDP_AUTOGUARD_ARM": f"script:{tmp_path / 'other.py'}", "TORCHELASTIC_RUN_ID": "x",
           "LOCAL_RANK": "0", "RANK": "0"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert "bootstrap failed" not in out.stderr, out.stderr
    assert out.returncode == 0, out.stderr
    real = Path(__file__).resolve().parents[2] / "k8sddp"
    assert out.stdout.strip().startswith(str(real)), out.stdout


def test_post_import_hook_patches_after_the_module_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "zc_probe_mod.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    hook = PostImportHook({"zc_probe_mod": lambda m: seen.append(m.VALUE)})
    sys.meta_path.insert(0, hook)
    try:
        import zc_probe_mod  # noqa: F401

        assert seen == [1]
    finally:
        sys.meta_path.remove(hook)
        sys.modules.pop("zc_probe_mod", None)


def test_learning_heartbeat_keeps_the_longest_interval_per_phase() -> None:
    hb = LearningHeartbeat({"step": 10.0}, 10.0)
    hb.beat(1, "step")
    time.sleep(0.05)
    hb.beat(2, "data")
    hb.beat(2, "step")
    assert hb.longest["step"] >= 0.05 and hb.longest["data"] < 0.05
    assert hb.count == {"init": 1, "step": 1, "data": 1}


def _learner(hb: LearningHeartbeat, root: Path | None, rank: int = 0, **kw: float) -> BudgetLearner:
    return BudgetLearner(hb, {"step": 10.0, "data": 10.0, "hook": 10.0, "eval": 30.0},
                         artifact_dir=root, rank=rank, factor=kw.get("factor", 5.0),
                         warmup=int(kw.get("warmup", 3)), floor_s=kw.get("floor", 0.5))


def test_a_learned_budget_clamped_to_the_fixed_one_is_reported_fixed(tmp_path: Path) -> None:
    # K8SDDP_WATCHDOG_MIN_SECONDS above K8SDDP_WATCHDOG_TIMEOUT_SECONDS: the fixed budget fires,
    # the record said "learned: 5 x longest interval 0.03 s" for a 10 s budget and counted a fire
    hb = LearningHeartbeat({"step": 10.0, "data": 10.0}, 10.0)
    hb.beat(0, "step")
    for i in range(4):
        time.sleep(0.01)
        hb.beat(i, "step")
    learner = _learner(hb, tmp_path, floor=60.0)
    learner.update(force=True)
    assert hb.budget_of("step") == 10.0
    info = learner.describe("step")
    assert info["budget_source"] == "fixed" and info["learned"]["budget_s"] == 10.0
    learner.fired("step")
    again = _learner(LearningHeartbeat({"step": 10.0}, 10.0), tmp_path, floor=0.001)
    assert not again._fired_before.get("step")  # the next attempt keeps its factor


def test_learned_budget_is_k_times_longest_on_any_rank_clamped(tmp_path: Path) -> None:
    hb0, hb1 = LearningHeartbeat({"step": 10.0, "data": 10.0}, 10.0), LearningHeartbeat({}, 10.0)
    for hb, gap in ((hb0, 0.01), (hb1, 0.2)):
        hb.beat(0, "step")
        for i in range(4):
            time.sleep(gap)
            hb.beat(i, "step")
    l1 = _learner(hb1, tmp_path, rank=1)
    l1.update()  # rank 1 publishes its 0.2 s intervals on the volume
    l0 = _learner(hb0, tmp_path, rank=0)
    l0.update(force=True)
    budget = hb0.budget_of("step")
    assert 5 * 0.2 <= budget < 5 * 0.35, budget  # rank 1's longest interval, not rank 0's
    assert hb0.budget_of("data") == budget  # one budget group
    assert hb0.budget_of("eval") == 10.0  # no eval interval seen: fixed
    info = l0.describe("step")
    assert info["budget_source"] == "learned" and info["learned"]["ranks_seen"] >= 2
    assert l0.describe("eval")["budget_source"] == "fixed"
    # the floor and the ceiling
    hb2 = LearningHeartbeat({"step": 10.0}, 10.0)
    for i in range(5):
        hb2.beat(i, "step")
    _learner(hb2, None, floor=2.0).update(force=True)
    assert hb2.budget_of("step") == 2.0
    hb3 = LearningHeartbeat({"step": 0.3}, 0.3)
    hb3.beat(0, "step")
    for i in range(4):
        time.sleep(0.1)
        hb3.beat(i, "step")
    BudgetLearner(hb3, {"step": 0.3}, artifact_dir=None, rank=0, warmup=3, floor_s=0.01).update(force=True)
    assert hb3.budget_of("step") == 0.3


def test_warm_up_then_kept_across_restarts_and_a_fire_doubles_k(tmp_path: Path) -> None:
    hb = LearningHeartbeat({"step": 10.0}, 10.0)
    learner = _learner(hb, tmp_path, warmup=50)
    for i in range(10):
        hb.beat(i, "step")
    learner.update(force=False)
    assert hb.budget_of("step") == 10.0  # still warming up
    for i in range(60):
        hb.beat(i, "step")
    time.sleep(0.1)
    hb.beat(61, "step")
    learner._next = 0.0
    learner.update()
    learned = hb.budget_of("step")
    assert learned < 10.0
    learner.fired("step")
    saved = json.loads((tmp_path / "budgets" / "learned-rank0.json").read_text())
    assert saved["groups"]["step"]["fired"] == 1 and saved["groups"]["step"]["count"] >= 60
    # a restart: nothing seen yet in this attempt, but the volume remembers (and k doubles)
    fresh = LearningHeartbeat({"step": 10.0}, 10.0)
    again = _learner(fresh, tmp_path, warmup=50)
    assert again.learned["step"]["from_earlier_attempts"] is True
    assert again.learned["step"]["factor"] == 10.0
    assert fresh.budget_of("step") == pytest.approx(min(10.0, 2 * learned), rel=0.01)


# -- real torchrun --------------------------------------------------------------------------------
def _launch(tmp_path: Path, artifacts: Path, name: str, timeout: float = 150, **env: str) -> tuple[int, Run]:
    cmd = [sys.executable, "-m", "k8sddp", "launch", "--", sys.executable, "-m", "torch.distributed.run",
           "--standalone", "--nnodes=1", "--nproc-per-node=2", str(SCRIPT)]
    e = guard_env(artifacts, **{"K8SDDP_WATCHDOG_TIMEOUT_SECONDS": "2", **env})
    run = Run(cmd, e, tmp_path / f"{name}.log")
    return run.wait(timeout), run


@pytest.mark.slow
def test_plain_script_stalling_on_one_rank_ends_142_with_its_stalled_line(tmp_path: Path, artifacts: Path) -> None:
    rc, run = _launch(tmp_path, artifacts, "stall", ZC_MODE="stall", ZC_RANK="1")
    assert rc == ec.HANG, run.output()[-3000:]
    rd = run_dirs(artifacts)[0]
    rec = run_record(rd)
    assert rec["autoguard"] == f"script:{SCRIPT}" and rec["guard_mode"] == "autoguard"
    assert rec["pg_timeout_s"] == 30.0 and rec["pg_timeout_source"] == "K8SDDP_PG_TIMEOUT_SECONDS"
    assert rec["suspected_stuck_ranks"] == [1], rec["ranks"]
    stacks = (rd / "stacks-rank1.txt").read_text()
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "ZC-STALLED-LINE" in text)
    assert f'File "{SCRIPT}", line {line} in stall_here' in stacks  # faulthandler: file and line
    fail = load_json(rd / "failure-rank1.json")
    assert fail["kind"] in ("hang", "terminated") and fail["step"] == 6
    assert any((rd / f"fr-rank{r}.pkl").exists() for r in (0, 1))
    hang = [f for f in (load_json(p) for p in rd.glob("failure-rank*.json")) if f["kind"] == "hang"]
    assert hang and all(f["since_beat_s"] < 2 + 1.5 for f in hang)  # detected at the 2 s budget


@pytest.mark.slow
def test_plain_script_without_a_stall_exits_0_and_opt_out_leaves_it_alone(tmp_path: Path, artifacts: Path) -> None:
    rc, run = _launch(tmp_path, artifacts, "ok", ZC_MODE="ok")
    assert rc == 0, run.output()[-3000:]
    rd = run_dirs(artifacts)[0]
    assert load_json(rd / "started-rank0.json")["guard_mode"] == "autoguard"
    assert (rd / "trace-rank0.jsonl").read_text().count('"phase": "step"') >= 10
    rc, run = _launch(tmp_path, artifacts, "optout", ZC_MODE="ok", K8SDDP_AUTOGUARD="0")
    assert rc == 0, run.output()[-3000:]
    rd = run_dirs(artifacts)[-1]
    assert run_record(rd)["autoguard"] is None and not (rd / "started-rank0.json").exists()


@pytest.mark.slow
def test_gil_holding_stall_in_a_plain_script_ends_by_the_hard_stop(tmp_path: Path, artifacts: Path) -> None:
    rc, run = _launch(tmp_path, artifacts, "gil", ZC_MODE="gil", ZC_RANK="0")
    assert rc == ec.HANG, run.output()[-3000:]
    rd = run_dirs(artifacts)[0]
    stacks = (rd / "stacks-rank0.txt").read_text()
    assert "Timeout (" in stacks and f'File "{SCRIPT}"' in stacks
    assert run_record(rd)["ranks"]["0"]["kind"] == "hang-hard"
    assert "exitcode  : -14" in run.output()


@pytest.mark.slow
def test_grad_accumulation_and_scaler_skips_no_false_alarm_and_no_missed_stall(
        tmp_path: Path, artifacts: Path) -> None:
    rc, run = _launch(tmp_path, artifacts, "amp", ZC_MODE="amp")
    assert rc == 0, run.output()[-3000:]
    skipped = [int(n) for n in re.findall(r"rank \d: skipped (\d+) steps", run.output())]
    assert len(skipped) == 2 and min(skipped) >= 5, skipped  # every step skipped by the scaler
    rc, run = _launch(tmp_path, artifacts, "amp-stall", ZC_MODE="amp", ZC_STALL="1", ZC_RANK="1")
    assert rc == ec.HANG, run.output()[-3000:]
    rec = run_record(run_dirs(artifacts)[-1])
    assert rec["suspected_stuck_ranks"] == [1], rec["ranks"]


@pytest.mark.slow
def test_learned_budget_fires_sooner_and_says_so(tmp_path: Path, artifacts: Path) -> None:
    rc, run = _launch(tmp_path, artifacts, "learn", ZC_MODE="stall", ZC_RANK="0", ZC_STEPS="200",
                      ZC_AT="120", K8SDDP_WATCHDOG_TIMEOUT_SECONDS="20", K8SDDP_WATCHDOG_MIN_SECONDS="1",
                      K8SDDP_LEARN_WARMUP="20")
    assert rc == ec.HANG, run.output()[-3000:]
    rd = run_dirs(artifacts)[0]
    fails = [load_json(p) for p in rd.glob("failure-rank*.json")]
    hang = next(f for f in fails if f["kind"] == "hang")
    assert hang["budget_source"] == "learned" and hang["budget_s"] < 20
    assert hang["learned"]["factor"] == 5.0 and hang["learned"]["intervals"] >= 20
    assert (artifacts / "budgets" / "learned-rank0.json").exists()


# -- frameworks (real packages, CPU/gloo, a tiny local model) -----------------------------------
FRAMEWORKS = [
    ("lightning", "lit_train.py", "training_step", "lightning done"),
    ("transformers", "hf_train.py", "forward", "transformers done"),
    ("accelerate", "acc_train.py", "<module>", "accelerate done"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("package", "script", "function", "done"), FRAMEWORKS)
def test_framework_runs_finish_and_their_stall_ends_142(
        tmp_path: Path, package: str, script: str, function: str, done: str) -> None:
    pytest.importorskip(package)
    path = HERE / "zc" / script
    for stall in ("0", "1"):
        artifacts = tmp_path / f"artifacts-{stall}"
        artifacts.mkdir()
        cmd = [sys.executable, "-m", "k8sddp", "launch", "--", sys.executable, "-m",
               "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=2", str(path)]
        # init (imports, model, first step) has max(pg timeout, watchdog) = 120 s: importing a
        # framework on the shared test machine took > 30 s
        env = guard_env(artifacts, K8SDDP_WATCHDOG_TIMEOUT_SECONDS="3", K8SDDP_PG_TIMEOUT_SECONDS="120",
                        ZC_STALL=stall, ZC_RANK="1")
        run = Run(cmd, env, tmp_path / f"{package}-{stall}.log")
        rc = run.wait(240)
        rd = run_dirs(artifacts)[0]
        rec = run_record(rd)
        assert rec["guard_mode"] == "autoguard"
        if stall == "0":
            assert rc == 0, run.output()[-3000:]
            assert run.output().count(done) == 2
            framework = load_json(rd / "started-rank0.json").get("framework")
            assert framework == package
            continue
        assert rc == ec.HANG, run.output()[-3000:]
        assert rec["suspected_stuck_ranks"] == [1], rec["ranks"]
        stacks = (rd / "stacks-rank1.txt").read_text()
        assert f'File "{path}", line ' in stacks and f"in {function}" in stacks


def test_hook_beats_never_lower_an_explicit_step_and_keep_a_long_phase() -> None:
    from k8sddp.runtime.autoguard import _Beats

    class _G:
        hb = LearningHeartbeat({}, 10.0)

    beats = _Beats(_G())  # type: ignore[arg-type]
    beats.progress("data")
    assert _G.hb.phase == "init"  # before the first optimizer step
    beats.optimizer_step(object(), (), {})
    assert (_G.hb.step, _G.hb.phase) == (1, "step")
    _G.hb.beat(1000, "step")  # a resumed script's own beat
    beats.optimizer_step(object(), (), {})
    assert _G.hb.step == 1000
    _G.hb.beat(1000, "eval")
    beats.progress("data")  # a batch inside an evaluation keeps the eval phase and budget
    assert _G.hb.phase == "eval"


def test_exited_records_are_done_on_success_final_alone_and_never_outrank_a_hang() -> None:
    from k8sddp.runtime.outcome import decide

    def verdict(code: int, failures: dict[int, dict[str, object]]) -> tuple[int, dict[int, dict[str, object]]]:
        o = decide(child_code=code, started={0: {}, 1: {}}, failures=failures, last_trace={},
                   hard_stopped=set(), signalled=None)
        return o.code, o.ranks

    code, ranks = verdict(0, {0: {"kind": "exited", "step": 3}, 1: {"kind": "exited", "step": 3}})
    assert code == 0 and ranks[0]["kind"] == "done"
    assert verdict(3, {0: {"kind": "exited"}, 1: {"kind": "exited"}})[0] == ec.TASK_ERROR  # sys.exit(3)
    assert verdict(1, {0: {"kind": "exited"}, 1: {"kind": "hang", "step": 2, "phase": "step"}})[0] == ec.HANG
