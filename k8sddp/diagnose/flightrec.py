"""Reading flight-recorder dumps (``fr-rank<R>.pkl``; stdlib only).

The dump is torch's pickle of a dict (``torch/csrc/distributed/c10d/FlightRecorder.cpp``,
``dump_entries``; version "2.10" with torch 2.13): ``version``, ``pg_config``, ``pg_status``
(``last_enqueued_collective``, ``last_started_collective``, ``last_completed_collective`` per
process group) and ``entries``, one per collective, oldest first, each with
``collective_seq_id``, ``profiling_name`` (``gloo:all_reduce``, ``nccl:all_reduce``),
``input_sizes``, ``output_sizes``, ``state``, ``retired``, ``process_group`` and ``frames``
(the Python stack that issued it). It is unpickled with a loader that refuses every class, so a
hostile dump cannot run code: a dump needs none (measured: only dicts, lists, tuples, strings,
numbers, ``None``). gloo records collectives but dumps only when asked (the worker asks before
it exits on a hang or a communication failure).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .stacks import Frame


class _NoClasses(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing class {module}.{name} in a flight-recorder dump")


@dataclass
class Collective:
    """One flight-recorder entry.

    Attributes:
        seq: ``collective_seq_id`` (per process group, 1 for the group's first collective).
        op: ``profiling_name`` without the backend prefix (``all_reduce``).
        in_sizes, out_sizes: tensor shapes (lists of ints per tensor).
        state: ``scheduled`` | ``started`` | ``completed``.
        retired: the entry's work object was destroyed (gloo: the collective returned).
        pg: the process group's name.
        frames: raw frames ``[{filename, line, name}]``, innermost first.
    """

    seq: int
    op: str
    in_sizes: list[Any]
    out_sizes: list[Any]
    state: str
    retired: bool | None
    pg: str
    frames: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def finished(self) -> bool:
        """The collective returned on this rank (completed, or retired: gloo never marks
        ``completed`` itself)."""
        return self.state == "completed" or bool(self.retired)

    def site(self) -> Frame | None:
        """The innermost frame outside torch: the call site in the loop or the task."""
        frames = [Frame(str(f.get("filename", "?")), int(f.get("line") or 0), str(f.get("name", "?")))
                  for f in self.frames if isinstance(f, dict)]
        for f in frames:
            if not f.in_torch:
                return f
        return frames[0] if frames else None

    def describe(self) -> str:
        """``#14 all_reduce in [[2177]]``."""
        return f"#{self.seq} {self.op} in {self.in_sizes}" + (
            f" out {self.out_sizes}" if self.out_sizes and self.out_sizes != self.in_sizes else "")


@dataclass
class FRInfo:
    """A rank's flight recorder, reduced to its default process group.

    Attributes:
        status: ``ok`` | ``missing`` | ``truncated`` | ``unreadable``.
        note: why, for a dump that is not ``ok``.
        entries: collectives of the group with the most entries, oldest first.
        pg: that group's name.
    """

    status: str
    note: str = ""
    entries: list[Collective] = field(default_factory=list)
    pg: str = ""

    @property
    def last_seq(self) -> int:
        """The highest sequence number this rank entered (0: none)."""
        return self.entries[-1].seq if self.entries else 0

    def at(self, seq: int) -> Collective | None:
        """The entry with sequence number ``seq``, or ``None`` (ring buffer overwrote it)."""
        if not self.entries:
            return None
        i = seq - self.entries[0].seq  # contiguous in the common case
        if 0 <= i < len(self.entries) and self.entries[i].seq == seq:
            return self.entries[i]
        return next((e for e in self.entries if e.seq == seq), None)

    def open(self) -> Collective | None:
        """The newest entry that had not returned when the dump was taken."""
        for e in reversed(self.entries[-4:]):
            if not e.finished:
                return e
        return None


def _op(name: Any) -> str:
    text = name if isinstance(name, str) else str(name or "?")
    return text.partition(":")[2] or text


def read_fr(path: Path) -> FRInfo:
    """Read one dump. Never raises: a missing, truncated or foreign file gives an :class:`FRInfo`
    whose ``status`` says so."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return FRInfo("missing", f"{path.name}: no flight-recorder dump")
    except OSError as exc:
        return FRInfo("unreadable", f"{path.name}: {exc.strerror or exc}")
    try:
        obj = _NoClasses(io.BytesIO(data)).load()
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, TypeError, KeyError) as exc:
        truncated = isinstance(exc, EOFError) or "truncated" in str(exc) or "ran out" in str(exc)
        return FRInfo("truncated" if truncated else "unreadable",
                      f"{path.name}: {'truncated' if truncated else 'not a flight-recorder dump'} "
                      f"({len(data)} bytes; {type(exc).__name__}: {exc})")
    if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
        return FRInfo("unreadable", f"{path.name}: not a flight-recorder dump (no entries list)")
    groups: dict[str, list[Collective]] = {}
    for e in obj["entries"]:
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        seq = e.get("collective_seq_id")
        if not isinstance(seq, int):
            continue
        pg = e.get("process_group")
        name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id", ""))
        groups.setdefault(name, []).append(Collective(
            seq, _op(e.get("profiling_name")), list(e.get("input_sizes") or []),
            list(e.get("output_sizes") or []), str(e.get("state", "")), e.get("retired"),
            name, e.get("frames") or []))
    if not groups:
        return FRInfo("ok", "", [], "")
    pg = max(groups, key=lambda k: len(groups[k]))
    return FRInfo("ok", "", groups[pg], pg)
