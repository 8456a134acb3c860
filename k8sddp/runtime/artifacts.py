"""The artifact volume's layout and its small records (torch-free).

Layout under ``K8SDDP_ARTIFACT_DIR`` (``docs/runtime.md``, "Artifacts")::

    checkpoints/ckpt-000000120.pt       torch.save payload (model, optimizer, step, RNG states)
    checkpoints/ckpt-000000120.json     manifest: size + sha256; written last = completeness marker
    launcher-state-node0.json           hang streak of node 0 (consecutive hang exits, best step)
    runs/<attempt>/run-node0.json       run record of one launcher attempt
    runs/<attempt>/started-rank1.json   a worker's start record (pid, host, torch/NCCL versions)
    runs/<attempt>/failure-rank1.json   a worker's failure record (kind, rank, step, phase, ...)
    runs/<attempt>/trace-rank1.jsonl    heartbeat trace (rank, step, phase, mono, wall)
    runs/<attempt>/stacks-rank1.txt     faulthandler output (watchdog, SIGTERM, SIGUSR1, hard stop)
    runs/<attempt>/fr-rank1.pkl         flight-recorder dump (torch's pickle format)
    runs/<attempt>/preempt              marker: the launcher received SIGTERM (preemption)

Every JSON file is written atomically (temporary file in the same folder, fsync, rename, fsync
of the folder), so a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

CHECKPOINTS = "checkpoints"
RUNS = "runs"


def fsync_dir(path: Path) -> None:
    """fsync a folder so that a rename inside it survives a crash (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: tmp file in the same folder, fsync, rename, fsync dir.

    Raises:
        OSError: the folder cannot be created or written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; post-mortem tools run as other users
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically (:func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or ``None`` when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class RunDir:
    """File names inside one attempt's folder (``runs/<attempt>/``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def started(self, rank: int) -> Path:
        """``started-rank<R>.json``: a worker's start record."""
        return self.path / f"started-rank{rank}.json"

    def failure(self, rank: int) -> Path:
        """``failure-rank<R>.json``: a worker's failure record."""
        return self.path / f"failure-rank{rank}.json"

    def trace(self, rank: int) -> Path:
        """``trace-rank<R>.jsonl``: a worker's heartbeat trace."""
        return self.path / f"trace-rank{rank}.jsonl"

    def stacks(self, rank: int) -> Path:
        """``stacks-rank<R>.txt``: a worker's faulthandler output."""
        return self.path / f"stacks-rank{rank}.txt"

    def flight_recorder(self, rank: int) -> Path:
        """``fr-rank<R>.pkl``: a worker's flight-recorder dump."""
        return self.path / f"fr-rank{rank}.pkl"

    def run_record(self, node: int) -> Path:
        """``run-node<N>.json``: the launcher's run record of node ``N``."""
        return self.path / f"run-node{node}.json"

    @property
    def preempt_marker(self) -> Path:
        """``preempt``: present once the launcher received SIGTERM or SIGINT."""
        return self.path / "preempt"

    def _by_rank(self, pattern: str) -> dict[int, Path]:
        rx = re.compile(pattern)
        out: dict[int, Path] = {}
        if self.path.is_dir():
            for entry in self.path.iterdir():
                m = rx.fullmatch(entry.name)
                if m:
                    out[int(m.group(1))] = entry
        return out

    def started_records(self) -> dict[int, dict[str, Any]]:
        """``{rank: start record}`` of every worker that got as far as writing one."""
        return {r: d for r, p in self._by_rank(r"started-rank(\d+)\.json").items()
                if isinstance(d := read_json(p), dict)}

    def failure_records(self) -> dict[int, dict[str, Any]]:
        """``{rank: failure record}``."""
        return {r: d for r, p in self._by_rank(r"failure-rank(\d+)\.json").items()
                if isinstance(d := read_json(p), dict)}

    def last_trace_entry(self, rank: int) -> dict[str, Any] | None:
        """The last complete line of a rank's heartbeat trace, or ``None``."""
        try:
            with self.trace(rank).open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 4096))
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


class ArtifactDir:
    """Top-level names under ``K8SDDP_ARTIFACT_DIR``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def checkpoints(self) -> Path:
        """``checkpoints/``."""
        return self.root / CHECKPOINTS

    @property
    def runs(self) -> Path:
        """``runs/``: one folder per launcher attempt."""
        return self.root / RUNS

    def run(self, attempt: str) -> RunDir:
        """The folder of attempt ``attempt``."""
        return RunDir(self.runs / attempt)

    def launcher_state(self, node: int) -> Path:
        """``launcher-state-node<N>.json``: node ``N``'s hang streak."""
        return self.root / f"launcher-state-node{node}.json"
