"""The guarded DDP training loop (needs torch).

Per step: ``beat(step, "data")``, fetch, ``beat(step, "step")``, forward/backward/optimizer step,
the task's ``on_step_end``, the stop check, periodic checkpoints. Per epoch: ``set_epoch`` on the
``DistributedSampler``, one small all-reduce comparing the ranks' batch counts (uneven counts run
under DDP's ``join()``, which costs an extra all-reduce per step and is therefore used only then),
evaluation on every rank through ``ddp.module`` (rank-0-only evaluation through the DDP wrapper is
itself a hang: the first forward after training syncs buffers; measured with torch 2.13), and a checkpoint. A task's ``IterableDataset``
shards itself per rank (no sampler; ``set_epoch`` is called on it when it has one) and always runs
under ``join()``; inside such an uneven epoch there are no periodic checkpoints and SIGTERM is
honoured at the epoch's end (the only point all ranks reach), and the step counts are re-synced to
the largest afterwards. Resumes from the newest complete
checkpoint (model, optimizer, step, epoch, position in the epoch, every rank's RNG states), so an
interrupted and resumed run reaches the same parameters as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join, Joinable, JoinHook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from . import checkpoint as ckpt
from .artifacts import ArtifactDir
from .config import RuntimeConfig
from .ioguard import Rank0IO
from .report import Reporter
from .stop import StopController
from .task import StepContext, Task
from .watchdog import Heartbeat


class ResumableSampler(DistributedSampler):  # type: ignore[type-arg]
    """A ``DistributedSampler`` that can skip the first ``start`` samples of one epoch (resume)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start = 0

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        start, self.start = self.start, 0
        return iter(indices[start:])

    def __len__(self) -> int:
        return self.num_samples - self.start


def seed_all(seed: int) -> None:
    """Seed Python ``random``, torch (CPU and CUDA) and NumPy when the task imported it."""
    random.seed(seed)
    torch.manual_seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % (2**32))


