"""Reading what torchrun and the backends print (the launcher's log tail; stdlib only).

* torchrun's failure summary (``torch/distributed/elastic/multiprocessing/errors/__init__.py``,
  ``ChildFailedError.format_msg``): per failed worker ``rank : R (local_rank: L)`` then
  ``exitcode : N (pid: P)``; a negative N is the signal that ended it.
* gloo's size check (``third_party/gloo/gloo/transport/tcp/pair.cc``): ``Received data size
  doesn't match expected size. Is there a distributed collective mismatch in your code?``, thrown
  as ``gloo::EnforceNotMet`` in a gloo thread, which ends the process with ``std::terminate``:
  SIGABRT (measured, torch 2.13 CPU).
* NCCL's asynchronous error handling (``ProcessGroupNCCL.cpp``): its watchdog tears the process
  down (SIGABRT) after ``Watchdog caught collective operation timeout`` or ``NCCL error``; a
  retryable communication failure, not a bug.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable

_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
#: gloo's collective-size check and PyTorch's own mismatch messages (TORCH_DISTRIBUTED_DEBUG=DETAIL).
MISMATCH_PATTERNS = ("Received data size doesn't match expected size", "collective mismatch",
                     "Detected mismatch between collectives")
#: NCCL's watchdog teardown after an asynchronous error or a collective timeout.
NCCL_TEARDOWN_PATTERNS = ("Watchdog caught collective operation timeout", "NCCL error",
                          "Some NCCL operations have failed or timed out", "ProcessGroupNCCL's watchdog",
                          "NCCL communicator was aborted")


def worker_exits(lines: Iterable[str]) -> dict[int, int]:
    """``{global rank: exit code}`` from torchrun's failure summary (negative: killed by that signal)."""
    out: dict[int, int] = {}
    rank: int | None = None
    for line in lines:
        m = _RANK.match(line)
        if m:
            rank = int(m.group(1))
            continue
        m = _EXIT.match(line)
        if m and rank is not None:
            out[rank] = int(m.group(1))
            rank = None
    return out


def signal_name(code: int) -> str:
    """``SIGKILL`` for ``-9`` (an exit status that is a negative signal number), else ``exit N``."""
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    if code > 128:
        try:
            return signal.Signals(code - 128).name
        except ValueError:
            pass
    return f"exit {code}"


def find_line(lines: Iterable[str], patterns: tuple[str, ...]) -> str | None:
    """The first line containing one of ``patterns`` (stripped, at most 400 characters), or ``None``."""
    for line in lines:
        if any(p in line for p in patterns):
            return line.strip()[:400]
    return None
