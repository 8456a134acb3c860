"""The local runner's pods: the operator's env, the kubelet's env resolution, volume mapping."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from k8sddp.errors import UsageError
from k8sddp.local.podspec import build_pods, expand, map_paths
from k8sddp.local.policy import Action, decide, exit_code, kubelet_backoff


def job(**spec_extra) -> dict:
    container = {
        "name": "pytorch", "image": "x",
        "command": ["python", "train.py"], "args": ["--ckpt=/ckpt/run", "--addr=$(MASTER_ADDR):$(MASTER_PORT)"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "$(A)-$(NOPE)-$$x"},
                {"name": "RANK", "value": "99"}, {"name": "OUT", "value": "/ckpt/out"},
                {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "P_"}],
        "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}, {"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "scratch", "mountPath": "/scratch"}],
    }
    pod = {"containers": [container], "volumes": [
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "pvc1"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "scratch", "emptyDir": {}}]}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
            "spec": {"nprocPerNode": "2", "pytorchReplicaSpecs": {
                "Worker": {"replicas": 2, "restartPolicy": "ExitCode", "template": {"spec": pod}},
                "Master": {"replicas": 1, "template": {"spec": pod}}}, **spec_extra}}


CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v", "A": "cm-a"}}


def test_operator_env_per_pod(tmp_path: Path) -> None:
    pods = build_pods(job(), configmaps=[CM], local_dir=tmp_path, master_port=4000, rdzv_port=4001)
    assert [p.name for p in pods] == ["j-master-0", "j-worker-0", "j-worker-1"]
    assert [p.pod_env["RANK"] for p in pods] == ["0", "1", "2"]  # the operator's RANK wins over the user's 99
    assert [p.pod_env["PET_NODE_RANK"] for p in pods] == ["0", "1", "2"]
    for p in pods:
        e = p.pod_env
        assert (e["WORLD_SIZE"], e["PET_NNODES"], e["PET_NPROC_PER_NODE"]) == ("6", "3", "2")
        assert (e["MASTER_ADDR"], e["MASTER_PORT"], e["PYTHONUNBUFFERED"]) == ("127.0.0.1", "4000", "1")
    assert pods[0].restart_policy == "OnFailure" and pods[1].restart_policy == "ExitCode"


def test_kubelet_env_resolution_and_paths(tmp_path: Path) -> None:
    p = build_pods(job(), configmaps=[CM], local_dir=tmp_path, master_port=4000, rdzv_port=4001)[1]
    e = p.pod_env
    assert e["P_k"] == "v" and e["P_A"] == "cm-a" and e["A"] == "1"
    assert e["B"] == "1-$(NOPE)-$x"
    assert e["FROM_CM"] == "v" and e["POD"] == "j-worker-0"
    assert e["OUT"] == str(tmp_path / "pvc" / "pvc1" / "out")
    assert p.argv == [sys.executable, "train.py", f"--ckpt={tmp_path}/pvc/pvc1/run", "--addr=127.0.0.1:4000"]
    assert p.empty_dirs == [tmp_path / "pods" / "j-worker-0" / "scratch"]
    assert "/dev/shm" not in str(p.env.get("OUT"))


def test_unreadable_env_sources_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match='ConfigMap "cm" is not in the input'):
        build_pods(job(), configmaps=[], local_dir=tmp_path, master_port=1, rdzv_port=2)
    j = job()
    del j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    with pytest.raises(UsageError, match="no command"):
        build_pods(j, configmaps=[CM], local_dir=tmp_path, master_port=1, rdzv_port=2)


def test_elastic_env(tmp_path: Path) -> None:
    j = job(elasticPolicy={"minReplicas": 1, "maxReplicas": 3, "maxRestarts": 2, "rdzvId": "r"})
    del j["spec"]["pytorchReplicaSpecs"]["Master"]
    p = build_pods(j, configmaps=[CM], local_dir=tmp_path, master_port=1, rdzv_port=4001)[0]
    assert p.pod_env["PET_RDZV_ENDPOINT"] == "127.0.0.1:4001" and p.pod_env["PET_NNODES"] == "1:3"
    assert p.pod_env["PET_RDZV_BACKEND"] == "c10d" and p.pod_env["PET_MAX_RESTARTS"] == "2"
    assert "MASTER_ADDR" not in p.pod_env and "RANK" in p.pod_env and p.pod_env["RANK"] == "99"


def test_expand_and_map_paths() -> None:
    assert expand("$(A)$(B)$$(A)", {"A": "x"}) == "x$(B)$(A)"
    m = [("/ckpt", "/tmp/c")]
    assert map_paths("/ckpt /ckpt/a --d=/ckpt /ckptx x/ckpt", m) == "/tmp/c /tmp/c/a --d=/tmp/c /ckptx x/ckpt"


@pytest.mark.parametrize("policy,code,action", [
    ("ExitCode", 0, Action.SUCCEEDED), ("ExitCode", 1, Action.FAIL_JOB), ("ExitCode", 127, Action.FAIL_JOB),
    ("ExitCode", 128, Action.RECREATE), ("ExitCode", 143, Action.RECREATE), ("OnFailure", 1, Action.RESTART_IN_PLACE),
    ("OnFailure", 0, Action.SUCCEEDED), ("Always", 0, Action.RESTART_IN_PLACE), ("Never", 137, Action.FAIL_JOB),
])
def test_policy_table(policy: str, code: int, action: Action) -> None:
    assert decide(policy, code) is action


def test_exit_codes_and_backoff() -> None:
    assert exit_code(-9) == 137 and exit_code(-15) == 143 and exit_code(3) == 3
    assert [kubelet_backoff(n) for n in (1, 2, 3, 6, 9)] == [10, 20, 40, 300, 300]
    with pytest.raises(ValueError):
        decide("OnFailur", 1)


def test_operator_defaults_in_the_env(tmp_path: Path) -> None:
    """The operator's defaulting (v1.9.4 pytorch_defaults.go) shows in the env it appends:
    nprocPerNode "auto" when unset, an elastic policy without bounds gets the Worker replicas
    for both, one bound is copied to the other, and an elastic nProcPerNode replaces nprocPerNode."""
    j = job()
    del j["spec"]["nprocPerNode"]
    p = build_pods(j, configmaps=[CM], local_dir=tmp_path, master_port=4000, rdzv_port=4001)[0]
    assert p.pod_env["PET_NPROC_PER_NODE"] == "auto" and p.pod_env["WORLD_SIZE"] == "3"
    assert p.pod_env["PET_MASTER_ADDR"] == "127.0.0.1" and p.pod_env["PET_MASTER_PORT"] == "4000"
    for policy, nnodes in (({}, "2:2"), ({"maxReplicas": 4}, "4:4"), ({"minReplicas": 1}, "1:1")):
        j = job(elasticPolicy=dict(policy))
        del j["spec"]["pytorchReplicaSpecs"]["Master"]
        p = build_pods(j, configmaps=[CM], local_dir=tmp_path, master_port=1, rdzv_port=4001)[0]
        assert p.pod_env["PET_NNODES"] == nnodes, policy
    j = job(elasticPolicy={"nProcPerNode": 4})
    del j["spec"]["pytorchReplicaSpecs"]["Master"]
    del j["spec"]["nprocPerNode"]
    p = build_pods(j, configmaps=[CM], local_dir=tmp_path, master_port=1, rdzv_port=4001)[0]
    assert p.pod_env["PET_NPROC_PER_NODE"] == "4"
