"""Which exceptions are communication failures: a peer, the store or the network went away
(retryable, exit 142) rather than a bug in the task (exit 1).

Used by the worker's exception path (:mod:`k8sddp.runtime.worker`), the zero-code guard's
``sys.excepthook`` (:mod:`k8sddp.runtime.guard`) and the Ray watchdog (:mod:`k8sddp.ray`); it
lives below all three so neither the guard nor the worker imports the other for it. Importing it
does not load torch.
"""

from __future__ import annotations

from .ioguard import Rank0IOTimeout

__all__ = ["COMM_PATTERNS", "classify"]

#: Substrings of gloo/NCCL errors that mean "a peer or the network failed", not a bug.
COMM_PATTERNS = ("Connection closed by peer", "Connection reset by peer", "Timed out waiting",
                 "Broken pipe", "NCCL", "Socket Timeout", "timed out", "Connection refused",
                 "ProcessGroup", "DistBackendError", "c10d")


def classify(exc: BaseException) -> str:
    """``"comm"`` for a collective/store/network failure (retryable), ``"exception"`` otherwise."""
    import torch.distributed as dist  # (here: importing this module must not load torch)

    comm_types: tuple[type[BaseException], ...] = (Rank0IOTimeout,)
    for name in ("DistError", "DistBackendError", "DistNetworkError", "DistStoreError"):
        t = getattr(dist, name, None)
        if isinstance(t, type):
            comm_types += (t,)
    if isinstance(exc, comm_types):
        return "comm"
    if type(exc) is RuntimeError and any(p in str(exc) for p in COMM_PATTERNS):
        return "comm"
    return "exception"
