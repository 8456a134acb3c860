"""The JSON Schema of a DDPJob spec (``schemas/ddpjob.schema.json``), built by ``k8sddp.schemagen``.

The Kubernetes types the spec passes through to the pod (volumes, mounts, affinity, security
contexts, containers, ...) are not written here: they are the definitions of the Kubernetes pod spec
embedded in the PyTorchJob CRD (``$defs``, extracted by :func:`k8sddp.schemagen.pod_definitions`),
so editors complete them and the spec refuses what the API server would. Every number is bounded
by the reader's limit (:mod:`k8sddp.bounds`); defaults are those of ``k8sddp/render/model.py``
(``DEFAULTS``, kept equal by tests/test_render.py).
"""

from __future__ import annotations

from typing import Any

from . import bounds
from . import guardvars as gv
from .schemabase import LABEL_VALUE, QUALIFIED_NAME

__all__ = ["POD_DEFINITIONS", "ddpjob_schema"]

#: ``$defs`` name -> where it sits in the CRD's pod template (path below ``template``).
POD_DEFINITIONS: dict[str, tuple[str, ...]] = {
    "Affinity": ("spec", "affinity"),
    "Container": ("spec", "initContainers", "items"),
    "EnvFromSource": ("spec", "initContainers", "items", "envFrom", "items"),
    "EnvVarSource": ("spec", "initContainers", "items", "env", "items", "valueFrom"),
    "PodSecurityContext": ("spec", "securityContext"),
    "SecurityContext": ("spec", "initContainers", "items", "securityContext"),
    "Toleration": ("spec", "tolerations", "items"),
    "TopologySpreadConstraint": ("spec", "topologySpreadConstraints", "items"),
    "Volume": ("spec", "volumes", "items"),
    "VolumeMount": ("spec", "initContainers", "items", "volumeMounts", "items"),
}

_INT32 = bounds.INT32_MAX
_INT64 = bounds.INT64_MAX


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _int(lo: int, hi: int, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi, **extra}


def _list_of(name: str, description: str) -> dict[str, Any]:
    return {"type": "array", "items": _ref(name), "description": description}


_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_RESOURCE_MAP = {
    "type": "object",
    "propertyNames": {"pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"},
    "additionalProperties": _ref("Quantity"),
}


def _labels() -> dict[str, Any]:
    """Label keys and values as the API server checks them (KDP102's own patterns): the pods get
    these labels, and a pod the operator cannot create is a job that never starts."""
    return {"type": "object", "propertyNames": {"pattern": QUALIFIED_NAME},
            "additionalProperties": {"type": "string", "pattern": LABEL_VALUE}}


def _annotations() -> dict[str, Any]:
    return {"type": "object", "propertyNames": {"pattern": QUALIFIED_NAME}, "additionalProperties": {"type": "string"}}


