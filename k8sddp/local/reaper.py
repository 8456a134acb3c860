"""A watcher process that kills the local runner's pods when the runner dies, however it dies.

The runner handles SIGTERM and Ctrl-C itself; SIGKILL (the OOM killer, ``timeout -s KILL``) gives it
no chance, and its pods (each in a session and process group of its own) would run on, re-parented
to PID 1. ``PR_SET_PDEATHSIG`` would only reach each pod's first process (not, e.g., torchrun's
workers) and needs a ``preexec_fn``, which is unsafe with the runner's reader threads. Instead one
small watcher process, in a session of its own, reads the process-group ids of the running pods
from a pipe whose only writer is the runner. When the runner exits for any reason the kernel closes
that pipe; the watcher reads end-of-file and sends SIGKILL to every group still registered.

Limits: a pod process that leaves its process group (``setsid``) escapes, as it would escape
``kill -- -PGID``; a pod started in the instant between its ``fork`` and its registration is missed.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

__all__ = ["Reaper"]

_WATCHER = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
groups = set()
for line in sys.stdin.buffer:
    line = line.strip()
    if line[:1] == b"+":
        groups.add(int(line[1:]))
    elif line[:1] == b"-":
        groups.discard(int(line[1:]))
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""


class Reaper:
    """The watcher of one local run. :meth:`add` each pod's process group, :meth:`discard` it once the
    pod has ended, :meth:`close` at the end (which also kills any group still registered).

    If the watcher cannot start (no fork, no interpreter), the run goes on without it.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        with contextlib.suppress(OSError):
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _WATCHER], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
            )

    def _send(self, text: str) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(text.encode())
            proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._proc = None

    def add(self, pgid: int) -> None:
        """Register the process group ``pgid`` of a pod that just started."""
        self._send(f"+{pgid}\n")

    def discard(self, pgid: int) -> None:
        """Forget ``pgid`` once its pod has ended (its id may be reused)."""
        self._send(f"-{pgid}\n")

    def close(self) -> None:
        """End the watcher: groups still registered are killed; waits up to 10 s for it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
