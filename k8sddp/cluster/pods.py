"""Finding a PyTorchJob's pods and printing their logs.

The Kubeflow training operator labels every pod it creates (kubeflow/common
pkg/apis/common/v1/constants.go; training-operator pkg/controller.v1/common/pod.go, v1.9):
``training.kubeflow.org/job-name`` = the job's name, ``training.kubeflow.org/replica-type`` = the
replica type in lower case (``master``, ``worker``: ``strings.ToLower(rtype)``),
``training.kubeflow.org/replica-index`` = 0, 1, ..., and ``training.kubeflow.org/job-role=master``
on the Master. Pods are named ``<job>-<replica-type>-<index>``; the training container is named
``pytorch`` (../shared/reference/NOTES.md).
"""

from __future__ import annotations

import sys
import threading
from typing import Any, BinaryIO

from ..errors import ClusterError, UsageError
from ..kinds.pytorchjob import PYTORCHJOB
from .client import Cluster

__all__ = [
    "JOB_NAME_LABEL",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "job_selector",
    "select_pods",
    "stream_logs",
]

# The operator's pod labels and the training container's name, from the kind module.
JOB_NAME_LABEL = PYTORCHJOB.status.pod_labels["job-name"]
REPLICA_TYPE_LABEL = PYTORCHJOB.status.pod_labels["replica-type"]
REPLICA_INDEX_LABEL = PYTORCHJOB.status.pod_labels["replica-index"]
CONTAINER = PYTORCHJOB.status.container


def job_selector(name: str, replica: str | None = None, index: int | None = None) -> str:
    """The label selector of a job's pods, optionally of one replica type and index.

    >>> job_selector("demo", "worker", 1)
    'training.kubeflow.org/job-name=demo,training.kubeflow.org/replica-type=worker,training.kubeflow.org/replica-index=1'
    """
    parts = [f"{JOB_NAME_LABEL}={name}"]
    if replica:
        parts.append(f"{REPLICA_TYPE_LABEL}={replica.lower()}")
    if index is not None:
        parts.append(f"{REPLICA_INDEX_LABEL}={index}")
    return ",".join(parts)


def select_pods(
    cluster: Cluster, name: str, *, replica: str | None, index: int | None
) -> list[dict[str, Any]]:
    """The job's pods for ``logs``: by default the Master's (else every pod of the job).

    Raises:
        ClusterError: no such pods (reason ``NotFound``); then the job is read, so that a missing
            job or a missing PyTorchJob CRD is reported as such; or the API failed.
    """
    if replica is None and index is None:
        pods = cluster.list_pods(job_selector(name, "master"))
        if not pods:
            pods = cluster.list_pods(job_selector(name))
    else:
        pods = cluster.list_pods(job_selector(name, replica or None, index))
    if not pods:
        # say why when we can: no PyTorchJob CRD, or no such job (as status and delete say)
        try:
            cluster.get_job(name)
        except ClusterError as exc:
            if exc.status != 403:  # may list pods but not read jobs: keep the general message
                raise
        what = f" {replica or 'any replica'}" + (f" index {index}" if index is not None else "")
        raise ClusterError(
            f'no pods of job "{name}" ({what.strip()}) in namespace "{cluster.namespace}": '
            "the job has not started them yet, or its pods were cleaned up",
            status=404,
            reason="NotFound",
        )
    return pods


def stream_logs(
    cluster: Cluster,
    pods: list[dict[str, Any]],
    *,
    follow: bool,
    out: BinaryIO | None = None,
    tail_lines: int | None = None,
) -> None:
    """Write the ``pytorch`` container's log of each pod to ``out``.

    One pod: its log as is. Several: each line prefixed ``[pod-name] `` (as ``kubectl logs
    --prefix``); with ``follow`` they stream concurrently, one thread per pod, and return when
    every stream has ended.

    Raises:
        ClusterError: a log could not be read (the first error of any pod).
        UsageError: a pod has no ``pytorch`` container.
    """
    sink = out or sys.stdout.buffer
    lock = threading.Lock()
    prefix = len(pods) > 1
    errors: list[BaseException] = []

    def one(pod: dict[str, Any]) -> None:
        pname = pod["metadata"]["name"]
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if names and CONTAINER not in names:
            raise UsageError(f'pod "{pname}" has no container named "{CONTAINER}" (it has {", ".join(map(str, names))})')
        tag = f"[{pname}] ".encode() if prefix else b""
        pending = b""
        for chunk in cluster.pod_log(pname, container=CONTAINER, follow=follow, tail_lines=tail_lines):
            if not prefix:
                with lock:
                    sink.write(chunk)
                    sink.flush()
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if lines:
                with lock:
                    sink.write(b"".join(tag + line + b"\n" for line in lines))
                    sink.flush()
        if pending:
            with lock:
                sink.write(tag + pending + (b"\n" if prefix else b""))
                sink.flush()

    if not follow or len(pods) == 1:
        for pod in pods:
            one(pod)
        return

    def guarded(pod: dict[str, Any]) -> None:
        try:
            one(pod)
        except BaseException as exc:  # surfaced below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(p,), daemon=True) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    if errors:
        raise errors[0]
