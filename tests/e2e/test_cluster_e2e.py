"""End to end against a real cluster with the Kubeflow training operator (kind in CI).

Runs only when ``K8SDDP_E2E_KUBECONFIG`` names a kubeconfig; skipped otherwise. Each test run uses
a fresh namespace (deleted afterwards). The jobs run ``python:3.11-slim`` (``K8SDDP_E2E_IMAGE``)
with tiny commands, so no training image is needed.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

KUBECONFIG = os.environ.get("K8SDDP_E2E_KUBECONFIG", "")
IMAGE = os.environ.get("K8SDDP_E2E_IMAGE", "python:3.11-slim")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not KUBECONFIG, reason="set K8SDDP_E2E_KUBECONFIG to run against a real cluster"),
]

GUARDS = [{"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "3"}, {"name": "PYTHONFAULTHANDLER", "value": "1"}]


def job(name: str, code: str, policy: str = "ExitCode") -> dict[str, Any]:
    def replica() -> dict[str, Any]:
        return {"replicas": 1, "restartPolicy": policy, "template": {"spec": {"containers": [{
            "name": "pytorch", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["python", "-c", code], "env": GUARDS}]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"activeDeadlineSeconds": 600, "cleanPodPolicy": "None"},
                     "pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}}}


@pytest.fixture(scope="module")
def namespace():
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=KUBECONFIG))
    name = f"k8sddp-e2e-{uuid.uuid4().hex[:6]}"
    api.create_namespace({"metadata": {"name": name}})
    yield name
    api.delete_namespace(name)


def write(tmp_path: Path, obj: dict[str, Any]) -> str:
    path = tmp_path / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return str(path)


def k(cli, *args: str):
    return cli(*args[:1], "--kubeconfig", KUBECONFIG, *args[1:])


def test_server_dry_run_of_the_rendered_example(cli, namespace: str) -> None:
    repo = Path(__file__).resolve().parents[2]
    # the spec names namespace "default"; a server dry run persists nothing there
    res = k(cli, "submit", "--dry-run=server", "-o", "name", str(repo / "examples" / "ddpjob.yaml"))
    assert res.code == 0, res.err
    assert res.out == "pytorchjob.kubeflow.org/demo\n"


def test_unknown_field_is_refused_by_strict_validation(namespace: str) -> None:
    from k8sddp.cluster.client import Cluster
    from k8sddp.errors import ClusterError

    obj = job("strict", "print(1)")
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicyy"] = "Never"
    with pytest.raises(ClusterError) as err:
        Cluster.connect(kubeconfig=KUBECONFIG, namespace=namespace).create_job(obj, dry_run=True)
    assert err.value.status == 400 and "unknown field" in str(err.value)


def test_job_succeeds_logs_status_delete(cli, namespace: str, tmp_path: Path) -> None:
    path = write(tmp_path, job("ok", "print('hello from', __import__('os').environ['RANK'])"))
    res = k(cli, "submit", "-n", namespace, "--wait", "--timeout", "10m", path)
    assert res.code == 0, res.err
    assert "Succeeded (PyTorchJobSucceeded)" in res.err
    res = k(cli, "logs", "ok", "-n", namespace)
    assert res.code == 0 and "hello from 0" in res.out
    res = k(cli, "status", "ok", "-n", namespace)
    assert res.code == 0 and res.out.startswith("ok: Succeeded")
    res = k(cli, "submit", "-n", namespace, path)
    assert res.code == 3 and "already exists" in res.err
    res = k(cli, "delete", "ok", "-n", namespace, "--wait")
    assert res.code == 0


def test_final_exit_code_fails_the_job(cli, namespace: str, tmp_path: Path) -> None:
    path = write(tmp_path, job("bad", "raise SystemExit(3)"))
    res = k(cli, "submit", "-n", namespace, "--wait", "--timeout", "10m", path)
    assert res.code == 4, res.err
    assert "Failed" in res.err


def test_missing_job_is_a_cluster_error(cli, namespace: str) -> None:
    res = k(cli, "status", "nope", "-n", namespace)
    assert res.code == 3 and "not found" in res.err
