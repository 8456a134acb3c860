"""``validate --cluster``: a TrainJob's runtime (and the ConfigMaps its trainer reads) come from the
API server when the input lacks them (a real HTTP server on loopback speaking the GET paths of
the API; the real ``kubernetes`` client talks to it). The kube tier repeats this against a real
API server (tests/kube/test_trainer.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.render import load_spec, render_runtime, render_spec

from ..admission.helpers import FakeApiServer
from ..conftest import REPO

pytest.importorskip("kubernetes")

CTR = "apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"


@pytest.fixture(autouse=True)
def _one_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K8SDDP_API_MAX_ATTEMPTS", "1")
    monkeypatch.delenv("KUBECONFIG", raising=False)


def _kubeconfig(tmp_path: Path, url: str, namespace: str = "team-a") -> str:
    cfg = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": namespace}}],
        "current-context": "fake",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _job() -> dict[str, Any]:
    (job,) = render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml")), "trainjob").objects
    del job["metadata"]["namespace"]
    return job


def _write(tmp_path: Path, *objs: dict[str, Any]) -> str:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    return str(path)


def _node(runtime: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    return container


def test_the_cluster_runtime_is_read_when_the_input_lacks_it(cli: Any, tmp_path: Path) -> None:
    with FakeApiServer() as server:
        server.objects[f"{CTR}/k8sddp-torch"] = render_runtime().objects[0]
        res = cli("validate", "--cluster", "--kubeconfig", _kubeconfig(tmp_path, server.url), _write(tmp_path, _job()))
        assert res.code == 0, res.out + res.err
        assert f"/{CTR}/k8sddp-torch" in [r.split("?")[0] for r in server.requests]
        # without --cluster the same input is unverifiable
        assert "KDP230" in cli("validate", _write(tmp_path, _job())).out


def test_a_guard_missing_in_the_cluster_runtime_is_found(cli: Any, tmp_path: Path) -> None:
    runtime = render_runtime().objects[0]
    _node(runtime)["env"] = [e for e in _node(runtime)["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    job = _job()
    job["spec"]["trainer"]["env"] = [e for e in job["spec"]["trainer"]["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    with FakeApiServer() as server:
        server.objects[f"{CTR}/k8sddp-torch"] = runtime
        res = cli("validate", "--cluster", "--kubeconfig", _kubeconfig(tmp_path, server.url), _write(tmp_path, job))
    assert res.code == 1 and "KDP202" in res.out and "KDP230" not in res.out, res.out


def test_a_runtime_absent_from_the_cluster_stays_unverifiable(cli: Any, tmp_path: Path) -> None:
    with FakeApiServer() as server:
        res = cli("validate", "--cluster", "--kubeconfig", _kubeconfig(tmp_path, server.url), _write(tmp_path, _job()))
    assert res.code == 1
    assert "KDP230" in res.out and f"ClusterTrainingRuntime 'k8sddp-torch' is in neither the input nor the cluster at {server.url}" in res.out


def test_a_training_runtime_is_read_in_the_jobs_namespace(cli: Any, tmp_path: Path) -> None:
    runtime = copy.deepcopy(render_runtime().objects[0])
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"]["namespace"] = "team-b"
    job = _job()
    job["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    path = "apis/trainer.kubeflow.org/v1alpha1/namespaces/team-b/trainingruntimes/k8sddp-torch"
    with FakeApiServer() as server:
        server.objects[path] = runtime
        kubeconfig = _kubeconfig(tmp_path, server.url)
        # the context's namespace (team-a) has none: unverifiable, and the finding says where it looked
        res = cli("validate", "--cluster", "--kubeconfig", kubeconfig, _write(tmp_path, job))
        assert res.code == 1 and "TrainingRuntime 'k8sddp-torch' is in neither the input nor the cluster" in res.out
        assert "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes/k8sddp-torch" in [r.split("?")[0] for r in server.requests]
        # -n team-b: found there
        assert cli("validate", "--cluster", "--kubeconfig", kubeconfig, "-n", "team-b", _write(tmp_path, job)).code == 0
        # the job's own namespace wins over -n
        job["metadata"]["namespace"] = "team-b"
        assert cli("validate", "--cluster", "--kubeconfig", kubeconfig, _write(tmp_path, job)).code == 0


def test_a_runtime_in_the_input_is_not_read(cli: Any, tmp_path: Path) -> None:
    with FakeApiServer() as server:
        res = cli("validate", "--cluster", "--kubeconfig", _kubeconfig(tmp_path, server.url),
                  _write(tmp_path, render_runtime().objects[0], _job()))
        assert res.code == 0, res.out
        assert not any("trainingruntimes" in r for r in server.requests)


def test_the_configmaps_of_a_cluster_runtime_are_read_too(cli: Any, tmp_path: Path) -> None:
    runtime = render_runtime().objects[0]
    node = _node(runtime)
    node["env"] = [e for e in node["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    node["envFrom"] = [{"configMapRef": {"name": "guards"}}]
    job = _job()
    job["spec"]["trainer"]["env"] = [e for e in job["spec"]["trainer"]["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    with FakeApiServer() as server:
        server.objects[f"{CTR}/k8sddp-torch"] = runtime
        kubeconfig = _kubeconfig(tmp_path, server.url)
        res = cli("validate", "--cluster", "--kubeconfig", kubeconfig, _write(tmp_path, job))
        assert res.code == 1 and "ConfigMap 'guards'" in res.out, res.out  # not on the cluster yet
        server.configmaps[("team-a", "guards")] = {"PYTHONFAULTHANDLER": "1"}
        res = cli("validate", "--cluster", "--kubeconfig", kubeconfig, _write(tmp_path, job))
        assert res.code == 0, res.out
        assert "/api/v1/namespaces/team-a/configmaps/guards" in [r.split("?")[0] for r in server.requests]


def test_cluster_flags_need_cluster(cli: Any, tmp_path: Path) -> None:
    res = cli("validate", "-n", "x", _write(tmp_path, _job()))
    assert res.code == 2 and "-n only apply with --cluster" in res.err


def test_an_unreachable_cluster_is_exit_3(cli: Any, tmp_path: Path) -> None:
    with FakeApiServer() as server:
        url = server.url
    res = cli("validate", "--cluster", "--kubeconfig", _kubeconfig(tmp_path, url), _write(tmp_path, _job()))
    assert res.code == 3, res.out + res.err
    # a SARIF consumer sees a failed analysis, not an empty one
    res = cli("validate", "--cluster", "--format", "sarif", "--kubeconfig", _kubeconfig(tmp_path, url), _write(tmp_path, _job()))
    assert res.code == 3 and '"executionSuccessful": false' in res.out, res.out


def test_a_training_runtime_of_another_namespace_in_the_input_is_named(cli: Any, tmp_path: Path) -> None:
    runtime = copy.deepcopy(render_runtime().objects[0])
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"]["namespace"] = "team-b"
    job = _job()
    job["metadata"]["namespace"] = "team-a"
    job["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "k8sddp-torch", "namespace": "team-c"}}
    res = cli("validate", _write(tmp_path, runtime, cm, job))
    assert res.code == 1 and "KDP230" in res.out
    assert "the input has it in namespace 'team-b'" in res.out and "team-c" not in res.out, res.out
