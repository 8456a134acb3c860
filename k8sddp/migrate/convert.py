"""One PyTorchJob (a ruamel.yaml round-trip mapping) into a TrainJob, and the job's own runtime when
its pod template has what neither ``spec.trainer`` nor a runtime patch can carry.

Moved values are the loaded nodes themselves, so the comments inside them (and those ruamel keeps
beside a key) travel with them; what is dropped is named in a :class:`Note`. Field tables and their
sources: :mod:`k8sddp.migrate.fields`; the failure policy: :mod:`k8sddp.kinds.trainerpolicy`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from ..kinds.trainermerge import NODE
from ..runtime.autoguard import torchrun_start
from ..schemagen_trainer import TRAINER_GROUP
from . import fields as f
from .container import (
    drop_v1_only,
    num_proc_per_node,
    trainer_command,
    trainer_env,
    v1_variable_refs,
)
from .notes import INFO, LOST, CannotMigrate, JobNotes, Note, plain, put

__all__ = ["CannotMigrate", "INFO", "LOST", "Migrated", "Note", "STOCK_RUNTIME", "convert_job", "plain"]

#: The stock ClusterTrainingRuntime of Trainer v2.3.0 (manifests/base/runtimes/torch_distributed.yaml):
#: no guards, no /dev/shm, no failure policy.
STOCK_RUNTIME = "torch-distributed"
#: A pod name (the JobSet webhook checks its generated pod names as DNS-1035 labels).
POD_NAME_MAX = 63


@dataclasses.dataclass
class Migrated:
    """The outcome for one PyTorchJob.

    Attributes:
        trainjob: the TrainJob (round-trip mapping, comments attached).
        runtime: the job's own TrainingRuntime (plain data), or None when it refers to a shared one.
        runtime_ref: ``(kind, name)`` of the runtime the TrainJob refers to.
        notes: what happened to each field worth telling.
    """

    trainjob: CommentedMap
    runtime: dict[str, Any] | None
    runtime_ref: tuple[str, str]
    notes: list[Note]


def _mapping(job: JobNotes, parent: Any, key: str, path: str, *, required: bool = True) -> CommentedMap:
    value = parent.get(key) if isinstance(parent, dict) else None
    if isinstance(value, dict):
        return value  # type: ignore[return-value]
    if value is None and not required:
        return CommentedMap()
    raise job.fail(parent, key if isinstance(parent, dict) and key in parent else None, path,
                   f"must be a mapping, not {'nothing' if value is None else type(value).__name__}")


def _run_policy(job: JobNotes, spec: CommentedMap, out: CommentedMap, runtime_extra: dict[str, Any], stock: bool) -> None:
    policy = _mapping(job, spec, "runPolicy", "spec.runPolicy", required=False)
    for key, value in list(policy.items()):
        path = f"spec.runPolicy.{key}"
        if key == "activeDeadlineSeconds":
            put(out, "activeDeadlineSeconds", policy, key)
        elif key == "suspend":
            put(out, "suspend", policy, key)
        elif key == "managedBy":
            if value == "kueue.x-k8s.io/multikueue":
                put(out, "managedBy", policy, key)
            else:
                job.note(policy, key, path, f"{value} dropped: the TrainJob is managed by the Trainer controller")
        elif key == "ttlSecondsAfterFinished":
            runtime_extra["ttlSecondsAfterFinished"] = value
            job.note(policy, key, path, "moved to the job's runtime: the JobSet's spec.ttlSecondsAfterFinished")
        elif key == "backoffLimit" and stock:
            job.note(policy, key, path, f"{value}: no TrainJob equivalent: the stock runtime's Job keeps Kubernetes' "
                     "default backoffLimit (6)", LOST)
        elif key == "backoffLimit":
            # Under ExitCode the v1 operator's restarts do not count against it (NOTES.md): nothing is lost then.
            exit_code = all(isinstance(r, dict) and r.get("restartPolicy") == "ExitCode"
                            for r in spec.get("pytorchReplicaSpecs", {}).values())
            job.note(policy, key, path,
                     "no TrainJob equivalent: retries are the runtime's failure policy (final exits 1-127 fail, others "
                     "restart the whole JobSet up to its failurePolicy.maxRestarts, docs/trainer.md)", INFO if exit_code else LOST)
        elif key == "cleanPodPolicy":
            level = INFO if value in ("None", None) else LOST
            job.note(policy, key, path, f"{value}: no TrainJob or JobSet setting; which pods stay after the JobSet ends "
                     "is the JobSet controller's (spec.ttlSecondsAfterFinished in a runtime deletes them all)", level)
        elif key == "schedulingPolicy":
            job.note(policy, key, path, "no TrainJob equivalent: gang scheduling is the runtime's spec.podGroupPolicy "
                     "(coscheduling or volcano) or Kueue (label kueue.x-k8s.io/queue-name)", LOST)
        else:
            job.note(policy, key, path, "unknown runPolicy field: dropped", LOST)


#: Said of a restart policy when the trainer command is torchrun without ``k8sddp launch``.
_BARE_TORCHRUN = ("; this command is torchrun, which exits 1 whenever a worker fails (docs/cluster.md), so every failure "
                  "but a disruption (preemption, eviction) is final where v1 restarted it: `k8sddp launch --` before "
                  "torchrun (k8sddp in the image) turns hangs and lost peers into retryable codes (docs/runtime.md)")


def _bare_torchrun(command: list[Any] | None) -> bool:
    """Whether ``command`` runs torchrun, not under ``k8sddp launch`` (which maps the workers' outcome to an exit code)."""
    if not command or torchrun_start(command) is None:
        return False
    return not (len(command) > 1 and str(command[0]).rsplit("/", 1)[-1] == "k8sddp" and command[1] == "launch")


def _restart_policies(job: JobNotes, replicas: CommentedMap, stock: bool, wrapped: bool, bare: bool) -> None:
    for rtype, rspec in replicas.items():
        policy = rspec.get("restartPolicy") if isinstance(rspec, dict) else None
        path = f"spec.pytorchReplicaSpecs.{rtype}.restartPolicy"
        if stock:
            # The stock runtime sets neither restartPolicy nor backoffLimit: JobSet's webhook defaults the
            # pods to OnFailure (jobset v0.12.0 jobset_webhook.go Default) and the Job keeps Kubernetes' backoffLimit 6.
            job.note(rspec, "restartPolicy" if policy else None, path,
                     f"{policy or 'OnFailure (default)'}: the stock runtime has no failure policy: its pods restart "
                     f"OnFailure (JobSet's default), whatever the exit code, until the Job's default backoffLimit (6) is "
                     "used up, then the JobSet fails (no JobSet restarts): use the guarded runtime (without --runtime stock)", LOST)
        elif policy == "ExitCode" and wrapped:
            # torchrun exits 1 whatever its worker did (docs/cluster.md, NOTES.md): the command's own
            # retryable codes (>= 128) no longer reach the pod.
            job.note(rspec, "restartPolicy", path, "ExitCode: the command now runs under torchrun, which exits 1 "
                     "whenever its worker fails, so the command's own retryable exit codes (>= 128) that v1 restarted "
                     "become final (exit 1 fails the TrainJob); only disruptions (preemption, eviction) restart", LOST)
        elif policy == "ExitCode":
            job.note(rspec, "restartPolicy", path, "ExitCode: the guarded runtime's failure policy does the same (final "
                     "exits 1-127 fail the TrainJob, >= 128 restart the JobSet, docs/trainer.md)")
        else:
            job.note(rspec, "restartPolicy" if policy else None, path,
                     f"{policy or 'OnFailure (default)'}: v2 restarts no single pod; the guarded runtime's failure "
                     "policy applies (final exits 1-127 fail the TrainJob, >= 128 restart the whole JobSet)"
                     + (_BARE_TORCHRUN if bare and policy != "Never" else ""))


def _replicas(job: JobNotes, spec: CommentedMap) -> tuple[CommentedMap, CommentedMap, int]:
    """``(replica specs, the replica spec whose template the trainer uses, numNodes)``."""
    replicas = _mapping(job, spec, "pytorchReplicaSpecs", "spec.pytorchReplicaSpecs")
    counts = {}
    for rtype, rspec in replicas.items():
        path = f"spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in ("Master", "Worker"):
            raise job.fail(replicas, rtype, path, "only Master and Worker replicas have a TrainJob equivalent")
        if not isinstance(rspec, dict):
            raise job.fail(replicas, rtype, path, "must be a mapping")
        count = rspec.get("replicas", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < (1 if rtype == "Master" else 0) or (rtype == "Master" and count != 1):
            raise job.fail(rspec, "replicas" if "replicas" in rspec else None, f"{path}.replicas",
                           f"must be {'1' if rtype == 'Master' else 'a number >= 0'}, not {count!r}")
        counts[rtype] = count
    if sum(counts.values()) < 1:
        raise job.fail(spec, "pytorchReplicaSpecs", "spec.pytorchReplicaSpecs", "has no Master and no Worker replica (numNodes must be >= 1)")
    main = "Master" if "Master" in replicas else "Worker"
    if len(counts) == 2:
        job.note(replicas, None, "spec.pytorchReplicaSpecs",
                 f"Master (1) + Worker ({counts['Worker']}) -> spec.trainer.numNodes {sum(counts.values())}: one trainer, "
                 "node rank 0 is the former Master")
        a, b = plain(replicas["Master"].get("template")), plain(replicas["Worker"].get("template"))
        if a != b:
            a, b = (a if isinstance(a, dict) else {}), (b if isinstance(b, dict) else {})
            keys = sorted(str(k) for k in {*a, *b} if a.get(k) != b.get(k)) or ["template"]
            job.note(replicas, "Worker", "spec.pytorchReplicaSpecs.Worker.template",
                     f"differs from the Master's ({', '.join(keys)}): v2 runs one pod template on every node; the Master's is used", LOST)
    return replicas, replicas[main], sum(counts.values())


def convert_job(doc: CommentedMap, *, first_line: int = 0, runtime_name: str, stock: bool = False,
                runtime_options: dict[str, Any] | None = None) -> Migrated:
    """Convert one ``kubeflow.org/v1`` PyTorchJob.

    Args:
        doc: the PyTorchJob as loaded by ruamel.yaml's round-trip loader (mutated: its nodes move).
        first_line: 0-based line of the document in the input file (for the notes' lines).
        runtime_name: the shared guarded ClusterTrainingRuntime's name; a job that needs its own
            runtime gets a TrainingRuntime ``<runtime_name>-<job name>`` in its namespace.
        stock: refer to the stock ``torch-distributed`` runtime instead (no runtime written).
        runtime_options: options of :func:`k8sddp.render.trainer.runtime_context` for the job's
            own runtime (``artifact_claim``, ``shm_size``, ``max_restarts``, ...).

    Raises:
        CannotMigrate: a PyTorchJob without a usable ``pytorch`` container or replica specs, or
            (``stock``) one that needs its own runtime.
    """
    job = JobNotes(first_line)
    metadata = _mapping(job, doc, "metadata", "metadata")
    spec = _mapping(job, doc, "spec", "spec")
    name = metadata.get("name") or metadata.get("generateName")  # kubectl create keeps generateName
    if not isinstance(name, str) or not name.strip("-"):
        raise job.fail(metadata, "name" if "name" in metadata else None, "metadata.name", "the job has neither a name nor a generateName")
    name = name.rstrip("-")
    replicas, main, num_nodes = _replicas(job, spec)
    # The JobSet is named like the TrainJob; its pods `NAME-node-0-INDEX-xxxxx` (jobset v0.12.0
    # placement.GenPodName, completions = numNodes) must be DNS-1035 labels, which JobSet's webhook checks.
    pod_name = f"{name}-{NODE}-0-{num_nodes - 1}-abcde"
    if len(pod_name) > POD_NAME_MAX:
        raise job.fail(metadata, "name", "metadata.name",
                       f"too long for Trainer v2: the TrainJob's JobSet names its pods {name}-{NODE}-0-{num_nodes - 1}-xxxxx "
                       f"({len(pod_name)} characters, more than {POD_NAME_MAX}), so JobSet's webhook refuses the JobSet and "
                       f"the TrainJob never starts; rename the job (at least {len(pod_name) - POD_NAME_MAX} characters shorter)")
    rtype = "Master" if main is replicas.get("Master") else "Worker"
    base = f"spec.pytorchReplicaSpecs.{rtype}.template"
    template = _mapping(job, main, "template", base)
    pod = _mapping(job, template, "spec", f"{base}.spec")
    containers = pod.get("containers")
    if not isinstance(containers, list):
        raise job.fail(pod, "containers" if "containers" in pod else None, f"{base}.spec.containers", "must be a list")
    index = next((i for i, c in enumerate(containers) if isinstance(c, dict) and c.get("name") == "pytorch"), None)
    if index is None:
        raise job.fail(pod, "containers", f"{base}.spec.containers", "has no container named pytorch (the v1 training container)")
    container = containers[index]
    cpath = f"{base}.spec.containers[{index}]"
    if not isinstance(container.get("image"), str) or not container["image"]:
        raise job.fail(container, "image" if "image" in container else None, f"{cpath}.image", "the pytorch container has no image")

    # spec.trainer
    trainer = CommentedMap()
    command, no_command, wrapped = trainer_command(job, container, cpath)
    put(trainer, "image", container, "image")
    if command is not None:
        if command is container["command"]:
            put(trainer, "command", container, "command")
        else:
            trainer["command"] = command
            if "command" in container.ca.items:
                trainer.ca.items["command"] = container.ca.items["command"]
    if "args" in container:
        put(trainer, "args", container, "args")
    trainer["numNodes"] = num_nodes
    nproc = num_proc_per_node(job, spec, command, wrapped, container.get("resources"))
    if nproc is not None:
        trainer["numProcPerNode"] = nproc
    trainer["env"] = trainer_env(job, container, cpath, stock)
    if "env" in container.ca.items:
        trainer.ca.items["env"] = container.ca.items["env"]
    if container.get("resources"):
        put(trainer, "resourcesPerNode", container, "resources")
    v1_variable_refs(job, container, trainer, cpath)

    # what only the job's own runtime can carry
    runtime_node: dict[str, Any] = {}
    runtime_pod: dict[str, Any] = {}
    runtime_jobset: dict[str, Any] = {}
    drop_v1_only(job, container, cpath)
    for key in container:
        if key not in (*f.TRAINER_CONTAINER_FIELDS, *f.NODE_PATCH_FIELDS, "name"):
            runtime_node[key] = container[key]
            job.note(container, key, f"{cpath}.{key}", "no TrainJob field: moved to the job's runtime's node container")
    sidecars = [c for i, c in enumerate(containers) if i != index]
    if sidecars:
        runtime_pod["sidecars"] = sidecars
        job.note(pod, "containers", f"{base}.spec.containers",
                 f"{len(sidecars)} other container(s) moved to the job's runtime (a runtime patch may only amend the runtime's "
                 "containers); v2 sets PET_* in the node container only (the runtime's mlPolicy.torch.envInjection can add them)")
    for key in pod:
        if key in ("containers", *f.PATCH_POD_FIELDS):
            continue
        if key == "restartPolicy":
            job.note(pod, key, f"{base}.spec.restartPolicy", "dropped: the runtime's pods restart Never (its failure policy needs it)")
            continue
        runtime_pod[key] = pod[key]
        job.note(pod, key, f"{base}.spec.{key}", "a runtime patch has no such pod field: moved to the job's runtime")

    out = CommentedMap()
    if doc.ca.comment:
        out.ca.comment = doc.ca.comment  # the comments above the document
    out["apiVersion"] = f"{TRAINER_GROUP}/v1alpha1"
    out["kind"] = "TrainJob"
    for key in f.SERVER_METADATA:
        if key in metadata:
            job.note(metadata, key, f"metadata.{key}", "set by the API server: dropped")
            del metadata[key]
    put(out, "metadata", doc, "metadata")
    tspec = CommentedMap()
    out["spec"] = tspec
    tspec["runtimeRef"] = CommentedMap()  # filled below, first in the spec
    _run_policy(job, spec, tspec, runtime_jobset, stock)
    _restart_policies(job, replicas, stock, wrapped, _bare_torchrun(command))
    if spec.get("elasticPolicy") is not None:
        job.note(spec, "elasticPolicy", "spec.elasticPolicy",
                 "no Trainer v2.3 equivalent (the torch runtime has no elastic policy): the TrainJob runs a fixed "
                 f"{num_nodes} node(s)", LOST)
    for key in spec:
        if key not in ("pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"):
            job.note(spec, key, f"spec.{key}", "unknown PyTorchJob field: dropped", LOST)
    if "status" in doc:
        job.note(doc, "status", "status", "set by the controller: dropped")
    tspec["trainer"] = trainer

    _volume_clashes(job, pod, f"{base}.spec.volumes")
    _v1_labels(job, main, f"spec.pytorchReplicaSpecs.{rtype}.template")
    patch = _patch(container, pod, template)
    if patch:
        tspec["runtimePatches"] = [CommentedMap([("manager", f.MANAGER), ("trainingRuntimeSpec", patch)])]

    own = bool(runtime_node or runtime_pod or runtime_jobset or no_command)
    if own and stock:
        raise job.fail(doc, "spec", "spec", "needs its own runtime (see the notes), which the stock runtime cannot be: "
                       "migrate without --runtime stock")
    namespace = metadata.get("namespace")
    runtime = None
    if own:
        kind, ref = "TrainingRuntime", f"{runtime_name}-{name}"
        runtime = _own_runtime(ref, namespace, container["image"], runtime_node, runtime_pod, runtime_jobset, no_command,
                               runtime_options or {})
    elif stock:
        kind, ref = "ClusterTrainingRuntime", STOCK_RUNTIME
    else:
        kind, ref = "ClusterTrainingRuntime", runtime_name
    tspec["runtimeRef"].update([("apiGroup", TRAINER_GROUP), ("kind", kind), ("name", ref)])
    return Migrated(out, runtime, (kind, ref), job.notes)


#: The labels the v1 operator put on its pods (kubeflow/trainer v1.9.4 pkg/apis/kubeflow.org/v1
#: common_types.go) and what a Trainer v2.3 pod has instead (JobSet v0.12.0's labels).
V1_POD_LABELS = {
    "training.kubeflow.org/job-name": "jobset.sigs.k8s.io/jobset-name",
    "training.kubeflow.org/replica-index": "batch.kubernetes.io/job-completion-index",
    "training.kubeflow.org/replica-type": "jobset.sigs.k8s.io/replicatedjob-name (node)",
    "training.kubeflow.org/job-role": "batch.kubernetes.io/job-completion-index 0",
    "training.kubeflow.org/operator-name": "none",
}


def _v1_labels(job: JobNotes, rspec: CommentedMap, path: str) -> None:
    """A pod template that refers to a label only the v1 operator set (an affinity's selector, a
    ``fieldRef`` env): Trainer v2 pods do not have it, so the reference matches nothing."""
    text = json.dumps(plain(rspec.get("template")))
    found = [k for k in V1_POD_LABELS if k in text]
    if found:
        job.note(rspec, "template", path, f"refers to {', '.join(found)}, which only the v1 operator put on its pods: a "
                 "Trainer v2 pod has JobSet's labels instead (" + "; ".join(f"{k}: {V1_POD_LABELS[k]}" for k in found)
                 + "); update the selectors and fieldRefs", LOST)


def _volume_clashes(job: JobNotes, pod: CommentedMap, path: str) -> None:
    """A job volume named like one of the guarded runtime's (``dshm``, ``artifacts``) but of
    another source merges into it by name (strategic merge, trainer.md): a volume with two sources,
    which the API server rejects. Said, as lost (rename the volume)."""
    from ..render.trainer import runtime_context

    theirs = {v["name"]: set(v) - {"name"} for v in runtime_context()["volumes"]}
    volumes = pod.get("volumes")
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        name = volume.get("name") if isinstance(volume, dict) else None
        if name in theirs and set(volume) - {"name"} != theirs[name]:
            job.note(volumes, i, f"{path}[{i}]", f"the guarded runtime has a volume {name} of another kind; the patch merges "
                     "them by name into one volume with two sources, which the API server rejects: rename it", LOST)


def _patch(container: CommentedMap, pod: CommentedMap, template: CommentedMap) -> CommentedMap | None:
    """The runtime patch: the pod template's labels and annotations, the pod fields a patch may
    set, and the ``node`` container's volume mounts and security context."""
    pod_patch = CommentedMap()
    node = CommentedMap([("name", NODE)])
    for key in f.NODE_PATCH_FIELDS:
        if key in container:
            put(node, key, container, key)
    if len(node) > 1:
        pod_patch["containers"] = CommentedSeq([node])
    for key in f.PATCH_POD_FIELDS:
        if key in pod:
            put(pod_patch, key, pod, key)
    meta = template.get("metadata")
    pod_template = CommentedMap()
    if isinstance(meta, dict):
        kept = CommentedMap((k, meta[k]) for k in ("labels", "annotations") if meta.get(k))
        if kept:
            pod_template["metadata"] = kept
    if pod_patch:
        pod_template["spec"] = pod_patch
    if not pod_template:
        return None
    rjob = CommentedMap([("name", NODE), ("template", CommentedMap(spec=CommentedMap(template=pod_template)))])
    return CommentedMap(template=CommentedMap(spec=CommentedMap(replicatedJobs=CommentedSeq([rjob]))))


def _own_runtime(name: str, namespace: Any, image: str, node_extra: dict[str, Any], pod_extra: dict[str, Any],
                 jobset_extra: dict[str, Any], no_command: bool, options: dict[str, Any]) -> dict[str, Any]:
    """The guarded runtime of ``k8sddp runtime render`` as a namespaced TrainingRuntime, with what
    only a runtime can carry: the container fields, sidecars and pod fields no patch has, the
    JobSet's TTL; without the runtime's command when the job has none (the image's entrypoint)."""
    from ..render import render_runtime

    runtime = render_runtime(**{**options, "name": name, "image": image}).objects[0]
    runtime["kind"] = "TrainingRuntime"
    if isinstance(namespace, str) and namespace:
        runtime["metadata"]["namespace"] = namespace
    jobset = runtime["spec"]["template"]["spec"]
    jobset.update(copy.deepcopy(jobset_extra))
    pod = jobset["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    node = pod["containers"][0]
    if no_command:
        del node["command"]
    node.update(node_extra)
    sidecars = pod_extra.pop("sidecars", [])
    pod["containers"].extend(sidecars)
    pod.update(pod_extra)
    return runtime
