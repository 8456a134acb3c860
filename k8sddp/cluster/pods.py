"""Finding a job's pods and printing their logs, by the labels its kind's controller sets
(:attr:`k8sddp.kinds.StatusModel.pod_labels`; default: the PyTorchJob's).

A TrainJob's pods are its JobSet's (Trainer v2.3.0 names the JobSet after the TrainJob; JobSet
v0.12.0 labels each pod ``jobset.sigs.k8s.io/jobset-name``, ``jobset.sigs.k8s.io/replicatedjob-name``
(``node`` for the trainer), and the Job controller ``batch.kubernetes.io/job-completion-index``, the
node rank); the training container is ``node``. A PyTorchJob's:

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
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import ClusterError, UsageError
from ..kinds.pytorchjob import PYTORCHJOB
from .client import Cluster

if TYPE_CHECKING:
    from ..kinds.base import Kind

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


def job_selector(name: str, replica: str | None = None, index: int | None = None, *, kind: Kind | None = None) -> str:
    """The label selector of the pods of job ``name`` of ``kind`` (default: a PyTorchJob),
    optionally of one replica type and index.

    >>> job_selector("demo", "worker", 1)
    'training.kubeflow.org/job-name=demo,training.kubeflow.org/replica-type=worker,training.kubeflow.org/replica-index=1'
    >>> from k8sddp.kinds import TRAINJOB
    >>> job_selector("demo", "node", 1, kind=TRAINJOB)
    'jobset.sigs.k8s.io/jobset-name=demo,jobset.sigs.k8s.io/replicatedjob-name=node,batch.kubernetes.io/job-completion-index=1'
    """
    labels = (kind or PYTORCHJOB).status.pod_labels
    parts = [f"{labels['job-name']}={name}"]
    if replica and "replica-type" in labels:
        parts.append(f"{labels['replica-type']}={replica.lower()}")
    if index is not None and "replica-index" in labels:
        parts.append(f"{labels['replica-index']}={index}")
    return ",".join(parts)


def select_pods(
    cluster: Cluster, name: str, *, replica: str | None, index: int | None, kind: Kind | None = None
) -> list[dict[str, Any]]:
    """The job's pods for ``logs``: by default those of the kind's log replica (a PyTorchJob's
    Master, a TrainJob's ``node`` pods), else every pod of the job.

    Raises:
        ClusterError: no such pods (reason ``NotFound``); then the job is read, so that a missing
            job or a missing CRD is reported as such; or the API failed.
    """
    kind = kind or PYTORCHJOB
    if replica is None and index is None:
        default = kind.status.log_replica
        pods = cluster.list_pods(job_selector(name, default, kind=kind)) if default else []
        if not pods:
            pods = cluster.list_pods(job_selector(name, kind=kind))
    else:
        pods = cluster.list_pods(job_selector(name, replica or None, index, kind=kind))
    if not pods:
        # say why when we can: no CRD, or no such job (as status and delete say)
        try:
            cluster.get_job(name, kind=kind)
        except ClusterError as exc:
            if exc.status != 403:  # may list pods but not read jobs: keep the general message
                raise
        what = f" {replica or 'any replica'}" + (f" index {index}" if index is not None else "")
        raise ClusterError(
            f'no pods of job "{name}" ({kind.kind}, {what.strip()}) in namespace "{cluster.namespace}": '
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
    container: str = CONTAINER,
    replica_label: str = "",
    training_replica: str = "",
) -> None:
    """Write the training container's log (``container``: ``pytorch``, a TrainJob's ``node``) of each pod to ``out``;
    a pod whose ``replica_label`` is not ``training_replica`` (a TrainJob's initializer) may lack it:
    then its only container's, or its ``kubectl.kubernetes.io/default-container``'s, as kubectl logs.

    One pod: its log as is. Several: each line prefixed ``[pod-name] `` (as ``kubectl logs
    --prefix``); with ``follow`` they stream concurrently, one thread per pod, and return when
    every stream has ended.

    Raises:
        ClusterError: a log could not be read (the first error of any pod).
        UsageError: a pod has no such container.
    """
    sink = out or sys.stdout.buffer
    lock = threading.Lock()
    prefix = len(pods) > 1
    errors: list[BaseException] = []

    def one(pod: dict[str, Any]) -> None:
        pname = pod["metadata"]["name"]
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        chosen = container
        meta = pod.get("metadata") or {}
        other_replica = bool(replica_label) and (meta.get("labels") or {}).get(replica_label) != training_replica
        if names and container not in names:
            # another replica's pod (a TrainJob's initializer: container ``dataset-initializer``):
            # as kubectl logs, its only container, else the one its default-container annotation names;
            # a training pod without the training container stays an error
            default = (meta.get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
            if not other_replica:
                raise UsageError(f'pod "{pname}" has no container named "{container}" (it has {", ".join(map(str, names))})')
            if len(names) == 1:
                chosen = str(names[0])
            elif default in names:
                chosen = str(default)
            else:
                raise UsageError(f'pod "{pname}" has no container named "{container}" (it has {", ".join(map(str, names))})')
        tag = f"[{pname}] ".encode() if prefix else b""
        pending = b""
        for chunk in cluster.pod_log(pname, container=chosen, follow=follow, tail_lines=tail_lines):
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
