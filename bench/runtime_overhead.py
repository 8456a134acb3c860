"""Runtime guard costs: step-time overhead, heartbeat cost, hang-detection latency.

    python bench/runtime_overhead.py                 # everything (~2-3 min on 2 busy cores)
    python bench/runtime_overhead.py --only beat     # just the heartbeat cost
    python bench/runtime_overhead.py --rounds 7 --steps 150 --hangs 5

Figures printed (and written as JSON to ``bench/out/runtime_overhead.json``):

* **step overhead**: one torchrun job with 2 gloo workers on CPU runs the *same* task
  alternately through a plain DDP loop (:mod:`k8sddp.runtime.plain`) and through the guarded
  loop (:class:`k8sddp.runtime.loop.TrainingLoop` with its watchdog thread and hard stop armed),
  ``--rounds`` times, interleaved, in the same processes. Per segment: the median time between
  consecutive steps. Reported: median of the per-round ratios guarded/plain - 1, with min/max;
  target < 1 %.
* **heartbeat cost**: ns per ``Heartbeat.beat`` (alternating ``data``/``step`` phases as the loop
  does, with the watchdog thread running), against an empty method call.
* **hang-detection latency**: ``--hangs`` real ``k8sddp launch`` runs of the seed's hang
  (rank 0 in a rank-0-only branch, rank 1 in the next all-reduce) with a 2 s watchdog: the time
  from the last beat to detection minus the budget, and from the hang's start to launch's exit;
  plus the C-level hard stop on a GIL-starved process (no torch): time from the stall to death
  minus the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import timeit
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

WORKER_STEPS_WARMUP = 20


# -- tasks (imported by the torchrun workers as ``runtime_overhead:...``) -------------------------
def bench_task(steps: int, record: list[tuple[float, float]] | None = None) -> Any:
    """The demo task, sized for a few-ms step, recording a timestamp after every step."""
    from k8sddp.runtime.demo import make_task

    def hook(ctx: Any) -> None:
        if record is not None:
            record.append((time.perf_counter(), time.thread_time()))

    task = make_task(samples=64 * 2 * (steps + 10), features=64, hidden=512, batch_size=64, epochs=1,
                     max_steps=steps, on_step_end=hook, name="bench")
    task.build_eval_dataset = None
    return task


def _hang_hook(ctx: Any) -> None:
    if ctx.rank == 0 and ctx.step == 3:
        ctx.heartbeat.beat(ctx.step, "checkpoint")
        Path(os.environ["BENCH_MARK"]).write_text(repr(time.time()))
        time.sleep(600)


def hang_task() -> Any:
    """The seed's hang at step 3 (rank-0-only branch)."""
    from k8sddp.runtime.demo import make_task

    return make_task(samples=512, epochs=1, on_step_end=_hang_hook, name="bench-hang")


# -- step overhead (runs inside each torchrun worker) ---------------------------------------------
def _seg_median(stamps: list[tuple[float, float]]) -> tuple[float, float]:
    """Median wall and main-thread CPU seconds between consecutive steps, after the warm-up."""
    kept = stamps[WORKER_STEPS_WARMUP:]
    wall = [b[0] - a[0] for a, b in zip(kept, kept[1:], strict=False)]
    cpu = [b[1] - a[1] for a, b in zip(kept, kept[1:], strict=False)]
    return statistics.median(wall), statistics.median(cpu)


