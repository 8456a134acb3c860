"""A plain DDP loop over the same :class:`~k8sddp.runtime.task.Task`, with none of the guards.

The baseline for ``bench/runtime_overhead.py`` and for the test that shows an unguarded hang
lasting until the process-group timeout. Not for production use:
``torchrun ... -m k8sddp.runtime.plain --task MODULE:ATTR``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from .. import guardvars as gv
from .ioguard import Rank0IO
from .task import StepContext, Task, load_task
from .watchdog import Heartbeat


def train_plain(task: Task, *, rank: int, world_size: int, seed: int = 0, steps: int | None = None) -> int:
    """Run ``task`` with plain DDP on CPU/gloo (process group already initialized when
    ``world_size > 1``); returns the number of steps done."""
    torch.manual_seed(seed)
    model = task.build_model()
    ddp = DDP(model)
    optimizer = task.build_optimizer(ddp.parameters())
    torch.manual_seed(seed + rank)
    dataset = task.build_dataset()
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=task.batch_size, sampler=sampler)
    hb = Heartbeat({}, 1e9)  # only for the task's hook; nobody watches it
    io = Rank0IO(rank=rank, world_size=1, store=None, heartbeat=hb)
    limit = steps if steps is not None else task.max_steps
    step = 0
    for epoch in range(task.epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            loss = task.loss(ddp, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if task.on_step_end is not None:
                task.on_step_end(StepContext(rank=rank, world_size=world_size, local_rank=rank,
                                             step=step, epoch=epoch, heartbeat=hb, rank0_io=io,
                                             device=torch.device("cpu"), artifact_dir=None))
            if limit is not None and step >= limit:
                return step
    return step


def main(argv: list[str] | None = None) -> int:
    """``python -m k8sddp.runtime.plain --task MODULE:ATTR`` under torchrun."""
    parser = argparse.ArgumentParser(prog="k8sddp.runtime.plain")
    parser.add_argument("--task", required=True)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    timeout = float(os.environ.get(gv.PG_TIMEOUT, gv.DEFAULT_PG_TIMEOUT_SECONDS))
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=timeout))
    steps = train_plain(load_task(args.task), rank=rank, world_size=world)
    print(f"plain: rank {rank}: {steps} steps", file=sys.stderr)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
