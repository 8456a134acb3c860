"""Atomic file replacement: readers see the old file or the new one, never a torn one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path``'s content with ``data`` atomically, keeping its mode and owner.

    Writes a temporary file in the same folder, flushes and fsyncs it, gives it the original
    file's permission bits (and owner, where allowed), renames it over the original (``os.replace``,
    atomic on POSIX) and fsyncs the folder. A symbolic link is followed: its target is replaced and
    the link kept.

    Args:
        path: the file to replace; when it does not exist, it is created with mode 0o644 minus umask.
        data: the complete new content.

    Raises:
        OSError: the folder is not writable, the disk is full, ...; the original is then untouched
            and the temporary file removed.
    """
    target = Path(os.path.realpath(path))
    try:
        st: os.stat_result | None = target.stat()
    except FileNotFoundError:
        st = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".k8sddp-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            with contextlib.suppress(PermissionError):
                os.chown(tmp, st.st_uid, st.st_gid)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o644 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