def worker(rounds: int, steps: int, out: str) -> None:
    """Alternate plain and guarded segments in this process; rank 0 writes the figures."""
    import datetime as dt

    import torch
    import torch.distributed as dist

    from k8sddp.runtime.config import RuntimeConfig
    from k8sddp.runtime.loop import Place, TrainingLoop
    from k8sddp.runtime.plain import train_plain
    from k8sddp.runtime.report import Reporter
    from k8sddp.runtime.stop import StopController
    from k8sddp.runtime.watchdog import Heartbeat, Watchdog

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=120))
    cfg = RuntimeConfig.from_env({"K8SDDP_WATCHDOG_TIMEOUT_SECONDS": "60"})
    total = steps + WORKER_STEPS_WARMUP + 1
    plain, guarded = [], []
    for r in range(rounds):
        for kind in (("plain", "guarded") if r % 2 == 0 else ("guarded", "plain")):
            stamps: list[tuple[float, float]] = []
            task = bench_task(total, stamps)
            if kind == "plain":
                train_plain(task, rank=rank, world_size=world, seed=0, steps=total)
                plain.append(_seg_median(stamps))
            else:
                reporter = Reporter(None, rank=rank, local_rank=rank, world_size=world)
                hb = Heartbeat(cfg.budgets, cfg.watchdog_timeout_s, cfg.trace_interval_s)
                reporter.hb = hb
                stop = StopController(None, rank=rank, world_size=world, grace_s=20, reporter=reporter)
                stop.store = dist.distributed_c10d._get_default_store()
                wd = Watchdog(hb, on_stall=reporter.on_stall, on_flush=lambda e: None,
                              on_signal=stop.on_signal_thread, install_wakeup_fd=True).start()
                try:
                    TrainingLoop(task, cfg, Place(rank, rank, world, torch.device("cpu")), hb, stop,
                                 reporter).run()
                finally:
                    wd.stop()
                guarded.append(_seg_median(stamps))
            dist.barrier()
    if rank == 0:
        Path(out).write_text(json.dumps({"plain": plain, "guarded": guarded}))
    dist.destroy_process_group()


