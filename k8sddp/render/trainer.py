"""Kubeflow Trainer v2 renders: a TrainJob for a DDPJob spec, and the guarded ClusterTrainingRuntime.

The runtime (``k8sddp runtime render``) carries what every TrainJob of a cluster shares: the guard
variables in the ``node`` container, a memory-backed ``/dev/shm``, an artifact volume, the
exit-code failure policy (:mod:`k8sddp.kinds.trainerpolicy`) and a ``k8sddp launch`` command. The
TrainJob (``render --target trainjob``) refers to it and carries the job's own values: image,
command, sizes, its guard values in ``spec.trainer.env`` (they win over the runtime's), the
checkpoint volume and the job's ``/dev/shm`` size through a runtime patch (env cannot go there),
and ``spec.activeDeadlineSeconds``.
"""

from __future__ import annotations

import copy
from typing import Any

from .. import guardvars as gv
from ..errors import SpecError, ValidationError
from ..kinds.trainermerge import ANCESTOR_LABEL, ANCESTOR_TRAINER, NODE
from ..kinds.trainerpolicy import DEFAULT_MAX_RESTARTS, jobset_failure_policy, pod_failure_policy
from ..schemagen_trainer import RESERVED_ENV, TRAINER_GROUP
from .model import CONTAINER, DEFAULTS, launch_command
from .output import RenderResult, failing_findings, render_text

__all__ = ["DEFAULT_RUNTIME", "RUNTIME_ARTIFACT_CLAIM", "RUNTIME_ARTIFACT_MOUNT", "render_runtime", "runtime_context", "trainjob_context"]

#: The name of the runtime ``k8sddp runtime render`` writes and ``render --target trainjob`` refers to.
DEFAULT_RUNTIME = "k8sddp-torch"
#: The runtime's artifact volume (a PersistentVolumeClaim the platform team creates).
RUNTIME_ARTIFACT_CLAIM = "k8sddp-artifacts"
RUNTIME_ARTIFACT_MOUNT = "/artifacts"
#: The runtime's default image and command: the demo task of the k8sddp image.
RUNTIME_IMAGE = "ghcr.io/k8sddp/train:0.1.0"
RUNTIME_TASK = "k8sddp.runtime.demo:task"
#: DDPJob fields a TrainJob cannot carry: TrainJobSpec (v2.3.0) has no restart, backoff, TTL or
#: clean-pod field, and a runtime patch's pod spec has no priorityClassName or schedulerName
#: (trainjob_types.go RuntimePatch PodSpecPatch).
#: DDPJob pod fields a runtime patch's pod spec cannot carry (v2.3.0 PodSpecPatch has affinity,
#: containers, imagePullSecrets, initContainers, nodeSelector, schedulingGates, securityContext,
#: serviceAccountName, terminationGracePeriodSeconds, tolerations, volumes; a container patch only
#: env, name, securityContext, volumeMounts).
POD_FIELDS_WITHOUT_PATCH = ("hostNetwork", "topologySpreadConstraints", "podTemplatePatch", "envFrom", "podLabels", "podAnnotations")
NO_TRAINJOB_EQUIVALENT = ("backoffLimit", "ttlSecondsAfterFinished", "cleanPodPolicy", "priorityClassName", "scheduling")
#: The runtime patch's manager (a domain-prefixed path, KDP135).
MANAGER = "k8sddp.dev/render"


def trainer_launch_command(command: dict[str, Any], procs_per_node: int) -> list[str]:
    """``k8sddp launch -- torchrun --nproc-per-node=N <target>``: torchrun reads ``PET_NNODES``,
    ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT``, which the torch plugin injects
    (plugins/torch/torch.go), so no rendezvous flags (the elastic form of :func:`launch_command`)."""
    return launch_command(command, procs_per_node, elastic=True)


