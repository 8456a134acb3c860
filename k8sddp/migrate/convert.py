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
import re
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from .. import guardvars as gv
from ..kinds.trainermerge import NODE
from ..runtime.autoguard import torchrun_start
from ..schemagen_trainer import TRAINER_GROUP
from . import fields as f

__all__ = ["STOCK_RUNTIME", "CannotMigrate", "Migrated", "Note", "convert_job"]

#: The stock ClusterTrainingRuntime of Trainer v2.3.0 (manifests/base/runtimes/torch_distributed.yaml):
#: no guards, no /dev/shm, no failure policy.
STOCK_RUNTIME = "torch-distributed"
INFO, LOST = "info", "lost"
#: ``$(NAME)`` of a variable the v1 operator sets (kubelet dependent-variable syntax).
_OPERATOR_REF = re.compile(r"\$\((" + "|".join(f.OPERATOR_ENV) + r")\)")
#: The port the v1 operator requires on the pytorch container (v1.9.4 defaults: pytorchjob-port).
V1_PORT_NAME = "pytorchjob-port"


@dataclasses.dataclass(frozen=True)
class Note:
    """What migrate did with one field, or what it could not keep.

    Attributes:
        line: 1-based line of the field in the input, or None.
        path: the field's path in the PyTorchJob (``spec.runPolicy.cleanPodPolicy``).
        message: what happened, and what to do.
        level: ``info`` (mapped, or dropped because v2 does it itself) or ``lost`` (no v2
            equivalent: the TrainJob behaves differently; exit 1).
    """

    line: int | None
    path: str
    message: str
    level: str = INFO


class CannotMigrate(Exception):
    """A PyTorchJob that cannot be turned into a TrainJob at all (``path``, 1-based ``line``)."""

    def __init__(self, message: str, path: str, line: int | None) -> None:
        super().__init__(message)
        self.message, self.path, self.line = message, path, line


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


def plain(value: Any) -> Any:
    """``value`` as plain JSON data (no comments, no ruamel types)."""
    return json.loads(json.dumps(value, default=str))


class _Job:
    """State of one conversion: the notes and the line numbers of the input."""

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.notes: list[Note] = []

    def line(self, node: Any, key: Any = None) -> int | None:
        """1-based input line of ``node[key]`` (or of ``node``)."""
        lc = getattr(node, "lc", None)
        if lc is None:
            return None
        try:
            where = (lc.key(key) if isinstance(node, CommentedMap) else lc.item(key)) if key is not None else (lc.line, lc.col)
        except (KeyError, IndexError, TypeError):
            return None
        return self.first_line + where[0] + 1 if where and where[0] is not None else None

    def note(self, node: Any, key: Any, path: str, message: str, level: str = INFO) -> None:
        self.notes.append(Note(self.line(node, key), path, message, level))

    def fail(self, node: Any, key: Any, path: str, message: str) -> CannotMigrate:
        return CannotMigrate(message, path, self.line(node, key))


def _put(dst: CommentedMap, key: str, src: CommentedMap, src_key: str) -> None:
    """``dst[key] = src[src_key]``, with the comments ruamel keeps beside the key."""
    dst[key] = src[src_key]
    if src_key in src.ca.items:
        dst.ca.items[key] = src.ca.items[src_key]


def _mapping(job: _Job, parent: Any, key: str, path: str, *, required: bool = True) -> CommentedMap:
    value = parent.get(key) if isinstance(parent, dict) else None
    if isinstance(value, dict):
        return value  # type: ignore[return-value]
    if value is None and not required:
        return CommentedMap()
    raise job.fail(parent, key if isinstance(parent, dict) and key in parent else None, path,
                   f"must be a mapping, not {'nothing' if value is None else type(value).__name__}")


