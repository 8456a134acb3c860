"""The real Kubeflow Trainer v2.3.0 controller and JobSet v0.12.0 against what k8sddp resolves and renders.

- the env of the ``node`` container in the JobSet's pod template that the real Trainer controller
  builds for a TrainJob (and in the pods the Job controller makes from it) equals, entry for entry
  and in order, the effective trainer container of :func:`k8sddp.kinds.trainermerge.resolve`
  (what ``validate`` checks), ``PET_*`` included: for the rendered TrainJob on the rendered
  runtime, and for the ``auto`` forms of ``PET_NPROC_PER_NODE`` (CPU requests, GPUs, the stock
  ``torch-distributed`` runtime with the reference's runtime-patches example);
- the failure policy of ``k8sddp runtime render`` (docs/trainer.md): a ``node`` exit >= 128
  restarts the whole JobSet (``status.restarts``, pods labelled with the new restart attempt) and
  the TrainJob does not fail; exit 1-127 fails the Job with reason ``PodFailurePolicy``, the JobSet
  with ``FailJobSet`` and the TrainJob with condition ``Failed``; a ``DisruptionTarget`` pod is
  replaced without a restart; retryable exits past ``maxRestarts`` fail it;
- k8sddp's webhook reads a TrainJob's runtime from the real API server: in-process (the admission
  decider with its KubeLookup) and on the whole path (kubectl -> API server ->
  ``k8sddp webhook serve`` -> a GET of the runtime), as the webhook chart's service account with
  the chart's RBAC; ``validate --cluster`` does the same (a ClusterTrainingRuntime, or a
  TrainingRuntime in the job's namespace, each admitted by the real Trainer webhook).

No kubelet runs: the test writes a pod's status subresource as a kubelet would.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp import kinds
from k8sddp.kinds.trainermerge import JOB_COMPLETION_INDEX, job_controller_env
from k8sddp.render import load_spec, render_runtime, render_spec
from k8sddp.validate import validate_objects
from k8sddp.validate.engine import new_index

from ..admission.helpers import make_cert, review
from ..conftest import REFERENCE, REPO
from .conftest import Kube, k

NODE = "node"


def _runtime(name: str, **options: Any) -> dict[str, Any]:
    runtime: dict[str, Any] = render_runtime(name=name, **options).objects[0]
    return runtime


def _trainjob(name: str, namespace: str, runtime: str) -> dict[str, Any]:
    (job,) = render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml")), "trainjob").objects
    job["metadata"].update(name=name, namespace=namespace)
    job["spec"]["runtimeRef"]["name"] = runtime
    # the rendered job mounts a claim; a PVC need not exist for a Pending pod
    return dict(job)


def _jobset(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get("jobset", name, namespace)


def _template_node(jobset: dict[str, Any]) -> dict[str, Any]:
    rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == NODE)
    return next(c for c in rjob["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == NODE)


def _pods(kube: Kube, namespace: str, jobset: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "pods", "-n", namespace, "-l", f"jobset.sigs.k8s.io/jobset-name={jobset}", "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def _undefaulted(env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A pod's env without the API server's default ``fieldRef.apiVersion: v1`` (core/v1
    SetDefaults_ObjectFieldSelector), to compare with the template's."""
    out = copy.deepcopy(env)
    for entry in out:
        ref = (entry.get("valueFrom") or {}).get("fieldRef")
        if isinstance(ref, dict) and ref.get("apiVersion") == "v1":
            del ref["apiVersion"]
    return out


