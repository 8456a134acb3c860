"""The template context of the KubeRay targets (``render --target rayjob|raycluster``).

Built on :func:`.model.build_model` (the same guard env, volumes, resources and deadlines as the
PyTorchJob), laid out as KubeRay wants it (ray-project/kuberay v1.7.0): one head group and one worker
group (``workers``, ``nodes`` replicas), the Ray container first in each pod (KubeRay runs
``ray start`` in ``containers[0]`` and writes its command itself), the guard env in the pod env and
mirrored in the RayJob's ``runtimeEnvYAML`` ``env_vars`` (the runtime env wins over the pod env, so
a runtime env added later cannot silently weaken it), plus ``RAY_TRAIN_COLLECTIVE_TIMEOUT_S``.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from .. import guardvars as gv
from ..errors import SpecError
from .model import CONTAINER, build_model

__all__ = ["RAY_PORTS", "RAY_VERSION", "build_ray_model"]

#: The Ray version written when the spec names none (the Ray these checks were measured with).
RAY_VERSION = "2.60.0"
#: The head's ports (KubeRay's defaults: GCS, dashboard, client; kuberay utils/constant.go).
RAY_PORTS = [{"name": "gcs-server", "containerPort": 6379}, {"name": "dashboard", "containerPort": 8265}, {"name": "client", "containerPort": 10001}]


def entrypoint(command: dict[str, Any]) -> str:
    """The RayJob's ``entrypoint``: the driver script that starts Ray Train (``python ...``)."""
    if "task" in command:
        argv = ["python", "-m", "k8sddp", "train", "--task", command["task"]]
    elif "module" in command:
        argv = ["python", "-m", command["module"]]
    else:
        argv = ["python", command["script"]]
    return shlex.join(argv + [str(a) for a in command.get("args", [])])


def build_ray_model(ddp: dict[str, Any], model: dict[str, Any] | None = None) -> dict[str, Any]:
    """The template context for a checked DDPJob rendered as a RayJob or RayCluster (``model``: its
    PyTorchJob model of :func:`.model.build_model`, computed when not given).

    Raises:
        SpecError: what :func:`.model.build_model` raises, and ``elastic`` (Ray Train scales itself).
    """
    if ddp["spec"].get("elastic"):
        raise SpecError("elastic is not rendered for Ray: Ray Train restarts workers itself (FailureConfig); remove spec.elastic", path="spec.elastic")
    model = model if model is not None else build_model(ddp)
    spec = ddp["spec"]
    template = model["template"]
    pod_spec = template["spec"]
    base = next(c for c in pod_spec["containers"] if c.get("name") == CONTAINER)
    env = [*base["env"], {"name": gv.RAY_COLLECTIVE_TIMEOUT, "value": str(gv.DEFAULT_RAY_COLLECTIVE_TIMEOUT_SECONDS)}]
    guarded = {e["name"] for e in env if e["name"] in (*gv.MANDATORY, gv.RAY_COLLECTIVE_TIMEOUT)}

    def container(name: str, *, head: bool) -> dict[str, Any]:
        resources = {k: dict(v) for k, v in base["resources"].items()}
        if head:  # the head schedules; the GPUs belong to the workers
            for part in resources.values():
                part.pop(spec.get("gpuResource", "nvidia.com/gpu"), None)
            resources = {k: v for k, v in resources.items() if v}
        # KubeRay writes the Ray container's start command and ports itself; the rest of the
        # PyTorchJob model's container (envFrom, securityContext, mounts) is kept
        out = {k: v for k, v in base.items() if k not in ("command", "ports")}
        out.update(name=name, env=env)
        if resources:
            out["resources"] = resources
        else:
            out.pop("resources", None)
        if head:
            out["ports"] = RAY_PORTS
        return out

    def pod(name: str, *, head: bool) -> dict[str, Any]:
        return {**template, "spec": {**pod_spec, "containers": [container(name, head=head)]}}

    cluster = {
        "rayVersion": spec.get("rayVersion", RAY_VERSION),
        "headGroupSpec": {"rayStartParams": {}, "template": pod("ray-head", head=True)},
        "workerGroupSpecs": [
            {"groupName": "workers", "replicas": spec.get("nodes", 1), "minReplicas": spec.get("nodes", 1), "maxReplicas": spec.get("nodes", 1), "rayStartParams": {}, "template": pod("ray-worker", head=False)}
        ],
    }
    runtime_env = yaml.safe_dump({"env_vars": {e["name"]: e["value"] for e in env if e["name"] in guarded}}, sort_keys=False)
    return {
        **{k: model[k] for k in ("name", "namespace", "labels", "annotations")},
        "cluster": cluster,
        "entrypoint": entrypoint(spec["command"]),
        "runtime_env_yaml": runtime_env,
        "backoff_limit": model["run_policy"]["backoffLimit"],
        "active_deadline_seconds": model["run_policy"]["activeDeadlineSeconds"],
    }
