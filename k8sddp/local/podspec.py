"""What one local "pod" runs: the ``pytorch`` container's command, args and env, as the operator
and the kubelet would build them, mapped onto this machine.

Sources (Kubeflow training operator v1.9.4, pkg/controller.v1/pytorch/envvar.go, master.go,
elastic.go, apis/kubeflow.org/v1/pytorch_defaults.go; checked against the real operator by
tests/kube/test_operator.py): the operator *appends* to the container's ``env``
``PYTHONUNBUFFERED=1``, and with a Master ``MASTER_PORT`` and ``PET_MASTER_PORT`` (the
``pytorchjob-port`` port, default 23456), ``MASTER_ADDR`` and ``PET_MASTER_ADDR``
(``<job>-master-0``), ``WORLD_SIZE`` (replicas x nprocPerNode, or replicas when it is not a number),
``RANK`` (Master 0, Worker i+1) and ``PET_NODE_RANK`` (= RANK); then ``PET_NPROC_PER_NODE``
(``nprocPerNode``, defaulted to ``auto`` unless an elastic policy sets ``nProcPerNode``); then for
an elastic job ``PET_RDZV_ENDPOINT`` (``<job>-worker-0:port``), ``PET_RDZV_BACKEND`` (default
c10d), ``PET_NNODES`` (``min:max``; a missing bound copied from the other, both missing: the
Worker replicas), ``PET_MAX_RESTARTS``, ``PET_NPROC_PER_NODE``, ``PET_RDZV_ID``,
``PET_RDZV_CONF``, ``PET_STANDALONE``; otherwise ``PET_NNODES`` (total replicas). Appended entries come last, so they win over the user's
entries of the same name (the kubelet keeps the last).

The kubelet (k8s.io/kubernetes pkg/kubelet/kubelet_pods.go makeEnvironmentVariables): ``envFrom``
first (later sources win, ``prefix`` prepended), then ``env`` in order (``env`` wins), each value
expanding ``$(NAME)`` of variables defined before it; command and args expand ``$(NAME)`` of all.

Local mapping: ``MASTER_ADDR`` and rendezvous hosts are ``127.0.0.1`` and the ports are free ports
of this machine; ``python``/``python3`` run ``sys.executable`` and the current environment's
``bin/`` leads ``PATH``; volume mount paths are rewritten to local folders in env values, command
and args (see :func:`volume_map`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

from ..configrefs import is_configmap
from ..errors import UsageError

__all__ = ["PodPlan", "base_env", "build_pods", "expand", "free_port", "plan_pod", "volume_map"]

DEFAULT_PORT = 23456
#: Variables of the parent environment a pod must not inherit (torchrun and operator state).
_SCRUB = re.compile(r"^(PET_|TORCHELASTIC_|MASTER_ADDR$|MASTER_PORT$|RANK$|LOCAL_RANK$|WORLD_SIZE$|"
                    r"LOCAL_WORLD_SIZE$|GROUP_RANK$|ROLE_RANK$|ROLE_WORLD_SIZE$|K8SDDP_)")


@dataclasses.dataclass
class PodPlan:
    """One pod to run.

    Attributes:
        name: ``<job>-<replica type lower>-<index>`` (the operator's pod name).
        replica_type: ``Master`` or ``Worker``.
        index: replica index (0-based).
        argv: the command and args, mapped.
        env: the environment (inherited base + pod env).
        pod_env: only the pod's own variables (for display and tests).
        restart_policy: the replica's policy (``OnFailure`` default, ``ExitCode``, ``Never``, ``Always``).
        grace_seconds: ``terminationGracePeriodSeconds`` (default 30).
        empty_dirs: local folders of ``emptyDir`` volumes (recreated empty with the pod).
    """

    name: str
    replica_type: str
    index: int
    argv: list[str]
    env: dict[str, str]
    pod_env: dict[str, str]
    restart_policy: str
    grace_seconds: float
    empty_dirs: list[Path]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubelet ``$(NAME)`` expansion: known names are replaced, ``$$`` is a literal ``$``, unknown
    references stay as written (k8s.io/kubernetes third_party/forked/golang/expansion)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(sub, text)


def _configmap_data(configmaps: list[dict[str, Any]], name: str, namespace: str) -> dict[str, str] | None:
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        if is_configmap(cm) and meta.get("name") == name and (meta.get("namespace") or namespace) == namespace:
            return {str(k): str(v) for k, v in (cm.get("data") or {}).items()}
    return None


def volume_map(pod_spec: dict[str, Any], container: dict[str, Any], *, local_dir: Path, pod: str,
               configmaps: list[dict[str, Any]], namespace: str) -> tuple[list[tuple[str, str]], list[Path]]:
    """``[(mountPath, local path)]`` longest first, and the pod's emptyDir folders.

    - ``persistentVolumeClaim``: ``<local_dir>/pvc/<claimName>``, shared by every pod and kept
      between runs (a ReadWriteMany claim);
    - ``emptyDir`` at ``/dev/shm``: this machine's ``/dev/shm`` (not mapped);
    - other ``emptyDir``: ``<local_dir>/pods/<pod>/<volume>``, emptied when the pod is recreated;
    - ``configMap``: its keys written as files under ``<local_dir>/pods/<pod>/<volume>``;
    - ``hostPath``: the path itself (this machine is the node); others: an empty pod folder.
    ``subPath`` is appended to the local path.

    Raises:
        UsageError: a mount names no volume of the pod.
    """
    volumes = {v.get("name"): v for v in pod_spec.get("volumes") or [] if isinstance(v, dict)}
    mapping: list[tuple[str, str]] = []
    empties: list[Path] = []
    for mount in container.get("volumeMounts") or []:
        vol = volumes.get(mount.get("name"))
        path = str(mount.get("mountPath", ""))
        if vol is None:
            raise UsageError(f'pod {pod}: volumeMount "{mount.get("name")}" names no volume of the pod')
        if "persistentVolumeClaim" in vol:
            local = local_dir / "pvc" / str(vol["persistentVolumeClaim"].get("claimName", vol["name"]))
            local.mkdir(parents=True, exist_ok=True)  # a mounted volume always exists
        elif "emptyDir" in vol and path.rstrip("/") == "/dev/shm":
            continue
        elif "hostPath" in vol:
            local = Path(str(vol["hostPath"].get("path", "")))
        else:
            local = local_dir / "pods" / pod / str(vol["name"])
            if "emptyDir" in vol:
                empties.append(local)
            elif "configMap" in vol:
                data = _configmap_data(configmaps, str(vol["configMap"].get("name", "")), namespace) or {}
                local.mkdir(parents=True, exist_ok=True)
                for key, value in data.items():
                    (local / key).write_text(value)
        if mount.get("subPath"):
            local = local / str(mount["subPath"])
        mapping.append((path.rstrip("/") or "/", str(local)))
    mapping.sort(key=lambda m: len(m[0]), reverse=True)
    return mapping, empties


def map_paths(text: str, mapping: list[tuple[str, str]]) -> str:
    """Rewrite every mount path in ``text`` that starts a path (``/ckpt``, ``/ckpt/x``,
    ``--dir=/ckpt/x``) to its local folder; ``/ckptx`` is left alone."""
    for mount, local in mapping:
        pattern = re.compile(r"(?<![\w.\-/])" + re.escape(mount) + r"(?=/|$|[^\w.\-])")
        text = pattern.sub(local.replace("\\", "\\\\"), text)
    return text


def _resolve_env(container: dict[str, Any], *, pod: str, labels: dict[str, str], namespace: str,
                 configmaps: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict[str, str]:
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = str(src.get("prefix") or "")
        if "configMapRef" in src:
            ref = src["configMapRef"]
            data = _configmap_data(configmaps, str(ref.get("name", "")), namespace)
            if data is None:
                if ref.get("optional"):
                    continue
                raise UsageError(f'pod {pod}: envFrom ConfigMap "{ref.get("name")}" is not in the input '
                                 "(a local run resolves env from the input's ConfigMaps only)")
            env.update({prefix + k: v for k, v in data.items()})
        elif "secretRef" in src:
            if src["secretRef"].get("optional"):
                continue
            raise UsageError(f'pod {pod}: envFrom Secret "{src["secretRef"].get("name")}" cannot be read by a local run')
    for var in container.get("env") or []:
        name = str(var.get("name"))
        if "value" in var or "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        vf = var["valueFrom"] or {}
        if "configMapKeyRef" in vf:
            ref = vf["configMapKeyRef"]
            data = _configmap_data(configmaps, str(ref.get("name", "")), namespace)
            if data is None or str(ref.get("key")) not in data:
                if ref.get("optional"):
                    continue
                raise UsageError(f'pod {pod}: env {name} needs key "{ref.get("key")}" of ConfigMap '
                                 f'"{ref.get("name")}", which the input lacks')
            env[name] = data[str(ref.get("key"))]
        elif "fieldRef" in vf:
            path = str(vf["fieldRef"].get("fieldPath", ""))
            m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
            values = {"metadata.name": pod, "metadata.namespace": namespace, "status.podIP": "127.0.0.1",
                      "status.hostIP": "127.0.0.1", "spec.nodeName": socket.gethostname(),
                      "spec.serviceAccountName": "default"}
            held = labels if m and m.group(1) == "labels" else (annotations or {})
            env[name] = held.get(m.group(2), "") if m else values.get(path, "")
        elif "resourceFieldRef" in vf:
            res = str(vf["resourceFieldRef"].get("resource", ""))
            kind, _, what = res.partition(".")
            value = ((container.get("resources") or {}).get(kind) or {}).get(what)
            env[name] = str(value) if value is not None else str(os.cpu_count() or 1) if what == "cpu" else "0"
        elif "secretKeyRef" in vf:
            if vf["secretKeyRef"].get("optional"):
                continue
            raise UsageError(f'pod {pod}: env {name} comes from Secret "{vf["secretKeyRef"].get("name")}", '
                             "which a local run cannot read")
    return env


def _operator_env(job: dict[str, Any], rtype: str, index: int, *, master_port: int, rdzv_port: int) -> list[tuple[str, str]]:
    """The entries the operator appends to a container's env, in its order (v1.9.4
    pkg/controller.v1/pytorch/envvar.go setPodEnv, master.go, elastic.go), after its defaulting
    (pytorch_defaults.go: ``nprocPerNode`` "auto" unless an elastic policy sets ``nProcPerNode``;
    an elastic policy's missing min/max replicas copied from the other, or both the Worker
    replicas). Compared with the real operator's pods in tests/kube/test_operator.py."""
    spec = job.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    total = sum(int((r or {}).get("replicas", 1)) for r in replicas.values())
    elastic = spec.get("elasticPolicy") if isinstance(spec.get("elasticPolicy"), dict) else None
    nproc = spec.get("nprocPerNode")
    if nproc is None and (elastic is None or elastic.get("nProcPerNode") is None):
        nproc = "auto"
    out = [("PYTHONUNBUFFERED", "1")]
    if "Master" in replicas:
        rank = index + 1 if rtype == "Worker" else index
        per_node = int(nproc) if nproc is not None and str(nproc).isdigit() else 1
        out += [("MASTER_PORT", str(master_port)), ("PET_MASTER_PORT", str(master_port)),
                ("MASTER_ADDR", "127.0.0.1"), ("PET_MASTER_ADDR", "127.0.0.1"),
                ("WORLD_SIZE", str(total * per_node)), ("RANK", str(rank)), ("PET_NODE_RANK", str(rank))]
    if nproc is not None:
        out.append(("PET_NPROC_PER_NODE", str(nproc)))
    if elastic is not None:
        workers = int((replicas.get("Worker") or {}).get("replicas", 1))
        low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
        low, high = (low if low is not None else high), (high if high is not None else low)
        nnodes = f"{low}:{high}" if low is not None else f"{workers}:{workers}"
        out += [("PET_RDZV_ENDPOINT", f"127.0.0.1:{rdzv_port}"),
                ("PET_RDZV_BACKEND", str(elastic.get("rdzvBackend") or "c10d")), ("PET_NNODES", nnodes)]
        if elastic.get("maxRestarts") is not None:
            out.append(("PET_MAX_RESTARTS", str(elastic["maxRestarts"])))
        if elastic.get("nProcPerNode") is not None:
            out.append(("PET_NPROC_PER_NODE", str(elastic["nProcPerNode"])))
        if elastic.get("rdzvId") is not None:
            out.append(("PET_RDZV_ID", str(elastic["rdzvId"])))
        if elastic.get("rdzvConf"):
            out.append(("PET_RDZV_CONF", ",".join(f"{c.get('key')}={c.get('value')}" for c in elastic["rdzvConf"])))
        if elastic.get("standalone"):
            out.append(("PET_STANDALONE", ""))
    else:
        out.append(("PET_NNODES", str(total)))
    return out


