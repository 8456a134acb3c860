"""Tasks that plant one culprit each, for the diagnose tests (imported by torchrun workers as
``dg_tasks:NAME``). Knobs come from ``DG_*`` variables: ``DG_RANK`` (the culprit's global rank,
default 1) and ``DG_STEP`` (the step at which it misbehaves, default 3)."""

from __future__ import annotations

import os
import signal
import time

from k8sddp.runtime.demo import make_task
from k8sddp.runtime.task import StepContext, Task


def _culprit(ctx: StepContext) -> bool:
    return ctx.rank == int(os.environ.get("DG_RANK", "1")) and ctx.step == int(os.environ.get("DG_STEP", "3"))


def _task(hook, name: str) -> Task:  # type: ignore[no-untyped-def]
    return make_task(samples=512, epochs=1, checkpoint_every=0, on_step_end=hook, name=name)


def _own_code(ctx: StepContext) -> None:
    if _culprit(ctx):
        time.sleep(600)  # the task's own code, no beat: phase hook


def own_code() -> Task:
    """The culprit sleeps in the task's own ``on_step_end`` (phase ``hook``)."""
    return _task(_own_code, "own-code")


def _in_phase(ctx: StepContext) -> None:
    if _culprit(ctx):
        phase = os.environ.get("DG_PHASE", "eval")
        ctx.heartbeat.beat(ctx.step, phase)  # declared long work (eval, checkpoint, data)
        time.sleep(600)


def in_phase() -> Task:
    """The culprit beats phase ``DG_PHASE`` (eval, checkpoint, data) and then never returns."""
    return _task(_in_phase, "in-phase")


def _extra(ctx: StepContext) -> None:
    if _culprit(ctx):
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(3))  # a collective only this rank issues


def extra_collective() -> Task:
    """The culprit issues one all-reduce of 3 floats that its peers never issue."""
    return _task(_extra, "extra-collective")


def _die(ctx: StepContext) -> None:
    if _culprit(ctx):
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does


def die() -> Task:
    """The culprit is SIGKILLed after step DG_STEP."""
    return _task(_die, "die")


def _boom(ctx: StepContext) -> None:
    if _culprit(ctx):
        raise ValueError(f"planted bug on rank {ctx.rank} at step {ctx.step}")


def boom() -> Task:
    """The culprit raises ValueError after step DG_STEP."""
    return _task(_boom, "boom")


def _gil(ctx: StepContext) -> None:
    if _culprit(ctx):
        sum(range(10**11))  # one C call holding the GIL: only the hard stop ends it


def gil() -> Task:
    """The culprit holds the GIL in one C call after step DG_STEP."""
    return _task(_gil, "gil")


def slow() -> Task:
    """Every step sleeps 0.2 s: long enough to be preempted mid-run."""
    return make_task(samples=512, epochs=1, checkpoint_every=0, step_sleep_s=0.2, name="slow")
