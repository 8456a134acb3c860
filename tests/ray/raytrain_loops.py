"""Ray Train loops for tests/ray (importable by Ray's worker processes: no test code at import)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import ray.train
import torch
import torch.distributed as dist
from ray.train import Checkpoint

from k8sddp import ray as kray

SEEN = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER", "K8SDDP_WATCHDOG_TIMEOUT_SECONDS", "MY_POD_ONLY")


@kray.guard
def loop(config: dict[str, Any]) -> None:
    """Six all-reduce steps, a checkpoint each; rank 1 sleeps at step ``stall_at`` on the first attempt."""
    out = Path(config["out"])
    rank = ray.train.get_context().get_world_rank()
    start = 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = json.loads((Path(d) / "state.json").read_text())["step"]
    with (out / f"attempt-rank{rank}-{os.getpid()}.json").open("w") as fh:
        json.dump({"start": start, "env": {k: os.environ.get(k) for k in SEEN}}, fh)
    for step in range(start, config["steps"]):
        t = torch.ones(1) * (rank + 1)
        dist.all_reduce(t)
        if rank == 1 and step == config.get("stall_at") and not (out / "stalled").exists():
            (out / "stalled").write_text(str(os.getpid()))
            time.sleep(600)  # a rank stuck outside any collective: the others wait in the next all_reduce
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "state.json").write_text(json.dumps({"step": step + 1}))
            ray.train.report({"step": step + 1, "sum": float(t.item())}, checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)
