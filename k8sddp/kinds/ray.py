"""KubeRay ``ray.io/v1``: RayJob, RayCluster, RayService and RayCronJob.

One module for the four kinds: they share the cluster layout (a ``headGroupSpec`` and
``workerGroupSpecs``, found at :data:`k8sddp.schemagen_ray.RAY_KINDS` in each) and differ in what
they add on top (a RayJob's runtime env and deadlines, a RayService's serve applications). Facts
(ray-project/kuberay v1.7.0; ray-project/ray 2.60; ``../shared/reference/NOTES.md``):

- the Ray container is ``containers[0]`` of every group's pod template (kuberay
  ``ray-operator/controllers/ray/utils/constant.go`` ``RayContainerIndex = 0``; ``common/pod.go``
  builds the ``ray start`` command and env into that container only): a guard on a sidecar does
  not reach the training workers;
- KubeRay mounts a memory-backed emptyDir at ``/dev/shm`` into that container unless it mounts
  something there already (``common/pod.go``, ``addEmptyDir(... SharedMemoryVolumeMountPath,
  corev1.StorageMediumMemory)``);
- a RayJob's ``runtimeEnvYAML`` ``env_vars`` reach the training workers and win over the pod's
  env (measured: pod ``=3``, runtime env ``=1`` gave ``1``); ``submissionMode: InteractiveMode``
  ignores ``runtimeEnvYAML`` (the user submits the job);
- a RayJob with ``clusterSelector`` (key ``ray.io/cluster``) runs on an existing RayCluster and
  has no pod templates of its own: its guards are those of that cluster.

Structure: ``schemas/ray.<kind>.structure.json`` (:mod:`k8sddp.schemagen_ray`) plus
:mod:`k8sddp.kinds.raychecks` (runtime envs, list-maps); guardrails: :mod:`k8sddp.validate.viewchecks`
and :mod:`k8sddp.kinds.raychecks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..schemagen_ray import RAY_KINDS, schema_name
from ..validate.envresolve import EnvValue, effective_env
from ..validate.jobparts import MAPPING, get
from ..validate.rawfinding import RawFinding
from ..validate.viewchecks import LayeredEnv
from . import raychecks
from .base import CheckContext, Kind, PodTemplateView, StatusModel
from .raychecks import group_views
from .registry import register

__all__ = [
    "HEAD_GROUP_LABEL_VALUE",
    "JOB_DEPLOYMENT_FAILED",
    "JOB_DEPLOYMENT_FINAL",
    "JOB_DEPLOYMENT_STATUSES",
    "POD_LABELS",
    "RAYCLUSTER",
    "RAYCLUSTER_CONDITIONS",
    "RAYCLUSTER_STATES",
    "RAYCRONJOB",
    "RAYJOB",
    "RAYSERVICE",
    "RAYSERVICE_CONDITIONS",
    "RAY_JOB_STATUSES",
    "RAY_JOB_TERMINAL",
    "RayClusterKind",
    "RayCronJobKind",
    "RayJobKind",
    "RayKind",
    "RayServiceKind",
]

#: The only clusterSelector key the RayJob controller reads (kuberay utils/constant.go RayJobDefaultClusterSelectorKey).
CLUSTER_SELECTOR_KEY = "ray.io/cluster"
#: Labels KubeRay puts on every Ray pod (kuberay ``ray-operator/controllers/ray/common/pod.go``
#: ``labelPod``; keys from ``utils/constant.go`` ``RayClusterLabelKey``, ``RayNodeTypeLabelKey``,
#: ``RayNodeGroupLabelKey``, ``RayWorkerReplicaIndexKey``; the same at v1.6.1 and v1.7.0):
#: ``ray.io/cluster`` is the RayCluster's name, ``ray.io/node-type`` ``head`` or ``worker``
#: (``RayNodeType``), ``ray.io/group`` the worker group's ``groupName`` or ``headgroup`` for the
#: head (``RayNodeHeadGroupLabelValue``); ``ray.io/worker-group-replica-index`` (0 to
#: replicas-1, on worker pods only) is set while the ``RayMultiHostIndexing`` feature gate is on
#: (beta, default on since v1.6: ``pkg/features/features.go``). The user cannot override the
#: first three.
POD_LABELS: Mapping[str, str] = {
    "cluster": "ray.io/cluster",
    "replica-type": "ray.io/node-type",
    "group": "ray.io/group",
    "replica-index": "ray.io/worker-group-replica-index",
}
#: ``ray.io/group`` of the head pod (kuberay utils/constant.go ``RayNodeHeadGroupLabelValue``).
HEAD_GROUP_LABEL_VALUE = "headgroup"

#: RayCluster ``status.conditions[].type`` (kuberay ``apis/ray/v1/raycluster_types.go``
#: ``RayClusterConditionType``, v1.6.1 = v1.7.0; set while the ``RayClusterStatusConditions`` gate
#: is on, beta and default on): ``RayClusterProvisioned`` (all pods ready the first time; never
#: changes after), ``HeadPodReady``, ``ReplicaFailure`` (a pod could not be created or deleted;
#: the Go constant is ``RayClusterReplicaFailure`` but the value is ``ReplicaFailure``),
#: ``RayClusterSuspending``, ``RayClusterSuspended``. They are independent flags, not a life
#: order: the cluster's state is ``status.state``.
RAYCLUSTER_CONDITIONS = ("RayClusterProvisioned", "HeadPodReady", "ReplicaFailure", "RayClusterSuspending", "RayClusterSuspended")
#: RayService ``status.conditions[].type`` (``apis/ray/v1/rayservice_types.go``
#: ``RayServiceConditionType``): ``Ready``, ``UpgradeInProgress``, ``RollbackInProgress``; v1.7.0
#: adds ``Suspending`` and ``Suspended``.
RAYSERVICE_CONDITIONS = ("Ready", "UpgradeInProgress", "RollbackInProgress", "Suspending", "Suspended")
#: RayJob ``status.jobDeploymentStatus`` values (``apis/ray/v1/rayjob_types.go``
#: ``JobDeploymentStatus``), in life order; ``""`` (New) before the first reconcile.
JOB_DEPLOYMENT_STATUSES = ("Initializing", "Waiting", "Running", "Retrying", "Suspending", "Suspended", "ValidationFailed", "Complete", "Failed")
#: The final ones: ``IsJobDeploymentTerminal`` (``Complete``, ``Failed``), and ``ValidationFailed``,
#: which the RayJob controller sets when the spec fails its checks and never leaves (its
#: ``Reconcile`` has no case for it: ``rayjob_controller.go``, the ``default`` branch only requeues).
JOB_DEPLOYMENT_FINAL = frozenset({"Complete", "Failed", "ValidationFailed"})
#: Final deployment states that mean failure. ``Complete`` is also the end of a Ray job that
#: ``STOPPED`` (``jobStatus``); a Ray job that ``FAILED`` ends as ``Failed`` (reason ``AppFailed``),
#: or ``Retrying`` while ``backoffLimit`` allows (``checkBackoffLimitAndUpdateStatusIfNeeded``).
JOB_DEPLOYMENT_FAILED = frozenset({"Failed", "ValidationFailed"})
#: RayJob ``status.jobStatus``: the Ray job's own status as Ray's dashboard reports it
#: (``JobStatus``: ``""`` New, ``PENDING``, ``RUNNING``, ``STOPPED``, ``SUCCEEDED``, ``FAILED``);
#: ``IsJobTerminal``: ``STOPPED``, ``SUCCEEDED``, ``FAILED``.
RAY_JOB_STATUSES = ("PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED")
RAY_JOB_TERMINAL = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
#: RayCluster ``status.state`` (``ClusterState``): ``ready`` (every pod Running and Ready, the
#: head and ``DesiredWorkerReplicas`` workers: ``raycluster_controller.go`` ``calculateStatus``),
#: ``suspended``; ``failed`` is deprecated and no longer set. A RayCluster has no final state.
RAYCLUSTER_STATES = ("ready", "suspended", "failed")


class RayKind(Kind):
    """What the four KubeRay kinds share: the cluster layout, the structure schema and the checks.

    Attributes:
        cluster_path: path of the RayClusterSpec from the object's root.
        job_path: path of the RayJobSpec (``None``: the kind runs no job).
    """

    group: ClassVar[str] = "ray.io"
    versions: ClassVar[tuple[str, ...]] = ("v1",)
    job_path: ClassVar[tuple[str, ...] | None] = None

    @property
    def cluster_path(self) -> tuple[str, ...]:
        """Path of the RayClusterSpec (:data:`k8sddp.schemagen_ray.RAY_KINDS`)."""
        return RAY_KINDS[self.kind][1]

    def check_structure(self, obj: Mapping[str, Any]) -> list[RawFinding]:
        """KDP150, KDP151, KDP102 (the CRD schema), KDP106 (list-maps) and KDP152 (runtime envs)."""
        findings = raychecks.schema_findings(schema_name(self.kind), self.kind, obj)
        findings += raychecks.list_map_findings(self.pod_templates(obj, None))
        findings += self.runtime_envs(obj).findings
        return findings

    def pod_templates(self, obj: Mapping[str, Any], ctx: CheckContext | None) -> list[PodTemplateView]:
        """The head and worker groups of the object's own cluster spec (a RayJob with a
        ``clusterSelector`` has none: :meth:`check_guardrails` reads the selected cluster)."""
        return group_views(get(obj, *self.cluster_path), self.cluster_path)

    def runtime_envs(self, obj: Mapping[str, Any]) -> raychecks.RuntimeEnvs:
        """The runtime envs that lay ``env_vars`` over the pods' env (none for a RayCluster)."""
        return raychecks.RuntimeEnvs([])

    def effective_env(self, obj: Mapping[str, Any], view: PodTemplateView, ctx: CheckContext) -> dict[str, EnvValue]:
        """The kubelet's resolution of ``containers[0]``, with the first runtime env's ``env_vars`` over it."""
        if view.container is None:
            return {}
        pod = effective_env(view.container, ctx.namespace, ctx.objects)
        overlays = self.runtime_envs(obj).envs
        return LayeredEnv(pod, overlays[0].env_vars) if overlays else pod

    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """KDP201/KDP202, KDP250-KDP251 (and KDP301-KDP306, KDP360-KDP365 under strict)."""
        runtime = self.runtime_envs(obj)
        findings = raychecks.guard_findings(self.pod_templates(obj, ctx), runtime.envs, ctx)
        findings += raychecks.cluster_strict_findings(obj, self.cluster_path, ctx)
        if self.job_path is not None:
            findings += raychecks.job_findings(obj, self.job_path, runtime.envs, ctx)
        return findings