def trainjob_context(ddp: dict[str, Any], model: dict[str, Any], runtime: str = DEFAULT_RUNTIME) -> dict[str, Any]:
    """The template context of ``trainjob.yaml.j2`` for a checked DDPJob ``ddp`` and its PyTorchJob ``model``.

    Raises:
        SpecError: what a TrainJob cannot express (an elastic job; ``PET_*`` in ``spec.env``).
    """
    spec = ddp["spec"]
    dropped = [f"spec.{k}" for k in NO_TRAINJOB_EQUIVALENT if k in spec]
    if spec.get("restartPolicy", "ExitCode") != "ExitCode":
        dropped.append("spec.restartPolicy")
    if dropped:
        raise SpecError(
            f"{', '.join(dropped)}: no Trainer v2 TrainJob equivalent (restarts and backoff are the runtime's failure policy, "
            "and a runtime patch may not set priority or scheduler); remove them or render with --target pytorchjob",
            path=dropped[0],
        )
    if spec.get("elastic"):
        raise SpecError("Trainer v2.3's torch runtime has no elastic policy: render an elastic job with --target pytorchjob", path="spec.elastic")
    pod = model["template"]["spec"]
    container = next(c for c in pod["containers"] if c.get("name") == CONTAINER)
    unsupported = [f"spec.{k}" for k in POD_FIELDS_WITHOUT_PATCH if k in spec]
    if unsupported:
        raise SpecError(
            f"{', '.join(unsupported)}: a Trainer v2.3 runtime patch has no such pod field (trainjob_types.go PodSpecPatch); "
            "set it in the runtime, or render with --target pytorchjob",
            path=unsupported[0],
        )
    for i, entry in enumerate(spec.get("env", [])):
        if entry["name"] in RESERVED_ENV:
            raise SpecError(f"{entry['name']} is injected by the Trainer's torch plugin, and its webhook rejects it in spec.trainer.env (rule KDP133)", path=f"spec.env[{i}]")
    procs = int(model["nproc_per_node"])
    node_patch: dict[str, Any] = {"name": NODE, "volumeMounts": copy.deepcopy(container["volumeMounts"])}
    if container.get("securityContext"):
        node_patch["securityContext"] = container["securityContext"]
    patch: dict[str, Any] = {
        "volumes": copy.deepcopy(pod["volumes"]),
        "containers": [node_patch],
        "terminationGracePeriodSeconds": pod["terminationGracePeriodSeconds"],
    }
    for key in ("imagePullSecrets", "nodeSelector", "tolerations", "serviceAccountName", "affinity", "securityContext", "initContainers"):
        if pod.get(key):
            patch[key] = pod[key]
    return {
        "name": model["name"],
        "namespace": model["namespace"],
        "labels": model["labels"],
        "annotations": model["annotations"],
        "runtime_ref": {"apiGroup": TRAINER_GROUP, "kind": "ClusterTrainingRuntime", "name": runtime},
        "active_deadline_seconds": model["run_policy"]["activeDeadlineSeconds"],
        "trainer": {
            "image": container["image"],
            "command": trainer_launch_command(spec["command"], procs),
            "numNodes": spec.get("nodes", DEFAULTS["nodes"]),
            "numProcPerNode": procs,
            "env": container["env"],
            "resourcesPerNode": container["resources"],
        },
        "manager": MANAGER,
        "node": NODE,
        "pod_patch": patch,
    }


def runtime_context(
    *,
    name: str = DEFAULT_RUNTIME,
    image: str = RUNTIME_IMAGE,
    torch_version: str | None = None,
    artifact_claim: str = RUNTIME_ARTIFACT_CLAIM,
    artifact_mount: str = RUNTIME_ARTIFACT_MOUNT,
    shm_size: str = DEFAULTS["shmSize"],
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    grace_seconds: int = DEFAULTS["terminationGracePeriodSeconds"],
) -> dict[str, Any]:
    """The template context of ``clustertrainingruntime.yaml.j2``.

    Args:
        name: the runtime's name.
        image: the ``node`` container's default image (a TrainJob's ``spec.trainer.image`` replaces it).
        torch_version: the image's torch version (older than 2.2 gets the legacy variable name).
        artifact_claim: the PersistentVolumeClaim of the artifact volume.
        artifact_mount: where it is mounted (absolute path).
        shm_size: ``sizeLimit`` of the memory-backed ``/dev/shm``.
        max_restarts: JobSet restarts for retryable failures (exit >= 128), at least 1.
        grace_seconds: the pods' termination grace period (seconds).

    Raises:
        SpecError: an unusable value (a relative mount path, ``max_restarts`` < 1, a bad torch version).
    """
    if not artifact_mount.startswith("/"):
        raise SpecError(f"the artifact mount path must be absolute, not {artifact_mount!r}", path="--artifact-mount")
    if max_restarts < 1:
        raise SpecError(f"max restarts must be at least 1 (retryable exits restart the JobSet), not {max_restarts}", path="--max-restarts")
    artifact_dir = artifact_mount.rstrip("/") + "/k8sddp"
    try:
        env = gv.guard_env(torch_version=torch_version, artifact_dir=artifact_dir)
    except ValueError as exc:
        raise SpecError(str(exc), path="--torch-version") from exc
    return {
        "name": name,
        "labels": {"trainer.kubeflow.org/framework": "torch", "app.kubernetes.io/managed-by": "k8sddp"},
        "failure_policy": jobset_failure_policy(max_restarts),
        "node": NODE,
        "job_labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER},
        "pod_failure_policy": pod_failure_policy(),
        "grace_seconds": grace_seconds,
        "image": image,
        "command": trainer_launch_command({"task": RUNTIME_TASK}, 1),
        "env": [{"name": n, "value": v} for n, v in env],
        "volume_mounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "artifacts", "mountPath": artifact_mount}],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
            {"name": "artifacts", "persistentVolumeClaim": {"claimName": artifact_claim}},
        ],
    }


def render_runtime(**options: Any) -> RenderResult:
    """The guarded ClusterTrainingRuntime (:func:`runtime_context` names the
    options), checked under ``strict``.

    Raises:
        SpecError: an unusable option.
        ValidationError: the output fails its own check (a k8sddp bug).
    """
    objects, text = render_text("clustertrainingruntime.yaml.j2", runtime_context(**options))
    failing = failing_findings(objects, [])
    if failing:
        details = "; ".join(f"{f.rule_id} {f.path}: {f.message}" for f in failing)
        raise ValidationError(f"the rendered runtime fails its own guardrails: {details}", failing)
    return RenderResult(objects=objects, text=text)
