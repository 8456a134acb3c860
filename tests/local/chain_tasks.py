"""Training tasks for the end-to-end local chain (render -> validate -> submit --local -> guarded
training): a tiny regression that checkpoints every step, and hooks that stall rank 0.

Each worker appends ``attempt first-step`` lines to ``<artifact dir>/steps-rank<r>.txt`` so a test
can see that a recreated pod resumed from its checkpoint instead of starting over.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from k8sddp.runtime.task import Task


def _dataset() -> torch.utils.data.Dataset[Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))


def _task(stall: str, checkpoint_every: int = 1) -> Task:
    seen: dict[str, bool] = {}

    def on_step_end(ctx: Any) -> None:
        art = Path(ctx.artifact_dir or ".")
        if not seen:
            seen["first"] = True
            with (art / f"steps-rank{ctx.rank}.txt").open("a") as fh:
                fh.write(f"{os.getpid()} {ctx.step}\n")
        marker = art / "stalled-once"
        stalls = stall == "always" or (stall == "once" and not marker.exists())
        if ctx.rank == 0 and ctx.step == 3 and stalls:
            marker.touch()
            time.sleep(3600)  # no heartbeat: the watchdog must end this

    return Task(
        name=f"chain-{stall}",
        build_model=lambda: torch.nn.Linear(4, 1),
        build_dataset=_dataset,
        build_optimizer=lambda params: torch.optim.SGD(params, lr=0.01),
        loss=lambda model, batch: torch.nn.functional.mse_loss(model(batch[0]), batch[1]),
        epochs=1,
        batch_size=8,
        checkpoint_every=checkpoint_every,
        on_step_end=on_step_end,
    )


def ok() -> Task:
    """Trains to the end."""
    return _task("never")


def stall_once() -> Task:
    """Rank 0 stalls at step 3 on the first attempt only."""
    return _task("once")


def stall_always() -> Task:
    """Rank 0 stalls at step 3 every time, before any checkpoint (only at the epoch's end): each
    attempt starts over and stalls at the same place without progress, a deterministic hang."""
    return _task("always", checkpoint_every=0)