def _spec_properties() -> dict[str, Any]:
    duration = _int(1, bounds.MAX_DURATION_SECONDS)
    return {
        "image": {"type": "string", "minLength": 1, "description": "Training image whose entrypoint can run `k8sddp launch` (see Dockerfile)."},
        "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"], "default": "IfNotPresent"},
        "imagePullSecrets": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "torchVersion": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+", "description": "torch version in the image, e.g. \"2.13\". Older than 2.2 gets the legacy NCCL_ASYNC_ERROR_HANDLING=1 instead of TORCH_NCCL_ASYNC_ERROR_HANDLING=3."},
        "command": {
            "type": "object",
            "additionalProperties": False,
            "description": "What each worker runs under `k8sddp launch` and torchrun: exactly one of task, module, script.",
            "oneOf": [{"required": ["task"]}, {"required": ["module"]}, {"required": ["script"]}],
            "properties": {
                "task": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$", "description": "module:attr of a k8sddp task, run by the guarded loop (`k8sddp train --task`)."},
                "module": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.]*$", "description": "A Python module run as `torchrun -m MODULE`."},
                "script": {"type": "string", "minLength": 1, "description": "A script path run as `torchrun SCRIPT`."},
                "args": {"type": "array", "items": {"type": "string"}, "default": []},
            },
        },
        "nodes": _int(1, _INT32, default=1, description="Pods: one Master plus nodes-1 Workers. Not with elastic."),
        "elastic": {
            "type": "object",
            "additionalProperties": False,
            "required": ["minNodes", "maxNodes"],
            "description": "Elastic job: Worker replicas only, c10d rendezvous.",
            "properties": {
                "minNodes": _int(1, _INT32),
                "maxNodes": _int(1, _INT32),
                "maxRestarts": _int(0, _INT32, default=3),
                "rdzvBackend": {"enum": ["c10d", "etcd", "etcd-v2"], "default": "c10d"},
            },
        },
        "procsPerNode": _int(1, _INT32, description="Processes (ranks) per pod. Default: gpusPerNode when that is above 0, else 1."),
        "gpusPerNode": _int(0, _INT32, description="GPUs per pod (spec.gpuResource, requests = limits). Default: procsPerNode (one GPU per process); 0 makes a CPU job. Must equal procsPerNode when above 0."),
        "gpuResource": {"type": "string", "default": "nvidia.com/gpu", "minLength": 1, "description": "The extended resource that counts GPUs (amd.com/gpu, ...)."},
        "cpu": {**_ref("Quantity"), "description": "CPU request and limit per pod (Kubernetes quantity)."},
        "memory": {**_ref("Quantity"), "description": "Memory request and limit per pod (Kubernetes quantity, e.g. 32Gi)."},
        "resources": {
            "type": "object",
            "additionalProperties": False,
            "description": "More requests and limits of the pytorch container (ephemeral-storage, hugepages-2Mi, vpc.amazonaws.com/efa, rdma/...). "
            "Extended resources get requests = limits. cpu, memory and the GPU resource are set by spec.cpu, spec.memory and spec.gpusPerNode.",
            "properties": {"requests": _RESOURCE_MAP, "limits": _RESOURCE_MAP},
        },
        "env": {
            "type": "array",
            "description": "Extra env for the pytorch container. A mandatory guard variable may only be repeated with render's own value.",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "oneOf": [{"required": ["value"]}, {"required": ["valueFrom"]}],
                "properties": {
                    "name": {"type": "string", "pattern": "^[-._a-zA-Z][-._a-zA-Z0-9]*$"},
                    "value": {"type": "string"},
                    "valueFrom": _ref("EnvVarSource"),
                },
            },
        },
        "envFrom": _list_of("EnvFromSource", "ConfigMaps and Secrets whose keys become env of the pytorch container (spec.env and the guard variables win)."),
        "shmSize": {**_ref("Quantity"), "default": "8Gi", "description": "sizeLimit of the memory-backed /dev/shm (the container default is 64 MiB)."},
        "checkpoint": {
            "type": "object",
            "additionalProperties": False,
            "required": ["claimName"],
            "description": "Persistent volume for checkpoints, traces, run records and flight-recorder dumps.",
            "properties": {
                "claimName": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
                "mountPath": {"type": "string", "pattern": "^/[^\\s]*[^/\\s]$", "default": "/checkpoints"},
            },
        },
        "volumes": _list_of("Volume", "More pod volumes (a ConfigMap with the training config, a dataset PVC). Not named dshm or checkpoints."),
        "volumeMounts": _list_of("VolumeMount", "More mounts of the pytorch container; not at /dev/shm or inside the checkpoint mount."),
        "timeouts": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "processGroupSeconds": {**duration, "default": gv.DEFAULT_PG_TIMEOUT_SECONDS},
                "watchdogSeconds": {**duration, "default": gv.DEFAULT_WATCHDOG_TIMEOUT_SECONDS},
            },
        },
        "maxHangRestarts": _int(0, _INT32, default=gv.DEFAULT_MAX_HANG_RESTARTS),
        "seed": _int(0, bounds.MAX_SEED, default=0),
        "restartPolicy": {"enum": ["ExitCode", "OnFailure", "Never", "Always"], "default": "ExitCode"},
        "backoffLimit": _int(0, _INT32, default=3),
        "activeDeadlineSeconds": _int(1, _INT64, default=604800),
        "ttlSecondsAfterFinished": _int(0, _INT32),
        "cleanPodPolicy": {"enum": ["All", "Running", "None"], "default": "Running"},
        "terminationGracePeriodSeconds": _int(1, _INT64, default=120),
        "nodeSelector": _STRING_MAP,
        "tolerations": {"type": "array", "items": _ref("Toleration")},
        "affinity": _ref("Affinity"),
        "topologySpreadConstraints": _list_of("TopologySpreadConstraint", "How the pods spread over nodes, racks or zones."),
        "serviceAccountName": {"type": "string"},
        "priorityClassName": {"type": "string"},
        "podLabels": {**_labels(), "description": "Labels of the pods only (metadata.labels go to the job and its pods)."},
        "podAnnotations": {**_annotations(), "description": "Annotations of the pods (metadata.annotations go to the job)."},
        "securityContext": {**_ref("PodSecurityContext"), "description": "The pod's securityContext."},
        "containerSecurityContext": {**_ref("SecurityContext"), "description": "The pytorch container's securityContext (privileged: true is passed on, and strict validate warns, KDP320)."},
        "hostNetwork": {"type": "boolean", "description": "Pods on the node's network (RDMA/RoCE setups); render then sets dnsPolicy ClusterFirstWithHostNet so the master's name still resolves."},
        "initContainers": _list_of("Container", "Init containers, run to completion before the pytorch container (after the sidecars start)."),
        "sidecars": _list_of("Container", "Containers that run beside pytorch, rendered as native sidecars (init containers with restartPolicy Always, Kubernetes >= 1.29): they never keep a failed pod alive."),
        "podTemplatePatch": {
            "type": "object",
            "additionalProperties": False,
            "description": "A strategic-merge patch (as `kubectl patch --type=strategic`: containers, volumes and env merged by name, "
            "volumeMounts by mountPath, ports by containerPort, `$patch: replace|delete`, null deletes) applied to every replica's pod "
            "template. The result is validated: a patch that voids a guard is refused.",
            "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}},
        },
        "scheduling": {
            "type": "object",
            "additionalProperties": False,
            "description": "Gang scheduling (runPolicy.schedulingPolicy) and the pods' scheduler.",
            "properties": {
                "schedulerName": {"type": "string"},
                "queue": {"type": "string"},
                "priorityClass": {"type": "string"},
                "minAvailable": _int(1, _INT32),
                "scheduleTimeoutSeconds": _int(1, _INT32),
            },
        },
    }


