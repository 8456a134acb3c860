"""Strict-profile checks JSON Schema cannot express: paths on a persistent volume (KDP304,
KDP305), a memory-backed ``/dev/shm`` (KDP307), consistent process counts (KDP309), and the
warnings for privileged containers (KDP320) and hostPath volumes (KDP321)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from .. import guardvars as gv
from .envresolve import EnvValue
from .jobparts import MAPPING as _MAPPING
from .jobparts import as_list as _list
from .jobparts import get as _get
from .jobparts import replicas as _replicas
from .rawfinding import RawFinding

__all__ = ["check_host_access", "check_sizes", "check_volumes", "disagreement", "pod_volume_findings", "size_facts"]

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
#: Volume kinds that outlive the pod.
PERSISTENT_VOLUME_KINDS = ("persistentVolumeClaim", "nfs")
_NPROC_FLAG = re.compile(r"^--nproc[-_]per[-_]node(?:=(.*))?$")


def _pod_volume(pod: Mapping[str, Any], name: Any) -> Mapping[str, Any] | None:
    for vol in _list(pod.get("volumes")):
        if isinstance(vol, _MAPPING) and vol.get("name") == name:
            return vol
    return None


def _writable_persistent(vol: Mapping[str, Any], mount: Mapping[str, Any]) -> bool:
    """A persistent volume the container can write through ``mount``: not a ``readOnly`` mount, not
    a ``persistentVolumeClaim.readOnly`` claim nor an ``nfs.readOnly`` export (Kubernetes API:
    VolumeMount.readOnly, PersistentVolumeClaimVolumeSource.readOnly, NFSVolumeSource.readOnly)."""
    if mount.get("readOnly") is True:
        return False
    for kind in PERSISTENT_VOLUME_KINDS:
        source = vol.get(kind)
        if source is not None:
            return not (isinstance(source, _MAPPING) and source.get("readOnly") is True)
    return False


def check_volumes(
    job: Mapping[str, Any],
    envs: dict[str, dict[str, EnvValue]],
    container_index: dict[str, int],
    seen: set[tuple[str, str]],
) -> list[RawFinding]:
    """KDP304/KDP305 (paths on a persistent volume) and KDP307 (memory-backed /dev/shm)."""
    findings = []
    for rtype, replica in _replicas(job):
        if rtype not in container_index:
            continue
        pod = _get(replica, "template", "spec") or {}
        base = ("spec", "pytorchReplicaSpecs", rtype, "template", "spec", "containers", container_index[rtype])
        container = _get(job, *base) or {}
        skip = frozenset(rule for rule, r in seen if r == rtype)
        for rule_id, field, message in pod_volume_findings(pod, container, envs[rtype], skip):
            findings.append(RawFinding(rule_id, (*base, field), f"replica {rtype}, container pytorch: {message}"))
    return findings


def pod_volume_findings(
    pod: Mapping[str, Any], container: Mapping[str, Any], env: dict[str, EnvValue], skip: frozenset[str] = frozenset()
) -> list[tuple[str, str, str]]:
    """KDP304/KDP305 and KDP307 for one training container of one pod spec (any kind).

    Args:
        pod: the pod spec (its ``volumes``).
        container: the training container (its ``volumeMounts``).
        env: the container's effective environment.
        skip: rules already reported for this container (a missing variable, say).

    Returns:
        ``(rule id, container field the finding is about: "env" or "volumeMounts", message)``.
    """
    findings = []
    mounts = [m for m in _list(container.get("volumeMounts")) if isinstance(m, _MAPPING)]
    for rule_id, var in (("KDP304", gv.FR_DUMP_TEMP_FILE), ("KDP305", gv.ARTIFACT_DIR)):
        value = env.get(var)
        if rule_id in skip or value is None or not value.value:
            continue
        persistent = False
        # Normalised, so that "/ckpt/../tmp/x" is not taken for a path on the /ckpt volume.
        target = posixpath.normpath(value.value)
        for m in mounts:
            mount_path = posixpath.normpath(str(m.get("mountPath", ""))) if m.get("mountPath") else ""
            if mount_path and (target == mount_path or target.startswith(mount_path.rstrip("/") + "/")):
                vol = _pod_volume(pod, m.get("name"))
                persistent = vol is not None and _writable_persistent(vol, m)
                if persistent:
                    break
        if not persistent:
            findings.append(
                (
                    rule_id,
                    "env",
                    f"{var}={value.value!r} is not on a persistent volume "
                    f"(no writable volumeMount of a persistentVolumeClaim or nfs volume contains it: a readOnly mount or claim does not count); "
                    "it would die with the pod, or cannot be written",
                )
            )
    if "KDP307" not in skip:
        shm = [m for m in mounts if m.get("mountPath") and posixpath.normpath(str(m["mountPath"])) == "/dev/shm"]
        vol = _pod_volume(pod, shm[0].get("name")) if shm else None
        medium = _get(vol, "emptyDir", "medium") if vol else None
        if shm and medium != "Memory":
            findings.append(
                (
                    "KDP307",
                    "volumeMounts",
                    f"/dev/shm is mounted from volume {shm[0].get('name')!r}, which is not an emptyDir with medium: Memory",
                )
            )
    return findings


def _nproc_from_args(container: Mapping[str, Any]) -> str | None:
    argv = [str(a) for a in _list(container.get("command")) + _list(container.get("args"))]
    for i, arg in enumerate(argv):
        for token in arg.split():
            m = _NPROC_FLAG.match(token)
            if m:
                if m.group(1) is not None:
                    return m.group(1)
                rest = arg.split()
                j = rest.index(token)
                if j + 1 < len(rest):
                    return rest[j + 1]
                if i + 1 < len(argv):
                    return argv[i + 1].split()[0] if argv[i + 1].split() else None
    return None


def size_facts(declared: str | None, container: Mapping[str, Any]) -> dict[str, str | None]:
    """The three process counts KDP309 compares, as strings (``None`` where not set).

    Args:
        declared: the job's declared processes per node (PyTorchJob ``nprocPerNode``, a TrainJob's
            ``spec.trainer.numProcPerNode``), as a string (``"4"``, ``"gpu"``, ``"auto"``), or ``None``.
        container: the training container (its ``command``/``args`` and ``resources.limits``).

    Returns:
        ``{"nprocPerNode": declared, "--nproc-per-node": the torchrun flag's value, "GPU limit":
        the first GPU resource limit of :data:`GPU_RESOURCES`}``.
    """
    limits = _get(container, "resources", "limits") or {}
    gpus = next((str(limits[k]) for k in GPU_RESOURCES if isinstance(limits, _MAPPING) and k in limits), None)
    return {"nprocPerNode": declared, "--nproc-per-node": _nproc_from_args(container), "GPU limit": gpus}


def disagreement(facts: Mapping[str, str | None]) -> str | None:
    """The KDP309 message part (``"nprocPerNode 4, GPU limit 8"``) when the numeric counts in
    ``facts`` (:func:`size_facts`; a GPU limit of ``0`` ignored) are not all equal, else ``None``."""
    numeric = {k: v for k, v in facts.items() if v is not None and v.isdigit() and not (k == "GPU limit" and v == "0")}
    if len(set(numeric.values())) > 1:
        return ", ".join(f"{k} {v}" for k, v in numeric.items())
    return None


def check_sizes(job: Mapping[str, Any], container_index: dict[str, int]) -> list[RawFinding]:
    """KDP309: nprocPerNode, --nproc-per-node and the GPU limit agree."""
    findings = []
    nproc = _get(job, "spec", "nprocPerNode") or _get(job, "spec", "elasticPolicy", "nProcPerNode")
    declared = str(nproc) if nproc is not None else None
    for rtype, _replica in _replicas(job):
        if rtype not in container_index:
            continue
        base = ("spec", "pytorchReplicaSpecs", rtype, "template", "spec", "containers", container_index[rtype])
        container = _get(job, *base) or {}
        facts = size_facts(declared, container)
        if declared == "gpu" and facts["GPU limit"] is None:
            findings.append(RawFinding("KDP309", base, f"replica {rtype}: nprocPerNode is \"gpu\" but the pytorch container has no GPU limit"))
        said = disagreement(facts)
        if said is not None:
            findings.append(
                RawFinding(
                    "KDP309",
                    (*base, "resources") if "resources" in container else base,
                    f"replica {rtype}: process counts disagree ({said}); they must be equal, one process per GPU",
                )
            )
    return findings


def check_host_access(job: Mapping[str, Any]) -> list[RawFinding]:
    """KDP320 (a privileged container, init container or sidecar) and KDP321 (a hostPath volume),
    in every replica: warnings, since some setups need them, but never something render adds."""
    findings = []
    for rtype, replica in _replicas(job):
        base = ("spec", "pytorchReplicaSpecs", rtype, "template", "spec")
        pod = _get(replica, "template", "spec")
        if not isinstance(pod, _MAPPING):
            continue
        for field in ("initContainers", "containers"):
            for i, c in enumerate(_list(pod.get(field))):
                if isinstance(c, _MAPPING) and _get(c, "securityContext", "privileged") is True:
                    findings.append(RawFinding(
                        "KDP320", (*base, field, i, "securityContext", "privileged"),
                        f"replica {rtype}: {field[:-1]} {c.get('name')!r} is privileged: it has every device and capability of the node",
                    ))
        for i, vol in enumerate(_list(pod.get("volumes"))):
            if isinstance(vol, _MAPPING) and "hostPath" in vol:
                findings.append(RawFinding(
                    "KDP321", (*base, "volumes", i),
                    f"replica {rtype}: volume {vol.get('name')!r} is a hostPath ({_get(vol, 'hostPath', 'path')!r}): "
                    "it ties the pod to one node's files and outlives nothing the job can rely on",
                ))
    return findings
