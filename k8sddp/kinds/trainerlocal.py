"""A TrainJob's pods as the Trainer v2.3.0 controller and JobSet v0.12.0 would make them: the local plan.

``submit --local`` runs what this module plans (:mod:`k8sddp.local.jobset`). The controller turns
a TrainJob and its runtime into a JobSet (plugins/jobset/builder.go): the runtime's
``spec.template`` with the runtime patches applied, the trainer Job (the ``replicatedJobs`` entry
labelled as the trainer ancestor) given ``parallelism`` = ``completions`` = the node count
(jobset.go: ``spec.trainer.numNodes``, else the runtime's ``mlPolicy.numNodes``, else the
template's ``parallelism``; trainingruntime.go and torch.go) and its ``node`` container the
effective one (:func:`.trainermerge.resolve`: overrides, ``PET_NNODES``, ``PET_NPROC_PER_NODE``,
``PET_NODE_RANK`` from the completion index, ``PET_MASTER_ADDR`` ``<job>-node-0-0.<job>``,
``PET_MASTER_PORT`` 29500). The JobSet controller creates one Indexed Job per replica of each
replicatedJob (``<jobset>-<replicatedJob>-<jobIndex>``); the Job controller creates a pod per
completion index, annotated and labelled ``batch.kubernetes.io/job-completion-index`` and with
``JOB_COMPLETION_INDEX`` in its env (kubernetes pkg/controller/job/indexed_job_utils.go).

The failure handling the local run applies is read from the same objects: each Job's
``podFailurePolicy``, ``backoffLimit`` (default 6) and pod ``restartPolicy``, the JobSet's
``failurePolicy`` (``maxRestarts``, ``rules``), and the TrainJob's ``activeDeadlineSeconds``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..schemagen_trainer import TRAINER_GROUP
from ..validate.jobparts import MAPPING, as_list, get
from ..validate.objindex import ObjectIndex
from .trainermerge import NODE, resolve, strategic_merge, trainer_job

__all__ = ["COMPLETION_INDEX", "JOB_COMPLETION_INDEX", "JobPlan", "TrainJobPlan", "plan"]

#: The completion index label and annotation of an Indexed Job's pods (batch/v1 JobCompletionIndexAnnotation).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: The variable the Job controller adds to every container of an Indexed Job's pods.
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
#: JobSet v0.12.0 pod labels (api/jobset/v1alpha2: JobSetNameKey, ReplicatedJobNameKey, JobIndexKey, RestartsKey).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
#: batch/v1 JobSpec.backoffLimit's default.
DEFAULT_BACKOFF_LIMIT = 6
#: The env names the controller sets to cluster addresses, which a local run points at this machine.
ADDRESS_ENV = ("PET_MASTER_ADDR", "PET_MASTER_PORT")


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """One Job of the JobSet (one replica of a ``replicatedJobs`` entry).

    Attributes:
        replicated_job: the ``replicatedJobs`` entry's name (``node``).
        job_index: the Job's index among the entry's replicas.
        completions: pods of the Job (Indexed: one per completion index 0..n-1).
        pod_spec: the pod spec, its ``node`` container the effective one (for the trainer Job).
        container: the container whose exit code the policy reads (``node``; else the first).
        restart_policy: the pod's ``restartPolicy`` (``Never``, ``OnFailure``).
        backoff_limit: ``backoffLimit`` (default 6).
        pod_failure_rules: ``podFailurePolicy.rules`` (``[]``: none).
        trainer: the trainer Job.
    """

    replicated_job: str
    job_index: int
    completions: int
    pod_spec: Mapping[str, Any]
    container: str
    restart_policy: str
    backoff_limit: int
    pod_failure_rules: list[Any]
    trainer: bool

    @property
    def name(self) -> str:
        """The Job's name without the JobSet's: ``node-0`` (the JobSet names it ``<jobset>-node-0``)."""
        return f"{self.replicated_job}-{self.job_index}"


@dataclasses.dataclass(frozen=True)
class TrainJobPlan:
    """The JobSet of one TrainJob.

    Attributes:
        name: the TrainJob's (and JobSet's) name.
        namespace: its namespace.
        jobs: the Jobs, trainer first.
        failure_policy: the JobSet's ``failurePolicy`` (``None``: any failed Job fails the set).
        deadline: ``spec.activeDeadlineSeconds`` (``None``: none).
        skipped: ``replicatedJobs`` a local run does not run (initializers), with why.
        address_env: the variables that name cluster addresses.
    """

    name: str
    namespace: str
    jobs: list[JobPlan]
    failure_policy: Mapping[str, Any] | None
    deadline: float | None
    skipped: list[str]
    address_env: tuple[str, ...] = ADDRESS_ENV


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def plan(trainjob: Mapping[str, Any], runtimes: Sequence[Mapping[str, Any]], namespace: str) -> TrainJobPlan:
    """The local plan of ``trainjob`` with its runtime from ``runtimes``.

    Args:
        trainjob: the TrainJob (validated).
        runtimes: TrainingRuntimes and ClusterTrainingRuntimes (the input's).
        namespace: the TrainJob's namespace (its own, else the one it is applied to).

    Raises:
        ValueError: the runtime is not among ``runtimes``, or has no trainer Job with a ``node``
            container (validate reports both: KDP230, KDP134).
    """
    index = ObjectIndex(references=((TRAINER_GROUP, "TrainingRuntime"), (TRAINER_GROUP, "ClusterTrainingRuntime")),
                        default_namespace=namespace)
    for runtime in runtimes:
        index.add(runtime)
    resolved = resolve(trainjob, index, namespace)
    if resolved.runtime is None:
        raise ValueError(f"{resolved.where} is not in the input: a local run needs the runtime's manifest")
    if resolved.container is None or resolved.job_index is None:
        raise ValueError(f"{resolved.where} has no trainer Job with a {NODE!r} container")
    name = str(get(trainjob, "metadata", "name") or "trainjob")
    spec = get(resolved.runtime, "spec", "template", "spec")
    for patch in as_list(get(trainjob, "spec", "runtimePatches")):
        body = get(patch, "trainingRuntimeSpec", "template", "spec")
        if isinstance(body, MAPPING):
            spec = strategic_merge(spec, body)  # (as resolve does: the Jobs' own settings may be patched too)
    found = trainer_job(spec)
    jobs: list[JobPlan] = []
    skipped: list[str] = []
    nodes = _int(get(trainjob, "spec", "trainer", "numNodes"), 0) or _int(get(resolved.runtime, "spec", "mlPolicy", "numNodes"), 0)
    for i, rjob in enumerate(as_list(get(spec, "replicatedJobs"))):
        if not isinstance(rjob, MAPPING):
            continue
        rname = str(rjob.get("name") or f"job{i}")
        if found is None or i != found[0]:
            skipped.append(f"{rname} (a local run starts the trainer Job only)")
            continue
        job_spec = get(rjob, "template", "spec")
        job_spec = job_spec if isinstance(job_spec, MAPPING) else {}
        pod = dict(resolved.pod_spec)
        pod["containers"] = [resolved.container if get(c, "name") == NODE else c for c in as_list(pod.get("containers"))]
        count = nodes or _int(job_spec.get("parallelism"), 1)
        for j in range(max(1, _int(rjob.get("replicas"), 1))):
            jobs.append(JobPlan(
                replicated_job=rname, job_index=j, completions=max(1, count), pod_spec=pod, container=NODE,
                restart_policy=str(get(job_spec, "template", "spec", "restartPolicy") or "Never"),
                backoff_limit=_int(job_spec.get("backoffLimit"), DEFAULT_BACKOFF_LIMIT),
                pod_failure_rules=as_list(get(job_spec, "podFailurePolicy", "rules")), trainer=True,
            ))
    policy = get(spec, "failurePolicy")
    deadline = get(trainjob, "spec", "activeDeadlineSeconds")
    return TrainJobPlan(
        name=name, namespace=namespace, jobs=jobs, failure_policy=policy if isinstance(policy, MAPPING) else None,
        deadline=float(deadline) if isinstance(deadline, (int, float)) and not isinstance(deadline, bool) else None,
        skipped=skipped,
    )
