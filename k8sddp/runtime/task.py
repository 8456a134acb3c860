"""What a training task supplies to ``k8sddp train --task MODULE:ATTR``.

A task is a :class:`Task`, or a factory returning one that may take the words after
``--task MODULE:ATTR`` as a list (``--task k8sddp.runtime.demo:task --epochs 3``). The loop owns everything
distributed (process group, DDP, samplers, checkpoints, watchdog); the task owns the model, the
data, the loss and the optimizer::

    task = Task(
        name="mine",
        build_model=lambda: MyNet(),
        build_dataset=lambda: MyDataset("train"),
        build_eval_dataset=lambda: MyDataset("val"),
        build_optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4),
        loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
    )
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .ioguard import Rank0IO
    from .watchdog import Heartbeat


@dataclass
class StepContext:
    """Handed to :attr:`Task.on_step_end` after every optimizer step.

    Attributes:
        rank, world_size, local_rank: this worker's place (ranks).
        step: optimizer steps completed so far (the checkpoint step numbering).
        epoch: the current epoch (0-based).
        heartbeat: beat it (``heartbeat.beat(step, "checkpoint")``) around long own work.
        rank0_io: the rank-0 IO guard (``with ctx.rank0_io("eval") as writer: ...``).
        device: the worker's device.
        artifact_dir: ``K8SDDP_ARTIFACT_DIR`` as a string, or ``None``.
    """

    rank: int
    world_size: int
    local_rank: int
    step: int
    epoch: int
    heartbeat: Heartbeat
    rank0_io: Rank0IO
    device: torch.device
    artifact_dir: str | None


@dataclass
class Task:
    """A training task.

    Attributes:
        build_model: returns the ``nn.Module`` (built on CPU, same on every rank; DDP broadcasts
            rank 0's parameters).
        build_dataset: returns the training ``Dataset``: map-style (a ``DistributedSampler``
            shards it) or an ``IterableDataset`` that shards itself per rank (batch counts may then
            differ between ranks; the loop runs it under DDP's ``Join``).
        build_optimizer: ``params -> Optimizer``.
        loss: ``(model, batch) -> scalar tensor``; ``batch`` is already on the device.
        build_eval_dataset: returns the evaluation ``Dataset`` or ``None`` (no evaluation).
        epochs: passes over the data.
        batch_size: per-rank batch size.
        max_steps: stop after this many optimizer steps in total (``None``: run all epochs).
        num_workers: DataLoader worker processes per rank.
        checkpoint_every: steps between checkpoints (0: only at each epoch end and the end;
            ``K8SDDP_CHECKPOINT_EVERY`` overrides).
        on_step_end: called after every optimizer step with a :class:`StepContext`.
        extra_state: returns extra picklable state saved in each checkpoint.
        name: shown in records.
    """

    build_model: Callable[[], torch.nn.Module]
    build_dataset: Callable[[], Any]
    build_optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    build_eval_dataset: Callable[[], Any] | None = None
    epochs: int = 1
    batch_size: int = 32
    max_steps: int | None = None
    num_workers: int = 0
    checkpoint_every: int = 0
    on_step_end: Callable[[StepContext], None] | None = None
    extra_state: Callable[[], Any] | None = None
    name: str = "task"
    options: dict[str, Any] = field(default_factory=dict)


def load_task(spec: str, args: Sequence[str] = ()) -> Task:
    """Import ``"package.module:attr"`` and return the :class:`Task` it names.

    ``attr`` may be a :class:`Task` (then ``args`` must be empty) or a factory returning one:
    called with ``args`` (a list of strings, the words after ``--task MODULE:ATTR``) when it takes
    a parameter, without arguments otherwise. A factory that raises ``SystemExit`` (argparse on
    bad arguments) becomes a :class:`~k8sddp.errors.UsageError`.

    Raises:
        UsageError: a malformed spec, an import error, a missing attribute, arguments the task
            does not take or rejects, or not a Task.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--task {spec!r}: expected MODULE:ATTR (e.g. k8sddp.runtime.demo:task)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--task {spec!r}: cannot import {module_name!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"--task {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    args = list(args)
    if isinstance(obj, Task):
        if args:
            raise UsageError(f"--task {spec!r} is a Task, not a factory: it takes no arguments ({args})")
    elif callable(obj):
        try:
            takes_args = bool(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            takes_args = False
        if args and not takes_args:
            raise UsageError(f"--task {spec!r} takes no arguments ({args})")
        try:
            obj = obj(args) if takes_args else obj()
        except SystemExit as exc:
            raise UsageError(f"--task {spec!r}: bad task arguments {args} (exit {exc.code})") from None
    if not isinstance(obj, Task):
        raise UsageError(f"--task {spec!r}: {type(obj).__name__} is not a k8sddp.runtime.task.Task")
    return obj