def step_overhead(rounds: int, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "w.json"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO)]), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
               "--nproc-per-node=2", str(Path(__file__)),
               "--worker", "--rounds", str(rounds), "--steps", str(steps), "--out", str(out)]
        subprocess.run(cmd, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        data = json.loads(out.read_text())
    result: dict[str, Any] = {"rounds": rounds, "steps_per_segment": steps}
    for i, clock in enumerate(("wall", "cpu")):
        plain = [seg[i] for seg in data["plain"]]
        guarded = [seg[i] for seg in data["guarded"]]
        ratios = sorted(g / p - 1 for p, g in zip(plain, guarded, strict=True))
        q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
        result[clock] = {
            "plain_step_ms_median": round(statistics.median(plain) * 1e3, 4),
            "guarded_step_ms_median": round(statistics.median(guarded) * 1e3, 4),
            "overhead_pct_median": round(statistics.median(ratios) * 100, 3),
            "overhead_pct_iqr": [round(q1 * 100, 3), round(q3 * 100, 3)],
            "overhead_pct_min_max": [round(ratios[0] * 100, 3), round(ratios[-1] * 100, 3)],
        }
    return result


# -- heartbeat cost --------------------------------------------------------------------------------
def beat_cost(n: int = 1_000_000) -> dict[str, Any]:
    from k8sddp.runtime.watchdog import Heartbeat, Watchdog

    hb = Heartbeat({"step": 60.0, "data": 60.0}, 60.0, trace_every_s=1.0)
    wd = Watchdog(hb, on_stall=lambda s: None, on_flush=lambda e: None).start()

    class Empty:
        def beat(self, step: int, phase: str = "step") -> None:
            pass

    empty = Empty()
    try:
        best_beat = min(timeit.repeat(lambda: (hb.beat(1, "data"), hb.beat(1, "step")), number=n // 2,
                                      repeat=5)) / n
        best_empty = min(timeit.repeat(lambda: (empty.beat(1, "data"), empty.beat(1, "step")),
                                       number=n // 2, repeat=5)) / n
    finally:
        wd.stop()
    # What the guarded loop adds per step on top of a plain loop: two beats (data, step), the
    # stop check, the checkpoint-interval check.
    from k8sddp.runtime.stop import StopController

    stop = StopController(None, rank=0, world_size=1, grace_s=1, reporter=None)  # type: ignore[arg-type]
    every = 1000

    def per_step(step: int = 7) -> None:
        hb.beat(step, "data")
        hb.beat(step, "step")
        stop.checked = step
        if stop.requested and stop.at_boundary(step):
            pass
        if every and step % every == 0:
            pass

    wd = Watchdog(hb, on_stall=lambda s: None, on_flush=lambda e: None).start()
    try:
        loop_extra = min(timeit.repeat(per_step, number=n // 2, repeat=5)) / (n // 2)
    finally:
        wd.stop()
    return {"beat_ns": best_beat * 1e9, "empty_call_ns": best_empty * 1e9,
            "beat_minus_empty_ns": (best_beat - best_empty) * 1e9,
            "guarded_loop_extra_ns_per_step": loop_extra * 1e9}


# -- hang-detection latency ------------------------------------------------------------------------
HARD_CHILD = textwrap.dedent("""
    import sys, time
    from k8sddp.runtime.watchdog import Heartbeat, Watchdog
    hb = Heartbeat({"step": 2.0}, 2.0)
    Watchdog(hb, on_stall=lambda s: None, stacks_file=open(sys.argv[1], "a")).start()
    for i in range(20):
        hb.beat(i, "step"); time.sleep(0.01)
    hb.beat(99, "step")
    print(repr(time.monotonic()), flush=True)
    sum(range(10**11))
""")


def hang_latency(runs: int) -> dict[str, Any]:
    soft, exits = [], []
    budget = 2.0
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            art = Path(tmp) / "a"
            mark = Path(tmp) / "mark"
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO)]),
                   "OMP_NUM_THREADS": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
                   "PYTHONFAULTHANDLER": "1", "K8SDDP_PG_TIMEOUT_SECONDS": "60",
                   "K8SDDP_WATCHDOG_TIMEOUT_SECONDS": str(budget), "K8SDDP_MAX_HANG_RESTARTS": "3",
                   "K8SDDP_ARTIFACT_DIR": str(art), "TORCH_FR_DUMP_TEMP_FILE": str(art / "fr" / "rank-"),
                   "BENCH_MARK": str(mark)}
            cmd = [sys.executable, "-m", "k8sddp", "launch", "--", sys.executable, "-m",
                   "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=2",
                   "-m", "k8sddp", "train", "--task",
                   "runtime_overhead:hang_task"]
            proc = subprocess.run(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=120)
            end = time.time()
            assert proc.returncode == 142, proc.returncode
            (attempt,) = (art / "runs").iterdir()
            rec = json.loads((attempt / "failure-rank1.json").read_text())
            soft.append(rec["since_beat_s"] - budget)
            exits.append(end - float(mark.read_text()))
    hard = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.Popen([sys.executable, "-c", HARD_CHILD, str(Path(tmp) / "s.txt")],
                                    cwd=REPO, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            stalled = float(proc.stdout.readline())
            proc.wait(timeout=60)
            hard.append(time.monotonic() - stalled - budget)
            assert proc.returncode == -14, proc.returncode

    def summary(xs: list[float]) -> dict[str, float]:
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    return {"runs": runs, "watchdog_s": budget,
            "soft_detection_minus_budget_s": summary(soft),
            "launch_exit_after_hang_start_s": summary(exits),
            "hard_stop_minus_budget_s": summary(hard)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--hangs", type=int, default=3)
    parser.add_argument("--only", choices=("beat", "overhead", "hang"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.rounds, args.steps, args.out)
        return 0
    results: dict[str, Any] = {}
    if args.only in (None, "beat"):
        results["heartbeat"] = beat_cost()
        print("heartbeat:", json.dumps(results["heartbeat"], indent=None), flush=True)
    if args.only in (None, "overhead"):
        results["step_overhead"] = step_overhead(args.rounds, args.steps)
        print("step overhead:", json.dumps(results["step_overhead"]), flush=True)
    if args.only in (None, "hang"):
        results["hang_latency"] = hang_latency(args.hangs)
        print("hang latency:", json.dumps(results["hang_latency"]), flush=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "runtime_overhead.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
