"""The checks of the KubeRay kinds (:mod:`.ray`): runtime envs, structure, guards, strict settings.

Sources: ray-project/kuberay v1.7.0 (CRDs in ``../shared/reference/kuberay``; ``common/pod.go`` for
``containers[0]`` and ``/dev/shm``; ``utils/validation.go`` for ``runtimeEnvYAML``, which the
controller unmarshals before it submits); ray-project/ray ``python/ray/_private/runtime_env``
(``env_vars`` is a mapping of strings to strings) and ``python/ray/serve/schema.py``
(``serveConfigV2``: ``applications[].runtime_env``).
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import yaml

from .. import guardvars as gv
from ..resources import load_schema
from ..validate import checks
from ..validate.envchecks import check_env_settings
from ..validate.envresolve import EnvValue, effective_env
from ..validate.jobparts import MAPPING, as_list, get
from ..validate.rawfinding import RawFinding
from ..validate.viewchecks import LayeredEnv, check_guard_views, describe_group
from .base import PodTemplateView

if TYPE_CHECKING:
    from .base import CheckContext

__all__ = [
    "RuntimeEnv",
    "RuntimeEnvs",
    "cluster_strict_findings",
    "group_views",
    "guard_findings",
    "job_findings",
    "job_runtime_env",
    "list_map_findings",
    "schema_findings",
    "selected_cluster_findings",
    "serve_runtime_envs",
]

#: Ray's own float parse of RAY_TRAIN_COLLECTIVE_TIMEOUT_S; k8sddp wants a positive value.
_POSITIVE_SECONDS = re.compile(r"^(?:[1-9][0-9]*(?:\.[0-9]*)?|0?\.[0-9]*[1-9][0-9]*)$")


@dataclasses.dataclass(frozen=True)
class RuntimeEnv:
    """One Ray runtime env whose ``env_vars`` win over the pod's env.

    Attributes:
        path: where it is written, from the object's root (the ``runtimeEnvYAML`` string).
        label: how messages name it (``runtimeEnvYAML``, ``serveConfigV2 application 'app'``).
        env_vars: its ``env_vars``, as :class:`EnvValue` with ``source`` = ``label``.
    """

    path: tuple[Any, ...]
    label: str
    env_vars: dict[str, EnvValue]


@dataclasses.dataclass
class RuntimeEnvs:
    """The runtime envs of one object, and KDP152 findings for those that cannot be read."""

    envs: list[RuntimeEnv]
    findings: list[RawFinding] = dataclasses.field(default_factory=list)


def _parse_yaml(text: Any, path: tuple[Any, ...], what: str) -> tuple[Any, list[RawFinding]]:
    if text is None or text == "":
        return None, []
    if not isinstance(text, str):
        return None, []  # (the CRD types it a string: KDP150)
    try:
        return yaml.safe_load(text), []
    except yaml.YAMLError as exc:
        return None, [RawFinding("KDP152", path, f"{what} is not YAML: {str(exc).splitlines()[0]}")]


def _env_vars(runtime_env: Any, path: tuple[Any, ...], label: str) -> RuntimeEnvs:
    if runtime_env is None:
        return RuntimeEnvs([])
    if not isinstance(runtime_env, MAPPING):
        return RuntimeEnvs([], [RawFinding("KDP152", path, f"{label} is not a mapping but {type(runtime_env).__name__}; Ray refuses it")])
    env_vars = runtime_env.get("env_vars")
    if env_vars is None:
        return RuntimeEnvs([RuntimeEnv(path, label, {})])
    if not isinstance(env_vars, MAPPING) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()):
        bad = [f"{k}={v!r}" for k, v in env_vars.items() if not isinstance(v, str)] if isinstance(env_vars, MAPPING) else []
        said = f" ({', '.join(bad[:3])}: quote the values)" if bad else ""
        return RuntimeEnvs([], [RawFinding("KDP152", path, f"{label} env_vars must map names to strings{said}; Ray refuses the runtime env")])
    return RuntimeEnvs([RuntimeEnv(path, label, {k: EnvValue(v, label) for k, v in env_vars.items()})])


def job_runtime_env(text: Any, path: tuple[Any, ...]) -> RuntimeEnvs:
    """A RayJob's ``runtimeEnvYAML`` (``text``, at ``path``): parsed, its ``env_vars`` read."""
    data, problems = _parse_yaml(text, path, "runtimeEnvYAML")
    if problems:
        return RuntimeEnvs([], problems)
    return _env_vars(data, path, "runtimeEnvYAML")


