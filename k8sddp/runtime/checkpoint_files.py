"""Checkpoint files on disk: names, manifests, verification, retention (torch-free).

A checkpoint is two files in ``<artifact>/checkpoints/``:

* ``ckpt-<step:09d>.pt``: the payload (bytes from ``torch.save``), written atomically;
* ``ckpt-<step:09d>.json``: its manifest ``{step, file, size, sha256, ...}``, written atomically
  *after* the payload is durable. The manifest is the completeness marker: a payload without one
  (a writer killed mid-way) is never loaded, and a payload whose size or sha256 differs from its
  manifest (truncated, corrupted) is skipped in favour of the next older complete one.

The manifest also names the ``task`` and the ``model_fingerprint`` (:func:`fingerprint`) of the
run that wrote it. Retention (:func:`prune`) counts only this run's intact checkpoints toward
``keep``: an invalid entry (no readable manifest, wrong size or sha256, a folder) is never counted,
so it cannot push a good checkpoint out, and another task's or model's checkpoints are neither
counted nor deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .artifacts import read_json, write_bytes_atomic, write_json_atomic

_PAYLOAD = re.compile(r"ckpt-(\d{9})\.pt")
_MANIFEST = re.compile(r"ckpt-(\d{9})\.json")


#: ``(path, size, mtime_ns)`` of payloads whose sha256 matched their manifest in this process:
#: retention re-checks the kept checkpoints after every save without re-reading them.
_VERIFIED: set[tuple[str, int, int]] = set()


def _stat_key(path: Path) -> tuple[str, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path), st.st_size, st.st_mtime_ns)


def fingerprint(entries: Iterable[tuple[str, Iterable[int], str]]) -> str:
    """A model's structure as 16 hex digits: sha256 over ``(name, shape, dtype)`` of every
    state-dict entry, in order (:func:`k8sddp.runtime.checkpoint.model_fingerprint` feeds it).
    Two models whose state dicts load into each other (same names and shapes) share it, dtype
    aside (``load_state_dict`` converts dtypes)."""
    h = hashlib.sha256()
    for name, shape, _dtype in entries:
        h.update(f"{name}:{tuple(int(d) for d in shape)};".encode())
    return h.hexdigest()[:16]


def payload_path(folder: Path, step: int) -> Path:
    """``<folder>/ckpt-<step:09d>.pt``."""
    return Path(folder) / f"ckpt-{step:09d}.pt"


def manifest_path(folder: Path, step: int) -> Path:
    """``<folder>/ckpt-<step:09d>.json``."""
    return Path(folder) / f"ckpt-{step:09d}.json"


def write_checkpoint_bytes(folder: Path, step: int, data: bytes, meta: dict[str, Any] | None = None) -> Path:
    """Write payload then manifest, each atomically; return the payload's path.

    Raises:
        OSError: the folder cannot be written.
    """
    payload = payload_path(folder, step)
    write_bytes_atomic(payload, data)
    manifest = {"format": 1, "step": step, "file": payload.name, "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(), **(meta or {})}
    write_json_atomic(manifest_path(folder, step), manifest)
    key = _stat_key(payload)
    if key is not None:
        _VERIFIED.add(key)
    return payload


def manifest_steps(folder: Path) -> list[int]:
    """Steps that have a manifest, newest first (no payload check)."""
    if not Path(folder).is_dir():
        return []
    steps = [int(m.group(1)) for p in Path(folder).iterdir() if (m := _MANIFEST.fullmatch(p.name))]
    return sorted(steps, reverse=True)


def verify(folder: Path, step: int) -> str | None:
    """``None`` when checkpoint ``step`` is complete and intact, else why not (one sentence)."""
    manifest = read_json(manifest_path(folder, step))
    if not isinstance(manifest, dict):
        return "no readable manifest"
    payload = payload_path(folder, step)
    key = _stat_key(payload)
    if key is not None and key in _VERIFIED and key[1] == manifest.get("size"):
        return None
    try:
        data = payload.read_bytes()
    except OSError as exc:
        return f"payload unreadable: {exc}"
    if len(data) != manifest.get("size"):
        return f"payload is {len(data)} bytes, manifest says {manifest.get('size')}"
    if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
        return "payload sha256 differs from the manifest"
    if key is not None:
        _VERIFIED.add(key)
    return None


def foreign(manifest: Any, *, task: str | None, model_fingerprint: str | None) -> str | None:
    """Why a checkpoint (its manifest or payload dict) belongs to another task or model, or
    ``None`` when it is this run's (fields it does not record are not held against it)."""
    if not isinstance(manifest, dict):
        return None
    theirs = manifest.get("task")
    if task is not None and theirs is not None and theirs != task:
        return f"written by task {theirs!r}, this run's task is {task!r}"
    fp = manifest.get("model_fingerprint")
    if model_fingerprint is not None and fp is not None and fp != model_fingerprint:
        return f"model fingerprint {fp}, this run's model is {model_fingerprint} (another architecture)"
    return None


