"""submit against the fake API server, through the real kubernetes client: create, dry runs,
errors as the server words them, retries, never a duplicate job."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import rendered_demo
from tests.cluster.fakeapi import CRD_PATH, FakeApiServer, Fault


def run_submit(cli, kubeconfig: Path, *args: str):
    return cli("submit", "--kubeconfig", str(kubeconfig), *args)


def test_create_lands_once_in_the_contexts_namespace(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    res = run_submit(cli, kubeconfig, str(manifest))
    assert res.code == 0, res.err
    assert res.out == "pytorchjob.kubeflow.org/demo created\n"
    jobs = api.jobs("ml")
    assert [j["metadata"]["name"] for j in jobs] == ["demo"]
    post = [r for r in api.requests if r["method"] == "POST"]
    assert post[-1]["query"].get("fieldValidation") == "Strict"
    assert "dryRun" not in post[-1]["query"]
    assert jobs[0]["metadata"]["annotations"]["k8sddp.dev/submission-id"]


def test_server_dry_run_persists_nothing(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    res = run_submit(cli, kubeconfig, "--dry-run=server", "-o", "name", str(manifest))
    assert res.code == 0, res.err
    assert res.out == "pytorchjob.kubeflow.org/demo\n"
    assert api.jobs() == []
    post = [r for r in api.requests if r["method"] == "POST"]
    assert post[-1]["query"]["dryRun"] == "All" and post[-1]["query"]["fieldValidation"] == "Strict"


def test_client_dry_run_sends_nothing(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    res = run_submit(cli, kubeconfig, "--dry-run=client", str(manifest))
    assert res.code == 0, res.err
    assert "(dry run)" in res.out
    assert api.requests == []


@pytest.mark.skipif(not CRD_PATH.is_file(), reason="needs ../shared/reference (the real PyTorchJob CRD)")
def test_strict_field_validation_reports_the_unknown_field(api: FakeApiServer, kubeconfig: Path) -> None:
    # The validator would refuse an unknown field first, so go under it: the client's create.
    from k8sddp.cluster.client import Cluster
    from k8sddp.errors import ClusterError

    job = rendered_demo()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicyy"] = "ExitCode"
    with pytest.raises(ClusterError) as err:
        Cluster.connect(kubeconfig=str(kubeconfig)).create_job(job, dry_run=True)
    assert err.value.status == 400 and err.value.reason == "BadRequest"
    assert 'unknown field "spec.pytorchReplicaSpecs.Worker.restartPolicyy"' in str(err.value)


@pytest.mark.parametrize("action", ["reset_after", "reset_before", "status_after"])
def test_connection_reset_never_duplicates(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path, action: str) -> None:
    api.faults.append(Fault("POST", "/pytorchjobs$", action, status=504))
    res = run_submit(cli, kubeconfig, "-o", "json", str(manifest))
    assert res.code == 0, res.err
    assert api.count("POST", "/pytorchjobs") == 2
    jobs = api.jobs()
    assert len(jobs) == 1
    # what was printed is the job that exists, whichever attempt created it
    assert json.loads(res.out)["metadata"]["uid"] == jobs[0]["metadata"]["uid"]


def test_generate_name_is_fixed_before_the_first_attempt(api: FakeApiServer, kubeconfig: Path) -> None:
    from k8sddp.cluster.client import Cluster

    job = rendered_demo()
    job["metadata"] = {"generateName": "demo-"}
    api.faults.append(Fault("POST", "/pytorchjobs$", "reset_after"))
    created = Cluster.connect(kubeconfig=str(kubeconfig)).create_job(job)
    assert len(api.jobs()) == 1
    assert created["metadata"]["name"].startswith("demo-") and len(created["metadata"]["name"]) == 10


def test_already_exists_suggests_replace_and_replace_recreates(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    old = api.put_job({**rendered_demo(), "metadata": {"name": "demo", "namespace": "ml"}})
    res = run_submit(cli, kubeconfig, str(manifest))
    assert res.code == 3
    assert 'pytorchjobs.kubeflow.org "demo" already exists in namespace "ml"' in res.err
    assert "--replace" in res.err
    assert api.jobs()[0]["metadata"]["uid"] == old["metadata"]["uid"]

    api.delete_delay = 1.0  # the old job lingers, as with a foreground deletion
    res = run_submit(cli, kubeconfig, "--replace", str(manifest))
    assert res.code == 0, res.err
    assert res.out == "pytorchjob.kubeflow.org/demo replaced\n"
    jobs = api.jobs()
    assert len(jobs) == 1 and jobs[0]["metadata"]["uid"] != old["metadata"]["uid"]
    deletes = [r for r in api.requests if r["method"] == "DELETE"]
    assert deletes and deletes[0]["query"]["propagationPolicy"] == "Foreground"
    # --replace where no job of that name exists: plainly created, and said so
    api.delete_delay = 0.0
    fresh = manifest.parent / "fresh.yaml"
    fresh.write_text(manifest.read_text().replace("name: demo\n", "name: fresh\n", 1))
    res = run_submit(cli, kubeconfig, "--replace", str(fresh))
    assert res.code == 0 and res.out == "pytorchjob.kubeflow.org/fresh created\n", (res.out, res.err)


def test_missing_crd_names_the_training_operator(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    api.crd_installed = False
    res = run_submit(cli, kubeconfig, str(manifest))
    assert res.code == 3
    assert "Kubeflow training operator" in res.err and "kubeflow.org/v1" in res.err
    assert "Traceback" not in res.err
    res = cli("logs", "demo", "--kubeconfig", str(kubeconfig))  # as status and delete say
    assert res.code == 3 and "Kubeflow training operator" in res.err
    api.crd_installed = True
    res = cli("logs", "nope", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and 'PyTorchJob or TrainJob "nope" not found in namespace "ml"' in res.err


def test_forbidden_names_verb_resource_namespace(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    api.forbidden.add(("create", "pytorchjobs", "ml"))
    res = run_submit(cli, kubeconfig, str(manifest))
    assert res.code == 3
    assert 'may not create pytorchjobs.kubeflow.org in namespace "ml"' in res.err


def test_invalid_shows_the_servers_causes(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    api.admission = lambda obj: [("spec.pytorchReplicaSpecs[Worker].replicas", "Invalid value: 9: over quota")]
    res = run_submit(cli, kubeconfig, str(manifest))
    assert res.code == 3
    assert "rejected the object as invalid" in res.err
    assert "  - spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: 9: over quota" in res.err


def test_429_is_retried_after_retry_after(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    api.faults.append(Fault("POST", "/pytorchjobs$", "status", status=429, retry_after=1))
    start = time.monotonic()
    res = run_submit(cli, kubeconfig, str(manifest))
    assert res.code == 0, res.err
    assert time.monotonic() - start >= 0.9
    assert api.count("POST", "/pytorchjobs") == 2 and len(api.jobs()) == 1


def test_503_gives_up_after_the_bounded_attempts(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    api.faults.append(Fault("POST", "/pytorchjobs$", "status", status=503, times=100))
    res = run_submit(cli, kubeconfig, str(manifest))
    assert res.code == 3
    assert api.count("POST", "/pytorchjobs") == 3  # K8SDDP_API_MAX_ATTEMPTS in conftest
    assert "after 3 attempts" in res.err and "503" in res.err


def test_unreachable_server(cli, tmp_path: Path, manifest: Path) -> None:
    server = FakeApiServer().start()
    config = server.write_kubeconfig(tmp_path / "kc")
    server.stop()  # nothing listens on that port any more
    res = run_submit(cli, config, str(manifest))
    assert res.code == 3
    assert "cannot reach the API server" in res.err and "connection refused" in res.err


def test_missing_kubeconfig_and_context_are_usage_errors(cli, tmp_path: Path, kubeconfig: Path, manifest: Path) -> None:
    assert run_submit(cli, tmp_path / "nope", str(manifest)).code == 2
    res = cli("submit", "--kubeconfig", str(kubeconfig), "--context", "nope", str(manifest))
    assert res.code == 2 and 'no context "nope"' in res.err


def test_context_and_namespace_flags(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    assert cli("submit", "--kubeconfig", str(kubeconfig), "--context", "other", str(manifest)).code == 0
    assert [j["metadata"]["namespace"] for j in api.jobs()] == ["other-ns"]
    assert run_submit(cli, kubeconfig, "-n", "team-a", str(manifest)).code == 0
    assert sorted(j["metadata"]["namespace"] for j in api.jobs()) == ["other-ns", "team-a"]
    job = yaml.safe_load(manifest.read_text())
    job["metadata"]["namespace"] = "elsewhere"
    manifest.write_text(yaml.safe_dump(job))
    res = run_submit(cli, kubeconfig, "-n", "team-a", str(manifest))
    assert res.code == 2 and "elsewhere" in res.err


def _unguard_via_configmap(job: dict) -> dict:
    job = copy.deepcopy(job)
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        c = rspec["template"]["spec"]["containers"][0]
        c["env"] = [e for e in c["env"] if e["name"] not in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER")]
        c["envFrom"] = [{"configMapRef": {"name": "nccl-guards"}}]
    return job


def test_configmaps_missing_from_the_input_are_read_from_the_cluster(
    cli, api: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_unguard_via_configmap(rendered_demo())))
    res = run_submit(cli, kubeconfig, str(path))
    assert res.code == 1, res.err  # the ConfigMap exists nowhere: unresolved -> refused
    assert "KDP201" in res.err and api.jobs() == []
    api.add_configmap("ml", "nccl-guards", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "1"})
    res = run_submit(cli, kubeconfig, str(path))
    assert res.code == 0, res.err
    assert api.count("GET", "/configmaps/nccl-guards") >= 1
    assert not [r for r in api.requests if "configmaps" in r["path"] and r["method"] != "GET"]
    api.add_configmap("ml", "nccl-guards", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "PYTHONFAULTHANDLER": "1"})
    path2 = tmp_path / "job2.yaml"
    job = _unguard_via_configmap(rendered_demo())
    job["metadata"]["name"] = "demo2"
    path2.write_text(yaml.safe_dump(job))
    assert run_submit(cli, kubeconfig, str(path2)).code == 1


def test_the_spec_is_rendered_and_unguarded_manifests_are_refused(cli, api: FakeApiServer, kubeconfig: Path) -> None:
    from tests.cluster.conftest import REPO

    res = run_submit(cli, kubeconfig, "-o", "yaml", str(REPO / "examples" / "ddpjob.yaml"))
    assert res.code == 0, res.err
    assert yaml.safe_load(res.out)["kind"] == "PyTorchJob"
    res = run_submit(cli, kubeconfig, str(REPO / "examples" / "unguarded-pytorchjob.yaml"))
    assert res.code == 1 and "nothing was submitted" in res.err
    assert len(api.jobs()) == 1