class _JobRuntimeEnv:
    """``runtimeEnvYAML`` of the RayJobSpec at ``job_path`` (ignored under InteractiveMode)."""

    job_path: ClassVar[tuple[str, ...]]

    def runtime_envs(self, obj: Mapping[str, Any]) -> raychecks.RuntimeEnvs:
        job = get(obj, *self.job_path)
        if not isinstance(job, MAPPING) or job.get("submissionMode") == "InteractiveMode":
            return raychecks.RuntimeEnvs([])
        return raychecks.job_runtime_env(job.get("runtimeEnvYAML"), (*self.job_path, "runtimeEnvYAML"))


class RayClusterKind(RayKind):
    """KubeRay RayCluster: a head group and worker groups; no job, no runtime env."""

    kind: ClassVar[str] = "RayCluster"
    status: ClassVar[StatusModel] = StatusModel(
        plural="rayclusters",
        version="v1",
        condition_types=RAYCLUSTER_CONDITIONS,
        final_conditions=frozenset(),
        pod_labels=POD_LABELS,
        container="",
        state_field="state",
        final_states=frozenset(),
        failed_states=frozenset(),
    )


class RayJobKind(_JobRuntimeEnv, RayKind):  # type: ignore[misc]
    """KubeRay RayJob: a job submitted to its own cluster (``rayClusterSpec``) or a selected one.

    Status: no conditions; ``status.jobDeploymentStatus`` (:data:`JOB_DEPLOYMENT_STATUSES`;
    ``Complete``, ``Failed`` and ``ValidationFailed`` final) with ``status.reason`` and
    ``status.message``, and ``status.jobStatus`` (the Ray job's own, :data:`RAY_JOB_STATUSES`).
    Its pods are those of the RayCluster named in ``status.rayClusterName``.
    """

    kind: ClassVar[str] = "RayJob"
    job_path: ClassVar[tuple[str, ...]] = ("spec",)
    references: ClassVar[tuple[tuple[str, str], ...]] = (("ray.io", "RayCluster"),)
    status: ClassVar[StatusModel] = StatusModel(
        plural="rayjobs",
        version="v1",
        condition_types=(),
        final_conditions=frozenset(),
        pod_labels=POD_LABELS,
        container="",
        state_field="jobDeploymentStatus",
        final_states=JOB_DEPLOYMENT_FINAL,
        failed_states=JOB_DEPLOYMENT_FAILED,
        detail_field="jobStatus",
        pods_owner_field="rayClusterName",
    )

    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """As :meth:`RayKind.check_guardrails`; with a ``clusterSelector`` and no ``rayClusterSpec``,
        the guards of the selected RayCluster of the input, or KDP251."""
        findings = super().check_guardrails(obj, ctx)
        return findings + raychecks.selected_cluster_findings(obj, self.job_path, self.runtime_envs(obj).envs, ctx)


