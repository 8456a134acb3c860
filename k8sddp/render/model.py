"""Turn a checked DDPJob spec into the values the PyTorchJob template lays out.

All decisions live here (defaults, the launch command, the guard env, volumes); the Jinja
template only places them. Pure function of the spec: no clock, no randomness, no environment.
"""

from __future__ import annotations

from typing import Any

from .. import guardvars as gv
from ..errors import SpecError
from . import podfields
from .smp import SmpError, patch_pod_template

__all__ = ["DEFAULTS", "build_model", "launch_command"]

#: Defaults of ``schemas/ddpjob.schema.json`` (kept equal by tests/test_render.py).
DEFAULTS: dict[str, Any] = {
    "imagePullPolicy": "IfNotPresent",
    "nodes": 1,
    "gpuResource": "nvidia.com/gpu",
    "shmSize": "8Gi",
    "checkpointMountPath": "/checkpoints",
    "processGroupSeconds": gv.DEFAULT_PG_TIMEOUT_SECONDS,
    "watchdogSeconds": gv.DEFAULT_WATCHDOG_TIMEOUT_SECONDS,
    "maxHangRestarts": gv.DEFAULT_MAX_HANG_RESTARTS,
    "seed": 0,
    "restartPolicy": "ExitCode",
    "backoffLimit": 3,
    "activeDeadlineSeconds": 604800,
    "cleanPodPolicy": "Running",
    "terminationGracePeriodSeconds": 120,
    "elasticMaxRestarts": 3,
    "rdzvBackend": "c10d",
}
#: Kubeflow's default PyTorchJob port name and number (kubeflow/trainer v1.9.4 constants).
PORT_NAME = "pytorchjob-port"
PORT = 23456
SEED_VAR = "K8SDDP_SEED"
CONTAINER = "pytorch"


def launch_command(command: dict[str, Any], procs_per_node: int, *, elastic: bool) -> list[str]:
    """The container command: ``k8sddp launch -- torchrun ... <target>``.

    torchrun reads ``PET_NNODES``, ``PET_NODE_RANK`` and (elastic) ``PET_RDZV_*`` that the operator
    injects (``../shared/reference/NOTES.md``); the operator sets ``MASTER_ADDR``/``MASTER_PORT`` but
    not their ``PET_`` forms, so they are passed with Kubernetes ``$(VAR)`` expansion.
    ``--nproc-per-node`` is explicit so it can be checked against ``nprocPerNode`` (KDP309).
    """
    argv = ["k8sddp", "launch", "--", "torchrun", f"--nproc-per-node={procs_per_node}"]
    if not elastic:
        argv += ["--master-addr=$(MASTER_ADDR)", "--master-port=$(MASTER_PORT)"]
    if "task" in command:
        argv += ["-m", "k8sddp", "train", "--task", command["task"]]
    elif "module" in command:
        argv += ["-m", command["module"]]
    else:
        argv += [command["script"]]
    return argv + list(command.get("args", []))


