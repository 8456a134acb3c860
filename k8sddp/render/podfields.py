"""The DDPJob fields that pass Kubernetes pod settings through (volumes, resources, containers,
labels, ...), merged with what render adds and refused where they would collide with it.

What render adds and protects (the names a spec may not take): the volumes ``dshm`` (``/dev/shm``,
memory-backed) and ``checkpoints`` (the checkpoint claim), their mount paths, the container name
``pytorch``, the resources ``cpu``/``memory`` (``spec.cpu``/``spec.memory``) and the GPU resource
(``spec.gpusPerNode``), the label ``app.kubernetes.io/managed-by`` and the operator's
``training.kubeflow.org/`` labels. Render never adds a privileged container or a hostPath volume of
its own; a spec that asks for one gets it, and strict validate warns (KDP320, KDP321).
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..bounds import quantity_value
from ..errors import SpecError

__all__ = ["CHECKPOINT_VOLUME", "SHM_VOLUME", "init_containers", "pod_metadata", "resources", "volumes"]

SHM_VOLUME = "dshm"
CHECKPOINT_VOLUME = "checkpoints"
SHM_PATH = "/dev/shm"
MANAGED_BY = "app.kubernetes.io/managed-by"
#: Labels the Kubeflow operator puts on its pods and selects them by (kubeflow/trainer v1.9.4
#: pkg/controller.v1/common: training.kubeflow.org/job-name, replica-type, replica-index, ...).
OPERATOR_LABEL_PREFIX = "training.kubeflow.org/"
#: Resources the scheduler may overcommit (requests below limits); every other one, extended
#: resources and hugepages, must have requests equal to limits (Kubernetes
#: pkg/apis/core/validation ValidateResourceRequirements, IsOverCommitAllowed).
OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")


def _norm(path: str) -> str:
    """The path the kubelet mounts at: a relative mountPath is made absolute (``dev/shm`` is
    ``/dev/shm``, kubelet ``MakeAbsolutePath``), and ``//dev/shm`` is ``/dev/shm`` too (normpath
    keeps two leading slashes)."""
    return "/" + posixpath.normpath("/" + path).lstrip("/") if path else path


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def volumes(spec: dict[str, Any], *, shm_size: str, claim: str, mount: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the pytorch container's mounts: render's two, then ``spec.volumes``
    and ``spec.volumeMounts``.

    Raises:
        SpecError: a volume named ``dshm``/``checkpoints`` or twice; a mount at ``/dev/shm``, at or
            inside the checkpoint mount, at a path mounted twice, or naming no volume.
    """
    vols: list[dict[str, Any]] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
        {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}},
    ]
    mounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": SHM_PATH}, {"name": CHECKPOINT_VOLUME, "mountPath": mount}]
    for i, vol in enumerate(spec.get("volumes", [])):
        name = vol.get("name")
        if name in (SHM_VOLUME, CHECKPOINT_VOLUME):
            raise SpecError(f"volume name {name!r} is render's own ({'/dev/shm' if name == SHM_VOLUME else 'the checkpoint claim'}); "
                            "choose another name", path=f"spec.volumes[{i}].name")
        if any(v["name"] == name for v in vols):
            raise SpecError(f"volume {name!r} is listed twice", path=f"spec.volumes[{i}].name")
        vols.append(vol)
    names = {v["name"] for v in vols}
    for i, m in enumerate(spec.get("volumeMounts", [])):
        where = f"spec.volumeMounts[{i}]"
        path = _norm(str(m.get("mountPath", "")))
        if _inside(path, SHM_PATH):
            raise SpecError(f"mountPath {m['mountPath']!r} is /dev/shm, which render mounts from a memory-backed emptyDir "
                            "(spec.shmSize sets its size)", path=f"{where}.mountPath")
        if _inside(path, _norm(mount)):
            raise SpecError(f"mountPath {m['mountPath']!r} is at or inside the checkpoint mount {mount!r}, where the "
                            "checkpoints and k8sddp's artifacts live; mount it elsewhere", path=f"{where}.mountPath")
        if any(_norm(x["mountPath"]) == path for x in mounts):
            raise SpecError(f"mountPath {m['mountPath']!r} is mounted twice", path=f"{where}.mountPath")
        if m.get("name") not in names:
            raise SpecError(f"volumeMount names volume {m.get('name')!r}, which is not in spec.volumes", path=f"{where}.name")
        mounts.append(m)
    return vols, mounts


