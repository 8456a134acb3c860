"""Zero-code guard and learned budgets: overhead, stall-to-exit, false alarms, slow checkpoint.

    python bench/guard_bench.py                  # small defaults (~4 min on 2 busy cores)
    python bench/guard_bench.py --rounds 6 --runs 100

Prints each figure and writes bench/out/guard_bench.json:

1. overhead: ``k8sddp launch`` zero-code vs plain torchrun, the same script
   (``bench/zc_step.py``: DDP on gloo, a fixed 20 ms step = compute + sleep), interleaved rounds;
   the per-step time ratio guarded/plain with a 95 % confidence interval (t distribution over
   rounds), plus the hooks' own CPU cost per step measured in one process (ns);
2. stall-to-exit: a rank stalls; seconds from the stall to ``k8sddp launch``'s exit with the
   fixed budget (``K8SDDP_WATCHDOG_TIMEOUT_SECONDS``, learning off) vs learned
   (``K8SDDP_WATCHDOG_MIN_SECONDS=1``);
3. false alarms: ``--runs`` runs of the real Heartbeat + Watchdog + BudgetLearner (floor 0.05 s, so
   the learned budget is k x the longest interval) under a busy second process, steps drawn
   from: typical 20 ms, 10 % slow steps uniform in [1.5, 3] x typical; per k in 2, 3, 5; also the
   ratio longest-in-warm-up / typical that k must cover;
4. slow checkpoint: a real ``guard.save_checkpoint`` of ``--ckpt-mb`` MB inside
   ``phase("checkpoint")`` after the step budget was learned down; it must not fire (exit 0).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from k8sddp.runtime.budgets import BudgetLearner, LearningHeartbeat  # noqa: E402
from k8sddp.runtime.watchdog import Stall, Watchdog  # noqa: E402

T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def guard_env(artifacts: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("K8SDDP_", "TORCHELASTIC"))}
    env.update({
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "1",
        "K8SDDP_PG_TIMEOUT_SECONDS": "60", "K8SDDP_WATCHDOG_TIMEOUT_SECONDS": "10",
        "K8SDDP_MAX_HANG_RESTARTS": "3", "K8SDDP_ARTIFACT_DIR": str(artifacts),
        "TORCH_FR_DUMP_TEMP_FILE": str(artifacts / "fr" / "rank-"), "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
    })
    env.update(extra)
    return env


def torchrun(script: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            "--nproc-per-node=2", str(script)]


def ci95(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = T975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


# -- 1. overhead ------------------------------------------------------------------------------------
def _loop_time(out: str) -> float:
    times = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("LOOP_S_PER_STEP")]
    if not times:
        raise RuntimeError("no LOOP_S_PER_STEP line:\n" + out[-2000:])
    return max(times)


def overhead(rounds: int, steps: int) -> dict[str, Any]:
    script = HERE / "zc_step.py"
    ratios, plain_s, guarded_s = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            env = guard_env(Path(tmp) / f"a{r}", ZC_STEPS=str(steps))
            order = ("plain", "guarded") if r % 2 == 0 else ("guarded", "plain")
            got: dict[str, float] = {}
            for arm in order:
                cmd = torchrun(script)
                if arm == "guarded":
                    cmd = [sys.executable, "-m", "k8sddp", "launch", "--", *cmd]
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
                if p.returncode != 0:
                    raise RuntimeError(f"{arm} exited {p.returncode}:\n{p.stderr[-2000:]}")
                got[arm] = _loop_time(p.stdout + p.stderr)
            plain_s.append(got["plain"])
            guarded_s.append(got["guarded"])
            ratios.append(got["guarded"] / got["plain"] - 1.0)
    mean, lo, hi = ci95(ratios)
    return {"rounds": rounds, "steps": steps, "plain_s_per_step": plain_s,
            "guarded_s_per_step": guarded_s, "overhead_mean": mean, "overhead_ci95": [lo, hi]}


def hook_cost(n: int = 50000) -> dict[str, float]:
    """CPU ns (this thread's CPU time: wall time on a shared machine mostly measures the other
    jobs) of the zero-code beats per step, one optimizer post hook plus one DataLoader fetch (3
    beats of a LearningHeartbeat), and of 3 beats of the plain Heartbeat for comparison."""
    from k8sddp.runtime import autoguard
    from k8sddp.runtime.watchdog import Heartbeat

    hb = LearningHeartbeat({"step": 1e9, "data": 1e9}, 1e9)

    class G:
        pass

    g = G()
    g.hb = hb  # type: ignore[attr-defined]
    beats = autoguard._Beats(g)  # type: ignore[arg-type]
    beats.started = True
    opt = object()
    t0 = time.thread_time_ns()
    for _ in range(n):
        beats.optimizer_step(opt, (), {})
        beats.progress("data")
        beats.progress("step")
    hooked = (time.thread_time_ns() - t0) / n
    plain = Heartbeat({"step": 1e9, "data": 1e9}, 1e9)
    t0 = time.thread_time_ns()
    for i in range(n):
        plain.beat(i, "step")
        plain.beat(i, "data")
        plain.beat(i, "step")
    return {"zero_code_cpu_ns_per_step": round(hooked, 1),
            "plain_heartbeat_3_beats_cpu_ns": round((time.thread_time_ns() - t0) / n, 1)}


# -- 2. stall to exit -------------------------------------------------------------------------------
def stall_to_exit(fixed_budget: float, runs: int) -> dict[str, Any]:
    script = HERE / "zc_step.py"
    out: dict[str, list[float]] = {"fixed": [], "learned": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            for mode in ("fixed", "learned"):
                extra = {"ZC_STEPS": "400", "ZC_STALL_AT": "60", "K8SDDP_WATCHDOG_TIMEOUT_SECONDS": str(fixed_budget)}
                if mode == "fixed":
                    extra["K8SDDP_LEARN_BUDGETS"] = "0"
                else:
                    extra.update(K8SDDP_WATCHDOG_MIN_SECONDS="1", K8SDDP_LEARN_WARMUP="20")
                env = guard_env(Path(tmp) / f"{mode}{i}", **extra)
                p = subprocess.run([sys.executable, "-m", "k8sddp", "launch", "--", *torchrun(script)],
                                   env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
                end = time.time()
                stalls = [float(line.split()[-1]) for line in (p.stdout + p.stderr).splitlines()
                          if line.startswith("STALL_AT")]
                if p.returncode != 142 or not stalls:
                    raise RuntimeError(f"{mode}: exit {p.returncode}:\n{p.stderr[-2000:]}")
                out[mode].append(round(end - stalls[0], 2))
    return {"fixed_budget_s": fixed_budget, "seconds": out,
            "median_fixed_s": statistics.median(out["fixed"]),
            "median_learned_s": statistics.median(out["learned"])}


# -- 3. false alarms --------------------------------------------------------------------------------
def _busy(seconds: float) -> subprocess.Popen[bytes]:
    code = f"import time\nend=time.time()+{seconds}\nwhile time.time()<end: sum(range(10000))"
    return subprocess.Popen([sys.executable, "-c", code])


def one_run(rng: random.Random, factor: float, typical: float, steps: int, warmup: int) -> tuple[bool, float]:
    hb = LearningHeartbeat({"step": 30.0, "data": 30.0}, 30.0, trace_every_s=1e9)
    fired: list[Stall] = []
    learner = BudgetLearner(hb, {"step": 30.0, "data": 30.0}, artifact_dir=None, rank=0,
                            factor=factor, warmup=warmup, floor_s=0.05)
    wd = Watchdog(hb, on_stall=fired.append, hard_stop=False, exit_on_stall=False)
    wd.start()
    longest_warm = 0.0
    hb.beat(0, "step")
    try:
        for step in range(1, steps + 1):
            slow = rng.random() < 0.10
            t = typical * (rng.uniform(1.5, 3.0) if slow else rng.uniform(0.9, 1.1))
            t0 = time.perf_counter()
            end = t0 + t / 2
            while time.perf_counter() < end:  # half compute (contends for the CPU), half wait
                sum(range(200))
            time.sleep(max(0.0, t0 + t - time.perf_counter()))
            hb.beat(step, "data")
            hb.beat(step, "step")
            if step == warmup:
                longest_warm = max(hb.longest.get("step", 0.0), hb.longest.get("data", 0.0))
            learner.update(force=True)
            if fired:
                break
    finally:
        wd.stop()
    longest = max(hb.longest.get("step", 0.0), hb.longest.get("data", 0.0))
    # the k this run needed: its longest interval over the longest one seen in the warm-up
    return bool(fired), longest_warm / typical, longest / max(longest_warm, 1e-9)


def false_alarms(runs: int, typical: float, steps: int, warmup: int) -> dict[str, Any]:
    rng = random.Random(12)
    out: dict[str, Any] = {"runs": runs, "typical_s": typical, "steps_per_run": steps,
                           "warmup": warmup, "slow_steps": "10 % uniform [1.5, 3] x typical",
                           "contention": "one busy Python process for the whole measurement"}
    busy = _busy(3600)
    try:
        for factor in (1.5, 3.0, 5.0):
            alarms, ratios, needed = 0, [], []
            for _ in range(runs):
                fired, ratio, need = one_run(rng, factor, typical, steps, warmup)
                alarms += fired
                ratios.append(ratio)
                needed.append(need)
            out[f"k={factor:g}"] = {"false_alarms": alarms,
                                    "warmup_longest_over_typical_max": round(max(ratios), 2),
                                    "warmup_longest_over_typical_median": round(statistics.median(ratios), 2),
                                    "needed_k_max": round(max(needed), 2),
                                    "needed_k_median": round(statistics.median(needed), 2)}
    finally:
        busy.kill()
        busy.wait()
    return out


# -- 4. slow checkpoint -----------------------------------------------------------------------------
CHILD = r"""
import sys, time, torch
from k8sddp import guard
state = {"w": torch.randn(int(sys.argv[1]) * 262144)}  # built before: only the save is timed
g = guard.start()
t_end = time.monotonic() + 6.5  # the watchdog thread learns every 5 s: 10 ms steps for 6.5 s
step = 0
while time.monotonic() < t_end:
    time.sleep(0.01)
    step += 1
    guard.beat(step)
