"""Accelerate: ``guard_accelerator(accelerator)`` (``pip install 'k8sddp[transformers]'``).

Accelerate wraps the optimizer (``AcceleratedOptimizer``) but still calls the torch optimizer's
``step``, so torch's global optimizer hooks beat on every real step (a step skipped by its
gradient scaler beats through ``GradScaler.update``); prepared DataLoaders are torch DataLoaders
(a batch beat each). This adds phase ``checkpoint`` around ``save_state``/``save_model``;
Accelerate has no evaluation loop of its own, so a script marks its evaluation with
``with k8sddp.guard.phase("eval"):``.
"""

from __future__ import annotations

import functools
from typing import Any

from .. import guard


def guard_accelerator(accelerator: Any, checkpoint_budget_s: float | None = None) -> Any:
    """Start (or reuse) the guard and run ``accelerator.save_state`` and ``save_model`` in phase
    ``checkpoint`` (budget ``checkpoint_budget_s`` seconds, default the configured one).
    Returns ``accelerator``."""
    guard.start().record_started(framework="accelerate")
    for name in ("save_state", "save_model"):
        inner = getattr(accelerator, name, None)
        if inner is None:
            continue

        def wrapped(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            with guard.phase("checkpoint", checkpoint_budget_s):
                return _inner(*args, **kwargs)

        setattr(accelerator, name, functools.wraps(inner)(wrapped))
    return accelerator
