"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, fsync, rename.

    Args:
        path: destination; its directory must exist.
        data: the full new content.
        mode: permission bits for the new file; default: keep the old file's, else 0o644.

    Raises:
        OSError: the directory is not writable, the disk is full, ...; the old file is untouched.
    """
    dest = Path(path)
    if mode is None:
        try:
            mode = dest.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(dest.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_text_atomic(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> None:
    """:func:`write_bytes_atomic` for UTF-8 text."""
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)
