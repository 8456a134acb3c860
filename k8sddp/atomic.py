"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def _chown_like(tmp: str, old: os.stat_result | None) -> bool:
    """Give ``tmp`` the old file's owner and group where allowed; True when both are kept."""
    if old is None or not hasattr(os, "chown"):
        return True
    for uid, gid in ((old.st_uid, old.st_gid), (-1, old.st_gid)):
        try:
            os.chown(tmp, uid, gid)
        except OSError:
            continue
        now = os.stat(tmp)
        if (now.st_uid, now.st_gid) == (old.st_uid, old.st_gid):
            return True
    now = os.stat(tmp)
    return (now.st_uid, now.st_gid) == (old.st_uid, old.st_gid)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> bool:
    """Write ``data`` to ``path`` through a temporary file in the same directory, fsync, rename.

    Args:
        path: destination; its directory must exist.
        data: the full new content.
        mode: permission bits for the new file; default: keep the old file's, else 0o644.

    Returns:
        True when the old file's owner and group were kept (or there was no old file); False
        when the rename made a file owned by the caller that could not be given them back (a
        non-root user cannot chown to another user, nor to a group it is not in).

    Raises:
        OSError: the directory is not writable, the disk is full, ...; the old file is untouched.
    """
    dest = Path(path)
    try:
        old: os.stat_result | None = dest.stat()  # (follows a symbolic link)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode) and not stat.S_ISDIR(old.st_mode):
        # A device, FIFO or terminal (`--out /dev/stdout`, /dev/null): a stream to write through,
        # never a file to replace (a rename would put a regular file where the device node was).
        with open(dest, "wb") as fh:
            fh.write(data)
            fh.flush()
        return True
    if dest.is_symlink():
        dest = Path(os.path.realpath(dest))  # replace the file the link points to, and keep the link
    if mode is None:
        mode = old.st_mode & 0o7777 if old is not None else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        kept = _chown_like(tmp, old)
        os.chmod(tmp, mode)  # after chown, which clears set-id bits
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
    return kept


def write_text_atomic(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> bool:
    """:func:`write_bytes_atomic` for UTF-8 text."""
    return write_bytes_atomic(path, text.encode("utf-8"), mode=mode)