def resources(spec: dict[str, Any], *, gpus: int, gpu_resource: str) -> dict[str, dict[str, Any]]:
    """The pytorch container's ``resources``: ``spec.cpu``/``spec.memory`` (request = limit), the
    GPUs (request = limit), then ``spec.resources`` (extended resources get request = limit).

    Raises:
        SpecError: ``spec.resources`` names cpu/memory while ``spec.cpu``/``spec.memory`` is set, or
            the GPU resource while ``gpusPerNode`` is above 0; an extended resource whose request
            and limit differ; a request above its limit.
    """
    out: dict[str, dict[str, Any]] = {}
    for key in ("cpu", "memory"):
        if key in spec:
            out.setdefault("requests", {})[key] = str(spec[key])
            out.setdefault("limits", {})[key] = str(spec[key])
    if gpus:
        out.setdefault("requests", {})[gpu_resource] = str(gpus)
        out.setdefault("limits", {})[gpu_resource] = str(gpus)
    extra = spec.get("resources", {})
    requests, limits = dict(extra.get("requests", {})), dict(extra.get("limits", {}))
    for kind, entries in (("requests", requests), ("limits", limits)):
        for name in entries:
            where = f"spec.resources.{kind}.{name}"
            if name in ("cpu", "memory") and name in spec:
                raise SpecError(f"{name} is set by spec.{name} (request = limit); set it in one place", path=where)
            if name == gpu_resource and gpus:
                raise SpecError(f"{name} is set by spec.gpusPerNode ({gpus}); set it in one place", path=where)
    for name in sorted(set(requests) | set(limits)):
        if name in OVERCOMMITTABLE:
            if name in requests and name in limits:
                req, lim = quantity_value(requests[name]), quantity_value(limits[name])
                if req is not None and lim is not None and req > lim:
                    raise SpecError(f"the {name} request {requests[name]!r} is above its limit {limits[name]!r}",
                                    path=f"spec.resources.requests.{name}")
            pairs = [(kind, entries[name]) for kind, entries in (("requests", requests), ("limits", limits)) if name in entries]
        else:
            if name in requests and name in limits and quantity_value(requests[name]) != quantity_value(limits[name]):
                raise SpecError(f"{name} cannot be overcommitted: its request {requests[name]!r} must equal its limit "
                                f"{limits[name]!r} (or give only one, render copies it)", path=f"spec.resources.requests.{name}")
            value = limits.get(name, requests.get(name))
            pairs = [("requests", value), ("limits", value)]
        for kind, value in pairs:
            out.setdefault(kind, {})[name] = value if isinstance(value, str) else str(value)
    return out


def _check_container_names(entries: list[tuple[str, dict[str, Any]]]) -> None:
    seen: set[str] = set()
    for where, c in entries:
        name = c.get("name")
        if name == "pytorch":
            raise SpecError("the container name 'pytorch' is the training container's (the operator reads its exit code)",
                            path=f"{where}.name")
        if name in seen:
            raise SpecError(f"container name {name!r} is used twice (initContainers and sidecars share one namespace)",
                            path=f"{where}.name")
        seen.add(str(name))


def init_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """``spec.sidecars`` as native sidecars (``restartPolicy: Always``), then ``spec.initContainers``.

    A sidecar as a plain second container would keep the pod running after pytorch fails, so the
    pod never fails and the ExitCode restart policy never acts; a native sidecar is stopped when
    the main container ends (Kubernetes >= 1.29, KEP-753).

    Raises:
        SpecError: a container named ``pytorch`` or a name used twice; a sidecar with another
            restartPolicy; an init container with ``restartPolicy: Always`` (that is a sidecar).
    """
    sidecars, inits = spec.get("sidecars", []), spec.get("initContainers", [])
    _check_container_names([(f"spec.sidecars[{i}]", c) for i, c in enumerate(sidecars)]
                           + [(f"spec.initContainers[{i}]", c) for i, c in enumerate(inits)])
    out = []
    for i, c in enumerate(sidecars):
        if c.get("restartPolicy", "Always") != "Always":
            raise SpecError("a sidecar runs with restartPolicy Always; leave restartPolicy out",
                            path=f"spec.sidecars[{i}].restartPolicy")
        out.append({**c, "restartPolicy": "Always"})
    for i, c in enumerate(inits):
        if "restartPolicy" in c:
            raise SpecError("restartPolicy on an init container makes it a sidecar: list it under spec.sidecars",
                            path=f"spec.initContainers[{i}].restartPolicy")
        out.append(dict(c))
    return out


def pod_metadata(spec: dict[str, Any], job_labels: dict[str, str]) -> dict[str, Any]:
    """The pod template's metadata: the job's labels plus ``spec.podLabels``; ``spec.podAnnotations``.

    Raises:
        SpecError: a pod label that changes a job label, or names the managed-by label or one of the
            operator's ``training.kubeflow.org/`` labels.
    """
    labels = dict(job_labels)
    for key, value in spec.get("podLabels", {}).items():
        where = f"spec.podLabels.{key}"
        if key.startswith(OPERATOR_LABEL_PREFIX):
            raise SpecError(f"label {key!r} is the Kubeflow operator's: it labels and selects its pods by it", path=where)
        if key == MANAGED_BY and value != labels.get(key):
            raise SpecError(f"label {key!r} is set by render ({labels.get(key)!r})", path=where)
        if key in labels and labels[key] != value:
            raise SpecError(f"label {key!r} is {labels[key]!r} in metadata.labels (which the pods get too); set it in one place",
                            path=where)
        labels[key] = value
    meta: dict[str, Any] = {"labels": labels}
    if spec.get("podAnnotations"):
        meta["annotations"] = dict(spec["podAnnotations"])
    return meta
