"""The bundled demo task: ``k8sddp train --task k8sddp.runtime.demo:task``.

A small MLP with dropout learning a fixed random linear map from synthetic data (generated from a
seed, nothing downloaded), with an evaluation set. Dropout makes the run depend on the RNG states,
so resume tests exercise their restoration. :func:`make_task` builds variants (tests, bench).
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


#: The README's demo: 2 epochs over 2,048 synthetic samples, a checkpoint every 20 steps.
task = make_task(checkpoint_every=20)
