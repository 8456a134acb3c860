"""How the Kubeflow Trainer v2.3.0 controller builds a TrainJob's trainer container from its runtime.

The order, read from kubeflow/trainer at tag v2.3.0:

1. the runtime's ``spec.template`` (a JobSet template): the trainer Job is the ``replicatedJobs``
   entry labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``, the trainer container
   its container named ``node`` (pkg/constants: LabelTrainJobAncestor, AncestorTrainer, Node);
2. ``spec.runtimePatches``, in order, each a strategic-merge patch of the JobSet spec
   (pkg/runtime/core/trainingruntime.go ``mergeRuntimePatches``, called from ``newRuntimeInfo``;
   the JobSet's ``replicatedJobs`` merge by ``name``, a pod's containers and volumes by ``name``,
   env by ``name``, volumeMounts by ``mountPath``). A patch may set a container's
   ``volumeMounts`` and ``securityContext`` but not its image, command or resources (the
   RuntimePatch container type has no such fields), and the webhook rejects ``env`` for the
   ``node``, ``dataset-initializer`` and ``model-initializer`` containers
   (plugins/jobset/jobset.go ``Validate``);
3. ``spec.trainer.resourcesPerNode``, strategic-merged over the ``node`` container's resources
   (``newRuntimeInfo``, pkg/util/trainingruntime ``MergeResourceRequirements``);
4. ``spec.trainer.env``, upserted by name into the ``node`` container's env, then the ``PET_*``
   rendezvous variables upserted over them when the runtime's ``mlPolicy`` is ``torch``
   (plugins/torch/torch.go ``EnforceMLPolicy``; the webhook rejects ``PET_*`` in
   ``spec.trainer.env``);
5. ``spec.trainer.image``, ``command`` and ``args`` replace the container's, and ``spec.trainer.env``
   is upserted once more (plugins/jobset/builder.go ``Builder.Trainer``).

A value in ``spec.trainer.env`` therefore wins over the same name in the runtime's container; an
``envFrom`` of the runtime's container still applies under it (kubelet order).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from decimal import ROUND_CEILING
from typing import Any

from ..bounds import quantity_value
from ..schemagen_trainer import TRAINER_GROUP
from ..validate.jobparts import MAPPING, as_list, get
from ..validate.objindex import ObjectIndex

__all__ = [
    "ANCESTOR_LABEL",
    "ANCESTOR_TRAINER",
    "JOB_COMPLETION_INDEX",
    "NODE",
    "Resolved",
    "TRAINER_PORT",
    "job_controller_env",
    "node_container",
    "resolve",
    "runtime_key",
    "strategic_merge",
    "trainer_job",
]

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
#: The trainer container's (and the trainer Job's) name.
NODE = "node"
#: constants.ContainerTrainerPort: PET_MASTER_PORT.
TRAINER_PORT = 29500
#: The variable the Job controller adds to the pods of an Indexed Job, and where it reads it from.
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
COMPLETION_INDEX_LABEL_FIELD = "metadata.labels['batch.kubernetes.io/job-completion-index']"
#: constants.TorchTuneEntrypoint: a trainer command that gets no PET_MASTER_* (torch.go).
TORCHTUNE_ENTRYPOINT = ("tune", "run")
#: Job completion index, the value of PET_NODE_RANK (constants.JobCompletionIndexFieldPath).
COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

#: Lists that strategic merge joins by a key (k8s.io/api core/v1 and JobSet v0.12.0 patchMergeKey tags).
_MERGE_KEYS = {
    "replicatedJobs": "name",
    "dependsOn": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    """``patch`` applied to ``base`` as a strategic-merge patch of the types above (a new value).

    Objects merge key by key (``null`` deletes); lists named in the merge-key table join by their
    key (entries with a new key are appended); other lists and scalars are replaced.
    """
    if isinstance(base, MAPPING) and isinstance(patch, MAPPING):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, str(key))
            else:
                out[key] = copy.deepcopy(value)
        return out
    key = _MERGE_KEYS.get(field)
    if key and isinstance(base, list) and isinstance(patch, list):
        out_list = list(base)
        for item in patch:
            name = item.get(key) if isinstance(item, MAPPING) else None
            at = next((i for i, b in enumerate(out_list) if isinstance(b, MAPPING) and name is not None and b.get(key) == name), None)
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = strategic_merge(out_list[at], item, "")
        return out_list
    return copy.deepcopy(patch)


def upsert_env(env: list[Any], entries: list[Any]) -> list[Any]:
    """``env`` with each entry of ``entries`` replacing the one of the same name, or appended
    (pkg/apply ``UpsertEnvVars``)."""
    out = list(env)
    for entry in entries:
        name = entry.get("name") if isinstance(entry, MAPPING) else None
        at = next((i for i, e in enumerate(out) if isinstance(e, MAPPING) and e.get("name") == name), None)
        if at is None:
            out.append(entry)
        else:
            out[at] = entry
    return out


def trainer_job(jobset_spec: Any) -> tuple[int, Mapping[str, Any]] | None:
    """``(index, replicatedJob)`` of the trainer Job of a JobSet spec (the one labelled as the trainer ancestor)."""
    for i, rjob in enumerate(as_list(get(jobset_spec, "replicatedJobs"))):
        if isinstance(rjob, MAPPING) and get(rjob, "template", "metadata", "labels", ANCESTOR_LABEL) == ANCESTOR_TRAINER:
            return i, rjob
    return None


def node_container(pod_spec: Any) -> tuple[int, Mapping[str, Any]] | None:
    """``(index, container)`` of the first container named ``node`` of a pod spec."""
    for i, c in enumerate(as_list(get(pod_spec, "containers"))):
        if isinstance(c, MAPPING) and c.get("name") == NODE:
            return i, c
    return None


def runtime_key(trainjob: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(apiGroup, kind, name)`` of a TrainJob's ``runtimeRef``, with the CRD's defaults
    (``trainer.kubeflow.org``, ``ClusterTrainingRuntime``); ``name`` is ``""`` when missing."""
    ref = get(trainjob, "spec", "runtimeRef")
    ref = ref if isinstance(ref, MAPPING) else {}
    group, kind, name = ref.get("apiGroup"), ref.get("kind"), ref.get("name")
    return (
        group if isinstance(group, str) else TRAINER_GROUP,
        kind if isinstance(kind, str) else "ClusterTrainingRuntime",
        name if isinstance(name, str) else "",
    )


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A TrainJob's trainer as the controller would build it.

    Attributes:
        where: the runtime, as messages name it (``ClusterTrainingRuntime 'torch-distributed'``).
        runtime: the runtime object, or ``None`` when the input lacks it.
        job_index: index of the trainer Job in the runtime's ``replicatedJobs`` (``None``: none).
        pod_spec: the trainer Job's pod spec after the runtime patches (``{}`` when unknown).
        runtime_container: the runtime's ``node`` container after the patches (``None``: none).
        container: the effective ``node`` container (``None`` when the runtime has none); when the
            runtime is missing, a container made of ``spec.trainer`` alone.
        torch: the runtime's ``mlPolicy`` is ``torch`` (PET_* injected).
    """

    where: str
    runtime: Mapping[str, Any] | None
    job_index: int | None
    pod_spec: Mapping[str, Any]
    runtime_container: Mapping[str, Any] | None
    container: Mapping[str, Any] | None
    torch: bool


def _quantity_count(value: Any) -> int:
    """``resource.Quantity.Value()``: the quantity rounded up to a whole number (``500m`` -> 1); 0
    when it is not a quantity."""
    q = quantity_value(value)
    return int(q.to_integral_value(rounding=ROUND_CEILING)) if q is not None else 0


def _gpus(resources: Mapping[str, Any]) -> int:
    """runtime.GetNumGPUPerNode: the requests' first resource whose name contains ``gpu``, else the limits'."""
    for field in ("requests", "limits"):
        listed = get(resources, field)
        for name, value in (listed.items() if isinstance(listed, MAPPING) else ()):
            if "gpu" in str(name).lower():
                count = _quantity_count(value)
                if count:
                    return count
                break
    return 0


def _cpus(resources: Mapping[str, Any]) -> int:
    """torch.go getNumCPUPerNode: the CPU request, else the CPU limit (rounded up), else 0."""
    request = _quantity_count(get(resources, "requests", "cpu"))
    return request if request else _quantity_count(get(resources, "limits", "cpu"))


def _nproc_per_node(trainer: Mapping[str, Any], runtime_container: Mapping[str, Any] | None) -> str:
    """``PET_NPROC_PER_NODE`` as plugins/torch/torch.go ``EnforceMLPolicy`` sets it: the TrainJob's
    ``numProcPerNode``; else ``auto`` with GPUs in the resources per node (torchrun then counts the
    node's GPUs), and without GPUs the CPU count of those resources (at least 1). The resources are
    ``spec.trainer.resourcesPerNode`` when set (whole, not merged), else the runtime ``node``
    container's (runtime.ExtractResourcePerNodeFromRuntime)."""
    nproc = trainer.get("numProcPerNode")
    if isinstance(nproc, int) and not isinstance(nproc, bool):
        return str(nproc)
    resources = trainer.get("resourcesPerNode")
    if not isinstance(resources, MAPPING):
        resources = get(runtime_container, "resources")
        resources = resources if isinstance(resources, MAPPING) else {}
    if _gpus(resources):
        return "auto"
    return str(max(1, _cpus(resources)))


def _pet_env(trainjob: Mapping[str, Any], runtime: Mapping[str, Any] | None, runtime_container: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The PET_* variables of plugins/torch/torch.go ``EnforceMLPolicy`` (v2.3.0): PET_NNODES (the
    TrainJob's ``numNodes``, else the runtime's ``mlPolicy.numNodes``, else 1), PET_NPROC_PER_NODE
    (:func:`_nproc_per_node`), PET_NODE_RANK (the Job completion index), and PET_MASTER_ADDR /
    PET_MASTER_PORT except for a torchtune command (``tune run``, which gets its rendezvous as
    arguments instead). Verified against the real controller by tests/kube/test_trainer.py."""
    name = get(trainjob, "metadata", "name")
    trainer = get(trainjob, "spec", "trainer")
    trainer = trainer if isinstance(trainer, MAPPING) else {}
    nodes = trainer.get("numNodes") or get(runtime, "spec", "mlPolicy", "numNodes") or 1
    env: list[dict[str, Any]] = [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": _nproc_per_node(trainer, runtime_container)},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}},
    ]
    if trainer.get("command") != list(TORCHTUNE_ENTRYPOINT):
        env += [
            {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
            {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
        ]
    return env


def _apply_trainer(container: Mapping[str, Any], trainer: Mapping[str, Any], pet: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(container)
    if isinstance(trainer.get("resourcesPerNode"), MAPPING):
        out["resources"] = strategic_merge(out.get("resources") or {}, trainer["resourcesPerNode"])
    env = upsert_env(as_list(out.get("env")), as_list(trainer.get("env")))
    env = upsert_env(env, pet)
    for key in ("image", "command", "args"):
        if trainer.get(key) is not None:
            out[key] = trainer[key]
    out["env"] = upsert_env(env, as_list(trainer.get("env")))
    return out


def job_controller_env(container: Mapping[str, Any], job_spec: Any) -> dict[str, Any]:
    """``container`` as the pods of its Job run it: an Indexed Job's pods get
    ``JOB_COMPLETION_INDEX`` (a field reference to the pod's completion-index label) appended to
    every container that does not set it (kubernetes pkg/controller/job/indexed_job_utils.go
    ``addCompletionIndexEnvVariable``). A JobSet's Jobs are Indexed unless the template says
    ``completionMode: NonIndexed`` (the JobSet webhook's default)."""
    mode = get(job_spec, "completionMode")
    env = as_list(container.get("env"))
    if mode not in (None, "Indexed") or any(isinstance(e, MAPPING) and e.get("name") == JOB_COMPLETION_INDEX for e in env):
        return dict(container)
    index = {"name": JOB_COMPLETION_INDEX, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_LABEL_FIELD}}}
    return {**container, "env": [*env, index]}


def resolve(trainjob: Mapping[str, Any], objects: ObjectIndex, namespace: str | None) -> Resolved:
    """The TrainJob's effective trainer, its runtime looked up in ``objects`` (namespaced
    ``TrainingRuntime`` in ``namespace``; cluster-scoped ``ClusterTrainingRuntime`` anywhere)."""
    group, kind, name = runtime_key(trainjob)
    where = f"{kind} {name!r}"
    trainer = get(trainjob, "spec", "trainer")
    trainer = trainer if isinstance(trainer, MAPPING) else {}
    runtime = objects.lookup(group, kind, namespace if kind == "TrainingRuntime" else None, name) if name else None
    if runtime is None and kind == "ClusterTrainingRuntime" and name:
        runtime = next((o for o in objects.objects(group, kind) if get(o, "metadata", "name") == name), None)
    if runtime is None:
        alone = _apply_trainer({"name": NODE}, trainer, [])
        return Resolved(where, None, None, {}, None, alone, False)
    torch = isinstance(get(runtime, "spec", "mlPolicy", "torch"), MAPPING)
    spec = get(runtime, "spec", "template", "spec")
    spec = spec if isinstance(spec, MAPPING) else {}
    for patch in as_list(get(trainjob, "spec", "runtimePatches")):
        body = get(patch, "trainingRuntimeSpec", "template", "spec")
        if isinstance(body, MAPPING):
            spec = strategic_merge(spec, body)
    found = trainer_job(spec)
    if found is None:
        return Resolved(where, runtime, None, {}, None, None, torch)
    index, rjob = found
    pod = get(rjob, "template", "spec", "template", "spec")
    pod = pod if isinstance(pod, MAPPING) else {}
    node = node_container(pod)
    if node is None:
        return Resolved(where, runtime, index, pod, None, None, torch)
    # the torch plugin upserts env only when the TrainJob has a spec.trainer (torch.go EnforceMLPolicy)
    pet = _pet_env(trainjob, runtime, node[1]) if torch and isinstance(get(trainjob, "spec", "trainer"), MAPPING) else []
    return Resolved(where, runtime, index, pod, node[1], _apply_trainer(node[1], trainer, pet), torch)