def _command(job: _Job, container: CommentedMap, path: str) -> tuple[list[Any] | None, bool, bool]:
    """The trainer command, whether the job's own runtime must drop the runtime's command (the
    job has none), and whether the command was wrapped in torchrun.

    torchrun (or ``python -m torch.distributed.run``) stays as it is: it reads the ``PET_*``
    values the torch plugin injects. Any other command is started under ``torchrun --no-python``:
    the v1 operator set ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` in every pod,
    v2 sets only ``PET_*``, and torchrun turns those into the variables the script reads (one
    process per node, as before). Without a command (the image's entrypoint) nothing can be wrapped.
    """
    command = container.get("command")
    if command is None:
        job.note(container, "args" if "args" in container else None, f"{path}.command",
                 "no command: the image's entrypoint runs (the job's runtime has no command, so the runtime's cannot "
                 "replace it), but v2 injects only PET_* variables, not the MASTER_ADDR, MASTER_PORT, WORLD_SIZE and "
                 "RANK the v1 operator set; unless the entrypoint starts torchrun, set spec.trainer.command", LOST)
        return None, True, False
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise job.fail(container, "command", f"{path}.command", "must be a list of strings")
    start = torchrun_start(command)
    if start is not None:
        command, removed = _drop_operator_flags(command, start)
        if removed:
            job.note(container, "command", f"{path}.command",
                     f"{' '.join(removed)} dropped: they name variables of the v1 operator; torchrun reads the same "
                     "values from the PET_* variables Trainer v2 injects")
        flags = [a for a in command[start:] if a.startswith(f.RENDEZVOUS_FLAGS)]
        if flags:
            job.note(container, "command", f"{path}.command",
                     f"torchrun flags {', '.join(flags)} override or bypass the static rendezvous Trainer v2 sets up through "
                     "PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT (torchrun reads PET_<FLAG> only as a "
                     "flag's default): remove them", LOST)
        return command, False, False
    if any("torchrun" in a or "torch.distributed.run" in a for a in command):
        job.note(container, "command", f"{path}.command",
                 "a shell command that starts torchrun: kept as it is; check it passes no MASTER_ADDR, MASTER_PORT, "
                 "WORLD_SIZE or RANK (v2 sets only PET_*, which torchrun reads by itself)", LOST)
        return command, False, False
    wrapped = CommentedSeq(["torchrun", "--no-python", *command])
    job.note(container, "command", f"{path}.command",
             "started under `torchrun --no-python` (numProcPerNode 1): v2 injects only PET_*, and torchrun gives the "
             "command the MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK and LOCAL_RANK the v1 operator set; the image "
             "must have torchrun (it comes with torch)")
    return wrapped, False, True


def _drop_operator_flags(command: list[Any], start: int) -> tuple[list[Any], list[str]]:
    """``command`` without torchrun rendezvous flags whose value is ``$(VAR)`` of a variable the v1
    operator set (``--master-addr=$(MASTER_ADDR)``, as k8sddp's PyTorchJob render writes): in v2
    the variable is unset and the kubelet would pass the text as it is; the removed tokens."""
    keep: list[Any] = list(command[:start])
    removed: list[str] = []
    i = start
    while i < len(command):
        arg = command[i]
        flag, eq, value = arg.partition("=")
        if (arg + ("" if eq else "=")).startswith(f.RENDEZVOUS_FLAGS) and not eq and i + 1 < len(command):
            value, width = command[i + 1], 2
        else:
            width = 1
        if arg.startswith(f.RENDEZVOUS_FLAGS) and _OPERATOR_REF.fullmatch(str(value)):
            removed.extend(command[i:i + width])
            i += width
            continue
        keep.append(arg)
        i += 1
    if not removed:
        return command, []
    seq = CommentedSeq(keep)
    return seq, removed


def _env(job: _Job, container: CommentedMap, path: str, stock: bool) -> CommentedSeq:
    """The ``pytorch`` container's env without what the operator sets itself, plus
    ``PYTHONUNBUFFERED=1`` (the v1 operator set it in every container; v2 does not) and, for the
    stock runtime (no guards), the baseline guard variables."""
    env = container.get("env")
    if env is None:
        env = CommentedSeq()
    elif not isinstance(env, list):
        raise job.fail(container, "env", f"{path}.env", "must be a list")
    names = [e.get("name") if isinstance(e, dict) else None for e in env]
    drop = [i for i, name in enumerate(names) if name in f.OPERATOR_ENV]
    for i in drop:
        why = ("the Trainer's torch plugin injects it and its webhook rejects it in spec.trainer.env (KDP133)"
               if names[i] in f.RESERVED_ENV else "set by the v1 operator; in v2 torchrun derives it from the PET_* values")
        job.note(env, i, f"{path}.env[{i}]", f"{names[i]} dropped: {why}")
    for i in reversed(drop):
        del env[i]
    added = []
    if "PYTHONUNBUFFERED" not in names:
        added.append(("PYTHONUNBUFFERED", "1"))
    if stock:
        if gv.ASYNC_ERROR_HANDLING not in names and gv.LEGACY_ASYNC_ERROR_HANDLING not in names:
            added.append((gv.ASYNC_ERROR_HANDLING, gv.ASYNC_ERROR_HANDLING_VALUE))
        if gv.FAULTHANDLER not in names:
            added.append((gv.FAULTHANDLER, gv.FAULTHANDLER_VALUE))
    for name, value in added:
        env.append(CommentedMap([("name", name), ("value", value)]))
    if added:
        job.note(container, "env" if "env" in container else None, f"{path}.env",
                 f"added {', '.join(f'{n}={v}' for n, v in added)} (the v1 operator set PYTHONUNBUFFERED=1 itself"
                 + ("; the stock runtime has no guards" if stock else "") + ")")
    return env


