"""The rank-0 IO guard: work only rank 0 does, fenced so that no rank can wait forever.

``with guard("checkpoint") as writer: if writer: save(...)`` runs the body on every rank; only
rank 0 gets ``writer=True``. On entry every rank beats the heartbeat with the guard's phase (so
the ranks that wait get that phase's budget, not the step budget: the seed's hang is rank 1
waiting in the next all-reduce with the step budget while rank 0 saves) and meets at a barrier on
the process group's store. On exit rank 0 publishes its outcome (``ok`` or the exception) under a
key of that store; the other ranks wait for the key, at most the phase's budget, and re-raise
rank 0's exception as :class:`Rank0IOError`, so an exception in rank 0's IO ends every rank
instead of leaving them in the next collective until the process-group timeout. The store is a
TCP connection separate from the collectives, so it answers even when a collective is stuck.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

from .watchdog import Heartbeat

_PREFIX = "k8sddp/io/"


class Rank0IOError(RuntimeError):
    """Raised on ranks != 0 when rank 0 raised inside the guard (a bug: final)."""


class Rank0IOTimeout(Rank0IOError):
    """Raised when a rank did not arrive, or rank 0 did not finish, in time (a hang: retryable).

    The wait is the phase's budget times 1.25 plus 1 s, so a rank's own watchdog (which fires
    at the budget) normally reports first.
    """


class Rank0IO:
    """Callable returning the guard context manager (see the module docstring).

    Args:
        rank, world_size: this worker's rank and the world size.
        store: the process group's ``torch.distributed.Store`` (``None``: single process).
        heartbeat: beaten with the guard's phase on entry, and with the previous phase on exit.

    Every rank must enter the guard the same number of times, in the same order (the n-th use
    on every rank shares the n-th key).
    """

    def __init__(self, *, rank: int, world_size: int, store: Any | None, heartbeat: Heartbeat) -> None:
        self.rank = rank
        self.world = world_size
        self.store = store
        self.hb = heartbeat
        self._n = 0

    def _barrier(self, store: Any, n: int, timeout: dt.timedelta) -> None:
        arrived = store.add(f"{_PREFIX}{n}/in", 1)
        if arrived == self.world:
            store.set(f"{_PREFIX}{n}/go", "1")
        store.wait([f"{_PREFIX}{n}/go"], timeout)

    @contextlib.contextmanager
    def __call__(self, phase: str = "checkpoint") -> Iterator[bool]:
        n = self._n
        self._n += 1
        step, before = self.hb.step, self.hb.phase
        self.hb.beat(step, phase)
        if self.store is None or self.world <= 1:
            yield self.rank == 0
            self.hb.beat(step, before)
            return
        timeout = dt.timedelta(seconds=self.hb.budget_of(phase) * 1.25 + 1.0)
        try:
            self._barrier(self.store, n, timeout)
        except Exception as exc:
            raise Rank0IOTimeout(f"rank0_io({phase!r}): ranks did not all arrive within "
                               f"{timeout.total_seconds():g} s: {exc}") from exc
        if n > 0 and self.rank == 0:
            for key in ("in", "go", "out"):
                with contextlib.suppress(Exception):
                    self.store.delete_key(f"{_PREFIX}{n - 1}/{key}")
        out = f"{_PREFIX}{n}/out"
        if self.rank == 0:
            try:
                yield True
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    self.store.set(out, f"error:{type(exc).__name__}: {exc}"[:4000])
                raise
            self.store.set(out, "ok")
        else:
            yield False
            try:
                self.store.wait([out], timeout)
                verdict = self.store.get(out).decode("utf-8", "replace")
            except Exception as exc:
                raise Rank0IOTimeout(f"rank0_io({phase!r}): rank 0 did not finish within "
                                   f"{timeout.total_seconds():g} s: {exc}") from exc
            if verdict != "ok":
                raise Rank0IOError(f"rank0_io({phase!r}): rank 0 failed: {verdict.removeprefix('error:')}")
        self.hb.beat(step, before)
