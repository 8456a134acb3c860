"""Reading an artifact volume: every node's attempt folders, grouped into restarts (stdlib only).

Layout (``docs/runtime.md``, "Artifacts"): ``runs/<attempt>/`` per launcher attempt, named
``<UTC time>-node<N>-<hex>`` by the node's launcher, holding ``run-node<N>.json``, and per rank
``started-``, ``failure-rank<R>.json``, ``trace-rank<R>.jsonl``, ``stacks-rank<R>.txt``,
``fr-rank<R>.pkl``. On a shared volume every node writes its own folders side by side.
Under Ray Train (``k8sddp.ray``) there is no launcher: one folder ``ray-<UTC start>-<hex>`` per
worker group holds every rank of every node (each record names its ``node``), so those folders
sort by rank 0's start time and each one is a restart of its own.

Node clocks drift, so attempts of one restart are not matched by time across nodes: each node's
attempts are ordered by its own folder names (its own clock), and restart ``k`` is the ``k``-th
newest attempt of every node (restarts happen together: a failure ends every node's torchrun).
Reading is lazy where it costs: the full heartbeat trace and the flight-recorder dumps are read
only when asked for (:meth:`RankData.trace`, :meth:`RankData.flight_recorder`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .flightrec import FRInfo, read_fr
from .stacks import StackInfo, parse_stacks

_FILE = re.compile(r"(started|failure|trace|stacks|fr)-rank(\d+)\.(json|jsonl|txt|pkl)")
_RECORD = re.compile(r"run-node(\d+)\.json")
_NODE = re.compile(r"-node(\d+)-")
#: Bytes read from the end of a trace for its last entry.
TAIL_BYTES = 4096


def _json(path: str | Path) -> Any:
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read())
    except (OSError, ValueError):
        return None


@dataclass
class RankData:
    """One rank of one attempt: its records and the paths of its bigger files.

    Attributes:
        rank: global rank; node: node rank (``None``: unknown); attempt: the folder's name.
        started, failure: the records (``None``: absent or unreadable; ``started`` read lazily).
        last: the trace's last complete entry ``{step, phase, mono, wall}``.
        stacks: the parsed stacks file (``None``: absent).
        paths: ``{"trace"|"stacks"|"fr"|...: path}`` of the files present (strings: a volume of
            10,000 ranks holds 50,000 files, and ``pathlib`` costs 10 us per path).
    """

    rank: int
    node: int | None
    attempt: str
    failure: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    stacks: StackInfo | None = None
    paths: dict[str, str] = field(default_factory=dict)
    _fr: FRInfo | None = None
    _started: dict[str, Any] | None = None
    _started_read: bool = False

    @property
    def started(self) -> dict[str, Any] | None:
        """The start record, read on first use (a volume of 10,000 ranks needs few of them)."""
        if not self._started_read:
            self._started_read = True
            path = self.paths.get("started")
            got = _json(path) if path else None
            self._started = got if isinstance(got, dict) else None
        return self._started

    @property
    def has_started(self) -> bool:
        """A start record exists (without reading it)."""
        return "started" in self.paths

    def flight_recorder(self) -> FRInfo:
        """The rank's flight recorder (read once; a missing dump gives status ``missing``)."""
        if self._fr is None:
            path = self.paths.get("fr")
            self._fr = read_fr(Path(path)) if path else FRInfo("missing", f"fr-rank{self.rank}.pkl: no flight-recorder dump")
        return self._fr

    def trace(self) -> list[dict[str, Any]]:
        """Every complete entry of the heartbeat trace, oldest first (a torn last line is skipped)."""
        path = self.paths.get("trace")
        if path is None:
            return []
        out = []
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except OSError:
            return []
        for line in raw.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("step"), int):
                out.append(entry)
        return out


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _last_line(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - TAIL_BYTES))
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            return entry
    return None


@dataclass
class Attempt:
    """One launcher attempt folder: ``path``, ``node``, its run record and its ranks' data."""

    path: Path
    node: int | None
    record: dict[str, Any] | None
    ranks: dict[int, RankData]
    #: files present but unreadable (truncated, not JSON): ``"name: why"``, said in the notes
    unreadable: list[str] = field(default_factory=list)

    @property
    def log_tail(self) -> list[str]:
        """The command output the launcher kept (``failure_log_tail`` of the run record)."""
        tail = (self.record or {}).get("failure_log_tail")
        return [str(x) for x in tail] if isinstance(tail, list) else []