class RayCronJobKind(RayJobKind):
    """KubeRay RayCronJob: a RayJob template (``spec.jobTemplate``) run on a schedule.

    Status: only ``status.lastScheduleTime`` (``apis/ray/v1/raycronjob_types.go``
    ``RayCronJobStatus``): no state, no conditions, never final. Each run is a RayJob labelled
    ``ray.io/cronjob-name`` (``utils/constant.go`` ``RayCronJobNameLabelKey``), whose pods are
    its RayCluster's. The controller runs only with the alpha ``RayCronJob`` feature gate.
    """

    kind: ClassVar[str] = "RayCronJob"
    job_path: ClassVar[tuple[str, ...]] = ("spec", "jobTemplate")
    status: ClassVar[StatusModel] = StatusModel(
        plural="raycronjobs",
        version="v1",
        condition_types=(),
        final_conditions=frozenset(),
        pod_labels=POD_LABELS,
        container="",
        state_field="",
        failed_states=frozenset(),
    )


class RayServiceKind(RayKind):
    """KubeRay RayService: a cluster (``rayClusterConfig``) running serve applications, each with
    its own runtime env in ``serveConfigV2``."""

    kind: ClassVar[str] = "RayService"
    status: ClassVar[StatusModel] = StatusModel(
        plural="rayservices",
        version="v1",
        condition_types=RAYSERVICE_CONDITIONS,
        final_conditions=frozenset(),
        pod_labels=POD_LABELS,
        container="",
        failed_states=frozenset(),
    )

    def runtime_envs(self, obj: Mapping[str, Any]) -> raychecks.RuntimeEnvs:
        return raychecks.serve_runtime_envs(get(obj, "spec", "serveConfigV2"), ("spec", "serveConfigV2"))


#: The registered instances.
RAYJOB = register(RayJobKind())
RAYCLUSTER = register(RayClusterKind())
RAYSERVICE = register(RayServiceKind())
RAYCRONJOB = register(RayCronJobKind())