def _resolved(job: dict[str, Any], runtime: dict[str, Any], namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The effective ``node`` container validate checks, and its effective env."""
    index = new_index(default_namespace=namespace)
    index.add(runtime)
    ctx = kinds.CheckContext("baseline", index, namespace)
    (view,) = kinds.TRAINJOB.pod_templates(job, ctx)
    assert view.container is not None
    return dict(view.container), kinds.TRAINJOB.effective_env(job, view, ctx)


def _variant(which: str, namespace: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``(runtime, trainjob, expected PET_NPROC_PER_NODE)``."""
    rname = f"k8sddp-{uuid.uuid4().hex[:6]}"
    name = f"env-{which}"
    if which == "stock":
        if not REFERENCE.is_dir():
            pytest.skip("../shared/reference is not present")
        ref = REFERENCE / "kubeflow-trainer"
        runtime = yaml.safe_load((ref / "runtimes" / "torch_distributed.yaml").read_text())
        runtime["metadata"]["name"] = rname
        job = yaml.safe_load((ref / "examples" / "02-runtime-patches.yaml").read_text())
        job["metadata"].update(name=name, namespace=namespace)
        job["spec"]["runtimeRef"]["name"] = rname
        return runtime, job, "2"  # requests.cpu 2 (limits 4): the request wins
    runtime = _runtime(rname)
    job = _trainjob(name, namespace, rname)
    trainer = job["spec"]["trainer"]
    if which == "rendered":
        return runtime, job, str(trainer["numProcPerNode"])
    del trainer["numProcPerNode"]
    if which == "auto-cpu":
        trainer["resourcesPerNode"] = {"requests": {"cpu": "1500m", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
        return runtime, job, "2"  # Quantity.Value() rounds up
    trainer["resourcesPerNode"] = {"limits": {"cpu": "8", "nvidia.com/gpu": "2", "memory": "16Gi"}}
    return runtime, job, "auto"  # torchrun counts the node's GPUs


@pytest.mark.parametrize("which", ["rendered", "auto-cpu", "auto-gpu", "stock"])
def test_jobset_env_equals_the_resolved_trainer(kube: Kube, namespace: str, which: str) -> None:
    runtime, job, nproc = _variant(which, namespace)
    name = job["metadata"]["name"]
    if which == "stock":
        kube.kubectl("create", "serviceaccount", "training-sa", "-n", namespace)  # the example's patch names it
    try:
        kube.apply(runtime)
        kube.apply(job, namespace=namespace)
        jobset = kube.wait_until("the Trainer's JobSet", lambda: _jobset(kube, namespace, name), timeout=60)
        container, env = _resolved(job, runtime, namespace)
        real = _template_node(jobset)
        assert real["env"] == container["env"]  # same entries, same order, PET_* included
        assert {e["name"]: e["value"] for e in real["env"] if "value" in e} == {n: v.value for n, v in env.items() if v.value is not None}
        # field references to the pod's index: the torch plugin's, and the Job controller's for Indexed Jobs
        assert {n for n, v in env.items() if v.value is None} == {"PET_NODE_RANK", JOB_COMPLETION_INDEX}
        assert {e["name"]: e.get("value") for e in real["env"]}["PET_NPROC_PER_NODE"] == nproc
        for key in ("image", "command", "resources"):
            assert real.get(key) == container.get(key), key
        nodes = int(job["spec"]["trainer"]["numNodes"])
        pods = kube.wait_until("the JobSet's pods", lambda: (lambda ps: ps if len(ps) == nodes else None)(_pods(kube, namespace, name)), timeout=60)
        rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == NODE)
        in_pods = job_controller_env(container, rjob["template"]["spec"])["env"]
        for pod in pods:
            pod_env = _undefaulted(next(c for c in pod["spec"]["containers"] if c["name"] == NODE)["env"])
            assert pod_env == in_pods, pod["metadata"]["name"]
            assert [e["name"] for e in pod_env] == list(env)  # validate's effective env: the pod's, name for name
        if which == "rendered":
            assert not validate_objects([runtime, job], profile="strict").failing()
    finally:
        kube.kubectl("delete", "trainjob", name, "-n", namespace, "--wait=false", check=False)
        kube.kubectl("delete", "clustertrainingruntime", runtime["metadata"]["name"], "--wait=false", check=False)


def _terminate(kube: Kube, namespace: str, pod: str, code: int, *, disrupted: bool = False) -> None:
    """What the kubelet writes when the ``node`` container ends with ``code`` (and, for a
    preemption, the DisruptionTarget condition the scheduler or the eviction API sets)."""
    status: dict[str, Any] = {"phase": "Failed", "containerStatuses": [{
        "name": NODE, "image": "ghcr.io/k8sddp/train:0.1.0", "imageID": "", "ready": False, "restartCount": 0, "started": False,
        "state": {"terminated": {"exitCode": code, "reason": "Error", "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}},
    }]}
    if disrupted:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                                 "message": "preempted", "lastTransitionTime": "2026-01-01T00:00:01Z"}]
    kube.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))


