"""Scale of ``k8sddp diagnose``: 10,000 simulated ranks, one planted culprit.

Builds an artifact volume of ``--nodes`` x ``--per-node`` ranks (default 1,250 x 8 = 10,000):
per rank a start record, 60 s of heartbeat trace at one beat per second, a failure record, a
stacks file and a flight-recorder dump of 2,000 entries (torch's dump format, as read from real
gloo dumps: ``k8sddp/diagnose/flightrec.py``). Rank ``--culprit`` stalls in phase ``eval`` at
step 57 outside any collective, one collective short; every other rank waits in collective
#2001 of step 58. The waiting ranks' dumps are hard links of one file (their content is the
same; it keeps the volume at ~2 MB instead of ~10 GB) and every file is still opened by path.

Then runs the diagnosis in a fresh process (``python -m k8sddp diagnose DIR --format json``),
checks that it names the culprit, and prints wall time and peak RSS (target: < 5 s, < 2 GB)::

    python bench/diagnose_scale.py            # 10,000 ranks
    python bench/diagnose_scale.py --nodes 2 --per-node 4
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENTRIES = 2000
TRACE_S = 60


def _entry(seq: int, retired: bool, site_line: int) -> dict:
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "gloo:all_reduce", "time_created_ns": 0,
            "input_sizes": [[2177]], "input_dtypes": ["Float"], "output_sizes": [[2177]],
            "output_dtypes": ["Float"], "state": "scheduled", "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": retired, "timeout_ms": 1800000,
            "is_p2p": False, "thread_id": "1", "thread_name": "python",
            "frames": [{"filename": "/usr/lib/python3/site-packages/torch/autograd/__init__.py", "line": 395,
                        "name": "backward"},
                       {"filename": "/app/k8sddp/runtime/loop.py", "line": site_line, "name": "run"}]}


def _dump(last_seq: int, open_last: bool) -> bytes:
    entries = [_entry(s, not (open_last and s == last_seq), 398) for s in range(last_seq - ENTRIES + 1, last_seq + 1)]
    return pickle.dumps({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[]"}},
                         "pg_status": {"0": {"last_enqueued_collective": last_seq, "last_started_collective": -1,
                                             "last_completed_collective": last_seq - int(open_last)}},
                         "comm_lib_version": "2.10", "entries": entries})


WAIT_STACK = ('--- k8sddp rank {r}: watchdog: no heartbeat for 300.00 s in phase \'step\' at step 58 (budget 300 s) ---\n'
              'Thread 0x00007f0000000001 (most recent call first):\n'
              '  File "/usr/lib/python3/site-packages/torch/autograd/graph.py", line 979 in _engine_run_backward\n'
              '  File "/app/k8sddp/runtime/loop.py", line 398 in run\n'
              '  File "/app/k8sddp/runtime/worker.py", line 152 in run_worker\n')
STALL_STACK = ('Current thread 0x00007f0000000001 (most recent call first):\n'
               '  File "/app/train.py", line 88 in evaluate_on_rank0\n'
               '  File "/app/k8sddp/runtime/loop.py", line 406 in run\n'
               '  File "/app/k8sddp/runtime/worker.py", line 152 in run_worker\n')


def build(root: Path, nodes: int, per_node: int, culprit: int) -> None:
    world = nodes * per_node
    runs = root / "runs"
    shared = root / "waiting-dump.pkl"
    shared.write_bytes(_dump(2001, True))
    for node in range(nodes):
        d = runs / f"20261201T120000-node{node}-abcdef"
        d.mkdir(parents=True)
        (d / f"run-node{node}.json").write_text(json.dumps({
            "status": "finished", "node_rank": node, "exit_code": 142, "exit_name": "hang",
            "failure_log_tail": []}))
        for local in range(per_node):
            r = node * per_node + local
            (d / f"started-rank{r}.json").write_text(json.dumps({"rank": r, "world_size": world, "backend": "nccl"}))
            stall = r == culprit
            last_step = 57 if stall else 58
            lines = []
            for t in range(TRACE_S):
                step = max(0, last_step - (TRACE_S - 1 - t))
                lines.append(json.dumps({"rank": r, "step": step, "phase": "eval" if stall and t == TRACE_S - 1 else "step",
                                         "mono": 1000.0 + t, "wall": 1.8e9 + t}))
            (d / f"trace-rank{r}.jsonl").write_text("\n".join(lines) + "\n")
            kind, phase, step = ("terminated", "eval", 57) if stall else ("hang", "step", 58)
            (d / f"failure-rank{r}.json").write_text(json.dumps({  # the fields Reporter.failure writes
                "rank": r, "local_rank": local, "world_size": world, "pid": 1000 + local, "host": f"node{node}",
                "time": "2026-12-01T12:01:00.000+00:00", "kind": kind, "step": step, "phase": phase,
                "since_beat_s": 300.0, "budget_s": 300.0, "exit_code": 142, "message": ""}))
            (d / f"stacks-rank{r}.txt").write_text((STALL_STACK if stall else WAIT_STACK).format(r=r))
            if stall:
                (d / f"fr-rank{r}.pkl").write_bytes(_dump(2000, False))
            else:
                os.link(shared, d / f"fr-rank{r}.pkl")


def main() -> int:
    """Build, diagnose, print figures; exit 1 when the culprit is not named or a target is missed."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1250)
    p.add_argument("--per-node", type=int, default=8)
    p.add_argument("--culprit", type=int, default=None, help="rank of the culprit (default: world // 2 + 3)")
    a = p.parse_args()
    world = a.nodes * a.per_node
    culprit = a.culprit if a.culprit is not None else world // 2 + 3
    with tempfile.TemporaryDirectory(prefix="k8sddp-diag-bench-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        build(root, a.nodes, a.per_node, culprit)
        print(f"built {world} ranks ({a.nodes} nodes x {a.per_node}) in {time.perf_counter() - t0:.1f} s: "
              f"{TRACE_S} beats and {ENTRIES} flight-recorder entries per rank, culprit rank {culprit}")
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "k8sddp", "diagnose", str(root), "--format", "json"],
                             capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        rss_mb = max(usage.ru_maxrss, before) / 1024
        cpu = usage.ru_utime + usage.ru_stime
        if out.returncode != 0:
            print(out.stderr[-2000:])
            return 1
        doc = json.loads(out.stdout)
        c = doc["culprits"][0]
        named = (c["rank"], c["kind"], c["phase"], c["step"])
        print(f"diagnose: {wall:.2f} s wall, {cpu:.2f} s CPU, peak RSS {rss_mb:.0f} MB (targets < 5 s, < 2048 MB); "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"culprit named: rank {c['rank']} node {c['node']} kind {c['kind']} phase {c['phase']} step {c['step']} "
              f"confidence {c['confidence']}; collective {c.get('collective')}")
        ok = named == (culprit, "hang", "eval", 57) and wall < 5 and rss_mb < 2048
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