def newest_valid(folder: Path) -> tuple[int, Path, list[str]]:
    """The newest complete, intact checkpoint: ``(step, payload path, skipped reasons)``.

    ``step`` is -1 (and the path the folder) when there is none; ``skipped`` names each newer
    checkpoint that was passed over and why.
    """
    skipped: list[str] = []
    for step in manifest_steps(folder):
        problem = verify(folder, step)
        if problem is None:
            return step, payload_path(folder, step), skipped
        skipped.append(f"ckpt-{step:09d}: {problem}")
    return -1, Path(folder), skipped


def newest_complete_step(folder: Path) -> int:
    """The newest step with a manifest whose payload has the right size (-1: none); cheap."""
    for step in manifest_steps(folder):
        manifest = read_json(manifest_path(folder, step)) or {}
        try:
            if payload_path(folder, step).stat().st_size == manifest.get("size"):
                return step
        except OSError:
            continue
    return -1


def prune(folder: Path, keep: int, *, task: str | None = None,
          model_fingerprint: str | None = None) -> list[Path]:
    """Keep the ``keep`` newest intact checkpoints of this task and model; delete older ones,
    invalid entries, orphan payloads and temporary files (run by the only writer, after its own
    save). Another task's or model's checkpoints (:func:`foreign`) are left alone and not counted;
    invalid ones (:func:`verify` fails) are not counted. Returns what was deleted."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    kept: set[int] = set()
    doomed_steps: set[int] = set()
    spared: set[int] = set()
    for step in manifest_steps(folder):  # newest first
        manifest = read_json(manifest_path(folder, step))
        payload = payload_path(folder, step)
        if not isinstance(manifest, dict) or not payload.is_file():
            doomed_steps.add(step)
        elif foreign(manifest, task=task, model_fingerprint=model_fingerprint):
            spared.add(step)  # not ours: never counted, never deleted, never read
        elif len(kept) >= max(1, keep):
            doomed_steps.add(step)  # older than the kept ones: deleted unread
        elif verify(folder, step) is None:  # sha256 only of what is kept (cached per process)
            kept.add(step)
        else:
            doomed_steps.add(step)
    deleted: list[Path] = []
    for entry in folder.iterdir():
        m = _PAYLOAD.fullmatch(entry.name) or _MANIFEST.fullmatch(entry.name)
        num = int(m.group(1)) if m else None
        orphan = num is not None and num not in kept and num not in spared and num not in doomed_steps
        if (num in doomed_steps or orphan or entry.name.endswith(".tmp")) and not entry.is_dir():
            deleted.append(entry)
    # manifests first, so a crash mid-prune never leaves a manifest without its payload
    deleted.sort(key=lambda p: (p.suffix != ".json", p.name))
    for entry in deleted:
        with contextlib.suppress(OSError):
            entry.unlink()
    return deleted