t0 = time.monotonic()
guard.save_checkpoint(state, step=step)   # torch.save + fsync inside rank0_io("checkpoint")
took = time.monotonic() - t0
print("STEP_BUDGET", g.hb.budget_of("step"), "CKPT_BUDGET", g.hb.budget_of("checkpoint"), "SAVE_S", round(took, 3))
guard.stop()
"""


def slow_checkpoint(mb: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = guard_env(Path(tmp), K8SDDP_WATCHDOG_TIMEOUT_SECONDS="4", K8SDDP_WATCHDOG_MIN_SECONDS="0.2",
                        K8SDDP_LEARN_WARMUP="20", K8SDDP_RUN_DIR=str(Path(tmp) / "runs" / "bench"))
        p = subprocess.run([sys.executable, "-c", CHILD, str(mb)], env=env, capture_output=True,
                           text=True, cwd=REPO, timeout=600)
    fields = (p.stdout.split() + [""] * 6)[:6]
    return {"exit_code": p.returncode, "checkpoint_mb": mb, "step_budget_s": fields[1],
            "checkpoint_budget_s": fields[3], "save_s": fields[5], "stderr_tail": p.stderr[-500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="overhead rounds (each: plain + guarded)")
    ap.add_argument("--steps", type=int, default=300, help="steps per overhead run (20 ms each)")
    ap.add_argument("--stall-runs", type=int, default=1)
    ap.add_argument("--fixed-budget", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=50, help="false-alarm runs per k")
    ap.add_argument("--ckpt-mb", type=int, default=256)
    ap.add_argument("--only", choices=["hooks", "overhead", "stall", "alarms", "checkpoint"], default=None)
    args = ap.parse_args()
    res: dict[str, Any] = {}
    if args.only in (None, "hooks"):
        res["hooks"] = hook_cost()
        print("hooks:", json.dumps(res["hooks"]), flush=True)
    if args.only in (None, "checkpoint"):
        res["slow_checkpoint"] = slow_checkpoint(args.ckpt_mb)
        print("slow checkpoint:", json.dumps(res["slow_checkpoint"]), flush=True)
    if args.only in (None, "alarms"):
        res["false_alarms"] = false_alarms(args.runs, 0.02, 60, 20)
        print("false alarms:", json.dumps(res["false_alarms"]), flush=True)
    if args.only in (None, "stall"):
        res["stall_to_exit"] = stall_to_exit(args.fixed_budget, args.stall_runs)
        print("stall to exit:", json.dumps(res["stall_to_exit"]), flush=True)
    if args.only in (None, "overhead"):
        res["overhead"] = overhead(args.rounds, args.steps)
        o = res["overhead"]
        print(f"overhead: {o['overhead_mean'] * 100:+.2f} % per step, 95 % CI "
              f"[{o['overhead_ci95'][0] * 100:+.2f}, {o['overhead_ci95'][1] * 100:+.2f}] %", flush=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "guard_bench.json").write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