def serve_runtime_envs(text: Any, path: tuple[Any, ...]) -> RuntimeEnvs:
    """A RayService's ``serveConfigV2``: the runtime env of every application."""
    data, problems = _parse_yaml(text, path, "serveConfigV2")
    out = RuntimeEnvs([], problems)
    if data is None:
        return out
    if not isinstance(data, MAPPING):
        out.findings.append(RawFinding("KDP152", path, "serveConfigV2 is not a mapping with applications"))
        return out
    apps = data.get("applications")
    if apps is not None and not isinstance(apps, list):  # Ray Serve refuses the config: nothing was read
        out.findings.append(RawFinding("KDP152", path, f"serveConfigV2 applications is not a list but {type(apps).__name__}; Ray refuses it"))
        return out
    for i, app in enumerate(as_list(apps)):
        if not isinstance(app, MAPPING):
            out.findings.append(RawFinding("KDP152", path, f"serveConfigV2 application {i} is not a mapping but {type(app).__name__}; Ray refuses it"))
            continue
        name = app.get("name", i)
        got = _env_vars(app.get("runtime_env"), path, f"serveConfigV2 application {name!r} runtime_env")
        out.envs += got.envs
        out.findings += got.findings
    return out


def group_views(cluster: Any, base: tuple[Any, ...]) -> list[PodTemplateView]:
    """The head group and every worker group of a RayClusterSpec at ``base``; the training (Ray)
    container is ``containers[0]`` (``None`` when the list is empty or not a list)."""
    views: list[PodTemplateView] = []
    if not isinstance(cluster, MAPPING):
        return views
    groups: list[tuple[str, tuple[Any, ...], Any]] = [("head", (*base, "headGroupSpec", "template"), get(cluster, "headGroupSpec", "template"))]
    for i, group in enumerate(as_list(cluster.get("workerGroupSpecs"))):
        name = group.get("groupName") if isinstance(group, MAPPING) else None
        label = f"workerGroupSpecs[{name}]" if isinstance(name, str) and name else f"workerGroupSpecs[{i}]"
        groups.append((label, (*base, "workerGroupSpecs", i, "template"), get(group, "template")))
    for label, path, template in groups:
        if not isinstance(template, MAPPING):
            continue
        first = get(template, "spec", "containers", 0)
        found = isinstance(first, MAPPING)
        views.append(PodTemplateView(label, path, template, 0 if found else None, first if found else None))
    return views


# -- structure ------------------------------------------------------------------------------------


def schema_findings(schema_file: str, kind: str, obj: Mapping[str, Any]) -> list[RawFinding]:
    """KDP150 (the KubeRay CRD), KDP102 (metadata) and KDP151 (the Ray container) for ``obj``."""
    validator = checks._validator(schema_file)
    if validator.is_valid(obj) or validator.is_valid(pruned := checks.prune_nulls(obj)):
        return []
    schema = load_schema(schema_file)
    findings, seen = [], set()
    for err in validator.iter_errors(pruned):
        rule_id = checks._rule_of(schema, list(err.schema_path)) or "KDP150"
        path = tuple(err.instance_path) + checks._offending_key(err)
        if rule_id == "KDP151":
            # Report the group once, at its template (or the first container).
            cut = next((i for i, p in enumerate(path) if p == "template"), len(path) - 1)
            path = path[: cut + 1] + (("spec", "containers", 0) if len(path) > cut + 4 else ())
        if (rule_id, path) in seen:
            continue
        seen.add((rule_id, path))
        if rule_id == "KDP151":
            message = "every group's containers[0] is the Ray container (KubeRay runs ray start there) and needs a non-empty image"
        elif rule_id == "KDP102":
            message = checks._structure_message("KDP102", path, err.message)
        else:
            message = checks._structure_message("KDP101", path, err.message).replace("the PyTorchJob CRD", f"the KubeRay {kind} CRD (v1.7.0)")
        findings.append(RawFinding(rule_id, path, message))
    return findings