def ddpjob_schema(pod_defs: dict[str, Any]) -> dict[str, Any]:
    """The DDPJob schema, with ``pod_defs`` (``$defs`` name -> converted CRD schema) embedded.

    Args:
        pod_defs: one schema per name of :data:`POD_DEFINITIONS`.
    """
    defs = {name: pod_defs[name] for name in sorted(POD_DEFINITIONS)}
    defs["Quantity"] = {
        "description": "A non-negative Kubernetes quantity (resource.Quantity): 4, \"500m\", \"32Gi\".",
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "number", "minimum": 0}, {"type": "string", "pattern": bounds.NONNEGATIVE_QUANTITY_PATTERN}],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://k8sddp.dev/schemas/ddpjob.schema.json",
        "title": "k8sddp DDPJob: a short spec that `k8sddp render` turns into a guarded Kubeflow PyTorchJob",
        "description": "Generated by `python -m k8sddp.schemagen` (k8sddp/ddpjobschema.py); the $defs are the pod types of the Kubeflow PyTorchJob CRD.",
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "k8sddp.dev/v1alpha1"},
            "kind": {"const": "DDPJob"},
            "metadata": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$", "maxLength": 48,
                             "description": "PyTorchJob name: a DNS-1035 label, short enough for the operator's <name>-worker-<i> Services."},
                    "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                    "labels": _labels(),
                    "annotations": _annotations(),
                },
            },
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["image", "command", "checkpoint"],
                "properties": _spec_properties(),
                "not": {"required": ["nodes", "elastic"]},
            },
        },
        "$defs": defs,
    }
