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
from ray.train import Checkpoint
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from k8sddp import ray as kray

SEEN = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER", "K8SDDP_WATCHDOG_TIMEOUT_SECONDS", "MY_POD_ONLY")


@kray.guard
def train(config: dict[str, Any]) -> None:
    """A tiny DDP model, one batch per step, a report per step and a checkpoint (rank 0) every
    ``ckpt_every`` steps; nothing of k8sddp's is called: the optimizer step, the DataLoader and
    the reports beat by themselves. Rank 1 sleeps after the optimizer step of ``stall_at`` on the
    first attempt, while rank 0 waits in that step's report (a checkpointing one when
    ``stall_at + 1`` is a multiple of ``ckpt_every``)."""
    out = Path(config["out"])
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(Path(d) / "state.pt")
        model.module.load_state_dict(state["model"])
        start = state["step"]
    with (out / f"attempt-rank{rank}-{os.getpid()}.json").open("w") as fh:
        json.dump({"start": start, "env": {k: os.environ.get(k) for k in SEEN}}, fh)
    data = DataLoader(TensorDataset(torch.randn(config["steps"] * 2, 4)), batch_size=2)
    for step, (x,) in enumerate(data):
        if step < start:
            continue
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        if rank == 1 and step == config.get("stall_at") and not (out / "stalled").exists():
            (out / "stalled").write_text(str(os.getpid()))
            time.sleep(600)  # stuck outside any collective; rank 0 waits in this step's report
        if rank == 0 and (step + 1) % config["ckpt_every"] == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save({"model": model.module.state_dict(), "step": step + 1}, Path(d) / "state.pt")
                ray.train.report({"step": step + 1}, checkpoint=Checkpoint.from_directory(d))
        else:
            ray.train.report({"step": step + 1})
