"""A worker's own artifacts: start and failure records, heartbeat trace, stacks, flight recorder.

Paths: :class:`k8sddp.runtime.artifacts.RunDir`. Without a run folder (no ``K8SDDP_ARTIFACT_DIR``)
stacks go to stderr and records are only printed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import faulthandler
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

from .artifacts import RunDir, write_bytes_atomic, write_json_atomic
from .watchdog import Heartbeat, Stall

#: How long a second ``failure`` caller waits for the first one's record to be on disk before it
#: returns (and, as a rule, ``os._exit``s): a few milliseconds normally; bounded so that a writer
#: stuck on a dead volume cannot keep the process alive past its hard stop.
FAILURE_WRITE_WAIT_S = 5.0


def _utc() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class Reporter:
    """Writes one rank's artifacts.

    Args:
        run: the attempt folder, or ``None``.
        rank, local_rank, world_size: this worker's place.
    """

    def __init__(self, run: RunDir | None, *, rank: int, local_rank: int, world_size: int) -> None:
        self.run = run
        self.rank = rank
        self.local_rank = local_rank
        self.world = world_size
        self.hb: Heartbeat | None = None
        #: the node rank, written into every record when set (``k8sddp.ray``)
        self.node: int | None = None
        #: ``phase -> {budget_source, ...}`` for the failure record (set by the guard).
        self.budget_info: Callable[[str], dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._wall_offset = time.time() - time.monotonic()
        self._written_failure = False
        self._failure_done = threading.Event()
        self.stacks: IO[str] = sys.stderr
        self._trace: IO[str] | None = None
        if run is not None:
            run.path.mkdir(parents=True, exist_ok=True)
            self.stacks = open(run.stacks(rank), "a", buffering=1)  # noqa: SIM115 - lives as long as the process
            self._trace = open(run.trace(rank), "a", buffering=1 << 16)  # noqa: SIM115

    # -- records --------------------------------------------------------------------------------
    def _base(self) -> dict[str, Any]:
        hb = self.hb
        now = time.monotonic()
        node = {} if self.node is None else {"node": self.node}
        return {**node,
            "rank": self.rank, "local_rank": self.local_rank, "world_size": self.world,
            "pid": os.getpid(), "host": socket.gethostname(), "time": _utc(),
            "step": hb.step if hb else None, "phase": hb.phase if hb else None,
            "since_beat_s": round(now - hb.last, 3) if hb else None,
            "budget_s": hb.budget if hb else None,
        }

    def started(self, info: dict[str, Any]) -> None:
        """Write ``started-rank<R>.json`` (pid, host, versions, backend, seed, ...)."""
        if self.run is not None:
            write_json_atomic(self.run.started(self.rank), {**self._base(), **info})

    def failure(self, kind: str, *, exit_code: int | None, message: str = "", exc: BaseException | None = None,
                stall: Stall | None = None, **extra: Any) -> None:
        """Write ``failure-rank<R>.json`` (first call wins) and print a one-line summary.

        A later call (another thread: the main thread's collective error racing the watchdog
        thread's SIGTERM or stall path) writes nothing but returns only once the first call's
        record is written (at most :data:`FAILURE_WRITE_WAIT_S`): its caller's ``os._exit``
        must not cut the first record short, or the rank would look as if it died without one.

        ``kind``: ``hang`` | ``comm`` | ``exception`` | ``config`` | ``preempted`` | ``terminated``
        | ``exited`` (zero-code and API modes: the script ended through the interpreter;
        ``exit_code`` ``None``, torchrun knows it).
        """
        with self._lock:
            first = not self._written_failure
            self._written_failure = True
        if not first:
            self._failure_done.wait(FAILURE_WRITE_WAIT_S)
            return
        try:
            self._write_failure(kind, exit_code, message, exc, stall, extra)
        finally:
            self._failure_done.set()

    def _write_failure(self, kind: str, exit_code: int | None, message: str, exc: BaseException | None,
                       stall: Stall | None, extra: dict[str, Any]) -> None:
        record = {**self._base(), "kind": kind, "exit_code": exit_code, "message": message, **extra}
        if stall is not None:
            record.update(step=stall.step, phase=stall.phase, since_beat_s=round(stall.since_beat_s, 3),
                          budget_s=stall.budget_s)
        if self.budget_info is not None and record.get("phase") is not None:
            with contextlib.suppress(Exception):
                record.update(self.budget_info(str(record["phase"])))
        if exc is not None:
            record["exception"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if record["step"] is None:  # before the heartbeat existed (configuration, task import)
            line = f"k8sddp train: rank {self.rank}: {kind}: {message}\n"
        else:
            line = (f"k8sddp train: rank {self.rank}: {kind} at step {record['step']} in phase "
                    f"{record['phase']} ({record['since_beat_s']} s since last beat): {message}\n")
        if kind != "exited":
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(line)
                sys.stderr.flush()
        if self.run is not None:
            with contextlib.suppress(OSError):
                write_json_atomic(self.run.failure(self.rank), record)

    # -- dumps ----------------------------------------------------------------------------------
    def dump_stacks(self, why: str) -> None:
        """Every thread's Python stack to the stacks file (and stderr when that is a file)."""
        for fh in {id(self.stacks): self.stacks, id(sys.stderr): sys.stderr}.values():
            with contextlib.suppress(OSError, ValueError):
                fh.write(f"--- k8sddp rank {self.rank}: {why} at {_utc()} ---\n")
                fh.flush()
                faulthandler.dump_traceback(file=fh, all_threads=True)

    def dump_flight_recorder(self) -> str | None:
        """Write the flight recorder (``torch._C._distributed_c10d._dump_fr_trace``) to
        ``fr-rank<R>.pkl``; gloo records collectives but never dumps by itself (torch 2.13, measured).
        Must run before ``destroy_process_group()``. Returns the path, or ``None``."""
        if self.run is None:
            return None
        if "torch.distributed" not in sys.modules:  # no process group: importing torch here (seconds)
            with contextlib.suppress(OSError, ValueError):  # would only eat the hard stop's margin
                sys.stderr.write(f"k8sddp train: rank {self.rank}: no flight-recorder dump: "
                                 "torch.distributed is not imported\n")
            return None
        try:
            import torch._C._distributed_c10d as c10d

            data = c10d._dump_fr_trace()  # type: ignore[attr-defined]
        except Exception as exc:  # private API: absent or failing on some builds
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"k8sddp train: rank {self.rank}: no flight-recorder dump: {exc}\n")
            return None
        path = self.run.flight_recorder(self.rank)
        with contextlib.suppress(OSError):
            write_bytes_atomic(path, data)
            return str(path)
        return None

    # -- trace ----------------------------------------------------------------------------------
    def write_trace(self, entries: list[tuple[int, str, float]]) -> None:
        """Append heartbeat entries as JSON lines ``{rank, step, phase, mono, wall}``."""
        if self._trace is None or not entries:
            return
        off = self._wall_offset
        text = "".join(
            json.dumps({"rank": self.rank, "step": s, "phase": p, "mono": round(m, 6),
                        "wall": round(m + off, 6)}) + "\n" for s, p, m in entries)
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._trace.write(text)
            self._trace.flush()

    def flush(self) -> None:
        """Write the heartbeat's buffered entries."""
        if self.hb is not None:
            self.write_trace(self.hb.drain())

    # -- watchdog callbacks ---------------------------------------------------------------------
    def on_stall(self, stall: Stall) -> None:
        """The watchdog fired: stacks, flight recorder, failure record ``hang``; the watchdog
        then exits the process with 142."""
        source = ""
        if self.budget_info is not None:
            with contextlib.suppress(Exception):
                info = self.budget_info(stall.phase)
                if info.get("budget_source") == "learned":
                    lr = info.get("learned") or {}
                    source = (f", learned: {lr.get('factor'):g} x longest interval "
                              f"{lr.get('longest_s'):.3g} s over {lr.get('intervals')} intervals")
                elif info.get("budget_source"):
                    source = f", {info['budget_source']}"
        why = (f"no heartbeat for {stall.since_beat_s:.2f} s in phase {stall.phase!r} at step "
               f"{stall.step} (budget {stall.budget_s:g} s{source})")
        self.dump_stacks("watchdog: " + why)
        fr = self.dump_flight_recorder()
        self.failure("hang", exit_code=142, message=why, stall=stall, flight_recorder=fr)
        self.flush()
