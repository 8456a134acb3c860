"""``k8sddp.guard``: the explicit guard API for training scripts that want more than zero-code mode.

Torch-only (no framework needed). Under ``k8sddp launch`` an unchanged script is already guarded
(zero-code mode, ``docs/runtime.md``); these calls add phases with their own budgets, explicit
beats, the rank-0 IO guard and atomic checkpoints. Outside the launcher, :func:`start` arms the
same guard itself. Example::

    from k8sddp import guard

    g = guard.start(seed=1234)                 # no-op when zero-code mode already armed it
    state = guard.load_checkpoint()            # newest intact checkpoint, or None
    start_step = state["step"] if state else 0
    for step in range(start_step, steps):
        guard.beat(step)                       # optional: optimizer steps already beat
        train_one_step()
        if step % 100 == 0:
            with guard.phase("eval"):          # eval's budget (3 x watchdog), or learned
                evaluate()
            guard.save_checkpoint({"model": model.state_dict(), "step": step}, step=step)
    guard.stop()

Every function is a thin layer over :class:`k8sddp.runtime.guard.Guard`: one watchdog, one record
format, whichever mode started it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import UsageError
from .runtime import autoguard
from .runtime.artifacts import ArtifactDir
from .runtime.guard import Guard

__all__ = ["beat", "current", "load_checkpoint", "phase", "rank0_io", "record", "save_checkpoint",
           "start", "stop"]

_api: Guard | None = None
_io: Any = None


def current() -> Guard | None:
    """The guard of this process (zero-code's or :func:`start`'s), or ``None``."""
    return autoguard.current() or _api


def start(*, seed: int | None = None, code_version: str | None = None,
          env: Mapping[str, str] | None = None) -> Guard:
    """Arm the guard of this rank (main thread), or return the one already armed.

    Args:
        seed: recorded in the start record and the run record (``K8SDDP_SEED`` otherwise).
        code_version: recorded likewise (``K8SDDP_CODE_VERSION`` otherwise).
        env: the environment (default ``os.environ``).

    Raises:
        UsageError: a malformed ``K8SDDP_*`` variable.
    """
    global _api
    g = current()
    if g is None:
        g = Guard(os.environ if env is None else env, mode="api").start()
        g.install_exit_records()
        autoguard.install(g)  # the same torch hooks as zero-code mode (optimizer steps, batches)
        os.register_at_fork(after_in_child=g.after_fork_in_child)
        g.record_started(pid=os.getpid())
        _api = g
    elif not g.active:  # stopped before (a framework's teardown): watch again
        g.start()
    fields: dict[str, Any] = {}
    if seed is not None:
        fields["seed"] = int(seed)
    if code_version is not None:
        fields["code_version"] = str(code_version)
    if fields:
        g.record_started(**fields)
    return g


def _need() -> Guard:
    g = current()
    if g is None:
        raise UsageError("k8sddp.guard: call guard.start() first (or run under k8sddp launch)")
    return g


def stop() -> None:
    """Stop the watchdog and cancel the hard stop (end of training; main thread)."""
    g = current()
    if g is not None:
        g.stop()


def record(**fields: Any) -> None:
    """Add JSON-serializable ``fields`` to this rank's start record (and, for rank 0, the
    launcher's run record picks up ``seed`` and ``code_version``).

    Raises:
        UsageError: the guard is not started.
    """
    _need().record_started(**fields)


def beat(step: int | None = None, phase: str = "step") -> None:
    """Tell the watchdog this rank made progress (``step``: int, ``None`` keeps the last).

    Raises:
        UsageError: the guard is not started.
    """
    _need().beat(step, phase)


@contextlib.contextmanager
def phase(name: str, budget: float | None = None) -> Iterator[None]:
    """``with guard.phase("eval"):`` runs the body under phase ``name``'s budget (seconds;
    ``budget`` overrides it and is never learned); see :meth:`Guard.phase`.

    Raises:
        UsageError: the guard is not started. ValueError: a bad name or budget.
    """
    with _need().phase(name, budget):
        yield


@contextlib.contextmanager
def rank0_io(phase: str = "checkpoint") -> Iterator[bool]:
    """``with guard.rank0_io() as writer: if writer: ...``: every rank enters, only rank 0
    writes; the others wait on the process group's TCP store (never a collective) and get rank
    0's exception as :class:`~k8sddp.runtime.ioguard.Rank0IOError`
    (:class:`~k8sddp.runtime.ioguard.Rank0IOTimeout` when it does not finish in time).

    Raises:
        UsageError: the guard is not started.
    """
    global _io
    g = _need()
    import torch.distributed as dist

    from .runtime.ioguard import Rank0IO

    if _io is None or _io.hb is not g.hb:
        store = dist.distributed_c10d._get_default_store() if dist.is_initialized() else None
        world = dist.get_world_size() if dist.is_initialized() else 1
        rank = dist.get_rank() if dist.is_initialized() else 0
        _io = Rank0IO(rank=rank, world_size=world, store=store, heartbeat=g.hb)
    with _io(phase) as writer:
        yield writer


def _folder(g: Guard) -> Path:
    if g.cfg.artifact_dir is None:
        raise UsageError("k8sddp.guard: checkpoints need K8SDDP_ARTIFACT_DIR")
    return ArtifactDir(g.cfg.artifact_dir).checkpoints


def save_checkpoint(state: dict[str, Any], *, step: int, keep: int | None = None) -> Path | None:
    """Call on every rank: rank 0 writes ``state`` atomically as checkpoint ``step`` (payload,
    fsync, rename, then the manifest with size and sha256) inside :func:`rank0_io`, so the other
    ranks wait under the checkpoint budget; the ``keep`` newest are kept
    (``K8SDDP_CHECKPOINT_KEEP``). Returns the payload's path on rank 0, ``None`` elsewhere.

    Raises:
        UsageError: the guard is not started, or no ``K8SDDP_ARTIFACT_DIR``.
        OSError: rank 0 cannot write (other ranks: ``Rank0IOError``).
    """
    g = _need()
    folder = _folder(g)
    from .runtime import checkpoint as ckpt

    g.beat(step, g.hb.phase)
    out: Path | None = None
    with rank0_io("checkpoint") as writer:
        if writer:
            out = ckpt.save(folder, step, {"step": step, "task": "k8sddp.guard", "user": state},
                            keep=keep or g.cfg.checkpoint_keep)
    return out


def load_checkpoint(*, map_location: str = "cpu") -> dict[str, Any] | None:
    """The ``state`` of the newest intact checkpoint written by :func:`save_checkpoint`
    (size and sha256 checked; a corrupt newer one is skipped with a warning on stderr), or
    ``None``. Every rank reads it from the artifact volume (multi-node: a shared volume).

    Raises:
        UsageError: the guard is not started, or no ``K8SDDP_ARTIFACT_DIR``.
    """
    import sys

    import torch

    g = _need()
    folder = _folder(g)
    from .runtime import checkpoint as ckpt

    _path, payload = ckpt.choose_resume(folder, task="k8sddp.guard", model_fp="", device=torch.device(map_location),
                                        warn=lambda m: print(f"k8sddp.guard: {m}", file=sys.stderr))
    if payload is None:
        return None
    user = payload.get("user")
    return user if isinstance(user, dict) else None
