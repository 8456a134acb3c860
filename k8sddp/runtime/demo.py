"""The bundled demo task: ``k8sddp train --task k8sddp.runtime.demo:task [--epochs N ...]``.

A small MLP with dropout learning a fixed random linear map from synthetic data (generated from a
seed, nothing downloaded), with an evaluation set. Dropout makes the run depend on the RNG states,
so resume tests exercise their restoration. :func:`make_task` builds variants (tests, bench).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from .task import StepContext, Task


def synthetic(n: int, features: int, seed: int) -> TensorDataset:
    """``n`` samples ``(x, y)``: ``x ~ N(0, 1)^features``, ``y = x @ W + noise`` with a fixed ``W``."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, 1, generator=torch.Generator().manual_seed(1234))
    x = torch.randn(n, features, generator=g)
    y = x @ w + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def make_task(
    *,
    samples: int = 2048,
    features: int = 32,
    hidden: int = 64,
    epochs: int = 2,
    batch_size: int = 32,
    lr: float = 0.05,
    checkpoint_every: int = 0,
    max_steps: int | None = None,
    step_sleep_s: float = 0.0,
    num_workers: int = 0,
    on_step_end: Callable[[StepContext], None] | None = None,
    extra_state: Callable[[], Any] | None = None,
    name: str = "demo",
) -> Task:
    """A demo :class:`Task`; ``step_sleep_s`` adds a sleep to every step (slow-step tests)."""

    def build_model() -> nn.Module:
        return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.1),
                             nn.Linear(hidden, 1))

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        if step_sleep_s and model.training:
            time.sleep(step_sleep_s)
        return nn.functional.mse_loss(model(x), y)

    return Task(
        name=name,
        build_model=build_model,
        build_dataset=lambda: synthetic(samples, features, seed=1),
        build_eval_dataset=lambda: synthetic(max(64, samples // 8), features, seed=2),
        build_optimizer=lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9),
        loss=loss,
        epochs=epochs,
        batch_size=batch_size,
        max_steps=max_steps,
        num_workers=num_workers,
        checkpoint_every=checkpoint_every,
        on_step_end=on_step_end,
        extra_state=extra_state,
    )


def task(argv: Sequence[str] = ()) -> Task:
    """The README's demo: ``--task k8sddp.runtime.demo:task [--epochs N] [--samples N]
    [--batch-size N] [--lr X] [--max-steps N] [--checkpoint-every N] [--num-workers N]``;
    by default 2 epochs over 2,048 synthetic samples, a checkpoint every 20 steps.

    Raises:
        SystemExit: bad arguments (argparse; :func:`k8sddp.runtime.task.load_task` reports it).
    """
    p = argparse.ArgumentParser(prog="k8sddp.runtime.demo:task", allow_abbrev=False)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--num-workers", type=int, default=0)
    a = p.parse_args(list(argv))
    return make_task(epochs=a.epochs, samples=a.samples, batch_size=a.batch_size, lr=a.lr,
                     max_steps=a.max_steps, checkpoint_every=a.checkpoint_every,
                     num_workers=a.num_workers)
