"""Tasks for the runtime tests, imported by torchrun workers as ``rt_tasks:NAME``.

Each reads its knobs from ``RT_*`` variables so one module serves every scenario.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from k8sddp.runtime.demo import make_task
from k8sddp.runtime.task import StepContext


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def slow():
    """The demo with a sleep per step: long enough to be signalled mid-run."""
    return make_task(samples=int(_env("RT_SAMPLES", "1024")), epochs=int(_env("RT_EPOCHS", "2")),
                     checkpoint_every=int(_env("RT_EVERY", "10")),
                     step_sleep_s=float(_env("RT_SLEEP", "0.0")), name="slow")


def _hang_hook(ctx: StepContext) -> None:
    # The seed's hang: rank 0 enters a long rank-0-only branch (a "save" outside any guard)
    # while rank 1 goes on into the next step's all-reduce.
    if ctx.rank == 0 and ctx.step == int(_env("RT_HANG_STEP", "3")):
        ctx.heartbeat.beat(ctx.step, "checkpoint")
        if _env("RT_MARK", ""):
            Path(_env("RT_MARK", "")).write_text(str(time.time()))
        time.sleep(600)


def rank0_hang():
    """Hangs at step RT_HANG_STEP (default 3) on rank 0; checkpoints every 2 steps."""
    return make_task(samples=512, epochs=1, checkpoint_every=2, on_step_end=_hang_hook, name="hang")


def _boom_hook(ctx: StepContext) -> None:
    if ctx.rank == 1 and ctx.step == 3:
        raise ValueError("boom: a bug in the task at step 3")


def boom():
    """Raises ValueError on rank 1 after step 3."""
    return make_task(samples=512, epochs=1, on_step_end=_boom_hook, name="boom")


class _KillOnPickle:
    """SIGKILLs the process while torch.save pickles it (a writer killed mid-checkpoint)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def __reduce__(self):
        marker = Path(os.environ["K8SDDP_ARTIFACT_DIR"]) / "killed-once"
        if self.step >= int(_env("RT_KILL_STEP", "6")) and not marker.exists():
            marker.write_text(str(self.step))
            os.kill(os.getpid(), signal.SIGKILL)
        return (_KillOnPickle, (self.step,))


def ckpt_kill():
    """Checkpoints every 2 steps; the writer is SIGKILLed while saving step RT_KILL_STEP (once)."""
    state = {"step": 0}

    def hook(ctx: StepContext) -> None:
        state["step"] = ctx.step

    return make_task(samples=512, epochs=1, checkpoint_every=2, on_step_end=hook,
                     extra_state=lambda: _KillOnPickle(state["step"]), name="ckpt-kill")


def _gil_hook(ctx: StepContext) -> None:
    if ctx.rank == 0 and ctx.step == 3:
        sum(range(10**11))  # holds the GIL in C: the watchdog thread starves


def gil_hog():
    """Rank 0 holds the GIL inside one C call after step 3 (only the hard stop can end it)."""
    return make_task(samples=512, epochs=1, on_step_end=_gil_hook, name="gil-hog")


def slow_workers():
    """:func:`slow` with two DataLoader worker processes per rank (persistent)."""
    task = slow()
    task.num_workers = 2
    return task


class _UnevenData:
    """An IterableDataset sharding itself: rank r yields (5 + 3 r) batches of 32 per epoch."""

    def __new__(cls):  # built lazily so that importing this module needs no torch
        import torch
        from torch.utils.data import IterableDataset

        class Uneven(IterableDataset):
            epoch = 0

            def set_epoch(self, epoch: int) -> None:
                self.epoch = epoch

            def __iter__(self):
                import torch.distributed as dist

                rank = dist.get_rank() if dist.is_initialized() else 0
                g = torch.Generator().manual_seed(100 + rank + 1000 * self.epoch)
                w = torch.randn(32, 1, generator=torch.Generator().manual_seed(1234))
                for _ in range((5 + 3 * rank) * 32):
                    x = torch.randn(32, generator=g)
                    yield x, x @ w

        return Uneven()


def _slow_tail(ctx: StepContext) -> None:
    # rank 1's last 3 steps of epoch 0 take 1.5 s each: 4.5 s of shadowing on rank 0, longer
    # than the 4 s step budget, so its heartbeat must come from the join hook
    if ctx.rank == 1 and ctx.epoch == 0 and ctx.step > 5:
        time.sleep(1.5)


def uneven():
    """Two epochs over :class:`_UnevenData` (5 vs 8 batches per epoch)."""
    task = make_task(epochs=2, checkpoint_every=2, on_step_end=_slow_tail, name="uneven")
    task.build_dataset = _UnevenData
    return task
