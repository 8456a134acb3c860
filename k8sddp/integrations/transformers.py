"""Hugging Face Transformers: ``guard_trainer(trainer)`` or ``callbacks=[K8sddpTrainerCallback()]``
(``pip install 'k8sddp[transformers]'``).

Beats: every optimizer step (``on_step_end``, ``state.global_step``) and every gradient
accumulation micro-step (``on_substep_end``), evaluation batches in phase ``eval``
(``on_prediction_step``; back to ``step`` at ``on_evaluate``). The Trainer has no callback
before a checkpoint is written (``on_save`` comes after), and writes safetensors (not
``torch.save``), so :func:`guard_trainer` also wraps ``Trainer._save_checkpoint`` in phase
``checkpoint``.
"""

from __future__ import annotations

import functools
from typing import Any

from transformers import TrainerCallback

from .. import guard


class K8sddpTrainerCallback(TrainerCallback):  # type: ignore[misc]
    """Guards a ``transformers.Trainer`` run (see the module docstring)."""

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start (or reuse) the guard."""
        guard.start().record_started(framework="transformers")

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start (or restart) the guard."""
        guard.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """One beat per optimizer step."""
        guard.beat(int(state.global_step), "step")

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """One beat per gradient-accumulation micro-step."""
        guard.beat(int(state.global_step), "step")

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Progress inside an evaluation (phase ``eval``)."""
        guard.beat(int(state.global_step), "eval")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Evaluation done: back to ``step``."""
        guard.beat(int(state.global_step), "step")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Stop the API-mode guard (zero-code mode keeps watching the rest of the script)."""
        g = guard.current()
        if g is not None and g.mode == "api":
            g.stop()


def guard_trainer(trainer: Any, checkpoint_budget_s: float | None = None) -> Any:
    """Add :class:`K8sddpTrainerCallback` to ``trainer`` and run its checkpoint writes in phase
    ``checkpoint`` (budget ``checkpoint_budget_s`` seconds, default the configured one).
    Returns ``trainer``."""
    trainer.add_callback(K8sddpTrainerCallback())
    guard.start().record_started(framework="transformers")
    inner = trainer._save_checkpoint

    @functools.wraps(inner)
    def _save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        with guard.phase("checkpoint", checkpoint_budget_s):
            return inner(*args, **kwargs)

    trainer._save_checkpoint = _save_checkpoint
    return trainer
