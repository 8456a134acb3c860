"""Training-state checkpoints: capture, atomic save, resume (needs torch).

File format and completeness rules: :mod:`k8sddp.runtime.checkpoint_files`. The payload is a
``torch.save`` dict::

    {"format": 1, "step": int, "epoch": int, "batch_in_epoch": int, "world_size": int,
     "samples_in_epoch": int, "seed": int, "task": str, "model_fingerprint": str,
     "model": state_dict, "optimizer": state_dict,
     "rng": [per-rank {"python", "torch", "cuda"?, "numpy"?}], "extra": any}

DDP keeps every rank's parameters identical after each optimizer step, so rank 0 alone writes;
RNG states differ per rank and are gathered first (:func:`gather_rng`).

Objects travel between ranks as pickled bytes in ``uint8`` tensors (:func:`broadcast_object`,
:func:`all_gather_objects`), not through ``broadcast_object_list``/``all_gather_object``: those
turn the received tensor back into bytes with ``tensor.numpy()`` (torch/distributed/
distributed_c10d.py, ``_tensor_to_object``), and torch's wheel does not depend on NumPy, so every
multi-rank run failed on a fresh ``pip install 'k8sddp[train]'`` (review of issue 3, item 1).
"""

from __future__ import annotations

import io
import pickle
import random
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..errors import UsageError
from .artifacts import read_json
from .checkpoint_files import (
    fingerprint,
    foreign,
    manifest_path,
    manifest_steps,
    payload_path,
    prune,
    verify,
    write_checkpoint_bytes,
)

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


def _encode(obj: Any, device: torch.device) -> torch.Tensor:
    return torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8).to(device)


def _decode(t: torch.Tensor, size: int) -> Any:
    return pickle.loads(bytes(t[:size].cpu().tolist()))  # noqa: S301 - our own ranks' bytes


def broadcast_object(obj: Any, *, src: int = 0, device: torch.device | None = None) -> Any:
    """``obj`` of rank ``src`` on every rank (a collective; no NumPy). Small objects only: the
    bytes are turned back with ``tolist`` (a checkpoint path, a verdict)."""
    if not dist.is_initialized() or dist.get_world_size() <= 1:
        return obj
    device = device or torch.device("cpu")
    data = _encode(obj, device) if dist.get_rank() == src else torch.empty(0, dtype=torch.uint8, device=device)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    dist.broadcast(size, src=src)
    if dist.get_rank() != src:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=src)
    return _decode(data, int(size.item()))


def all_gather_objects(obj: Any, *, device: torch.device | None = None) -> list[Any]:
    """Every rank's ``obj``, indexed by rank (a collective; no NumPy; small objects, as above)."""
    if not dist.is_initialized() or dist.get_world_size() <= 1:
        return [obj]
    device = device or torch.device("cpu")
    world = dist.get_world_size()
    data = _encode(obj, device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=device))
    longest = max(int(t.item()) for t in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[:data.numel()] = data
    parts = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(parts, padded)
    return [_decode(part, int(size.item())) for part, size in zip(parts, sizes, strict=True)]


def gather_rng(world_size: int, device: torch.device | None = None) -> list[dict[str, Any]]:
    """Every rank's :func:`capture_rng`, indexed by rank (a collective when ``world_size > 1``;
    ``device``: where the collective's tensors live, the rank's CUDA device under NCCL)."""
    mine = capture_rng()
    if world_size <= 1 or not dist.is_initialized():
        return [mine]
    return all_gather_objects(mine, device=device)


def model_fingerprint(model: torch.nn.Module) -> str:
    """:func:`k8sddp.runtime.checkpoint_files.fingerprint` of ``model.state_dict()``."""
    return fingerprint((k, tuple(v.shape), str(v.dtype)) for k, v in model.state_dict().items())


def save(folder: Path, step: int, state: dict[str, Any], *, keep: int) -> Path:
    """Serialize ``state`` and write it as checkpoint ``step`` (payload, then manifest), then keep
    only the ``keep`` newest intact checkpoints of the same task and model
    (:func:`k8sddp.runtime.checkpoint_files.prune`).

    Raises:
        OSError: the folder cannot be written.
    """
    buf = io.BytesIO()
    torch.save({"format": FORMAT, **state}, buf)
    meta = {k: state.get(k) for k in ("epoch", "task", "model_fingerprint", "world_size")}
    path = write_checkpoint_bytes(folder, step, buf.getvalue(), meta)
    prune(folder, keep, task=state.get("task"), model_fingerprint=state.get("model_fingerprint"))
    return path


def load(path: Path, device: torch.device) -> dict[str, Any]:
    """Load a payload written by :func:`save` (a verified file on the job's own volume).

    Raises:
        ValueError: not a dict of this format. Any unpickling error propagates.
    """
    state = torch.load(path, map_location=device, weights_only=False)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path}: not a k8sddp checkpoint of format {FORMAT}")
    return state


def choose_resume(folder: Path, *, task: str, model_fp: str, device: torch.device,
                  warn: Any = print) -> tuple[Path | None, dict[str, Any] | None]:
    """Rank 0's choice: the newest checkpoint that is intact, loads, and belongs to this task and
    model; ``(None, None)`` when there is none. Each one passed over is reported through ``warn``
    (one line each): invalid (size, sha256, manifest), unloadable although its checksum matches
    (``torch.load`` fails, wrong format), or another task's/model's.

    Raises:
        UsageError: no usable checkpoint, but some of another task or model: resuming from
            nothing would silently restart, so the run refuses (final, exit 2).
    """
    others: list[str] = []
    for step in manifest_steps(folder):
        name = f"ckpt-{step:09d}"
        problem = verify(folder, step)
        if problem is not None:
            warn(f"skipping checkpoint {name}: {problem}")
            continue
        why = foreign(read_json(manifest_path(folder, step)), task=task, model_fingerprint=model_fp)
        if why is None:
            path = payload_path(folder, step)
            try:
                state = load(path, device)
            except Exception as exc:  # noqa: BLE001 - any unpickling failure: fall back
                warn(f"skipping checkpoint {name}: its checksum matches but it does not load: "
                     f"{type(exc).__name__}: {str(exc)[:200]}; falling back to an older one")
                continue
            recorded = dict(state)
            if recorded.get("model_fingerprint") is None and isinstance(state.get("model"), dict):
                recorded["model_fingerprint"] = fingerprint(  # older checkpoints: from the payload
                    (k, tuple(v.shape), str(v.dtype)) for k, v in state["model"].items()
                    if isinstance(v, torch.Tensor))
            why = foreign(recorded, task=task, model_fingerprint=model_fp)
            if why is None:
                return path, state
        warn(f"skipping checkpoint {name}: {why}")
        others.append(f"{name}: {why}")
    if others:
        raise UsageError(
            f"{folder} holds checkpoints of another task or model and none of this one "
            f"({others[0]}): use a fresh K8SDDP_ARTIFACT_DIR, or remove them to start over")
    return None, None
