"""Small artifact volumes written by hand in the runtime's formats (for the fast unit tests; the
real ones come from torchrun in ``test_diagnose_real.py``)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any


def entry(seq: int, *, op: str = "all_reduce", sizes: Any = ((2177,),), retired: bool = True,
          file: str = "/app/k8sddp/runtime/loop.py", line: int = 398) -> dict[str, Any]:
    return {"collective_seq_id": seq, "profiling_name": f"gloo:{op}", "process_group": ("0", "default_pg"),
            "input_sizes": [list(s) for s in sizes], "output_sizes": [list(s) for s in sizes],
            "state": "scheduled", "retired": retired, "is_p2p": False,
            "frames": [{"filename": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 1, "name": op},
                       {"filename": file, "line": line, "name": "run"}]}


def dump(entries: list[dict[str, Any]]) -> bytes:
    return pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries})


WAITING = ('--- k8sddp rank {r}: watchdog: no heartbeat for 2.00 s in phase \'step\' at step 3 (budget 2 s) ---\n'
           'Thread 0x00007f0000000001 (most recent call first):\n'
           '  File "/x/site-packages/torch/autograd/graph.py", line 979 in _engine_run_backward\n'
           '  File "/app/k8sddp/runtime/loop.py", line 398 in run\n'
           '  File "/app/k8sddp/runtime/worker.py", line 152 in run_worker\n')
BUSY = ('Current thread 0x00007f0000000001 (most recent call first):\n'
        '  File "/app/train.py", line 88 in save_on_rank0\n'
        '  File "/app/k8sddp/runtime/loop.py", line 406 in run\n'
        '  File "/app/k8sddp/runtime/worker.py", line 152 in run_worker\n')


def rank_files(d: Path, r: int, *, world: int, kind: str, step: int, phase: str, stacks: str | None,
               fr: bytes | None) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"started-rank{r}.json").write_text(json.dumps({"rank": r, "world_size": world, "seed": 7,
                                                         "torch_version": "2.13.0", "backend": "gloo"}))
    (d / f"failure-rank{r}.json").write_text(json.dumps({"rank": r, "kind": kind, "step": step, "phase": phase,
                                                         "since_beat_s": 2.0, "message": f"{kind} here"}))
    beats = [{"rank": r, "step": s, "phase": p, "mono": 10.0 + i, "wall": 1e9 + i}
             for i, (s, p) in enumerate([(1, "step"), (2, "step"), (step, phase)])]
    (d / f"trace-rank{r}.jsonl").write_text("".join(json.dumps(b) + "\n" for b in beats))
    if stacks is not None:
        (d / f"stacks-rank{r}.txt").write_text(stacks.format(r=r))
    if fr is not None:
        (d / f"fr-rank{r}.pkl").write_bytes(fr)


def run_record(d: Path, node: int, **extra: Any) -> None:
    rec = {"status": "finished", "node_rank": node, "exit_code": 142, "exit_name": "hang", "image": "img:1",
           "code_version": "abc123", "seed": 7, "torch_version": "2.13.0", "failure_log_tail": []}
    rec.update(extra)
    (d / f"run-node{node}.json").write_text(json.dumps(rec))


def rank0_hang(root: Path, *, nodes: int = 1) -> Path:
    """Rank 0 stalls in checkpoint (one collective short); rank 1 waits in collective #5."""
    per = 2 // nodes
    for node in range(nodes):
        d = root / "runs" / f"20261201T100000-node{node}-aaaaaa"
        run_record(d if d.mkdir(parents=True, exist_ok=True) is None else d, node)
        for r in range(node * per, node * per + per):
            if r == 0:
                rank_files(d, 0, world=2, kind="terminated", step=3, phase="checkpoint", stacks=BUSY,
                           fr=dump([entry(s) for s in range(1, 5)]))
            else:
                rank_files(d, r, world=2, kind="hang", step=3, phase="step", stacks=WAITING,
                           fr=dump([entry(s) for s in range(1, 5)] + [entry(5, retired=False)]))
    return root