def _conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def _attempt_pods(kube: Kube, namespace: str, name: str, attempt: int, count: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = [p for p in _pods(kube, namespace, name) if p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == str(attempt)]
        return pods if len(pods) == count else None

    pods: list[dict[str, Any]] = kube.wait_until(f"{count} pods of restart attempt {attempt}", ready, timeout=90)
    return pods


@pytest.fixture
def guarded(kube: Kube, namespace: str) -> Any:
    """A fresh guarded runtime (maxRestarts 1) and a TrainJob on it; yields ``(name, nodes)``."""
    rname = f"k8sddp-{uuid.uuid4().hex[:6]}"
    runtime = _runtime(rname, max_restarts=1)
    job = _trainjob("fp", namespace, rname)
    kube.apply(runtime)
    kube.apply(job, namespace=namespace)
    yield "fp", int(job["spec"]["trainer"]["numNodes"])
    kube.kubectl("delete", "trainjob", "fp", "-n", namespace, "--wait=false", check=False)
    kube.kubectl("delete", "clustertrainingruntime", rname, "--wait=false", check=False)


def test_retryable_exit_restarts_the_jobset_and_a_final_one_fails_the_trainjob(kube: Kube, namespace: str, guarded: Any) -> None:
    name, nodes = guarded
    first = _attempt_pods(kube, namespace, name, 0, nodes)
    _terminate(kube, namespace, first[0]["metadata"]["name"], 142)
    restarted = kube.wait_until("JobSet restart 1", lambda: (lambda j: j if (j or {}).get("status", {}).get("restarts") == 1 else None)(
        _jobset(kube, namespace, name)), timeout=90)
    assert _conditions(restarted)["RestartingJobSet"]["reason"] == "DefaultFailurePolicy"  # no rule matched: RestartJobSet
    second = _attempt_pods(kube, namespace, name, 1, nodes)
    assert not {p["metadata"]["uid"] for p in second} & {p["metadata"]["uid"] for p in first}  # every pod anew
    assert "Failed" not in _conditions(kube.get("trainjob", name, namespace))
    _terminate(kube, namespace, second[1]["metadata"]["name"], 1)
    trainjob = kube.wait_until("the TrainJob's Failed condition", lambda: (lambda t: t if "Failed" in _conditions(t) else None)(
        kube.get("trainjob", name, namespace)), timeout=90)
    jobset = _jobset(kube, namespace, name)
    assert jobset is not None and jobset["status"]["restarts"] == 1 and jobset["status"].get("terminalState") == "Failed"
    assert _conditions(jobset)["Failed"]["reason"] == "FailJobSetFailurePolicyAction"
    job = kube.get("job", f"{name}-{NODE}-0", namespace)
    assert _conditions(job)["Failed"]["reason"] == "PodFailurePolicy"
    assert _conditions(trainjob)["Failed"]["reason"] == "FailJobSetFailurePolicyAction"


def test_retryable_exits_past_max_restarts_fail_the_trainjob(kube: Kube, namespace: str, guarded: Any) -> None:
    name, nodes = guarded
    _terminate(kube, namespace, _attempt_pods(kube, namespace, name, 0, nodes)[0]["metadata"]["name"], 137)
    _terminate(kube, namespace, _attempt_pods(kube, namespace, name, 1, nodes)[0]["metadata"]["name"], 143)
    trainjob = kube.wait_until("the TrainJob's Failed condition", lambda: (lambda t: t if "Failed" in _conditions(t) else None)(
        kube.get("trainjob", name, namespace)), timeout=90)
    jobset = _jobset(kube, namespace, name)
    assert jobset is not None and jobset["status"]["restarts"] == 1
    assert _conditions(jobset)["Failed"]["reason"] == "ReachedMaxRestarts"
    assert _conditions(trainjob)["Failed"]["reason"] == "ReachedMaxRestarts"


def test_a_disrupted_pod_is_replaced_without_a_restart(kube: Kube, namespace: str, guarded: Any) -> None:
    name, nodes = guarded
    first = _attempt_pods(kube, namespace, name, 0, nodes)
    _terminate(kube, namespace, first[0]["metadata"]["name"], 143, disrupted=True)
    gone = first[0]["metadata"]["uid"]
    kube.wait_until("a replacement pod", lambda: (lambda ps: len(ps) == nodes and gone not in {p["metadata"]["uid"] for p in ps})(
        [p for p in _pods(kube, namespace, name) if p.get("status", {}).get("phase") != "Failed"]), timeout=90)
    jobset = _jobset(kube, namespace, name)
    assert jobset is not None and jobset.get("status", {}).get("restarts", 0) == 0
    assert "Failed" not in _conditions(kube.get("trainjob", name, namespace))


# -- the runtime read from the API server -----------------------------------------------------------
def _reader(kube: Kube, namespace: str, tmp_path: Path, *, grant: bool) -> str:
    """A kubeconfig (bound token) of the webhook chart's service account with the chart's own RBAC
    (``helm template charts/k8sddp-webhook``: ``get`` on configmaps and on both runtime kinds,
    templates/rbac.yaml), or of a service account without any grant."""
    release = f"rd-{uuid.uuid4().hex[:6]}"
    if not grant:
        kube.kubectl("create", "serviceaccount", release, "-n", namespace)
        return kube.token_kubeconfig(tmp_path, namespace, release)
    helm = kube.bin / "helm"
    if not helm.is_file():
        pytest.skip(f"helm not built in {kube.bin}")
    out = subprocess.run([str(helm), "template", release, str(REPO / "charts" / "k8sddp-webhook"), "-n", namespace],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    wanted = [d for d in yaml.safe_load_all(out) if d and d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    assert {d["kind"] for d in wanted} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    kube.apply(*wanted)
    account = next(d["metadata"]["name"] for d in wanted if d["kind"] == "ServiceAccount")
    return kube.token_kubeconfig(tmp_path, namespace, account)


def _review(job: dict[str, Any], namespace: str) -> bytes:
    return json.dumps(review(job, namespace=namespace, kind=("trainer.kubeflow.org", "v1alpha1", "TrainJob"))).encode()


def test_the_webhook_reads_the_runtime_from_the_api_server(kube: Kube, namespace: str, tmp_path: Path) -> None:
    pytest.importorskip("kubernetes")
    from k8sddp.admission.lookup import KubeLookup
    from k8sddp.admission.review import AdmissionDecider, parse_review

    rname = f"k8sddp-{uuid.uuid4().hex[:6]}"
    guarded = _runtime(rname)
    # a TrainingRuntime in the namespace that lacks a guard (the real Trainer webhook admits it)
    weak = copy.deepcopy(guarded)
    weak.update(kind="TrainingRuntime")
    weak["metadata"]["namespace"] = namespace
    node = weak["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    node["env"] = [e for e in node["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    kube.apply(guarded)
    kube.apply(weak, namespace=namespace)
    try:
        def decide(job: dict[str, Any], kubeconfig: str) -> Any:
            lookup = KubeLookup(kubeconfig=kubeconfig, cache_seconds=0)
            return AdmissionDecider(profile="strict", configmaps=lookup, runtimes=lookup).decide(parse_review(_review(job, namespace)))

        granted = _reader(kube, namespace, tmp_path, grant=True)
        job = _trainjob("wh", namespace, rname)
        verdict = decide(job, granted)
        assert verdict.allowed, verdict.message
        weak_job = copy.deepcopy(job)
        weak_job["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
        weak_job["spec"]["trainer"]["env"] = [e for e in job["spec"]["trainer"]["env"] if e["name"] != "PYTHONFAULTHANDLER"]
        verdict = decide(weak_job, granted)
        assert not verdict.allowed and verdict.failed_rules() == ["KDP202"], verdict.message
        missing = copy.deepcopy(job)
        missing["spec"]["runtimeRef"]["name"] = "absent"
        verdict = decide(missing, granted)
        assert not verdict.allowed and "KDP230" in verdict.failed_rules()
        assert any("ClusterTrainingRuntime absent not found" in w for w in verdict.warnings), verdict.warnings
        # without the grant the runtime is unreadable: unverifiable, never a pass
        verdict = decide(job, _reader(kube, namespace, tmp_path, grant=False))
        assert not verdict.allowed and "KDP230" in verdict.failed_rules()
        assert any("403" in w for w in verdict.warnings), verdict.warnings
    finally:
        kube.kubectl("delete", "clustertrainingruntime", rname, "--wait=false", check=False)


def test_the_api_server_calls_the_webhook_which_reads_the_runtime(kube: Kube, namespace: str, tmp_path: Path) -> None:
    """The whole path: kubectl -> API server -> `k8sddp webhook serve` (a ValidatingWebhookConfiguration
    for trainjobs, this test's namespace only) -> a GET of the runtime as the chart's service account."""
    rname = f"k8sddp-{uuid.uuid4().hex[:6]}"
    guarded = _runtime(rname)
    weak = copy.deepcopy(guarded)
    weak["metadata"]["name"] = f"{rname}-weak"
    node = weak["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    node["env"] = [e for e in node["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    kube.apply(guarded, weak)
    cert, key = make_cert(tmp_path, common_name="127.0.0.1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (tmp_path / "webhook.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "k8sddp", "webhook", "serve", "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
         "--address", "127.0.0.1", "--port", str(port), "--kubeconfig", _reader(kube, namespace, tmp_path, grant=True),
         "--lookup-cache-seconds", "0", "--shutdown-delay", "0"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)})
    vwc = f"k8sddp-trainer-{namespace}"
    try:
        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        kube.wait_until("the webhook to listen", listening, timeout=30)
        kube.kubectl("label", "namespace", namespace, f"k8sddp-test/trainer-webhook={namespace}")
        kube.apply({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": vwc},
            "webhooks": [{
                "name": f"{vwc}.k8sddp.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                "timeoutSeconds": 5, "clientConfig": {"url": f"https://127.0.0.1:{port}/validate", "caBundle": base64.b64encode(cert.read_bytes()).decode()},
                "namespaceSelector": {"matchLabels": {"k8sddp-test/trainer-webhook": namespace}},
                "rules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"], "resources": ["trainjobs"]}],
            }],
        })
        weak_job = _trainjob("weak", namespace, f"{rname}-weak")
        weak_job["spec"]["trainer"]["env"] = [e for e in weak_job["spec"]["trainer"]["env"] if e["name"] != "PYTHONFAULTHANDLER"]
        # the configuration takes a moment to reach the API server's webhook cache: retry until it denies
        end = time.monotonic() + 30
        while True:
            res = kube.kubectl("create", "-f", "-", input=yaml.safe_dump(weak_job), check=False)
            if res.returncode != 0 or time.monotonic() > end:
                break
            kube.kubectl("delete", "trainjob", "weak", "-n", namespace, "--wait=true", check=False)
            time.sleep(0.5)
        assert res.returncode != 0 and f'admission webhook "{vwc}.k8sddp.dev" denied the request' in res.stderr, res.stderr
        assert "KDP202" in res.stderr and f"ClusterTrainingRuntime '{rname}-weak'" in res.stderr, res.stderr
        res = kube.kubectl("create", "-f", "-", input=yaml.safe_dump(_trainjob("good", namespace, rname)), check=False)
        assert res.returncode == 0, res.stderr
        kube.wait_until("the Trainer's JobSet for the admitted TrainJob", lambda: _jobset(kube, namespace, "good"), timeout=60)
    finally:
        kube.kubectl("delete", "validatingwebhookconfiguration", vwc, check=False)
        kube.kubectl("delete", "clustertrainingruntime", rname, f"{rname}-weak", "--wait=false", check=False)
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_validate_cluster_reads_the_runtime(kube: Kube, namespace: str, tmp_path: Path, cli: Any) -> None:
    rname = f"k8sddp-{uuid.uuid4().hex[:6]}"
    runtime = _runtime(rname)
    kube.apply(runtime)
    try:
        job = _trainjob("vc", namespace, rname)
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(job))
        assert "KDP230" in cli("validate", str(path)).out  # the input alone: unverifiable
        res = k(cli, kube, "validate", "--cluster", str(path), kubeconfig=_reader(kube, namespace, tmp_path, grant=True))
        assert res.code == 0, res.out + res.err
        job["spec"]["runtimeRef"]["name"] = "absent"
        path.write_text(yaml.safe_dump(job))
        res = k(cli, kube, "validate", "--cluster", str(path))
        assert res.code == 1 and "ClusterTrainingRuntime 'absent' is in neither the input nor the cluster" in res.out, res.out
        # the real Trainer webhook agrees that such a TrainJob cannot run: it refuses it
        denied = kube.kubectl("apply", "--server-side", "-f", str(path), check=False)
        assert denied.returncode != 0 and '"absent" not found' in denied.stderr, denied.stderr
        # a namespaced runtime, read in the job's namespace
        namespaced = copy.deepcopy(runtime)
        namespaced["kind"] = "TrainingRuntime"
        namespaced["metadata"]["namespace"] = namespace
        kube.apply(namespaced, namespace=namespace)
        job["spec"]["runtimeRef"].update(kind="TrainingRuntime", name=rname)
        del job["metadata"]["namespace"]
        path.write_text(yaml.safe_dump(job))
        assert k(cli, kube, "validate", "--cluster", "-n", "default", str(path)).code == 1  # not in default
        res = k(cli, kube, "validate", "--cluster", "-n", namespace, str(path))
        assert res.code == 0, res.out + res.err
        # without RBAC the read fails: exit 3, never a pass
        res = k(cli, kube, "validate", "--cluster", "-n", namespace, str(path), kubeconfig=_reader(kube, namespace, tmp_path, grant=False))
        assert res.code == 3, res.out + res.err
    finally:
        kube.kubectl("delete", "clustertrainingruntime", rname, "--wait=false", check=False)
