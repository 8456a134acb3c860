"""`submit`, `status`, `logs`, `delete` against the real API server and the real operator.

What the API server itself decides is asserted as it says it: server-side dry run (nothing
persisted), strict field validation (``fieldValidation=Strict``: an unknown field is a 400),
AlreadyExists, Invalid with its causes, and RBAC Forbidden for a service account token that may
only read. No kubelet runs, so pods stay Pending and the pod log endpoint has no node to ask.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..admission.helpers import rendered_job
from .conftest import Kube, k

REPO = Path(__file__).resolve().parents[2]


def _job(name: str, namespace: str) -> dict[str, Any]:
    job = copy.deepcopy(rendered_job())
    job["metadata"]["name"] = name
    job["metadata"]["namespace"] = namespace
    return job


def _write(tmp_path: Path, obj: dict[str, Any]) -> str:
    path = tmp_path / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return str(path)


def test_server_dry_run_persists_nothing(cli: Any, kube: Kube, namespace: str, tmp_path: Path) -> None:
    path = _write(tmp_path, _job("dry", namespace))
    res = k(cli, kube, "submit", "--dry-run=server", "-o", "name", "-n", namespace, path)
    assert res.code == 0, res.err
    assert res.out == "pytorchjob.kubeflow.org/dry\n"
    assert kube.get("pytorchjob", "dry", namespace) is None
    # the rendered example itself (namespace default, as its spec says) passes the real server
    res = k(cli, kube, "submit", "--dry-run=server", "-o", "name", str(REPO / "examples" / "ddpjob.yaml"))
    assert res.code == 0, res.err
    assert kube.get("pytorchjob", "demo", "default") is None


def test_unknown_field_is_refused_by_strict_field_validation(kube: Kube, namespace: str) -> None:
    from k8sddp.cluster.client import Cluster
    from k8sddp.errors import ClusterError

    job = _job("strict", namespace)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicyy"] = "Never"
    with pytest.raises(ClusterError) as err:
        Cluster.connect(kubeconfig=kube.kubeconfig, namespace=namespace).create_job(job, dry_run=True)
    assert err.value.status == 400
    assert 'unknown field "spec.pytorchReplicaSpecs.Worker.restartPolicyy"' in str(err.value)


def test_invalid_names_the_causes(kube: Kube, namespace: str) -> None:
    from k8sddp.cluster.client import Cluster
    from k8sddp.errors import ClusterError

    cluster = Cluster.connect(kubeconfig=kube.kubeconfig, namespace=namespace)
    # the CRD's OpenAPI schema (a quantity pattern)
    job = _job("invalid", namespace)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "four"
    with pytest.raises(ClusterError) as err:
        cluster.create_job(job, dry_run=True)
    text = str(err.value)
    assert err.value.status == 422, text
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu" in text, text
    # the operator's own validating webhook (pkg/webhooks/pytorch): a Master must have 1 replica.
    # An admission denial is a 403 too, but not RBAC's: the message says which.
    job = _job("invalid", namespace)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    with pytest.raises(ClusterError) as err:
        cluster.create_job(job, dry_run=True)
    text = str(err.value)
    assert err.value.status == 403, text
    assert text.startswith("refused at admission"), text
    assert ('admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '
            "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1") in text
    assert "RBAC" not in text


def test_create_status_logs_already_exists_delete(cli: Any, kube: Kube, namespace: str, tmp_path: Path) -> None:
    path = _write(tmp_path, _job("life", namespace))
    res = k(cli, kube, "submit", "-n", namespace, path)
    assert res.code == 0, res.err
    assert "pytorchjob.kubeflow.org/life created" in res.out
    # the real operator creates one pod per replica with its labels and a headless service
    pods = kube.wait_until("the operator's pods", lambda: _pods(kube, namespace, "life", 2), timeout=90)
    assert sorted(p["metadata"]["name"] for p in pods) == ["life-master-0", "life-worker-0"]
    assert kube.get("service", "life-master-0", namespace) is not None
    res = k(cli, kube, "status", "life", "-n", namespace)
    assert res.code == 0, res.err
    assert res.out.startswith("life: ")
    assert "Created" in res.out or "Pending" in res.out or "Running" in res.out
    # no kubelet: the API server answers the log of a pod without a node with an empty 200
    # (kubectl logs prints nothing and exits 0 too)
    res = k(cli, kube, "logs", "life", "-n", namespace)
    assert res.code == 0 and res.out == "", res.err
    assert kube.kubectl("logs", "life-master-0", "-n", namespace).stdout == ""
    res = k(cli, kube, "submit", "-n", namespace, path)
    assert res.code == 3 and "already exists" in res.err
    res = k(cli, kube, "delete", "life", "-n", namespace, "--wait")
    assert res.code == 0, res.err
    assert kube.get("pytorchjob", "life", namespace) is None
    # the garbage collector removes the pods the job owned
    kube.wait_until("the garbage collector to delete the pods",
                    lambda: not _pods(kube, namespace, "life", 0), timeout=90)
    res = k(cli, kube, "status", "life", "-n", namespace)
    assert res.code == 3 and "not found" in res.err


def test_rbac_forbidden_for_a_read_only_service_account(cli: Any, kube: Kube, namespace: str, tmp_path: Path) -> None:
    kube.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "pytorchjob-reader", "namespace": namespace},
         "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "reader", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pytorchjob-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]},
    )
    cfg = kube.token_kubeconfig(tmp_path, namespace, "reader")
    assert (Path(cfg).stat().st_mode & 0o777) == 0o600
    path = _write(tmp_path, _job("denied", namespace))
    res = k(cli, kube, "submit", "-n", namespace, path, kubeconfig=cfg)
    assert res.code == 3
    assert "forbidden" in res.err.lower()
    assert f"system:serviceaccount:{namespace}:reader" in res.err
    # reading is allowed: a missing job is NotFound, not Forbidden
    res = k(cli, kube, "status", "nothing", "-n", namespace, kubeconfig=cfg)
    assert res.code == 3 and "not found" in res.err and "forbidden" not in res.err.lower()


def _pods(kube: Kube, namespace: str, job: str, want: int) -> list[dict[str, Any]]:
    import json

    out = kube.kubectl("get", "pods", "-n", namespace, "-l", f"training.kubeflow.org/job-name={job}",
                       "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    if want == 0:
        return items
    return live if len(live) >= want else []