def _user_env(entries: list[dict[str, Any]], mandatory: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for i, entry in enumerate(entries):
        name = entry["name"]
        if name in gv.MANDATORY or name in gv.SAFETY_NETS or name == SEED_VAR:
            expected = mandatory.get(name)
            if "value" in entry and expected is not None and entry["value"] == expected:
                continue  # the same value render sets: harmless
            if name in (gv.ASYNC_ERROR_HANDLING, gv.LEGACY_ASYNC_ERROR_HANDLING) and expected is not None and entry.get("value") in gv.ASYNC_ERROR_HANDLING_ACCEPTED:
                mandatory[name] = entry["value"]  # 1 is safe too (KDP201): the user's choice wins
                continue
            if name in gv.SAFETY_NETS and "value" in entry and entry["value"].strip().strip("0"):
                out.append(entry)
                continue
            shown = entry.get("value", "a valueFrom reference")
            want = f"render sets {expected!r}" if expected is not None else "render manages it"
            raise SpecError(
                f"{name}={shown!r} would override a mandatory guard variable ({want}); remove it from spec.env "
                "or use the spec field that sets it (timeouts, maxHangRestarts, checkpoint, torchVersion, seed)",
                path=f"spec.env[{i}]",
            )
        out.append(entry)
    return out


def _sizes(spec: dict[str, Any]) -> tuple[int, int]:
    """(processes, GPUs) per pod: ``gpusPerNode`` defaults to ``procsPerNode`` (one GPU per
    process); ``procsPerNode`` defaults to ``gpusPerNode`` when that is above 0, else 1."""
    procs = spec.get("procsPerNode") or spec.get("gpusPerNode") or 1
    gpus = spec.get("gpusPerNode", procs)
    if gpus and procs != gpus:
        raise SpecError(
            f"procsPerNode {procs} and gpusPerNode {gpus} differ: one process per GPU (rule KDP309); "
            "gpusPerNode 0 makes a CPU job",
            path="spec.procsPerNode",
        )
    return procs, gpus


#: dnsPolicy values under which a pod on the node's network still resolves the master's Service
#: (``None``: the patch's own dnsConfig names the resolvers).
HOST_NETWORK_DNS = ("ClusterFirstWithHostNet", "None")


def _check_patched_pod(pod: Any) -> None:
    """What render guarantees beyond validate's rules, checked again after ``podTemplatePatch``.

    Raises:
        SpecError: a container beside ``pytorch`` (a plain second container keeps a failed pod
            running, so the pod never fails and the restart policy never acts: sidecars are native,
            ``spec.sidecars``), or ``hostNetwork`` without ``dnsPolicy: ClusterFirstWithHostNet``
            (the node's resolver does not know the master's Service name).
    """
    if not isinstance(pod, dict):
        return
    containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    if not any(c.get("name") == CONTAINER for c in containers):
        return  # no pytorch container at all: validate says so (KDP104)
    for c in containers:
        if c.get("name") != CONTAINER:
            raise SpecError(f"container {c.get('name')!r} beside pytorch would keep a failed pod running, so the pod "
                            "never fails and the restart policy never acts; list it under spec.sidecars (rendered as a "
                            "native sidecar, stopped when pytorch ends)", path="spec.podTemplatePatch.spec.containers")
    if pod.get("hostNetwork") is True and pod.get("dnsPolicy") not in HOST_NETWORK_DNS:
        raise SpecError(f"hostNetwork with dnsPolicy {pod.get('dnsPolicy', 'ClusterFirst')!r}: on the node's resolver the "
                        "master's Service name does not resolve; set spec.hostNetwork (render sets dnsPolicy "
                        "ClusterFirstWithHostNet) or dnsPolicy ClusterFirstWithHostNet in the patch",
                        path="spec.podTemplatePatch.spec.hostNetwork")


def build_model(ddp: dict[str, Any]) -> dict[str, Any]:
    """The template context for a checked DDPJob.

    Returns:
        ``name``, ``namespace``, ``labels``, ``annotations``, ``nproc_per_node``, ``run_policy``,
        ``elastic_policy``, ``replicas`` (type, count, restart policy) and ``template`` (the pod
        template every replica gets, ``spec.podTemplatePatch`` applied).

    Raises:
        SpecError: inconsistent sizes, a user env entry that would override a guard variable, a
            field that collides with what render adds (:mod:`k8sddp.render.podfields`), or a
            ``podTemplatePatch`` the strategic-merge rules refuse.
    """
    meta, spec = ddp["metadata"], ddp["spec"]
    d = DEFAULTS
    procs, gpus = _sizes(spec)
    elastic = spec.get("elastic")
    if elastic and elastic["minNodes"] > elastic["maxNodes"]:
        raise SpecError("elastic.minNodes is larger than elastic.maxNodes", path="spec.elastic")
    ckpt = spec["checkpoint"]
    mount = ckpt.get("mountPath", d["checkpointMountPath"])
    artifact_dir = mount.rstrip("/") + "/k8sddp"
    timeouts = spec.get("timeouts", {})
    try:
        guard = gv.guard_env(
            torch_version=spec.get("torchVersion"),
            artifact_dir=artifact_dir,
            pg_timeout_seconds=timeouts.get("processGroupSeconds", d["processGroupSeconds"]),
            watchdog_timeout_seconds=timeouts.get("watchdogSeconds", d["watchdogSeconds"]),
            max_hang_restarts=spec.get("maxHangRestarts", d["maxHangRestarts"]),
        )
    except ValueError as exc:
        raise SpecError(str(exc), path="spec.torchVersion") from exc
    guard.append((SEED_VAR, str(spec.get("seed", d["seed"]))))
    chosen = dict(guard)
    user_env = _user_env(spec.get("env", []), chosen)
    env = [{"name": n, "value": chosen[n]} for n, _ in guard] + user_env

    vols, mounts = podfields.volumes(spec, shm_size=str(spec.get("shmSize", d["shmSize"])), claim=ckpt["claimName"], mount=mount)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec["image"],
        "imagePullPolicy": spec.get("imagePullPolicy", d["imagePullPolicy"]),
        "command": launch_command(spec["command"], procs, elastic=bool(elastic)),
        "env": env,
        "envFrom": spec.get("envFrom", []),
        "ports": [{"name": PORT_NAME, "containerPort": PORT}],
        "resources": podfields.resources(spec, gpus=gpus, gpu_resource=spec.get("gpuResource", d["gpuResource"])),
        "volumeMounts": mounts,
        "securityContext": spec.get("containerSecurityContext", {}),
    }
    scheduling = spec.get("scheduling", {})
    host_network = bool(spec.get("hostNetwork"))
    pod = {
        "initContainers": podfields.init_containers(spec),
        "containers": [{k: v for k, v in container.items() if v or k == "env"}],
        "volumes": vols,
        "terminationGracePeriodSeconds": spec.get("terminationGracePeriodSeconds", d["terminationGracePeriodSeconds"]),
        "imagePullSecrets": [{"name": s} for s in spec.get("imagePullSecrets", [])],
        "nodeSelector": spec.get("nodeSelector", {}),
        "tolerations": spec.get("tolerations", []),
        "affinity": spec.get("affinity", {}),
        "topologySpreadConstraints": spec.get("topologySpreadConstraints", []),
        "securityContext": spec.get("securityContext", {}),
        # on the node's network the pod's resolver is the node's: the master's Service name would not resolve
        "hostNetwork": host_network,
        "dnsPolicy": "ClusterFirstWithHostNet" if host_network else "",
        "serviceAccountName": spec.get("serviceAccountName", ""),
        "priorityClassName": spec.get("priorityClassName", ""),
        "schedulerName": scheduling.get("schedulerName", ""),
    }
    labels = dict(meta.get("labels", {}))
    labels.setdefault("app.kubernetes.io/managed-by", "k8sddp")
    template = {"metadata": podfields.pod_metadata(spec, labels), "spec": {k: v for k, v in pod.items() if v}}
    if "podTemplatePatch" in spec:
        try:
            template = patch_pod_template(template, spec["podTemplatePatch"])
        except SmpError as exc:
            raise SpecError(f"not a valid strategic-merge patch: {exc}", path="spec.podTemplatePatch" + exc.path) from exc
        _check_patched_pod(template.get("spec"))
    restart = spec.get("restartPolicy", d["restartPolicy"])
    if elastic:
        replicas = [("Worker", elastic["maxNodes"])]
    else:
        nodes = spec.get("nodes", d["nodes"])
        replicas = [("Master", 1)] + ([("Worker", nodes - 1)] if nodes > 1 else [])
    scheduling_policy = {
        k: scheduling[k] for k in ("queue", "priorityClass", "minAvailable", "scheduleTimeoutSeconds") if k in scheduling
    }
    run_policy: dict[str, Any] = {
        "cleanPodPolicy": spec.get("cleanPodPolicy", d["cleanPodPolicy"]),
        "backoffLimit": spec.get("backoffLimit", d["backoffLimit"]),
        "activeDeadlineSeconds": spec.get("activeDeadlineSeconds", d["activeDeadlineSeconds"]),
    }
    if "ttlSecondsAfterFinished" in spec:
        run_policy["ttlSecondsAfterFinished"] = spec["ttlSecondsAfterFinished"]
    if scheduling_policy:
        run_policy["schedulingPolicy"] = scheduling_policy
    elastic_policy = None
    if elastic:
        elastic_policy = {
            "rdzvBackend": elastic.get("rdzvBackend", d["rdzvBackend"]),
            "minReplicas": elastic["minNodes"],
            "maxReplicas": elastic["maxNodes"],
            "maxRestarts": elastic.get("maxRestarts", d["elasticMaxRestarts"]),
        }
    return {
        "name": meta["name"],
        "namespace": meta.get("namespace", ""),
        "labels": labels,
        "annotations": meta.get("annotations", {}),
        "nproc_per_node": str(procs),
        "run_policy": run_policy,
        "elastic_policy": elastic_policy,
        "replicas": [{"type": t, "count": n, "restart_policy": restart} for t, n in replicas],
        "template": template,
    }
