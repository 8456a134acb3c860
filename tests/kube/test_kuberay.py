"""The real KubeRay operator (ray-operator v1.6.1 over the v1.7.0 CRDs) on what
``k8sddp render --target rayjob|raycluster`` writes.

- the head pod's and every worker pod's Ray container (``containers[0]``) carries the guards
  exactly as ``k8sddp validate`` resolved them from the manifest (``RayKind.effective_env``),
  and what KubeRay adds on top (``RAY_*``/``KUBERAY_*`` env appended after the user's, its own
  ``/dev/shm`` emptyDir only where nothing is mounted there) breaks none of them: the live pods,
  put back into a RayCluster, still pass ``validate --profile strict``;
- the pods carry the labels :data:`k8sddp.kinds.ray.POD_LABELS` names, and the RayJob's and
  RayCluster's statuses read as :class:`k8sddp.kinds.base.StatusModel` says;
- the RayJob's ``runtimeEnvYAML`` reaches the submitter Job's ``ray job submit
  --runtime-env-json``, and that runtime env over the pod env gives the env validate resolved.

No kubelet runs: the pods stay Pending, and a RayJob stays ``Initializing`` (no submitter Job)
until the test writes every pod's status as Running and Ready, as a kubelet would; the
RayCluster is then ``ready`` and the operator creates the submitter Job. No Ray runs, so the
Ray job itself is never submitted.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from k8sddp import guardvars as gv
from k8sddp.kinds import RAYCLUSTER, RAYCRONJOB, RAYJOB, RAYSERVICE, CheckContext, Kind
from k8sddp.kinds.ray import HEAD_GROUP_LABEL_VALUE, POD_LABELS
from k8sddp.schemagen_ray import RAY_KINDS
from k8sddp.validate import validate_objects
from k8sddp.validate.envresolve import EnvValue, effective_env
from k8sddp.validate.objindex import ObjectIndex
from k8sddp.validate.viewchecks import LayeredEnv

from ..conftest import REPO
from .conftest import Kube

SPEC = REPO / "examples" / "ddpjob.yaml"
#: Every variable validate or strict validate checks in the Ray container.
GUARDS = (*gv.MANDATORY, *gv.SAFETY_NETS, gv.LEGACY_FR_DUMP_TEMP_FILE, gv.RAY_COLLECTIVE_TIMEOUT)
#: What KubeRay v1.6.1 appends to containers[0] (common/pod.go setContainerEnvVars).
KUBERAY_ENV_PREFIXES = ("RAY_", "KUBERAY_", "FQ_RAY_IP")


def _render(target: str, name: str, namespace: str) -> dict[str, Any]:
    """``k8sddp render --target TARGET examples/ddpjob.yaml`` (the real CLI), named for the test."""
    proc = subprocess.run([sys.executable, "-m", "k8sddp", "render", "--target", target, str(SPEC)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    obj: dict[str, Any] = yaml.safe_load(proc.stdout)
    obj["metadata"].update(name=name, namespace=namespace)
    return obj


def _expected(kind: Kind, obj: Mapping[str, Any], namespace: str, *, pod_only: bool = False) -> dict[str, dict[str, str | None]]:
    """Group -> guard variable -> value, as validate resolves them (``pod_only``: without the runtime env)."""
    ctx = CheckContext(profile="strict", objects=ObjectIndex(default_namespace=namespace), namespace=namespace)
    out = {}
    for view in kind.pod_templates(obj, ctx):
        assert view.container is not None
        env = effective_env(view.container, namespace, ctx.objects) if pod_only else kind.effective_env(obj, view, ctx)
        out[view.group] = {k: env[k].value for k in GUARDS if k in env}
    return out


def _group_of(pod: Mapping[str, Any]) -> str:
    """The validate group name of a live pod (``head``, ``workerGroupSpecs[workers]``)."""
    group = pod["metadata"]["labels"][POD_LABELS["group"]]
    return "head" if group == HEAD_GROUP_LABEL_VALUE else f"workerGroupSpecs[{group}]"


def _pods(kube: Kube, namespace: str, cluster: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "pods", "-n", namespace, "-l", f"{POD_LABELS['cluster']}={cluster}", "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def _wait_pods(kube: Kube, namespace: str, cluster: str, want: int) -> list[dict[str, Any]]:
    return kube.wait_until(f"{want} pods of RayCluster {cluster}",  # type: ignore[no-any-return]
                           lambda: (lambda ps: ps if len(ps) == want else None)(_pods(kube, namespace, cluster)), timeout=120)


def _set_running(kube: Kube, namespace: str, pod: Mapping[str, Any]) -> None:
    """What the kubelet writes once the pod's containers run and pass their readiness probes."""
    now = "2026-01-01T00:00:00Z"
    statuses = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": True, "restartCount": 0, "started": True,
                 "state": {"running": {"startedAt": now}}} for c in pod["spec"]["containers"]]
    status = {"status": {
        "phase": "Running", "podIP": "10.244.0.10", "startTime": now,
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                       for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
        "containerStatuses": statuses,
    }}
    kube.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status", "--type=merge",
                 "-p", json.dumps(status))