def list_map_findings(views: Sequence[PodTemplateView]) -> list[RawFinding]:
    """KDP106: container names and each container's env names are unique in every group."""
    findings = []
    for view in views:
        containers = as_list(view.pod_spec.get("containers"))
        seen: set[str] = set()
        for i, c in enumerate(containers):
            if not isinstance(c, MAPPING):
                continue
            name = c.get("name")
            if isinstance(name, str) and name in seen:
                findings.append(RawFinding("KDP106", (*view.path, "spec", "containers", i), f"group {view.group}: two containers are named {name!r}"))
            seen.add(str(name))
            names: set[str] = set()
            for j, e in enumerate(as_list(c.get("env"))):
                n = e.get("name") if isinstance(e, MAPPING) else None
                if isinstance(n, str) and n in names:
                    findings.append(RawFinding("KDP106", (*view.path, "spec", "containers", i, "env", j), f"group {view.group}: env of container {name!r} has {n!r} twice"))
                names.add(str(n))
    return findings


# -- guards ---------------------------------------------------------------------------------------

_GUARDS_ON_SIDECARS = {"KDP201": (gv.ASYNC_ERROR_HANDLING, gv.LEGACY_ASYNC_ERROR_HANDLING), "KDP202": (gv.FAULTHANDLER,)}


def _sidecar_hint(view: PodTemplateView, rule_id: str) -> str:
    names = _GUARDS_ON_SIDECARS.get(rule_id, ())
    for c in as_list(view.pod_spec.get("containers"))[1:]:
        if isinstance(c, MAPPING) and any(isinstance(e, MAPPING) and e.get("name") in names for e in as_list(c.get("env"))):
            return f" (container {c.get('name')!r} sets it, but KubeRay runs Ray in containers[0] only: a guard on a sidecar does not count)"
    return ""


def guard_findings(
    views: Sequence[PodTemplateView], overlays: Sequence[RuntimeEnv], ctx: CheckContext, *, at: tuple[Any, ...] | None = None, prefix: str = ""
) -> list[RawFinding]:
    """The guard rules on each group's Ray container, once per runtime env laid over the pod env
    (once with the pod env alone when there is none), plus KDP250, KDP364 and KDP365.

    Args:
        views: the groups.
        overlays: the runtime envs whose ``env_vars`` win over the pod env.
        ctx: the check context (profile, objects, namespace).
        at: report every finding at this path (a RayJob's ``clusterSelector``) instead.
        prefix: put before every message (``selected RayCluster 'c': ``).
    """
    pods = [effective_env(v.container, ctx.namespace, ctx.objects) if v.container is not None else {} for v in views]
    by_path = {o.label: o.path for o in overlays}

    def locate(view: PodTemplateView, var: str | None, value: EnvValue | None) -> tuple[Any, ...]:
        if at is not None:
            return at
        if value is not None and value.source in by_path:
            return by_path[value.source]
        base = view.container_path or view.path
        return (*base, "env") if isinstance(view.container, MAPPING) and "env" in view.container else base

    findings: list[RawFinding] = []
    seen: set[tuple[str, tuple[Any, ...], str]] = set()
    layers: list[RuntimeEnv | None] = [*overlays] or [None]
    for overlay in layers:
        envs = [LayeredEnv(p, overlay.env_vars) if overlay else p for p in pods]
        for f in check_guard_views(views, envs, ctx.profile, locate=locate):
            view = next(v for v in views if f.message.startswith(describe_group(v)))
            # A value from a runtime env is one finding there, not one per group it reaches.
            shared = at is not None or f.path in by_path.values()
            key = (f.rule_id, f.path, "" if shared else view.group)
            if key not in seen:
                seen.add(key)
                findings.append(RawFinding(f.rule_id, f.path, prefix + f.message + _sidecar_hint(view, f.rule_id)))
        if overlay is not None:
            findings += _weakened(views, pods, overlay, at, prefix)
        findings += _settings(views, envs, overlay, at, prefix, seen)
    if ctx.profile == "strict":
        for view, pod in zip(views, pods, strict=True):
            if view.container is None:
                continue
            layered: list[Mapping[str, EnvValue]] = [LayeredEnv(pod, o.env_vars) for o in overlays]
            for env in layered or [pod]:
                for f in _collective_timeout(view, env, locate, prefix):
                    if (f.rule_id, f.path, view.group) not in seen:
                        seen.add((f.rule_id, f.path, view.group))
                        findings.append(f)
            findings += _dev_shm(view, at, prefix)
    return findings


