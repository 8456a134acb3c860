"""Checkpoint files on disk: names, manifests, verification, retention (torch-free).

A checkpoint is two files in ``<artifact>/checkpoints/``:

* ``ckpt-<step:09d>.pt``: the payload (bytes from ``torch.save``), written atomically;
* ``ckpt-<step:09d>.json``: its manifest ``{step, file, size, sha256, ...}``, written atomically
  *after* the payload is durable. The manifest is the completeness marker: a payload without one
  (a writer killed mid-way) is never loaded, and a payload whose size or sha256 differs from its
  manifest (truncated, corrupted) is skipped in favour of the next older complete one.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path
from typing import Any

from .artifacts import read_json, write_bytes_atomic, write_json_atomic

_PAYLOAD = re.compile(r"ckpt-(\d{9})\.pt")
_MANIFEST = re.compile(r"ckpt-(\d{9})\.json")


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
    try:
        data = payload.read_bytes()
    except OSError as exc:
        return f"payload unreadable: {exc}"
    if len(data) != manifest.get("size"):
        return f"payload is {len(data)} bytes, manifest says {manifest.get('size')}"
    if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
        return "payload sha256 differs from the manifest"
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


def prune(folder: Path, keep: int) -> list[Path]:
    """Keep the ``keep`` newest complete checkpoints; delete older ones, orphan payloads and
    temporary files (run by the only writer, after its own save). Returns what was deleted."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    complete = [s for s in manifest_steps(folder) if payload_path(folder, s).exists()]
    kept = set(complete[:max(1, keep)])
    deleted: list[Path] = []
    for entry in folder.iterdir():
        m = _PAYLOAD.fullmatch(entry.name) or _MANIFEST.fullmatch(entry.name)
        doomed = (m is not None and int(m.group(1)) not in kept) or entry.name.endswith(".tmp")
        if doomed:
            # manifests first, so a crash mid-prune never leaves a manifest without its payload
            deleted.append(entry)
    deleted.sort(key=lambda p: (p.suffix != ".json", p.name))
    for entry in deleted:
        with contextlib.suppress(OSError):
            entry.unlink()
    return deleted
