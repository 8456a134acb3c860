"""The real Kubeflow training operator (v1.9.4) against what `submit --local` emulates.

- the env the operator appends to each replica's ``pytorch`` container equals what
  :func:`k8sddp.local.podspec.build_pods` injects (same names, same values; the hosts differ only
  as documented: a local run puts every pod on 127.0.0.1);
- with ``restartPolicy: ExitCode`` a pod whose ``pytorch`` container ended 142 (retryable, >= 128)
  is deleted and recreated, one that ended 1 fails the job; ``submit --wait`` reports both.

No kubelet runs: the test writes the pod's status subresource as a kubelet would
(``phase: Failed`` and a terminated ``pytorch`` container status).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.local.podspec import build_pods

from ..admission.helpers import rendered_job
from .conftest import Kube

REPO = Path(__file__).resolve().parents[2]
PORT = 23456  # the pytorchjob-port of the rendered job (the operator's default too)


def _job(name: str, namespace: str) -> dict[str, Any]:
    job = copy.deepcopy(rendered_job())
    job["metadata"].update(name=name, namespace=namespace)
    return job


def _elastic(name: str, namespace: str) -> dict[str, Any]:
    job = _job(name, namespace)
    worker = job["spec"]["pytorchReplicaSpecs"].pop("Worker")
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    worker["replicas"] = 2
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = worker
    job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d", "maxRestarts": 3}
    return job


def _pods(kube: Kube, namespace: str, job: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "pods", "-n", namespace, "-l", f"training.kubeflow.org/job-name={job}",
                       "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def _pytorch(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "pytorch")


@pytest.mark.parametrize("shape", ["master-worker", "elastic"])
def test_injected_env_equals_submit_local(kube: Kube, namespace: str, tmp_path: Path, shape: str) -> None:
    name = f"env-{shape}"
    job = _job(name, namespace) if shape == "master-worker" else _elastic(name, namespace)
    kube.apply(job, namespace=namespace)
    want = sum(int(r["replicas"]) for r in job["spec"]["pytorchReplicaSpecs"].values())
    pods = kube.wait_until("the operator's pods", lambda: (lambda ps: ps if len(ps) == want else None)(
        _pods(kube, namespace, name)), timeout=90)
    local = {p.name: p for p in build_pods(job, configmaps=[], local_dir=tmp_path, master_port=PORT, rdzv_port=PORT)}
    assert sorted(local) == sorted(p["metadata"]["name"] for p in pods)
    # a local run puts every pod on 127.0.0.1; the operator names the Master's (or worker 0's) Service
    hosts = {"MASTER_ADDR": f"{name}-master-0", "PET_MASTER_ADDR": f"{name}-master-0",
             "PET_RDZV_ENDPOINT": f"{name}-worker-0:{PORT}"}
    for pod in pods:
        pname = pod["metadata"]["name"]
        rtype = pod["metadata"]["labels"]["training.kubeflow.org/replica-type"]
        manifest_env = _pytorch({"spec": job["spec"]["pytorchReplicaSpecs"][rtype.capitalize()]["template"]["spec"]})["env"]
        real = _pytorch(pod)["env"]
        assert real[:len(manifest_env)] == manifest_env, pname  # the operator appends, never edits
        injected = {e["name"]: e.get("value", "") for e in real[len(manifest_env):]}
        emulated = {k: v for k, v in local[pname].pod_env.items() if k not in {e["name"] for e in manifest_env}}
        for key, value in hosts.items():
            if key in emulated:
                assert emulated[key].startswith("127.0.0.1")
                emulated[key] = value
        assert injected == emulated, pname


def _set_terminated(kube: Kube, namespace: str, pod: str, code: int) -> None:
    """What the kubelet writes when the pod's only container ends with ``code``."""
    status = {"status": {
        "phase": "Failed" if code else "Succeeded",
        "containerStatuses": [{
            "name": "pytorch", "image": "ghcr.io/k8sddp/train:0.1.0", "imageID": "", "ready": False,
            "restartCount": 0, "started": False,
            "state": {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed",
                                     "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}},
        }],
    }}
    kube.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status))


def _conditions(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    obj = kube.get("pytorchjob", name, namespace) or {}
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def test_exit_codes_under_restart_policy_exitcode(kube: Kube, namespace: str, tmp_path: Path) -> None:
    name = "codes"
    path = tmp_path / "codes.yaml"
    path.write_text(yaml.safe_dump(_job(name, namespace)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    waiter = subprocess.Popen(
        [sys.executable, "-m", "k8sddp", "submit", "--kubeconfig", kube.kubeconfig, "-n", namespace,
         "--wait", "--timeout", "3m", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = kube.wait_until("the master pod", lambda: next(
            (p for p in _pods(kube, namespace, name) if p["metadata"]["name"] == f"{name}-master-0"), None), timeout=90)
        # 142 (>= 128) is retryable: the operator deletes the pod and creates it again
        _set_terminated(kube, namespace, f"{name}-master-0", 142)
        second = kube.wait_until("the recreated master pod", lambda: next(
            (p for p in _pods(kube, namespace, name)
             if p["metadata"]["name"] == f"{name}-master-0" and p["metadata"]["uid"] != first["metadata"]["uid"]),
            None), timeout=90)
        assert not second.get("status", {}).get("containerStatuses")
        assert _conditions(kube, namespace, name).get("Restarting") == "True"
        assert "Failed" not in _conditions(kube, namespace, name)
        # 1 is final: the job fails and the pod stays for inspection
        _set_terminated(kube, namespace, f"{name}-master-0", 1)
        kube.wait_until("the Failed condition", lambda: _conditions(kube, namespace, name).get("Failed") == "True",
                        timeout=90)
        assert kube.get("pod", f"{name}-master-0", namespace)["metadata"]["uid"] == second["metadata"]["uid"]
        out, err = waiter.communicate(timeout=120)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 4, err
    assert "Restarting (PyTorchJobRestarting)" in err, err
    assert "Failed (PyTorchJobFailed) | Master 1 failed" in err, err
