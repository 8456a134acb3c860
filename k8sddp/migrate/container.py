"""The ``pytorch`` container of a PyTorchJob into ``spec.trainer``: the command (torchrun reads
the ``PET_*`` values Trainer v2 injects), the env without the v1 operator's variables, the
processes per node, and what means nothing in v2 (sources: :mod:`k8sddp.migrate.fields`)."""

from __future__ import annotations

import re
from typing import Any, cast

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from .. import guardvars as gv
from ..runtime.autoguard import torchrun_start
from . import fields as f
from .notes import LOST, JobNotes

__all__ = ["V1_PORT_NAME", "drop_v1_only", "num_proc_per_node", "trainer_command", "trainer_env", "v1_variable_refs"]

#: ``$(NAME)`` of a variable the v1 operator sets (kubelet dependent-variable syntax).
_OPERATOR_REF = re.compile(r"\$\((" + "|".join(f.OPERATOR_ENV) + r")\)")
#: The port the v1 operator requires on the pytorch container (v1.9.4 defaults: pytorchjob-port).
V1_PORT_NAME = "pytorchjob-port"


def trainer_command(job: JobNotes, container: CommentedMap, path: str) -> tuple[list[Any] | None, bool, bool]:
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
    if any(word in a for a in command for word in ("torchrun", "torch.distributed.run", "torch.distributed.launch")):
        job.note(container, "command", f"{path}.command",
                 "starts torchrun (or the deprecated torch.distributed.launch) in a way migrate does not read (a shell "
                 "command): kept as it is; check it passes no MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK (v2 sets "
                 "only PET_*, which torchrun reads by itself)", LOST)
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


def trainer_env(job: JobNotes, container: CommentedMap, path: str, stock: bool) -> CommentedSeq:
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


#: What Trainer v2.3 makes of ``auto`` without a GPU (plugins/torch/torch.go ``EnforceMLPolicy``,
#: ``getNumCPUPerNode``), against torch's own ``auto`` that the v1 operator passed on.
_CPU_AUTO = ("v1 passed `auto` to torchrun, which starts one process per CPU of the node without an accelerator "
             "(torch's determine_local_world_size); Trainer v2.3 resolves `auto` itself when resourcesPerNode has no GPU: "
             "the CPU request (else limit) of the node, at least 1, so the process count (and WORLD_SIZE) may change: set "
             "spec.trainer.numProcPerNode to keep a number")


def _has_gpu(resources: Any) -> bool:
    """Whether Trainer v2.3 sees a GPU in ``resources`` (runtime.go ``numGPU``: a resource name containing "gpu")."""
    if not isinstance(resources, dict):
        return False
    return any("gpu" in str(name).lower() for part in ("requests", "limits")
               if isinstance(resources.get(part), dict) for name in resources[part])


def num_proc_per_node(job: JobNotes, spec: CommentedMap, command: list[Any] | None, wrapped: bool,
                      resources: Any = None) -> int | None:
    """``spec.trainer.numProcPerNode`` (an integer in v2.3; unset means ``auto``); ``resources``
    the ``pytorch`` container's (``spec.trainer.resourcesPerNode``)."""
    value = spec.get("nprocPerNode")
    elastic = spec.get("elasticPolicy")
    key, node = "nprocPerNode", cast("dict[Any, Any]", spec)
    if value is None and isinstance(elastic, dict) and elastic.get("nProcPerNode") is not None:
        value, key, node = elastic.get("nProcPerNode"), "nProcPerNode", elastic
    if wrapped:
        # v1 set WORLD_SIZE = replicas x N (envvar.go) for a command that is not torchrun; under
        # `torchrun --no-python` with one process per node torchrun sets WORLD_SIZE = numNodes.
        if str(value).isdigit() and int(value) > 1:
            job.note(node, key, f"spec.{'elasticPolicy.' if node is elastic else ''}{key}",
                     f"{value}: v1 gave this command PET_NPROC_PER_NODE={value} (and, with a Master, WORLD_SIZE = "
                     f"replicas x {value}); under `torchrun --no-python` (numProcPerNode 1) WORLD_SIZE is numNodes and "
                     f"RANK the node's rank: if the script starts {value} processes itself, start it under torchrun "
                     f"--nproc-per-node={value} instead", LOST)
        return 1
    flag = _flag_nproc(command or [])
    path = f"spec.{'elasticPolicy.' if node is elastic else ''}{key}"
    if value is None or str(value) == "auto":
        if flag is None and not _has_gpu(resources):
            job.note(node, key if value is not None else None, path, f"{value or 'unset (auto)'}: {_CPU_AUTO}")
        return flag
    if str(value).isdigit():
        if flag is not None and flag != int(value):
            job.note(node, key, path,
                     f"{value}, but the command's --nproc-per-node={flag} wins (an explicit torchrun flag over "
                     f"PET_NPROC_PER_NODE): numProcPerNode {flag}")
            return flag
        return int(value)
    if str(value) in ("gpu", "cpu"):
        job.note(node, key, path,
                 f"{value!r} has no v2.3 value (numProcPerNode is an integer): left unset, the torch runtime's default "
                 "`auto`: one process per GPU of resourcesPerNode" + (f"; {_CPU_AUTO}" if not _has_gpu(resources) else ""))
        return None
    raise job.fail(spec, "nprocPerNode", "spec.nprocPerNode", f"must be auto, cpu, gpu or a number, not {value!r}")


#: ``$(NAME)`` of a variable the v1 operator set that a Trainer v2 container does not have (the
#: reserved PET_* ones it does: the torch plugin injects them); ``$$(NAME)`` is the kubelet's escape.
_V1_ONLY_REF = re.compile(r"(?<!\$)\$\((" + "|".join(n for n in f.OPERATOR_ENV if n not in f.RESERVED_ENV) + r")\)")
_V2_REF = {"MASTER_ADDR": "$(PET_MASTER_ADDR)", "MASTER_PORT": "$(PET_MASTER_PORT)"}


def v1_variable_refs(job: JobNotes, container: CommentedMap, trainer: CommentedMap, path: str) -> None:
    """``$(MASTER_ADDR)``, ``$(WORLD_SIZE)``, ... left in the trainer's command, args or env values:
    the kubelet expands ``$(VAR)`` from the container's env when it starts it, and in v2 that env has
    only the ``PET_*`` values (torchrun sets MASTER_ADDR, ... in its workers, too late for the
    kubelet), so the text stays as written."""
    places: list[tuple[Any, Any, str, Any]] = [(container, key, f"{path}.{key}", trainer.get(key)) for key in ("command", "args")]
    env = trainer.get("env")
    for i, item in enumerate(env if isinstance(env, list) else []):
        if isinstance(item, dict):
            places.append((env, i, f"{path}.env[{item.get('name')}]", item.get("value")))
    for node, key, where, value in places:
        refs = sorted({m.group(1) for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)
                       for m in _V1_ONLY_REF.finditer(v)})
        if refs:
            hints = [f"$({r}) -> {_V2_REF[r]}" for r in refs if r in _V2_REF]
            job.note(node, key if node is not container or key in container else None, where,
                     f"{', '.join(f'$({r})' for r in refs)}: set by the v1 operator; a Trainer v2 container has only "
                     "the PET_* ones, so the kubelet passes the text as it is" + (f" (use {', '.join(hints)})" if hints else "")
                     + "; or let the script read the values torchrun sets in its environment", LOST)


def drop_v1_only(job: JobNotes, container: CommentedMap, path: str) -> None:
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