#: The variables Ray Train sets in each training worker over the pod's env (Ray 2.60
#: ray/train/torch/config.py ``_set_torch_distributed_env_vars``, ``_setup_torch_process_group``):
#: KDP215 when a Ray container sets them.
RAY_TRAIN_ENV: dict[str, str] = {
    name: "Ray Train sets it in every training worker (ray/train/torch/config.py)"
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")
}


def _settings(
    views: Sequence[PodTemplateView], envs: Sequence[Mapping[str, EnvValue]], overlay: RuntimeEnv | None,
    at: tuple[Any, ...] | None, prefix: str, seen: set[tuple[str, tuple[Any, ...], str]],
) -> list[RawFinding]:
    """KDP213, KDP215-KDP217 (:func:`k8sddp.validate.envchecks.check_env_settings`) for each group's
    Ray container, on its env with ``overlay`` laid over it; a blocking wait that the runtime env
    turns on is reported once, at the runtime env."""
    out = []
    for view, env in zip(views, envs, strict=True):
        if view.container is None or view.container_path is None:
            continue
        for f in check_env_settings(env, view.container, view.container_path, describe_group(view).removesuffix(": "), operator_env=RAY_TRAIN_ENV):
            from_overlay = overlay is not None and f"(from {overlay.label})" in f.message
            path = at if at is not None else (overlay.path if from_overlay and overlay is not None else f.path)
            key = (f.rule_id, path, "" if from_overlay or at is not None else view.group)
            if key not in seen:
                seen.add(key)
                out.append(RawFinding(f.rule_id, path, prefix + f.message))
    return out


def _weakened(views: Sequence[PodTemplateView], pods: Sequence[Mapping[str, EnvValue]], overlay: RuntimeEnv, at: tuple[Any, ...] | None, prefix: str) -> list[RawFinding]:
    """KDP250: the runtime env sets the async mode to 1 where the pod sets 3."""
    out = []
    for name in (gv.ASYNC_ERROR_HANDLING, gv.LEGACY_ASYNC_ERROR_HANDLING):
        top = overlay.env_vars.get(name)
        if top is None or top.value != "1":
            continue
        weaker = [v.group for v, p in zip(views, pods, strict=True) if (pv := p.get(name)) is not None and pv.value == gv.ASYNC_ERROR_HANDLING_VALUE]
        if weaker:
            out.append(
                RawFinding(
                    "KDP250",
                    at or overlay.path,
                    f"{prefix}{overlay.label} env_vars set {name}=\"1\" over the pod env's \"3\" (groups {', '.join(weaker)}); the runtime env "
                    "wins, and mode 1 aborts the communicator before the process dies, which can kill rank 0 before the flight recorder "
                    f"dumps: set \"{gv.ASYNC_ERROR_HANDLING_VALUE}\" there or leave it to the pod env",
                )
            )
    return out


def _collective_timeout(view: PodTemplateView, env: Mapping[str, EnvValue], locate: Any, prefix: str) -> list[RawFinding]:
    """KDP364: RAY_TRAIN_COLLECTIVE_TIMEOUT_S is a positive number of seconds."""
    name = gv.RAY_COLLECTIVE_TIMEOUT
    value = env.get(name)
    if value is not None and value.value is not None and _POSITIVE_SECONDS.match(value.value):
        return []
    state = checks._describe(name, value)
    return [
        RawFinding(
            "KDP364",
            locate(view, name, value),
            f"{prefix}{describe_group(view)}{state}; expected a positive number of seconds, e.g. \"{gv.DEFAULT_RAY_COLLECTIVE_TIMEOUT_SECONDS}\" "
            "(a ray.train.report reached by some ranks only waits forever without it)",
        )
    ]