def to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """Move tensors (also inside lists, tuples and dicts) to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device, non_blocking) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    return batch


class _WorkerInit:
    """DataLoader ``worker_init_fn``: detach a worker from the parent's signal handling, then run
    the task's own ``worker_init_fn`` (if any).

    torchrun stops a worker with ``killpg`` (torch/distributed/elastic/multiprocessing/
    subprocess_handler), so SIGTERM reaches the DataLoader's worker processes too. Dying on it
    would make the parent's next batch fail ("DataLoader worker exited unexpectedly") before the
    final checkpoint; so they ignore SIGTERM and SIGINT and end with their parent (the DataLoader
    workers watch it) or torchrun's SIGKILL. They also drop the inherited faulthandler
    registration and the signal wakeup fd (the parent's watchdog pipe).
    """

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        """Run in each DataLoader worker at start."""
        import faulthandler
        import signal

        with contextlib.suppress(Exception):
            faulthandler.unregister(signal.SIGTERM)
            faulthandler.unregister(signal.SIGUSR1)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.set_wakeup_fd(-1)
        if self.inner is not None:
            self.inner(worker_id)


class _BeatHook(JoinHook):
    def __init__(self, loop: TrainingLoop) -> None:
        self.loop = loop

    def main_hook(self) -> None:
        """One step shadowed for the ranks that still have data: that is progress."""
        self.loop.hb.beat(self.loop.step, "step")


class _BeatWhileJoined(Joinable):
    """A :class:`~torch.distributed.algorithms.join.Joinable` without collectives of its own:
    only its join hook, which beats the heartbeat while this rank shadows the others."""

    def __init__(self, loop: TrainingLoop, device: torch.device) -> None:
        super().__init__()
        self.loop = loop
        self.device = device

    def join_hook(self, **kwargs: Any) -> JoinHook:
        """The hook Join calls once per shadowed step."""
        return _BeatHook(self.loop)

    @property
    def join_device(self) -> torch.device:
        """Device of the join all-reduce (the worker's device)."""
        return self.device

    @property
    def join_process_group(self) -> Any:
        """The default process group (the one DDP uses)."""
        return dist.group.WORLD


@dataclass
class Place:
    """Where this worker runs: ranks and device."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device


class TrainingLoop:
    """One worker's training run.

    Args:
        task: the task.
        cfg: the runtime configuration.
        place: ranks and device.
        hb: the heartbeat the watchdog watches.
        stop: the SIGTERM controller.
        reporter: the rank's artifact writer.
    """

    def __init__(self, task: Task, cfg: RuntimeConfig, place: Place, hb: Heartbeat,
                 stop: StopController, reporter: Reporter) -> None:
        self.task = task
        self.cfg = cfg
        self.p = place
        self.hb = hb
        self.stop = stop
        self.reporter = reporter
        store = dist.distributed_c10d._get_default_store() if dist.is_initialized() else None
        self.rank0_io = Rank0IO(rank=place.rank, world_size=place.world_size, store=store, heartbeat=hb)
        self.ckpt_dir = ArtifactDir(cfg.artifact_dir).checkpoints if cfg.artifact_dir else None
        every = cfg.checkpoint_every if cfg.checkpoint_every is not None else task.checkpoint_every
        self.every = int(every or 0)
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.saved_step = -1
        self.resumed_from: int | None = None
        self.eval_results: list[dict[str, Any]] = []

    # -- setup ----------------------------------------------------------------------------------
    def _build(self) -> None:
        task, p, cfg = self.task, self.p, self.cfg
        torch.manual_seed(cfg.seed)  # the same initial model on every rank
        self.model = task.build_model().to(p.device)
        cuda = p.device.type == "cuda"
        self.ddp = DDP(self.model, device_ids=[p.device.index] if cuda else None)
        self.optimizer = task.build_optimizer(self.ddp.parameters())
        seed_all(cfg.seed + p.rank)
        self.dataset = dataset = task.build_dataset()
        # An IterableDataset shards itself (per rank); its batch counts may differ between ranks.
        self.sampler = None if isinstance(dataset, IterableDataset) else ResumableSampler(
            dataset, num_replicas=p.world_size, rank=p.rank, shuffle=True, seed=cfg.seed)
        self.generator = torch.Generator()
        self.loader = DataLoader(
            dataset, batch_size=task.batch_size, sampler=self.sampler,
            num_workers=task.num_workers, pin_memory=cuda,
            persistent_workers=task.num_workers > 0, generator=self.generator,
            worker_init_fn=_WorkerInit() if task.num_workers > 0 else None)
        self.eval_loader = None
        if task.build_eval_dataset is not None:
            eval_ds = task.build_eval_dataset()
            if eval_ds is not None:
                sharded = isinstance(eval_ds, IterableDataset)
                self.eval_loader = DataLoader(
                    eval_ds, batch_size=task.batch_size, pin_memory=cuda,
                    sampler=None if sharded else DistributedSampler(
                        eval_ds, num_replicas=p.world_size, rank=p.rank, shuffle=False))

    def _resume(self) -> None:
        if self.ckpt_dir is None:
            return
        choice: list[Any] = [None]
        if self.p.rank == 0:
            step, path, skipped = ckpt.find_resume(self.ckpt_dir)
            for reason in skipped:
                print(f"k8sddp train: skipping checkpoint {reason}", file=sys.stderr)
            choice = [str(path) if path else None]
        if self.p.world_size > 1:
            dist.broadcast_object_list(choice, src=0)
        if choice[0] is None:
            return
        state = ckpt.load(Path(choice[0]), self.p.device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = self.saved_step = self.resumed_from = int(state["step"])
        self.epoch = int(state["epoch"])
        self.batch_in_epoch = int(state["batch_in_epoch"])
        rngs = state.get("rng") or []
        if self.p.rank < len(rngs) and state.get("world_size") == self.p.world_size:
            ckpt.restore_rng(rngs[self.p.rank])
        else:  # another world size: deterministic per-rank reseed
            seed_all(self.cfg.seed + self.p.rank + 7919 * self.step)
        print(f"k8sddp train: rank {self.p.rank}: resumed from {choice[0]} (step {self.step})",
              file=sys.stderr)

    # -- pieces ---------------------------------------------------------------------------------
    def checkpoint(self, *, collective: bool = True) -> None:
        """Write checkpoint ``self.step`` (rank 0 writes; RNG states gathered when ``collective``)."""
        if self.ckpt_dir is None or self.saved_step == self.step:
            return
        self.hb.beat(self.step, "checkpoint")
        rngs = ckpt.gather_rng(self.p.world_size) if collective else [ckpt.capture_rng()]
        state = {
            "step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
            "world_size": self.p.world_size if collective else -1, "seed": self.cfg.seed,
            "task": self.task.name, "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "rng": rngs,
            "extra": self.task.extra_state() if self.task.extra_state else None,
        }
        if collective:
            with self.rank0_io("checkpoint") as writer:
                if writer:
                    ckpt.save(self.ckpt_dir, self.step, state, keep=self.cfg.checkpoint_keep)
        elif self.p.rank == 0:
            ckpt.save(self.ckpt_dir, self.step, state, keep=self.cfg.checkpoint_keep)
        self.saved_step = self.step

    def evaluate(self) -> dict[str, Any] | None:
        """Mean loss over the evaluation set on every rank (through ``ddp.module``)."""
        if self.eval_loader is None:
            return None
        self.hb.beat(self.step, "eval")
        self.model.eval()
        total = torch.zeros(2, dtype=torch.float64, device=self.p.device)
        non_blocking = self.p.device.type == "cuda"
        with torch.no_grad():
            for batch in self.eval_loader:
                batch = to_device(batch, self.p.device, non_blocking)
                loss = self.task.loss(self.model, batch)
                n = len(batch[0]) if isinstance(batch, (list, tuple)) else 1
                total[0] += loss.double() * n
                total[1] += n
        self.model.train()
        if self.p.world_size > 1:
            dist.all_reduce(total)
        result = {"step": self.step, "epoch": self.epoch,
                  "eval_loss": float(total[0] / total[1].clamp(min=1))}
        self.eval_results.append(result)
        with self.rank0_io("eval") as writer:
            if writer and self.reporter.run is not None:
                with (self.reporter.run.path / "eval.jsonl").open("a") as fh:
                    fh.write(json.dumps(result) + "\n")
        return result

    def _any_rank(self, flag: bool) -> bool:
        if self.p.world_size <= 1:
            return flag
        t = torch.tensor([1 if flag else 0], device=self.p.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def _sync_step(self) -> None:
        # after an uneven epoch every rank counted its own steps: continue from the largest
        if self.p.world_size > 1:
            t = torch.tensor([self.step], device=self.p.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            self.step = int(t.item())

    def _uneven(self) -> bool:
        if self.p.world_size <= 1:
            return False
        if self.sampler is None:
            return True  # an IterableDataset: the counts are unknown until the data runs out
        counts = torch.tensor([len(self.loader), -len(self.loader)], device=self.p.device)
        dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        return int(counts[0]) != -int(counts[1])

    # -- main -----------------------------------------------------------------------------------
    def run(self) -> str:
        """Train; return ``"done"`` or ``"preempted"`` (final checkpoint written when possible)."""
        self._build()
        self._resume()
        task, hb, stop, p = self.task, self.hb, self.stop, self.p
        max_steps = task.max_steps
        non_blocking = p.device.type == "cuda"
        on_accelerator = p.device.type != "cpu"
        first = True
        while self.epoch < task.epochs and not (max_steps is not None and self.step >= max_steps):
            if self.sampler is not None:
                self.sampler.set_epoch(self.epoch)
                self.sampler.start = self.batch_in_epoch * task.batch_size
            elif hasattr(self.dataset, "set_epoch"):
                self.dataset.set_epoch(self.epoch)
            self.generator.manual_seed(self.cfg.seed * 1_000_003 + self.epoch)
            uneven = self._uneven()
            join: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if uneven:
                # DDP shadows the all-reduces of ranks whose data ran out; the second joinable
                # beats the heartbeat once per shadowed step, so a joined rank's watchdog sees
                # progress while the others finish the epoch.
                join = Join([self.ddp, _BeatWhileJoined(self, p.device)])
            completed = False
            with join:
                batches = iter(self.loader)
                while True:
                    hb.beat(self.step, "init" if first else "data")
                    try:
                        batch = next(batches)
                    except StopIteration:
                        completed = True
                        break
                    hb.beat(self.step, "init" if first else "step")
                    first = False
                    if on_accelerator:
                        batch = to_device(batch, p.device, non_blocking)
                    loss = task.loss(self.ddp, batch)
                    self.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    self.optimizer.step()
                    self.step += 1
                    self.batch_in_epoch += 1
                    if task.on_step_end is not None:
                        task.on_step_end(StepContext(
                            rank=p.rank, world_size=p.world_size, local_rank=p.local_rank,
                            step=self.step, epoch=self.epoch, heartbeat=hb, rank0_io=self.rank0_io,
                            device=p.device, artifact_dir=str(self.cfg.artifact_dir or "") or None))
                    if uneven:  # no collective outside DDP's until every rank is out of data
                        if max_steps is not None and self.step >= max_steps:
                            break
                        continue
                    stop.checked = self.step
                    if stop.requested and stop.at_boundary(self.step):
                        hb.beat(self.step, "stop")
                        self.checkpoint(collective=stop.agreed)
                        return "preempted"
                    if self.every and self.step % self.every == 0:
                        self.checkpoint()
                    if max_steps is not None and self.step >= max_steps:
                        break
            if uneven:
                self._sync_step()
                if self._any_rank(stop.requested):  # SIGTERM during an uneven epoch: stop here
                    if completed:
                        self.epoch += 1
                        self.batch_in_epoch = 0
                    hb.beat(self.step, "stop")
                    self.checkpoint()
                    return "preempted"
            if completed:
                self.epoch += 1
                self.batch_in_epoch = 0
            self.evaluate()
            self.checkpoint()
            if not completed:
                break
        self.checkpoint()
        return "done"
