"""k8sddp's strategic merge patch (k8sddp/render/smp.py) against the real one.

Every case is applied by k8sddp and, where a ``kubectl`` is found (``~/.cache/k8sddp-kube/bin`` or
``PATH``), by ``kubectl patch --local --type=strategic`` on a Pod made of the same template (the
API server's code, k8s.io/apimachinery strategicpatch): the results must be equal. Without
kubectl the comparison skips; the expectations written here still run.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from k8sddp.render import load_spec, render_spec
from k8sddp.render.smp import SmpError, patch_pod_template

from .conftest import REPO


def _kubectl() -> str | None:
    local = Path.home() / ".cache" / "k8sddp-kube" / "bin" / "kubectl"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("kubectl")


def _template() -> dict[str, Any]:
    job = render_spec(load_spec(str(REPO / "tests" / "golden" / "ddpjob-podfields.yaml"))).objects[0]
    template: dict[str, Any] = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["metadata"]["finalizers"] = ["a.example.com/keep", "b.example.com/keep"]
    template["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    return template


def _env(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


#: name -> patch (applied to :func:`_template`).
CASES: dict[str, dict[str, Any]] = {
    "env-add-and-change": {"spec": {"containers": [{"name": "pytorch", "env": [_env("NEW", "1"), _env("NCCL_IB_HCA", "mlx5_2")]}]}},
    "env-interleave": {"spec": {"containers": [{"name": "pytorch", "env": [_env("N1", "1"), _env("K8SDDP_SEED", "7"), _env("N2", "2"),
                                                                            _env("PYTHONFAULTHANDLER", "1")]}]}},
    "env-delete-item": {"spec": {"containers": [{"name": "pytorch", "env": [{"name": "K8SDDP_SEED", "$patch": "delete"}]}]}},
    "env-replace-list": {"spec": {"containers": [{"name": "pytorch", "env": [{"$patch": "replace"}, _env("ONLY", "1")]}]}},
    "new-container-first": {"spec": {"containers": [{"name": "debug", "image": "busybox"}]}},
    "init-merge-by-name": {"spec": {"initContainers": [{"name": "fetch-tokenizer", "image": "busybox:1.37"}]}},
    "volumes-merge": {"spec": {"volumes": [{"name": "dshm", "emptyDir": {"sizeLimit": "64Gi"}}, {"name": "scratch", "emptyDir": {}}]}},
    "volume-retain-keys": {"spec": {"volumes": [{"name": "checkpoints", "$retainKeys": ["name", "emptyDir"], "emptyDir": {}}]}},
    "mounts-by-path": {"spec": {"containers": [{"name": "pytorch", "volumeMounts": [{"mountPath": "/dev/shm", "name": "other"},
                                                                                     {"mountPath": "/new", "name": "config"}]}]}},
    "ports-by-number": {"spec": {"containers": [{"name": "pytorch", "ports": [{"containerPort": 23456, "name": "renamed"},
                                                                               {"containerPort": 8080, "name": "http"}]}]}},
    "null-deletes": {"metadata": {"labels": {"pool": None}}, "spec": {"terminationGracePeriodSeconds": None, "hostNetwork": None}},
    "map-replace": {"spec": {"securityContext": {"$patch": "replace", "runAsUser": 5}}},
    "map-delete": {"spec": {"affinity": {"$patch": "delete"}}},
    "list-without-key-replaced": {"spec": {"tolerations": [{"key": "other", "operator": "Exists"}],
                                           "containers": [{"name": "pytorch", "args": ["--x"], "command": ["python"]}]}},
    "finalizers-union-and-delete": {"metadata": {"finalizers": ["c.example.com/new", "a.example.com/keep"],
                                                 "$deleteFromPrimitiveList/finalizers": ["b.example.com/keep"]}},
    "pull-secrets-by-name": {"spec": {"imagePullSecrets": [{"name": "regcred"}]}},
    "spread-by-topology-key": {"spec": {"topologySpreadConstraints": [{"topologyKey": "kubernetes.io/hostname", "maxSkew": 2},
                                                                      {"topologyKey": "topology.kubernetes.io/zone", "maxSkew": 1,
                                                                       "whenUnsatisfiable": "ScheduleAnyway"}]}},
    "new-map-drops-nulls": {"spec": {"dnsConfig": {"nameservers": ["1.1.1.1"], "searches": None},
                                     "containers": [{"name": "pytorch", "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}},
                                                                                      "postStart": None}}]}},
    "nested-merge": {"spec": {"containers": [{"name": "pytorch", "resources": {"limits": {"memory": "300Gi"}},
                                              "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}]}},
    "annotations": {"metadata": {"annotations": {"new": "x", "sidecar.istio.io/inject": None}}},
    # a value taken whole (the original lacks the key, or holds another type) loses every map that
    # holds $patch, at any depth (strategicpatch removeDirectives); these were kept, then refused
    # by the CRD schema as unknown fields
    "new-key-list-directives": {"spec": {"hostAliases": [{"$patch": "replace"}, {"ip": "10.0.0.1", "hostnames": ["a"]},
                                                         {"ip": "10.0.0.2", "$patch": "delete"}]}},
    "new-key-nested-directive": {"spec": {"overhead": {"cpu": "1", "x": {"$patch": "delete"}}}},
    "new-key-map-directive": {"spec": {"readinessGates": [{"conditionType": "a"}], "os": {"$patch": "replace", "name": "linux"}}},
    "type-change-directive": {"spec": {"terminationGracePeriodSeconds": {"$patch": "replace"}}},
}

#: name -> patch that both implementations refuse.
ERRORS: dict[str, dict[str, Any]] = {
    "item-without-merge-key": {"spec": {"containers": [{"image": "x"}]}},
    "bad-directive": {"spec": {"securityContext": {"$patch": "merge-deep"}}},
    "delete-without-key": {"spec": {"containers": [{"$patch": "delete"}]}},
}


def _kubectl_patch(kubectl: str, template: dict[str, Any], patch: dict[str, Any], tmp: Path) -> tuple[dict[str, Any] | None, str]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**copy.deepcopy(template["metadata"]), "name": "p"},
           "spec": copy.deepcopy(template["spec"])}
    path = tmp / "pod.json"
    path.write_text(json.dumps(pod))
    proc = subprocess.run([kubectl, "patch", "--local", "-f", str(path), "--type=strategic", "-p", json.dumps(patch), "-o", "json"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "KUBECONFIG": str(tmp / "none")})
    if proc.returncode != 0:
        return None, proc.stderr
    out = json.loads(proc.stdout)
    del out["metadata"]["name"]
    return {"metadata": out["metadata"], "spec": out["spec"]}, ""


def test_expectations_without_kubectl() -> None:
    t = _template()
    out = patch_pod_template(t, CASES["new-container-first"])
    assert [c["name"] for c in out["spec"]["containers"]] == ["debug", "pytorch"]  # as the Kubernetes docs show
    out = patch_pod_template(t, CASES["env-delete-item"])
    assert "K8SDDP_SEED" not in [e["name"] for e in out["spec"]["containers"][0]["env"]]
    out = patch_pod_template(t, CASES["finalizers-union-and-delete"])
    assert out["metadata"]["finalizers"] == ["c.example.com/new", "a.example.com/keep"]
    out = patch_pod_template(t, CASES["volume-retain-keys"])
    assert {"name": "checkpoints", "emptyDir": {}} in out["spec"]["volumes"]
    assert patch_pod_template(t, {}) == t and t == _template()  # no change, and the input is not modified
    out = patch_pod_template(t, CASES["new-key-list-directives"])
    assert out["spec"]["hostAliases"] == [{"ip": "10.0.0.1", "hostnames": ["a"]}]
    out = patch_pod_template(t, CASES["new-key-map-directive"])
    assert "os" not in out["spec"] and out["spec"]["readinessGates"] == [{"conditionType": "a"}]
    assert "terminationGracePeriodSeconds" not in patch_pod_template(t, CASES["type-change-directive"])["spec"]
    with pytest.raises(SmpError, match=r"\$setElementOrder"):
        patch_pod_template(t, {"spec": {"$setElementOrder/containers": [{"name": "pytorch"}]}})


@pytest.fixture(scope="module")
def kubectl() -> str:
    found = _kubectl()
    if found is None:
        pytest.skip("kubectl not found (~/.cache/k8sddp-kube/bin or PATH)")
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_kubectl_patch(kubectl: str, case: str, tmp_path: Path) -> None:
    template = _template()
    expected, err = _kubectl_patch(kubectl, template, CASES[case], tmp_path)
    assert expected is not None, err
    assert patch_pod_template(template, CASES[case]) == expected


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_refuses_what_kubectl_refuses(kubectl: str, case: str, tmp_path: Path) -> None:
    template = _template()
    expected, err = _kubectl_patch(kubectl, template, ERRORS[case], tmp_path)
    assert expected is None and err
    with pytest.raises(SmpError):
        patch_pod_template(template, ERRORS[case])
