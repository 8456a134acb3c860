"""Training-state checkpoints: capture, atomic save, resume (needs torch).

File format and completeness rules: :mod:`k8sddp.runtime.checkpoint_files`. The payload is a
``torch.save`` dict::

    {"format": 1, "step": int, "epoch": int, "batch_in_epoch": int, "world_size": int,
     "seed": int, "task": str, "model": state_dict, "optimizer": state_dict,
     "rng": [per-rank {"python", "torch", "cuda"?, "numpy"?}], "extra": any}

DDP keeps every rank's parameters identical after each optimizer step, so rank 0 alone writes;
RNG states differ per rank and are gathered first (:func:`gather_rng`).
"""

from __future__ import annotations

import io
import random
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .checkpoint_files import newest_valid, prune, write_checkpoint_bytes

FORMAT = 1


def capture_rng() -> dict[str, Any]:
    """This process's generator states: Python ``random``, torch CPU, CUDA (if any), NumPy
    (only when the task already imported it)."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Undo :func:`capture_rng` (missing parts are left alone)."""
    if "python" in state:
        random.setstate(state["python"])
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    np = sys.modules.get("numpy")
    if "numpy" in state and np is not None:
        np.random.set_state(state["numpy"])


def gather_rng(world_size: int) -> list[dict[str, Any]]:
    """Every rank's :func:`capture_rng`, indexed by rank (a collective when ``world_size > 1``)."""
    mine = capture_rng()
    if world_size <= 1 or not dist.is_initialized():
        return [mine]
    out: list[Any] = [None] * world_size
    dist.all_gather_object(out, mine)
    return out


def save(folder: Path, step: int, state: dict[str, Any], *, keep: int) -> Path:
    """Serialize ``state`` and write it as checkpoint ``step`` (payload, then manifest), then keep
    only the ``keep`` newest complete checkpoints.

    Raises:
        OSError: the folder cannot be written.
    """
    buf = io.BytesIO()
    torch.save({"format": FORMAT, **state}, buf)
    path = write_checkpoint_bytes(folder, step, buf.getvalue(),
                                  {"epoch": state.get("epoch"), "task": state.get("task")})
    prune(folder, keep)
    return path


def find_resume(folder: Path) -> tuple[int, Path | None, list[str]]:
    """``(step, payload, skipped)`` of the newest complete, intact checkpoint (``-1, None``: none)."""
    step, path, skipped = newest_valid(folder)
    return step, (path if step >= 0 else None), skipped


def load(path: Path, device: torch.device) -> dict[str, Any]:
    """Load a payload written by :func:`save` (a verified file on the job's own volume)."""
    state = torch.load(path, map_location=device, weights_only=False)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path}: not a k8sddp checkpoint of format {FORMAT}")
    return state