def _localize_argv(argv: list[str]) -> list[str]:
    """Run the image's Python tools from the current environment: ``python``/``python3`` ->
    ``sys.executable``; ``k8sddp`` -> ``python -m k8sddp``; ``torchrun`` -> ``python -m
    torch.distributed.run`` (what the ``torchrun`` script runs)."""
    head = argv[0]
    if re.fullmatch(r"python(3(\.\d+)?)?", head):
        return [sys.executable, *argv[1:]]
    if head == "k8sddp":
        return [sys.executable, "-m", "k8sddp", *argv[1:]]
    if head == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return argv


def base_env() -> dict[str, str]:
    """The environment every local pod starts from: this process's, without torchrun's and the
    operators' variables, this Python's ``bin/`` first on ``PATH``, and this k8sddp importable."""
    bindir = str(Path(sys.executable).parent)
    base = {k: v for k, v in os.environ.items() if not _SCRUB.match(k)}
    base["PATH"] = bindir + os.pathsep + base.get("PATH", "")
    # the k8sddp being run must be the one the pods import (a source checkout included)
    pkg_root = str(Path(__file__).resolve().parents[2])
    base["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, base.get("PYTHONPATH", "")) if p)
    return base


def plan_pod(*, pod: str, replica_type: str, index: int, pod_spec: dict[str, Any], container: dict[str, Any],
             labels: dict[str, str], namespace: str, configmaps: list[dict[str, Any]], local_dir: Path,
             controller_env: list[tuple[str, str]], restart_policy: str, base: dict[str, str],
             annotations: dict[str, str] | None = None) -> PodPlan:
    """One pod: ``container``'s env as the kubelet resolves it (with the pod's ``labels`` and
    ``annotations`` for field references), then ``controller_env`` appended (a controller's own
    entries, local addresses and ports already in), paths mapped, the command localized.

    Raises:
        UsageError: no ``command``, an env source a local run cannot read.
    """
    if not container.get("command"):
        raise UsageError(f"pod {pod}: the {container.get('name')} container has no command; a local run cannot "
                         "know the image's entrypoint, so give command (and args) in the manifest")
    mapping, empties = volume_map(pod_spec, container, local_dir=local_dir, pod=pod,
                                  configmaps=configmaps, namespace=namespace)
    env = _resolve_env(container, pod=pod, labels=labels, namespace=namespace, configmaps=configmaps,
                       annotations=annotations)
    for key, value in controller_env:
        env[key] = value
    env = {k: map_paths(v, mapping) for k, v in env.items()}
    argv = [map_paths(expand(str(a), env), mapping)
            for a in list(container.get("command") or []) + list(container.get("args") or [])]
    return PodPlan(
        name=pod, replica_type=replica_type, index=index, argv=_localize_argv(argv), env={**base, **env}, pod_env=env,
        restart_policy=restart_policy, grace_seconds=float(pod_spec.get("terminationGracePeriodSeconds", 30)),
        empty_dirs=empties,
    )


def build_pods(job: dict[str, Any], *, configmaps: list[dict[str, Any]], local_dir: Path,
               master_port: int, rdzv_port: int) -> list[PodPlan]:
    """Every pod of a PyTorchJob, Master first.

    Raises:
        UsageError: a replica without a ``pytorch`` container or without a ``command``, an env
            source a local run cannot read (Secret, ConfigMap not in the input).
    """
    meta = job.get("metadata") or {}
    name = str(meta.get("name") or "job")
    namespace = str(meta.get("namespace") or "default")
    replicas = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    base = base_env()
    pods: list[PodPlan] = []
    for rtype in sorted(replicas, key=lambda r: (r != "Master", r)):
        rspec = replicas[rtype] or {}
        pod_spec = ((rspec.get("template") or {}).get("spec") or {})
        container = next((c for c in pod_spec.get("containers") or [] if c.get("name") == "pytorch"), None)
        if container is None:
            raise UsageError(f'job {name}: replica {rtype} has no container named "pytorch"')
        if not container.get("command"):
            raise UsageError(f"job {name}: the {rtype} pytorch container has no command; a local run cannot "
                             "know the image's entrypoint, so give command (and args) in the manifest")
        for index in range(int(rspec.get("replicas", 1))):
            labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": rtype.lower(),
                      "training.kubeflow.org/replica-index": str(index)}
            pods.append(plan_pod(
                pod=f"{name}-{rtype.lower()}-{index}", replica_type=rtype, index=index, pod_spec=pod_spec,
                container=container, labels=labels, namespace=namespace, configmaps=configmaps, local_dir=local_dir,
                controller_env=_operator_env(job, rtype, index, master_port=master_port, rdzv_port=rdzv_port),
                restart_policy=str(rspec.get("restartPolicy") or "OnFailure"), base=base,
            ))
    return pods