def _dev_shm(view: PodTemplateView, at: tuple[Any, ...] | None, prefix: str) -> list[RawFinding]:
    """KDP365: /dev/shm is KubeRay's memory emptyDir (nothing mounted there) or one of the pod's own."""
    container = view.container or {}
    volumes = {v.get("name"): v for v in as_list(view.pod_spec.get("volumes")) if isinstance(v, MAPPING)}
    for mount in as_list(container.get("volumeMounts")):
        if isinstance(mount, MAPPING) and mount.get("mountPath") and posixpath.normpath(str(mount["mountPath"])) == "/dev/shm":
            if get(volumes.get(mount.get("name")), "emptyDir", "medium") == "Memory":
                return []
            base = view.container_path or view.path
            return [
                RawFinding(
                    "KDP365",
                    at or (*base, "volumeMounts"),
                    f"{prefix}{describe_group(view)}/dev/shm is mounted from volume {mount.get('name')!r}, which is not an emptyDir with "
                    "medium: Memory; remove the mount (KubeRay then mounts a memory emptyDir there) or make it one",
                )
            ]
    return []


def cluster_strict_findings(obj: Mapping[str, Any], cluster_path: tuple[Any, ...], ctx: CheckContext) -> list[RawFinding]:
    """KDP363 (strict): the RayClusterSpec names its ``rayVersion``."""
    cluster = get(obj, *cluster_path)
    if ctx.profile != "strict" or not isinstance(cluster, MAPPING) or (isinstance(cluster.get("rayVersion"), str) and cluster["rayVersion"]):
        return []
    return [RawFinding("KDP363", cluster_path, "rayVersion is not set; KubeRay picks the autoscaler and the features it uses by it: set the image's Ray version")]


def job_findings(obj: Mapping[str, Any], job_path: tuple[Any, ...], overlays: Sequence[RuntimeEnv], ctx: CheckContext) -> list[RawFinding]:
    """KDP360-KDP362 (strict) for the RayJobSpec at ``job_path``."""
    job = get(obj, *job_path)
    if ctx.profile != "strict" or not isinstance(job, MAPPING):
        return []
    out = []
    deadline = job.get("activeDeadlineSeconds")
    if not isinstance(deadline, int) or isinstance(deadline, bool) or deadline < 1:
        out.append(RawFinding("KDP360", job_path, "activeDeadlineSeconds is not set (or not a positive integer); a hung job otherwise runs (and holds its GPUs) forever: KubeRay stops it at the deadline"))
    if "backoffLimit" not in job:
        out.append(RawFinding("KDP361", job_path, "backoffLimit is not set; say how many times KubeRay may retry the job after a failure (0: never), e.g. 2"))
    selected = job.get("clusterSelector") and not job.get("rayClusterSpec")
    if not selected and job.get("shutdownAfterJobFinishes") is not True and not job.get("deletionStrategy"):
        out.append(
            RawFinding(
                "KDP362",
                job_path,
                "neither shutdownAfterJobFinishes: true nor a deletionStrategy: the RayCluster (and its GPUs) stays after the job ends",
            )
        )
    return out


def selected_cluster_findings(obj: Mapping[str, Any], job_path: tuple[Any, ...], overlays: Sequence[RuntimeEnv], ctx: CheckContext) -> list[RawFinding]:
    """A RayJob that runs on a selected RayCluster: that cluster's guards (KDP2xx, at ``clusterSelector``), or KDP251."""
    job = get(obj, *job_path)
    selector = job.get("clusterSelector") if isinstance(job, MAPPING) else None
    if not isinstance(selector, MAPPING) or not selector or job.get("rayClusterSpec"):
        return []
    at = (*job_path, "clusterSelector")
    name = selector.get("ray.io/cluster")
    if not isinstance(name, str) or not name:
        return [RawFinding("KDP251", at, "clusterSelector has no 'ray.io/cluster' key, the only one the RayJob controller reads: the job's guards cannot be verified")]
    cluster = ctx.objects.lookup("ray.io", "RayCluster", ctx.namespace, name)
    if cluster is None:
        ns = f" in namespace {ctx.namespace!r}" if ctx.namespace else ""
        return [RawFinding("KDP251", at, f"the job runs on RayCluster {name!r}{ns}, which is not in the input: its guards cannot be verified; add the RayCluster to the input")]
    views = group_views(cluster.get("spec"), ("spec",))
    return [f for f in guard_findings(views, overlays, ctx, at=at, prefix=f"selected RayCluster {name!r}, ") if f.rule_id not in ("KDP365",)]
