"""``--wait``: follow a job's conditions with watch streams until it ends or time runs out.

A PyTorchJob's or a TrainJob's: each as its kind reports them (:mod:`k8sddp.jobstatus`).

The loop: GET the job (its ``resourceVersion``), then WATCH it from there
(``fieldSelector=metadata.name=NAME``), each stream bounded by the time left; a stream the server
ends is reopened from the last ``resourceVersion`` seen; a ``410 Expired`` ERROR event (history
compacted) or a broken connection makes it GET again and re-watch (the API concepts page, "Efficient
detection of changes"). On each change the pods are listed by the operator's labels for their
states. Ends at a final condition other than Failed (``Succeeded``, a TrainJob's ``Complete``: returns), ``Failed`` (:class:`JobFailedError`, exit 4), the deadline
(:class:`WaitTimeoutError`, exit 5), or the job deleted under us (:class:`ClusterError`, exit 3).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError, JobFailedError, WaitTimeoutError
from ..jobstatus import JobState, Progress, job_state, pods_summary
from .client import Cluster
from .pods import job_selector
from .retry import is_transport_error

if TYPE_CHECKING:
    from ..kinds.base import Kind

__all__ = ["wait_for_job"]

#: Longest single watch request (seconds); the server may end it sooner.
MAX_WATCH_SECONDS = 300


def wait_for_job(
    cluster: Cluster,
    name: str,
    *,
    timeout: float | None,
    progress: Progress,
    show_pods: bool = True,
    kind: Kind | None = None,
) -> JobState:
    """Block until the job ``name`` ends.

    Args:
        cluster: the connection (its namespace is the job's).
        name: the job's name.
        timeout: seconds to wait at most; ``None`` waits for ever.
        progress: where the live state goes.
        show_pods: list the job's pods on each change (one ``list pods`` call per change).
        kind: the job's kind (default: a PyTorchJob).

    Returns:
        The final state when the job Succeeded.

    Raises:
        JobFailedError: the job ended Failed (the message has the condition's reason and message).
        WaitTimeoutError: ``timeout`` passed first.
        ClusterError: the job disappeared, or the API failed beyond the retries.
    """
    from ..kinds.pytorchjob import PYTORCHJOB

    kind = kind or PYTORCHJOB
    deadline = None if timeout is None else time.monotonic() + timeout
    obj = cluster.get_job(name, kind=kind)
    rv = str(obj["metadata"].get("resourceVersion", ""))
    state = _show(cluster, obj, progress, show_pods, None, kind)
    broken = 0
    while not state.final:
        left = _left(deadline)
        if left is not None and left <= 0:
            break
        seconds = MAX_WATCH_SECONDS if left is None else max(1, min(MAX_WATCH_SECONDS, math.ceil(left)))
        resync = False
        try:
            for event in cluster.watch_jobs(name, resource_version=rv, timeout_seconds=seconds, kind=kind):
                etype = event.get("type")
                ev_obj = event.get("object") or {}
                if etype == "ERROR":
                    if ev_obj.get("code") == 410:
                        resync = True
                        break
                    raise ClusterError(
                        f'watch of job "{name}" failed: {ev_obj.get("message", "")}',
                        status=ev_obj.get("code"),
                        reason=str(ev_obj.get("reason", "")),
                    )
                new_rv = (ev_obj.get("metadata") or {}).get("resourceVersion")
                if new_rv:
                    rv = str(new_rv)
                if etype == "BOOKMARK":
                    continue
                if etype == "DELETED":
                    progress.event(f"{name}: deleted while waiting")
                    raise ClusterError(
                        f'{kind.kind} "{name}" in namespace "{cluster.namespace}" was deleted while '
                        "waiting for it to finish",
                        status=404,
                        reason="NotFound",
                    )
                state = _show(cluster, ev_obj, progress, show_pods, state, kind)
                broken = 0
                if state.final:
                    break
                left = _left(deadline)
                if left is not None and left <= 0:
                    break
        except Exception as exc:
            if not is_transport_error(exc):
                raise
            broken += 1
            if broken > 10:
                raise ClusterError(
                    f'lost the watch on job "{name}" {broken} times in a row: {exc}', reason="Unreachable"
                ) from None
            time.sleep(min(2.0, 0.2 * broken))
            resync = True
        if resync:
            obj = cluster.get_job(name, kind=kind)
            rv = str(obj["metadata"].get("resourceVersion", ""))
            state = _show(cluster, obj, progress, show_pods, state, kind)
    if not state.final:
        progress.finish(state)
        raise WaitTimeoutError(
            f'gave up waiting for job "{name}" after {round(timeout or 0.0, 1):g} s; it is {state.condition}'
            + (f" ({state.reason})" if state.reason else "")
        )
    progress.finish(state)
    if state.failed:
        raise JobFailedError(
            f'job "{name}" Failed'
            + (f" ({state.reason})" if state.reason else "")
            + (f": {state.message}" if state.message else "")
        )
    return state


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _show(
    cluster: Cluster, obj: dict[str, Any], progress: Progress, show_pods: bool, before: JobState | None, kind: Kind
) -> JobState:
    state = job_state(obj)
    changed = before is None or (state.condition, state.reason) != (before.condition, before.reason)
    if changed and not state.final:
        extra = f": {state.message}" if state.message else ""
        progress.event(f"{state.name}: {state.condition}" + (f" ({state.reason})" if state.reason else "") + extra)
    pods = None
    if show_pods and not state.final:
        try:
            selector = job_selector(state.name or obj["metadata"]["name"], kind=kind)
            pods = pods_summary(cluster.list_pods(selector), kind.status.container)
        except ClusterError:
            pods = None  # pod listing is a nicety: no RBAC for pods must not end the wait
    progress.update(state, pods)
    return state
