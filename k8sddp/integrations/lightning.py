"""Lightning: ``Trainer(callbacks=[K8sddpCallback()])`` (``pip install 'k8sddp[lightning]'``).

Works with ``lightning`` (2.x) and, when only that is installed, ``pytorch_lightning``.
Beats: every training batch (``step``, the trainer's ``global_step``), validation and test in
phase ``eval``, checkpoint writes in phase ``checkpoint`` (Lightning saves with ``torch.save``
through its checkpoint IO; the callback enters the phase when the checkpoint dict is built and
leaves it at the next batch).
"""

from __future__ import annotations

from typing import Any

from .. import guard

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover - the older package name
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef,assignment]


class K8sddpCallback(Callback):  # type: ignore[misc]
    """Guards a Lightning run (see the module docstring).

    Args:
        eval_budget_s: budget of the ``eval`` phase (seconds; default: the configured one,
            ``K8SDDP_PHASE_TIMEOUTS``, 3 x the watchdog timeout, or learned).
        checkpoint_budget_s: likewise for ``checkpoint``.
    """

    def __init__(self, eval_budget_s: float | None = None, checkpoint_budget_s: float | None = None) -> None:
        super().__init__()
        self.eval_budget_s = eval_budget_s
        self.checkpoint_budget_s = checkpoint_budget_s

    def _g(self) -> Any:
        return guard.start()

    def _set(self, phase: str, budget: float | None, trainer: Any) -> None:
        g = self._g()
        if budget is not None:
            with g.phase(phase, budget):
                pass  # pins the phase's budget
        g.beat(int(trainer.global_step), phase)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Start (or reuse) the guard."""
        self._g().record_started(framework="lightning")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Back to ``step`` (after a validation or a checkpoint)."""
        self._g().beat(int(trainer.global_step), "step")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """One beat per training batch (also with gradient accumulation)."""
        self._g().beat(int(trainer.global_step), "step")

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        """Enter ``eval``."""
        self._set("eval", self.eval_budget_s, trainer)

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        """Progress inside ``eval``."""
        self._g().beat(int(trainer.global_step), "eval")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """Leave ``eval``."""
        self._g().beat(int(trainer.global_step), "step")

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        """Testing is evaluation too."""
        self._set("eval", self.eval_budget_s, trainer)

    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        """Progress inside ``eval``."""
        self._g().beat(int(trainer.global_step), "eval")

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """The checkpoint is about to be written: phase ``checkpoint``."""
        self._set("checkpoint", self.checkpoint_budget_s, trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """The end of ``fit``/``validate``/``test``: the watchdog stops (the next one restarts
        it); zero-code mode keeps watching the rest of the script."""
        g = guard.current()
        if g is not None and g.mode == "api":
            g.stop()