def read_attempt(path: Path, *, read_stacks: bool = True) -> Attempt:
    """Read one attempt folder (records, last trace entries, stacks; not the dumps)."""
    files: dict[tuple[str, int], str] = {}
    records: dict[int, str] = {}
    try:
        entries = list(os.scandir(path))
    except OSError:
        entries = []
    for entry in entries:
        m = _FILE.fullmatch(entry.name)
        if m:
            files[(m.group(1), int(m.group(2)))] = entry.path
            continue
        m = _RECORD.fullmatch(entry.name)
        if m:
            records[int(m.group(1))] = entry.path
    node: int | None = None
    record = None
    unreadable: list[str] = []
    if records:
        node = min(records)
        got = _json(records[node])
        record = got if isinstance(got, dict) else None
        if record is None:
            unreadable.append(f"{Path(records[node]).name}: not a readable JSON record")
    else:
        m = _NODE.search(path.name)
        node = int(m.group(1)) if m else None
    ranks: dict[int, RankData] = {}
    for (what, rank), p in files.items():
        rd = ranks.get(rank)
        if rd is None:
            rd = ranks[rank] = RankData(rank, node, path.name)
        rd.paths[what] = p
    for rd in ranks.values():
        if "failure" in rd.paths:
            got = _json(rd.paths["failure"])
            rd.failure = got if isinstance(got, dict) else None
            if rd.failure is None:
                unreadable.append(f"failure-rank{rd.rank}.json: not a readable JSON record")
            elif rd.node is None and isinstance(rd.failure.get("node"), int):
                rd.node = rd.failure["node"]  # k8sddp.ray: one folder holds every node's ranks
        if "trace" in rd.paths:
            rd.last = _last_line(rd.paths["trace"])
            if rd.last is None and _size(rd.paths["trace"]) > 0:  # empty: no beat yet, not damage
                unreadable.append(f"trace-rank{rd.rank}.jsonl: no readable entry")
        if read_stacks and "stacks" in rd.paths:
            try:
                with open(rd.paths["stacks"], encoding="utf-8", errors="replace") as fh:
                    rd.stacks = parse_stacks(fh.read())
            except OSError:
                rd.stacks = None
    return Attempt(path, node, record, ranks, sorted(unreadable))


def _is_attempt(path: Path) -> bool:
    try:
        return any(_FILE.fullmatch(e.name) or _RECORD.fullmatch(e.name) for e in os.scandir(path))
    except OSError:
        return False


def find_attempt_dirs(root: Path) -> list[Path]:
    """Attempt folders under ``root``: ``root`` itself when it is one, else ``root/runs/*``, also
    below one or two levels (a ``submit --local`` job folder: ``<job>/pvc/<claim>/runs``); else
    the ``runs/ray-*`` folders one or two levels up (``root`` is Ray Train's ``storage_path``
    or an experiment folder inside it: ``k8sddp.ray.trainer_kwargs`` puts it at
    ``K8SDDP_ARTIFACT_DIR/ray``).

    Raises:
        FileNotFoundError: ``root`` does not exist or is not a folder.
    """
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder")
    if _is_attempt(root):
        return [root]
    for base in (root, *sorted(root.glob("*")), *sorted(root.glob("*/*"))):
        runs = base if base.name == "runs" else base / "runs"
        if runs.is_dir():
            found = sorted(p for p in runs.iterdir() if p.is_dir() and _is_attempt(p))
            if found:
                return found
    for up in (root.resolve().parent, root.resolve().parent.parent):
        runs = up / "runs"
        if runs.is_dir():
            found = sorted(p for p in runs.glob("ray-*") if p.is_dir() and _is_attempt(p))
            if found:
                return found
    return []


@dataclass
class Generation:
    """One restart: the ``k``-th newest attempt of every node (``index`` 0: the newest)."""

    index: int
    attempts: list[Attempt]

    @property
    def ranks(self) -> dict[int, RankData]:
        """Every rank of every node, by global rank."""
        out: dict[int, RankData] = {}
        for a in self.attempts:
            out.update(a.ranks)
        return out


def node_of(path: Path) -> int | None:
    """The node rank in an attempt folder's name (``...-node1-...``), or ``None``."""
    m = _NODE.search(path.name)
    return int(m.group(1)) if m else None


def group_generations(dirs: list[Path]) -> list[list[Path]]:
    """Attempt folders grouped into restarts, newest first (see the module docstring)."""
    by_node: dict[int | None, list[Path]] = {}
    for d in dirs:
        by_node.setdefault(node_of(d), []).append(d)
    for lst in by_node.values():
        lst.sort(key=lambda p: p.name)
    depth = max((len(v) for v in by_node.values()), default=0)
    return [[lst[-1 - k] for lst in by_node.values() if len(lst) > k] for k in range(depth)]


def load(root: Path, *, generation: int = 0) -> tuple[Generation, int]:
    """Read restart ``generation`` (0: the newest) under ``root``; returns it and how many
    restarts the volume holds.

    Raises:
        FileNotFoundError: ``root`` is not a folder, or holds no attempt folder.
        IndexError: ``generation`` is beyond the restarts the volume holds.
    """
    groups = group_generations(find_attempt_dirs(root))
    if not groups:
        raise FileNotFoundError(f"{root}: no attempt folders (runs/<attempt>/ with started-rank*.json, "
                                "run-node*.json)")
    if not 0 <= generation < len(groups):
        raise IndexError(f"attempt {generation} does not exist: {root} holds {len(groups)}")
    return Generation(generation, [read_attempt(p) for p in groups[generation]]), len(groups)