def _flag_nproc(command: list[Any]) -> int | None:
    """The number a torchrun command's own ``--nproc-per-node`` gives, if any."""
    start = torchrun_start(command)
    if start is None:
        return None
    for i, arg in enumerate(command[start:], start):
        for flag in ("--nproc-per-node", "--nproc_per_node"):
            text = arg[len(flag) + 1:] if arg.startswith(flag + "=") else (command[i + 1] if arg == flag and i + 1 < len(command) else None)
            if text is not None and str(text).isdigit():
                return int(text)
    return None


def _nproc(job: _Job, spec: CommentedMap, command: list[Any] | None, wrapped: bool) -> int | None:
    """``spec.trainer.numProcPerNode`` (an integer in v2.3; unset means ``auto``)."""
    if wrapped:
        return 1
    value = spec.get("nprocPerNode")
    elastic = spec.get("elasticPolicy")
    if value is None and isinstance(elastic, dict) and elastic.get("nProcPerNode") is not None:
        value = elastic.get("nProcPerNode")
    flag = _flag_nproc(command or [])
    if value is None or str(value) == "auto":
        return flag
    if str(value).isdigit():
        if flag is not None and flag != int(value):
            job.note(spec, "nprocPerNode", "spec.nprocPerNode",
                     f"{value}, but the command's --nproc-per-node={flag} wins (an explicit torchrun flag over "
                     f"PET_NPROC_PER_NODE): numProcPerNode {flag}")
            return flag
        return int(value)
    if str(value) in ("gpu", "cpu"):
        job.note(spec, "nprocPerNode", "spec.nprocPerNode",
                 f"{value!r} has no v2.3 value (numProcPerNode is an integer): left unset, the torch runtime's default "
                 "`auto` (one process per GPU, else per CPU)")
        return None
    raise job.fail(spec, "nprocPerNode", "spec.nprocPerNode", f"must be auto, cpu, gpu or a number, not {value!r}")


def _run_policy(job: _Job, spec: CommentedMap, out: CommentedMap, runtime_extra: dict[str, Any]) -> None:
    policy = _mapping(job, spec, "runPolicy", "spec.runPolicy", required=False)
    for key, value in list(policy.items()):
        path = f"spec.runPolicy.{key}"
        if key == "activeDeadlineSeconds":
            _put(out, "activeDeadlineSeconds", policy, key)
        elif key == "suspend":
            _put(out, "suspend", policy, key)
        elif key == "managedBy":
            if value == "kueue.x-k8s.io/multikueue":
                _put(out, "managedBy", policy, key)
            else:
                job.note(policy, key, path, f"{value} dropped: the TrainJob is managed by the Trainer controller")
        elif key == "ttlSecondsAfterFinished":
            runtime_extra["ttlSecondsAfterFinished"] = value
            job.note(policy, key, path, "moved to the job's runtime: the JobSet's spec.ttlSecondsAfterFinished")
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


