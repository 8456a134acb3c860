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

__all__ = ["RAYCLUSTER", "RAYCRONJOB", "RAYJOB", "RAYSERVICE", "RayClusterKind", "RayCronJobKind", "RayJobKind", "RayKind", "RayServiceKind"]

#: The only clusterSelector key the RayJob controller reads (kuberay utils/constant.go RayJobDefaultClusterSelectorKey).
CLUSTER_SELECTOR_KEY = "ray.io/cluster"
#: Pod labels KubeRay sets (kuberay utils/constant.go).
_POD_LABELS = {"cluster": "ray.io/cluster", "replica-type": "ray.io/node-type", "group": "ray.io/group"}


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
        condition_types=("RayClusterProvisioned", "HeadPodReady", "RayClusterReplicaFailure", "RayClusterSuspending", "RayClusterSuspended"),
        final_conditions=frozenset(),
        pod_labels={"replica-type": _POD_LABELS["replica-type"]},
        container="",
    )


class RayJobKind(_JobRuntimeEnv, RayKind):  # type: ignore[misc]
    """KubeRay RayJob: a job submitted to its own cluster (``rayClusterSpec``) or a selected one.

    Status: ``status.jobDeploymentStatus`` (``Complete`` and ``Failed`` final), not conditions.
    """

    kind: ClassVar[str] = "RayJob"
    job_path: ClassVar[tuple[str, ...]] = ("spec",)
    references: ClassVar[tuple[tuple[str, str], ...]] = (("ray.io", "RayCluster"),)
    status: ClassVar[StatusModel] = StatusModel(
        plural="rayjobs", version="v1", condition_types=(), final_conditions=frozenset(), pod_labels={"replica-type": _POD_LABELS["replica-type"]}, container=""
    )

    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """As :meth:`RayKind.check_guardrails`; with a ``clusterSelector`` and no ``rayClusterSpec``,
        the guards of the selected RayCluster of the input, or KDP251."""
        findings = super().check_guardrails(obj, ctx)
        return findings + raychecks.selected_cluster_findings(obj, self.job_path, self.runtime_envs(obj).envs, ctx)


class RayCronJobKind(RayJobKind):
    """KubeRay RayCronJob: a RayJob template (``spec.jobTemplate``) run on a schedule."""

    kind: ClassVar[str] = "RayCronJob"
    job_path: ClassVar[tuple[str, ...]] = ("spec", "jobTemplate")
    status: ClassVar[StatusModel] = StatusModel(
        plural="raycronjobs", version="v1", condition_types=(), final_conditions=frozenset(), pod_labels={"replica-type": _POD_LABELS["replica-type"]}, container=""
    )


class RayServiceKind(RayKind):
    """KubeRay RayService: a cluster (``rayClusterConfig``) running serve applications, each with
    its own runtime env in ``serveConfigV2``."""

    kind: ClassVar[str] = "RayService"
    status: ClassVar[StatusModel] = StatusModel(
        plural="rayservices",
        version="v1",
        condition_types=("Ready", "UpgradeInProgress"),
        final_conditions=frozenset(),
        pod_labels={"replica-type": _POD_LABELS["replica-type"]},
        container="",
    )

    def runtime_envs(self, obj: Mapping[str, Any]) -> raychecks.RuntimeEnvs:
        return raychecks.serve_runtime_envs(get(obj, "spec", "serveConfigV2"), ("spec", "serveConfigV2"))


#: The registered instances.
RAYJOB = register(RayJobKind())
RAYCLUSTER = register(RayClusterKind())
RAYSERVICE = register(RayServiceKind())
RAYCRONJOB = register(RayCronJobKind())
