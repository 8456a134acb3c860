"""The post-mortem decision table: what ``k8sddp diagnose`` and the launcher conclude from a
diagnosis (its kind, the phase the culprit stood in, the signal that ended it): the likely root
cause, the catalogue rules that prevent it, retry or stop, and the pod's exit code.

Generated into ``docs/decisions.md`` and printed by ``k8sddp rules``
(:mod:`k8sddp.docgen`); :mod:`k8sddp.catalogue` re-exports the table. The rule ids it names are
catalogue ids; the exit codes are the launcher's
(:mod:`k8sddp.runtime.exitcodes`).
"""

from __future__ import annotations

import dataclasses

__all__ = ["DECISIONS", "Decision", "match_decision"]


@dataclasses.dataclass(frozen=True)
class Decision:
    """One row of the post-mortem decision table (``docs/decisions.md``, ``k8sddp rules``).

    Attributes:
        trigger: stable id of the row (``hang-rank0-branch``); ``k8sddp diagnose`` prints it.
        kind: the diagnosis kind it matches (``hang``, ``collective-mismatch``, ``died``, ...).
        phases: heartbeat phases it matches (empty: any).
        signals: signals it matches, for ``died`` (empty: any).
        signature: what diagnose sees.
        hypothesis: the root cause it suggests.
        guardrails: catalogue rule ids that prevent it (validate, lint or runtime guard).
        action: ``retry`` or ``stop``.
        exit_code: the pod exit code the launcher gives it.
    """

    trigger: str
    kind: str
    phases: tuple[str, ...]
    signals: tuple[str, ...]
    signature: str
    hypothesis: str
    guardrails: tuple[str, ...]
    action: str
    exit_code: int


#: The decision table; the first matching row wins (:func:`match_decision`).
DECISIONS: tuple[Decision, ...] = (
    Decision("hang-rank0-branch", "hang", ("eval", "checkpoint"), (),
             "one rank stalled in phase eval or checkpoint, outside any collective, while its peers wait in the next collective",
             "a rank-conditional branch (rank-0-only evaluation or save) holds one rank",
             ("KDP501", "KDP503", "KDP603", "KDP601"), "retry", 142),
    Decision("hang-data", "hang", ("data",), (),
             "one rank stalled in phase data (fetching a batch) while its peers wait in the step's all-reduce",
             "data loading stalls on one rank: slow or unreachable storage, a deadlocked DataLoader worker, exhausted /dev/shm",
             ("KDP307", "KDP508", "KDP601"), "retry", 142),
    Decision("hang-own-code", "hang", ("hook", "init"), (),
             "one rank stalled in the task's own code (phase hook) outside any collective",
             "the task's own code blocks on one rank: IO, a lock, a rank-conditional wait",
             ("KDP501", "KDP502", "KDP601"), "retry", 142),
    Decision("hang-in-step", "hang", (), (),
             "one rank behind its peers in the step, its flight recorder short of the collective they entered",
             "a slow or stuck rank inside the step (device, host contention, a value-dependent branch)",
             ("KDP510", "KDP601", "KDP302"), "retry", 142),
    Decision("gil-starved", "gil-starved", (), (),
             "a rank ended by the hard stop ('Timeout (' dump, SIGALRM) with its main thread inside one C call",
             "a C call held the GIL for longer than the budget (a long tensor op, a C extension without GIL release)",
             ("KDP602",), "retry", 142),
    Decision("collective-mismatch", "collective-mismatch", (), (),
             "ranks issued different collectives at one sequence number (flight recorder), or gloo aborted: 'Received data size doesn't match expected size'",
             "a rank-conditional collective or a rank-dependent early exit: one rank issues a collective its peers do not",
             ("KDP501", "KDP502", "KDP503", "KDP604"), "stop", 1),
    Decision("died-oom", "died", (), ("SIGKILL",),
             "a rank vanished without a record, killed by SIGKILL",
             "the kernel's OOM killer (container memory limit) or an eviction",
             ("KDP307", "KDP608"), "retry", 137),
    Decision("died-crash", "died", (), (),
             "a rank vanished without a record, killed by another signal (SIGSEGV, SIGABRT, SIGBUS)",
             "a native crash in torch or an extension",
             ("KDP202", "KDP608"), "retry", 137),
    Decision("exception", "exception", (), (),
             "one rank's failure record holds an exception; its peers only saw broken collectives",
             "a bug in the task (or data that only that rank sees)",
             ("KDP607",), "stop", 1),
    Decision("config", "config", (), (),
             "a rank refused its configuration (config record)",
             "a missing or malformed setting, a --task that cannot be imported",
             ("KDP301", "KDP302", "KDP305"), "stop", 2),
    Decision("comm-failure", "comm", (), (),
             "collectives failed or timed out on every rank and no rank stood outside one (or NCCL's watchdog tore a rank down)",
             "the network or a peer's device failed; NCCL asynchronous error handling ended the rank",
             ("KDP201", "KDP609", "KDP304"), "retry", 142),
    Decision("preempted", "preempted", (), (),
             "the launcher received SIGTERM; the ranks agreed on a step and wrote a final checkpoint",
             "preemption, eviction or deletion of the pod: nobody's fault",
             ("KDP605",), "retry", 143),
)


def match_decision(kind: str, phase: str | None = None, signal: str | None = None) -> Decision | None:
    """The first :data:`DECISIONS` row for a diagnosis ``kind`` (and ``phase``, ``signal``), or ``None``."""
    for d in DECISIONS:
        if d.kind != kind:
            continue
        if d.phases and phase not in d.phases:
            continue
        if d.signals and signal not in d.signals:
            continue
        return d
    return None