def _restart_policies(job: _Job, replicas: CommentedMap, stock: bool) -> None:
    for rtype, rspec in replicas.items():
        policy = rspec.get("restartPolicy") if isinstance(rspec, dict) else None
        path = f"spec.pytorchReplicaSpecs.{rtype}.restartPolicy"
        if stock:
            job.note(rspec, "restartPolicy" if policy else None, path,
                     f"{policy or 'OnFailure (default)'}: the stock runtime has no failure policy (any failure fails the "
                     "JobSet): use the guarded runtime (without --runtime stock)", LOST)
        elif policy == "ExitCode":
            job.note(rspec, "restartPolicy", path, "ExitCode: the guarded runtime's failure policy does the same (final "
                     "exits 1-127 fail the TrainJob, >= 128 restart the JobSet, docs/trainer.md)")
        else:
            job.note(rspec, "restartPolicy" if policy else None, path,
                     f"{policy or 'OnFailure (default)'}: v2 restarts no single pod; the guarded runtime's failure "
                     "policy applies (final exits 1-127 fail the TrainJob, >= 128 restart the whole JobSet)")


def _replicas(job: _Job, spec: CommentedMap) -> tuple[CommentedMap, CommentedMap, int]:
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
    job = _Job(first_line)
    metadata = _mapping(job, doc, "metadata", "metadata")
    spec = _mapping(job, doc, "spec", "spec")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise job.fail(metadata, "name" if "name" in metadata else None, "metadata.name", "the job has no name")
    replicas, main, num_nodes = _replicas(job, spec)
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
    command, no_command, wrapped = _command(job, container, cpath)
    _put(trainer, "image", container, "image")
    if command is not None:
        if command is container["command"]:
            _put(trainer, "command", container, "command")
        else:
            trainer["command"] = command
            if "command" in container.ca.items:
                trainer.ca.items["command"] = container.ca.items["command"]
    if "args" in container:
        _put(trainer, "args", container, "args")
    trainer["numNodes"] = num_nodes
    nproc = _nproc(job, spec, command, wrapped)
    if nproc is not None:
        trainer["numProcPerNode"] = nproc
    trainer["env"] = _env(job, container, cpath, stock)
    if "env" in container.ca.items:
        trainer.ca.items["env"] = container.ca.items["env"]
    if container.get("resources"):
        _put(trainer, "resourcesPerNode", container, "resources")

    # what only the job's own runtime can carry
    runtime_node: dict[str, Any] = {}
    runtime_pod: dict[str, Any] = {}
    runtime_jobset: dict[str, Any] = {}
    _drop_v1_only(job, container, cpath)
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
    _put(out, "metadata", doc, "metadata")
    tspec = CommentedMap()
    out["spec"] = tspec
    tspec["runtimeRef"] = CommentedMap()  # filled below, first in the spec
    _run_policy(job, spec, tspec, runtime_jobset)
    _restart_policies(job, replicas, stock)
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


def _drop_v1_only(job: _Job, container: CommentedMap, path: str) -> None:
    """Drop what means nothing in v2 or is the default anyway: the ``pytorchjob-port`` port (the v1
    rendezvous port; v2 uses PET_MASTER_PORT 29500) and an ``imagePullPolicy`` equal to the
    Kubernetes default for the image (Always for ``:latest`` or no tag, else IfNotPresent)."""
    ports = container.get("ports")
    if isinstance(ports, list):
        for i in reversed(range(len(ports))):
            if isinstance(ports[i], dict) and ports[i].get("name") == V1_PORT_NAME:
                job.note(ports, i, f"{path}.ports[{i}]", f"{V1_PORT_NAME} dropped: v2's rendezvous port is PET_MASTER_PORT (29500)")
                del ports[i]
        if not ports:
            del container["ports"]
    image = str(container.get("image", ""))
    tail = image.rsplit("/", 1)[-1]
    latest = "@" not in tail and (":" not in tail or tail.endswith(":latest"))
    policy = container.get("imagePullPolicy")
    if policy is not None and policy == ("Always" if latest else "IfNotPresent"):
        job.note(container, "imagePullPolicy", f"{path}.imagePullPolicy", f"{policy} dropped: the default for this image")
        del container["imagePullPolicy"]


def _patch(container: CommentedMap, pod: CommentedMap, template: CommentedMap) -> CommentedMap | None:
    """The runtime patch: the pod template's labels and annotations, the pod fields a patch may
    set, and the ``node`` container's volume mounts and security context."""
    pod_patch = CommentedMap()
    node = CommentedMap([("name", NODE)])
    for key in f.NODE_PATCH_FIELDS:
        if key in container:
            _put(node, key, container, key)
    if len(node) > 1:
        pod_patch["containers"] = CommentedSeq([node])
    for key in f.PATCH_POD_FIELDS:
        if key in pod:
            _put(pod_patch, key, pod, key)
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