def _check_pods(kind: Kind, obj: Mapping[str, Any], pods: list[dict[str, Any]], namespace: str, cluster: str) -> None:
    """Labels, guards, /dev/shm and KubeRay's additions on each live pod's Ray container."""
    want = _expected(kind, obj, namespace, pod_only=True)
    ctx = CheckContext(profile="strict", objects=ObjectIndex(default_namespace=namespace), namespace=namespace)
    templates = {v.group: v for v in kind.pod_templates(obj, ctx)}
    seen: dict[str, int] = {}
    for pod in pods:
        name, labels = pod["metadata"]["name"], pod["metadata"]["labels"]
        group = _group_of(pod)
        seen[group] = seen.get(group, 0) + 1
        assert labels[POD_LABELS["cluster"]] == cluster, name
        assert labels[POD_LABELS["replica-type"]] == ("head" if group == "head" else "worker"), name
        if group == "head":
            assert POD_LABELS["replica-index"] not in labels, name
        else:
            assert labels[POD_LABELS["replica-index"]] in {str(i) for i in range(2)}, name
        manifest = templates[group].container
        assert manifest is not None
        ray = pod["spec"]["containers"][0]
        assert ray["name"] == manifest["name"], name
        # KubeRay appends to the user's env and never edits it
        user_env = list(manifest.get("env") or [])
        assert ray["env"][: len(user_env)] == user_env, name
        added = [e["name"] for e in ray["env"][len(user_env):]]
        assert added and all(n.startswith(KUBERAY_ENV_PREFIXES) for n in added), (name, added)
        assert not set(added) & set(GUARDS), (name, added)
        names = [e["name"] for e in ray["env"]]
        assert all(names.count(g) <= 1 for g in GUARDS), name
        live = effective_env(ray, namespace, ObjectIndex(default_namespace=namespace))
        assert {k: live[k].value for k in GUARDS if k in live} == want[group], name
        assert want[group][gv.ASYNC_ERROR_HANDLING] == gv.ASYNC_ERROR_HANDLING_VALUE
        assert want[group][gv.FAULTHANDLER] == gv.FAULTHANDLER_VALUE
        assert want[group][gv.RAY_COLLECTIVE_TIMEOUT] == str(gv.DEFAULT_RAY_COLLECTIVE_TIMEOUT_SECONDS)
        # /dev/shm: mounted once, from a memory emptyDir: the manifest's own when it mounts one
        # there (KubeRay's shared-mem is then not added), else KubeRay's, sized to the
        # container's memory limit (common/pod.go addEmptyDir, findMemoryReqOrLimit)
        shm = [m for m in ray.get("volumeMounts") or [] if m["mountPath"] == "/dev/shm"]
        own = [m for m in manifest.get("volumeMounts") or [] if m["mountPath"] == "/dev/shm"]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        if own:
            assert [m["name"] for m in shm] == [own[0]["name"]], name
            manifest_volumes = {v["name"]: v for v in templates[group].pod_spec["volumes"]}
            assert volumes[own[0]["name"]]["emptyDir"] == manifest_volumes[own[0]["name"]]["emptyDir"], name
            assert "shared-mem" not in volumes, name
        else:
            assert [m["name"] for m in shm] == ["shared-mem"], name
            limit = manifest["resources"]["limits"]["memory"]
            assert volumes["shared-mem"]["emptyDir"] == {"medium": "Memory", "sizeLimit": limit}, name
        assert volumes[shm[0]["name"]]["emptyDir"]["medium"] == "Memory"
    workers = sum(int(g["replicas"]) for g in _cluster_spec(obj)["workerGroupSpecs"])
    assert seen == {"head": 1, "workerGroupSpecs[workers]": workers}
    # The live pods, put back into a RayCluster, pass strict validation: nothing KubeRay added
    # (its env, its command, its defaults) undoes a guard.
    assert validate_objects([_as_raycluster(obj, pods, namespace)], profile="strict").findings == []


