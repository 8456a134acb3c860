"""Reading and showing a job's status, for cluster jobs and local runs alike.

The object's kind (:func:`k8sddp.kinds.lookup` by its ``apiVersion`` and ``kind``) says how to
read it: its :class:`~k8sddp.kinds.StatusModel` names the final conditions, the failed one and
where the replica counts are. A TrainJob (Trainer v2.3.0 trainjob_types.go) has conditions
``Suspended``, ``Complete``, ``Failed`` (the last two copied from its JobSet with the JobSet's
reason: ``AllJobsCompleted``, ``FailJobSetFailurePolicyAction``, ``ReachedMaxRestarts``, ...) and
``jobsStatus`` (``[{"name": "node", "active": 1, "succeeded": 0, "failed": 0, ...}]``).

A PyTorchJob's ``status`` (kubeflow.org/v1 JobStatus; ../shared/reference/kubeflow CRD) holds
``conditions`` (``type`` Created, Running, Restarting, Succeeded, Suspended, Failed, each with
``status`` "True"/"False", ``reason``, ``message``, ``lastTransitionTime``), ``replicaStatuses``
(``{"Master": {"active": 1, "succeeded": 0, "failed": 0}, ...}``), ``startTime`` and
``completionTime``. The job's state is its last condition whose status is "True" (the operator
appends conditions and sets the previous Running to False on Restarting/Succeeded/Failed).

:class:`Progress` prints the state: a live, redrawn line when the stream is a terminal, plain lines
(one per change) otherwise, so logs and CI output stay readable.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from .kinds.pytorchjob import PYTORCHJOB

if TYPE_CHECKING:
    from .kinds.base import Kind

__all__ = ["FINAL_TYPES", "JobState", "Progress", "job_state", "kind_of", "pods_summary"]

#: A PyTorchJob's conditions after which nothing changes any more.
FINAL_TYPES = PYTORCHJOB.status.final_conditions


@dataclasses.dataclass(frozen=True)
class JobState:
    """A job's current state.

    Attributes:
        name: job name.
        condition: type of the last true condition (``Created``, ``Running``, ..., or ``Pending``
            when there is none yet).
        reason: that condition's reason (``PyTorchJobSucceeded``).
        message: that condition's message.
        replicas: ``{"Master": {"active": 1, "succeeded": 0, "failed": 0}, ...}``.
        final_conditions: the kind's final condition types (a PyTorchJob's Succeeded, Failed).
        failed_condition: the kind's condition of failure (``Failed``).
    """

    name: str
    condition: str
    reason: str
    message: str
    replicas: dict[str, dict[str, int]]
    final_conditions: frozenset[str] = FINAL_TYPES
    failed_condition: str = "Failed"

    @property
    def final(self) -> bool:
        """True once in a final condition (Succeeded or Failed; a TrainJob's Complete or Failed)."""
        return self.condition in self.final_conditions

    @property
    def failed(self) -> bool:
        """True once Failed."""
        return self.condition == self.failed_condition

    def replicas_text(self) -> str:
        """``Master 1 active; Worker 1 active, 1 failed`` (zero counts left out)."""
        parts = []
        for rtype in sorted(self.replicas, key=lambda r: (r != "Master", r)):
            counts = self.replicas[rtype]
            bits = [f"{counts[k]} {k}" for k in ("active", "succeeded", "failed") if counts.get(k)]
            parts.append(f"{rtype} {', '.join(bits) or '0 active'}")
        return "; ".join(parts)

    def line(self) -> str:
        """One line: ``demo: Running (PyTorchJobRunning) | Master 1 active; Worker 1 active``."""
        reason = f" ({self.reason})" if self.reason else ""
        reps = self.replicas_text()
        return f"{self.name}: {self.condition}{reason}" + (f" | {reps}" if reps else "")


def kind_of(obj: dict[str, Any]) -> Kind:
    """The registered kind of a job object (a PyTorchJob when its kind is not known)."""
    from . import kinds

    return kinds.lookup(obj.get("apiVersion"), obj.get("kind")) or PYTORCHJOB


def job_state(obj: dict[str, Any]) -> JobState:
    """The :class:`JobState` of a job object (as the API returns it), read as its kind reports status.

    The state is the last condition whose status is "True", except that a final one wins over
    any other (a TrainJob's conditions are a map by type, so their order says nothing).
    """
    status_model = kind_of(obj).status
    name = (obj.get("metadata") or {}).get("name", "")
    status = obj.get("status") or {}
    current: dict[str, Any] = {}
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and str(cond.get("status")) == "True":
            if current.get("type") in status_model.final_conditions and cond.get("type") not in status_model.final_conditions:
                continue
            current = cond
    replicas = status_model.replica_counts(status)
    # a kind without a Running condition (a TrainJob) runs once a child Job is ready (JobSet
    # v0.12.0 ReplicatedJobStatus.ready: all its pods ready or done; active counts Jobs whose pods
    # may still be Pending), or, for counts without "ready", while they show active replicas
    held = status.get(status_model.replica_status) if status_model.replica_status else None
    if isinstance(held, list):
        running = any(isinstance(e, dict) and str(e.get("ready") or "0") != "0" for e in held)
    else:
        running = any(c.get("active") for c in replicas.values())
    idle = "Running" if running else "Pending"
    return JobState(
        name=name,
        condition=str(current.get("type") or idle),
        reason=str(current.get("reason") or ""),
        message=str(current.get("message") or ""),
        replicas=replicas,
        final_conditions=status_model.final_conditions,
        failed_condition=status_model.failed_condition,
    )


def pods_summary(pods: list[dict[str, Any]], container: str = PYTORCHJOB.status.container) -> list[str]:
    """One line per pod: ``demo-worker-0  Running  restarts=1  last exit 137 (Error)``."""
    lines = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        st = pod.get("status") or {}
        text = f"{meta.get('name', '?')}  {st.get('phase', 'Unknown')}"
        for cs in st.get("containerStatuses") or []:
            if cs.get("name") != container:
                continue
            text += f"  restarts={cs.get('restartCount', 0)}"
            state = cs.get("state") or {}
            if state.get("waiting"):
                text += f"  waiting: {state['waiting'].get('reason', '')}"
            if state.get("terminated"):
                term = state["terminated"]
                text += f"  exited {term.get('exitCode')} ({term.get('reason', '')})"
            last = (cs.get("lastState") or {}).get("terminated")
            if last:
                text += f"  last exit {last.get('exitCode')} ({last.get('reason', '')})"
        lines.append(text)
    return lines


class Progress:
    """Shows a job's progress on ``stream`` (stderr by default).

    On a terminal: one line redrawn in place (``\\r`` + clear) with the elapsed time. Elsewhere:
    a plain line each time the state or the pods change, nothing in between.

    Args:
        stream: where to write.
        tty: force terminal mode on or off (default: ``stream.isatty()``).
    """

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._start = time.monotonic()
        self._last_line = ""
        self._last_pods: list[str] = []
        self._live = False
        self._drawn = 0.0

    def clear_live(self) -> None:
        """Erase the live line (before another writer prints to the same terminal)."""
        self._clear()

    def _clear(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[2K")
            self._live = False

    def event(self, text: str) -> None:
        """Print a permanent line (a condition change, a restart)."""
        self._clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def update(self, state: JobState, pods: list[str] | None = None) -> None:
        """Show ``state`` (and the pod lines, when they changed)."""
        line = state.line()
        changed = line != self._last_line
        if pods is not None and pods != self._last_pods:
            self._last_pods = list(pods)
            self._clear()
            for p in pods:
                self.stream.write(f"  {p}\n")
            changed = True
        if self.tty:
            now = time.monotonic()
            if not changed and self._live and now - self._drawn < 1.0:
                return  # the clock only needs a redraw once a second
            self._drawn = now
            elapsed = int(now - self._start)
            self._clear()
            self.stream.write(f"{line}  [{elapsed // 60:02d}:{elapsed % 60:02d}]")
            self._live = True
            self.stream.flush()
        elif changed:
            self.stream.write(line + "\n")
            self.stream.flush()
        self._last_line = line

    def finish(self, state: JobState) -> None:
        """End the live line and print the final condition with its reason and message."""
        self._clear()
        reason = f" ({state.reason})" if state.reason else ""
        msg = f": {state.message}" if state.message else ""
        self.stream.write(f"{state.name}: {state.condition}{reason}{msg}\n")
        self.stream.flush()
