"""What a diagnosis says (stdlib only): culprits, every rank's part, the notes on missing evidence.

The JSON form (``k8sddp diagnose --format json``) is :meth:`Diagnosis.as_dict`: a top-level
``culprits`` list of objects with ``rank``, ``node``, ``phase``, ``step``, ``kind``, ``evidence``
and ``confidence`` (the interface contract), plus ``ranks``, ``collective``, ``notes``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Culprit kinds, and the pod exit code each implies (``docs/runtime.md``, exit codes).
KIND_CODES: dict[str, int] = {
    "hang": 142,                 # one rank stalled outside any collective
    "gil-starved": 142,          # ended by the C-level hard stop
    "comm": 142,                 # a collective failed or timed out with no rank to blame
    "died": 137,                 # a rank died by a signal without a record
    "collective-mismatch": 1,    # ranks issued different collectives: a bug, final
    "exception": 1,              # the task raised on one rank: a bug, final
    "config": 2,                 # configuration, final
    "preempted": 143,            # SIGTERM to the pod: nobody's fault
}
CONFIDENCE = ("low", "medium", "high")


@dataclass
class Culprit:
    """The rank (or event) a failure is blamed on.

    Attributes:
        kind: one of :data:`KIND_CODES`.
        rank, node: global rank and node rank (``None``: not a rank's fault, or unknown).
        phase, step: where the rank was (heartbeat phase; optimizer steps completed).
        evidence: one line per fact, each naming the file it comes from.
        confidence: ``high`` | ``medium`` | ``low``.
        summary: one sentence for people.
        frame: ``file:line in func`` of the stalled (or failing) frame, when known.
        collective: the collective at which the ranks parted ``{seq, op, sizes, ...}``.
        signal: the signal that ended the rank (``SIGKILL``), for ``died``.
        decision: the decision-table trigger id that matches (``k8sddp rules``).
    """

    kind: str
    rank: int | None
    node: int | None
    phase: str | None
    step: int | None
    evidence: list[str] = field(default_factory=list)
    confidence: str = "medium"
    summary: str = ""
    frame: str | None = None
    collective: dict[str, Any] | None = None
    signal: str | None = None
    decision: str | None = None

    @property
    def exit_code(self) -> int:
        """The pod exit code this kind implies."""
        return KIND_CODES.get(self.kind, 137)


@dataclass
class RankState:
    """What one rank did: ``role`` is ``culprit``, ``waiting`` (blocked on its peers),
    ``torn-down`` (ended by torchrun after another rank failed), ``done``, ``preempted`` or
    ``unknown``; ``detail`` one line."""

    rank: int
    node: int | None
    role: str
    record: str | None
    step: int | None
    phase: str | None
    detail: str = ""


@dataclass
class Diagnosis:
    """The verdict on one restart of a job.

    Attributes:
        root: the folder read; attempts: the attempt folders of this restart (one per node).
        restart: 0 for the newest restart, 1 for the one before, ...; restarts: how many exist.
        world_size: ranks expected (start records), or ``None``.
        culprits: who failed first (empty: nothing failed).
        ranks: every rank's part.
        notes: missing or truncated evidence and how it lowered the confidence.
        verdict: one line.
    """

    root: str
    attempts: list[str]
    restart: int
    restarts: int
    world_size: int | None
    culprits: list[Culprit]
    ranks: list[RankState]
    notes: list[str] = field(default_factory=list)
    verdict: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (see the module docstring)."""
        out = asdict(self)
        for c, obj in zip(out["culprits"], self.culprits, strict=True):
            c["exit_code"] = obj.exit_code
        return out