def _cluster_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The RayClusterSpec of a RayJob, RayCronJob or RayCluster (:data:`k8sddp.schemagen_ray.RAY_KINDS`)."""
    spec: Any = obj
    for key in RAY_KINDS[obj["kind"]][1]:
        spec = spec[key]
    assert isinstance(spec, dict)
    return spec


def _as_raycluster(obj: Mapping[str, Any], pods: list[dict[str, Any]], namespace: str) -> dict[str, Any]:
    """A RayCluster whose group templates are the live pods' specs (one pod per group)."""
    spec = json.loads(json.dumps(_cluster_spec(obj)))
    by_group = {_group_of(p): p for p in pods}
    spec["headGroupSpec"]["template"] = {"metadata": {}, "spec": by_group["head"]["spec"]}
    for group in spec["workerGroupSpecs"]:
        group["template"] = {"metadata": {}, "spec": by_group[f"workerGroupSpecs[{group['groupName']}]"]["spec"]}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "live", "namespace": namespace}, "spec": spec}


def _submit_command(job: Mapping[str, Any]) -> list[str]:
    """The words bash runs in the submitter Job's container: KubeRay sets the command to
    ``/bin/bash -ce --`` (utils.GetContainerCommand) and the one argument to the script."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/bash", "-ce", "--"], container["command"]
    (script,) = container["args"]
    return shlex.split(script)


def test_rayjob_pods_carry_the_guards_and_the_runtime_env_reaches_the_submitter(kube: Kube, namespace: str) -> None:
    job = _render("rayjob", "guarded", namespace)
    assert validate_objects([job], profile="strict").findings == []
    kube.apply(job, namespace=namespace)
    obj = kube.wait_until("the RayJob's RayCluster name", lambda: (lambda o: o if (o or {}).get("status", {}).get(
        RAYJOB.status.pods_owner_field) else None)(kube.get("rayjob", "guarded", namespace)), timeout=90)
    cluster = obj["status"][RAYJOB.status.pods_owner_field]
    rc = kube.get("raycluster", cluster, namespace)
    assert rc is not None and rc["metadata"]["labels"]["ray.io/originated-from-cr-name"] == "guarded"
    workers = sum(int(g["replicas"]) for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"])
    pods = _wait_pods(kube, namespace, cluster, 1 + workers)
    _check_pods(RAYJOB, job, pods, namespace, cluster)

    # The head never becomes ready: the job waits in Initializing, with no submitter Job.
    reading = RAYJOB.status.read(kube.get("rayjob", "guarded", namespace)["status"])  # type: ignore[index]
    assert (reading.state, reading.final, reading.detail) == ("Initializing", False, "")
    assert kube.get("job", "guarded", namespace) is None

    for pod in pods:
        _set_running(kube, namespace, pod)
    submitter = kube.wait_until("the submitter Job", lambda: kube.get("job", "guarded", namespace), timeout=120)
    assert submitter["metadata"]["labels"]["ray.io/originated-from-cr-name"] == "guarded"
    words = _submit_command(submitter)
    submit = words.index("submit")
    assert words[submit - 2:submit] == ["ray", "job"]
    sent = json.loads(words[words.index("--runtime-env-json", submit) + 1])
    assert sent == yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    dash = words.index("--", submit)
    assert words[dash + 1: dash + 1 + len(shlex.split(job["spec"]["entrypoint"]))] == shlex.split(job["spec"]["entrypoint"])
    status = kube.get("rayjob", "guarded", namespace)["status"]  # type: ignore[index]
    assert words[words.index("--submission-id", submit) + 1] == status["jobId"]
    (container,) = submitter["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RAY_JOB_SUBMISSION_ID"] == status["jobId"] and env["PYTHONUNBUFFERED"] == "1"
    assert env["RAY_DASHBOARD_ADDRESS"] == status["dashboardURL"]
    reading = RAYJOB.status.read(status)
    assert (reading.state, reading.final) == ("Running", False)
    assert kube.get("raycluster", cluster, namespace)["status"]["state"] == "ready"  # type: ignore[index]

    # What the training workers see: the runtime env the submitter sends, over the live pod env,
    # is what validate resolved from the manifest.
    want = _expected(RAYJOB, job, namespace)
    overlay = {k: EnvValue(v, "runtimeEnvYAML") for k, v in sent["env_vars"].items()}
    for pod in pods:
        live = LayeredEnv(effective_env(pod["spec"]["containers"][0], namespace, ObjectIndex(default_namespace=namespace)), overlay)
        assert {k: live[k].value for k in GUARDS if k in live} == want[_group_of(pod)], pod["metadata"]["name"]


def _fail_submitter_pod(kube: Kube, namespace: str, job: str) -> None:
    """Write the submitter pod's status as a kubelet would once ``ray job submit`` exited 1."""
    pod = kube.wait_until("the submitter pod", lambda: next(iter(json.loads(kube.kubectl(
        "get", "pods", "-n", namespace, "-l", f"job-name={job}", "-o", "json").stdout)["items"]), None), timeout=90)
    (container,) = pod["spec"]["containers"]
    status = {"status": {"phase": "Failed", "containerStatuses": [{
        "name": container["name"], "image": container["image"], "imageID": "", "ready": False, "restartCount": 0,
        "started": False, "state": {"terminated": {"exitCode": 1, "reason": "Error",
                                                   "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}}}]}}
    kube.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status", "--type=merge",
                 "-p", json.dumps(status))


def test_a_failed_submitter_ends_the_rayjob_failed_and_shuts_the_cluster_down(kube: Kube, namespace: str) -> None:
    job = _render("rayjob", "doomed", namespace)
    # no retries: the first failure is final (rendered backoffLimit 3 would retry with a new cluster)
    job["spec"]["backoffLimit"] = 0
    job["spec"]["submitterConfig"] = {"backoffLimit": 0}
    assert validate_objects([job], profile="strict").findings == []
    kube.apply(job, namespace=namespace)
    obj = kube.wait_until("the RayJob's RayCluster name", lambda: (lambda o: o if (o or {}).get("status", {}).get(
        RAYJOB.status.pods_owner_field) else None)(kube.get("rayjob", "doomed", namespace)), timeout=90)
    cluster = obj["status"][RAYJOB.status.pods_owner_field]
    for pod in _wait_pods(kube, namespace, cluster, 3):
        _set_running(kube, namespace, pod)
    kube.wait_until("the submitter Job", lambda: kube.get("job", "doomed", namespace), timeout=120)
    _fail_submitter_pod(kube, namespace, "doomed")

    def reading() -> Any:
        got = RAYJOB.status.read((kube.get("rayjob", "doomed", namespace) or {}).get("status"))
        return got if got.final else None

    final = kube.wait_until("the RayJob's final state", reading, timeout=120)
    assert (final.state, final.reason, final.failed) == ("Failed", "SubmissionFailed", True)
    assert "BackoffLimitExceeded" in final.message
    # shutdownAfterJobFinishes (rendered true, ttlSecondsAfterFinished 0): the RayCluster goes
    kube.wait_until(f"RayCluster {cluster} deleted", lambda: kube.get("raycluster", cluster, namespace) is None, timeout=90)


@pytest.mark.slow
def test_raycronjob_runs_a_guarded_rayjob(kube: Kube, namespace: str) -> None:
    # the rendered RayJob's spec as the template of a RayCronJob due every minute (the
    # controller runs with the RayCronJob feature gate: cluster.sh)
    job = _render("rayjob", "nightly", namespace)
    cron = {"apiVersion": "ray.io/v1", "kind": "RayCronJob", "metadata": job["metadata"],
            "spec": {"schedule": "* * * * *", "jobTemplate": job["spec"]}}
    assert validate_objects([cron], profile="strict").findings == []
    kube.apply(cron, namespace=namespace)

    def runs() -> list[dict[str, Any]]:
        out = kube.kubectl("get", "rayjobs", "-n", namespace, "-l", "ray.io/cronjob-name=nightly", "-o", "json").stdout
        return [j for j in json.loads(out)["items"] if (j.get("status") or {}).get(RAYJOB.status.pods_owner_field)]

    (run, *_) = kube.wait_until("the RayCronJob's first RayJob", runs, timeout=130)
    assert run["spec"]["runtimeEnvYAML"] == job["spec"]["runtimeEnvYAML"]
    cluster = run["status"][RAYJOB.status.pods_owner_field]
    pods = _wait_pods(kube, namespace, cluster, 3)
    _check_pods(RAYCRONJOB, cron, pods, namespace, cluster)
    status = (kube.get("raycronjob", "nightly", namespace) or {}).get("status")
    assert status and status.get("lastScheduleTime")
    reading = RAYCRONJOB.status.read(status)
    assert (reading.state, reading.final) == ("", False)


def _without_own_shm(obj: dict[str, Any]) -> dict[str, Any]:
    """The RayCluster with the rendered /dev/shm volume and mounts removed (KubeRay then adds its own)."""
    spec = _cluster_spec(obj)
    for group in (spec["headGroupSpec"], *spec["workerGroupSpecs"]):
        pod = group["template"]["spec"]
        names = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts") or [] if m["mountPath"] == "/dev/shm"}
        for c in pod["containers"]:
            c["volumeMounts"] = [m for m in c.get("volumeMounts") or [] if m["name"] not in names]
        pod["volumes"] = [v for v in pod.get("volumes") or [] if v["name"] not in names]
    return obj


@pytest.mark.parametrize("shm", ["rendered", "kuberay"])
def test_raycluster_pods_carry_the_guards_and_the_status_reads_ready(kube: Kube, namespace: str, shm: str) -> None:
    obj = _render("raycluster", "guarded-cluster", namespace)
    if shm == "kuberay":
        obj = _without_own_shm(obj)
    # strict accepts both: KDP365 wants a memory emptyDir at /dev/shm, or nothing there (KubeRay's)
    assert validate_objects([obj], profile="strict").findings == []
    kube.apply(obj, namespace=namespace)
    workers = sum(int(g["replicas"]) for g in obj["spec"]["workerGroupSpecs"])
    pods = _wait_pods(kube, namespace, "guarded-cluster", 1 + workers)
    _check_pods(RAYCLUSTER, obj, pods, namespace, "guarded-cluster")

    def conditions() -> dict[str, str]:
        status = (kube.get("raycluster", "guarded-cluster", namespace) or {}).get("status") or {}
        return {c["type"]: c["status"] for c in status.get("conditions") or []}

    pending = kube.wait_until("the RayCluster's first conditions", lambda: conditions() or None, timeout=60)
    assert set(pending) <= set(RAYCLUSTER.status.condition_types)
    assert pending.get("RayClusterProvisioned") == "False" and pending.get("HeadPodReady") == "False"
    assert RAYCLUSTER.status.read(kube.get("raycluster", "guarded-cluster", namespace)["status"]).state == ""  # type: ignore[index]
    for pod in pods:
        _set_running(kube, namespace, pod)
    kube.wait_until("RayClusterProvisioned and HeadPodReady", lambda: conditions().get("RayClusterProvisioned") == "True"
                    and conditions().get("HeadPodReady") == "True", timeout=90)
    status = kube.get("raycluster", "guarded-cluster", namespace)["status"]  # type: ignore[index]
    assert set(conditions()) <= set(RAYCLUSTER.status.condition_types)
    reading = RAYCLUSTER.status.read(status)
    assert (reading.state, reading.final, reading.failed) == ("ready", False, False)


@pytest.mark.parametrize("kind", [RAYCLUSTER, RAYJOB, RAYSERVICE, RAYCRONJOB], ids=lambda k: k.kind)
def test_the_v1_7_0_crds_serve_what_the_status_models_name(kube: Kube, kind: Kind) -> None:
    crd = kube.get("crd", f"{kind.status.plural}.{kind.group}")
    assert crd is not None and crd["spec"]["names"]["kind"] == kind.kind
    assert kind.status.version in [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
    # v1.7.0, not the operator's own v1.6.1 CRDs: gcsFaultToleranceOptions.backend is new in v1.7.0
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == kind.status.version]
    assert '"backend"' in json.dumps(v1["schema"]), kind.kind
