"""Kustomize: short patches drop the guards without merge keys; k8sddp's openapi document fixes that.

Runs the real ``kubectl kustomize`` (kustomize v5.5.0 on these machines) on the overlays in
``tests/data/kustomize`` and checks its output with ``k8sddp validate -``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.kustomizegen import (
    BUILTIN_KINDS,
    K8S_DEFINITIONS_FILE,
    OPENAPI_FILE,
    PYTORCHJOB_DEFINITION,
    build_openapi,
    dumps,
)
from k8sddp.resources import schemas_dir

DATA = Path(__file__).parent / "data" / "kustomize"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) not installed")


def _doc() -> dict[str, Any]:
    return json.loads((schemas_dir() / OPENAPI_FILE).read_text(encoding="utf-8"))


def test_committed_document_is_generated_from_the_crd(reference: Path) -> None:
    crd = yaml.safe_load((reference / "kubeflow" / "kubeflow.org_pytorchjobs.yaml").read_text(encoding="utf-8"))
    k8s = json.loads((schemas_dir() / K8S_DEFINITIONS_FILE).read_text(encoding="utf-8"))
    committed = (schemas_dir() / OPENAPI_FILE).read_text(encoding="utf-8")
    assert committed == dumps(build_openapi(crd, k8s)), (
        "regenerate: python -m k8sddp.kustomizegen openapi --crd ../shared/reference/kubeflow/kubeflow.org_pytorchjobs.yaml")


def test_document_shape_and_closure() -> None:
    defs = _doc()["definitions"]
    gvks = {(g["group"], g["version"], g["kind"]) for d in defs.values()
            for g in d.get("x-kubernetes-group-version-kind", [])}
    assert ("kubeflow.org", "v1", "PyTorchJob") in gvks
    for name in BUILTIN_KINDS:
        assert defs[name]["x-kubernetes-group-version-kind"], name
    assert {("apps", "v1", "Deployment"), ("batch", "v1", "Job"), ("", "v1", "Pod")} <= gvks
    # every reference resolves inside the document; no JSON-Schema leftovers
    text = json.dumps(defs)
    for ref in set(part.split('"')[0] for part in text.split('"$ref": "#/definitions/')[1:]):
        assert ref in defs, ref
    assert "#/$defs/" not in text and '"null"' not in text and '"description"' not in text
    assert len(text) < 400_000


def test_pytorchjob_lists_carry_kubernetes_merge_keys() -> None:
    job = _doc()["definitions"][PYTORCHJOB_DEFINITION]
    template = job["properties"]["spec"]["properties"]["pytorchReplicaSpecs"]["additionalProperties"][
        "properties"]["template"]
    pod = template["properties"]["spec"]["properties"]
    container = pod["containers"]["items"]["properties"]
    expected = {
        "containers": (pod["containers"], "name"),
        "initContainers": (pod["initContainers"], "name"),
        "volumes": (pod["volumes"], "name"),
        "env": (container["env"], "name"),
        "volumeMounts": (container["volumeMounts"], "mountPath"),
        "ports": (container["ports"], "containerPort"),
    }
    for field, (schema, key) in expected.items():
        assert schema["x-kubernetes-patch-merge-key"] == key, field
        assert schema["x-kubernetes-patch-strategy"].split(",")[0] == "merge", field
    init_env = pod["initContainers"]["items"]["properties"]["env"]
    assert init_env["x-kubernetes-patch-merge-key"] == "name"


def test_cli_prints_and_writes_the_document(cli, tmp_path: Path) -> None:
    res = cli("kustomize", "openapi")
    assert res.code == 0 and json.loads(res.out) == _doc()
    out = tmp_path / "pytorchjob-openapi.json"
    assert cli("kustomize", "openapi", "-o", str(out)).code == 0
    assert json.loads(out.read_text(encoding="utf-8")) == _doc()
    res = cli("kustomize", "openapi", "-o", str(tmp_path / "missing" / "x.json"))
    assert res.code == 2 and "cannot write" in res.err


def test_cli_extra_argument_gets_the_subcommand_usage(cli) -> None:
    res = cli("kustomize", "openapi", "extra")
    assert res.code == 2 and res.out == ""
    assert res.err.startswith("usage: k8sddp kustomize openapi [-h] [-o FILE]\n")
    assert "k8sddp kustomize openapi: error: unrecognized arguments: extra" in res.err


# -- real kustomize ------------------------------------------------------------------------------


@pytest.fixture
def overlays(tmp_path: Path, cli) -> Path:
    root = tmp_path / "kustomize"
    shutil.copytree(DATA, root)
    for name in ("overlay-openapi", "overlay-mixed"):
        assert cli("kustomize", "openapi", "-o", str(root / name / "pytorchjob-openapi.json")).code == 0
    return root


def _build(path: Path) -> str:
    assert KUBECTL is not None
    proc = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _objects(text: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(text) if d}


def _pytorch(job: dict[str, Any], replica: str) -> dict[str, Any]:
    containers = job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "pytorch")


def _validate_stdin(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "k8sddp", "validate", "-"], input=text,
                          capture_output=True, text=True, timeout=120)


@needs_kubectl
def test_short_patch_without_openapi_drops_guards_and_validate_catches_it(overlays: Path) -> None:
    out = _build(overlays / "overlay-plain")
    worker = _pytorch(_objects(out)["PyTorchJob"], "Worker")
    assert worker == {"name": "pytorch", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}  # all else lost
    res = _validate_stdin(out)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("<stdin>:")]
    worker_lines = [ln for ln in lines if "Worker" in ln]
    assert {rule for ln in worker_lines for rule in ("KDP104", "KDP201", "KDP202") if f" {rule} " in ln} == {
        "KDP104", "KDP201", "KDP202"}
    assert any("TORCH_NCCL_ASYNC_ERROR_HANDLING is not set" in ln for ln in worker_lines)
    assert not [ln for ln in lines if "Master" in ln]  # the Master was not patched


@needs_kubectl
def test_same_patch_with_openapi_merges_env_by_name(overlays: Path) -> None:
    out = _build(overlays / "overlay-openapi")
    job = _objects(out)["PyTorchJob"]
    worker = _pytorch(job, "Worker")
    assert worker["image"] == "repo/train:1" and worker["command"] == ["torchrun", "train.py"]
    assert {e["name"]: e["value"] for e in worker["env"]} == {
        "NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "1"}
    res = _validate_stdin(out)
    assert res.returncode == 0, res.stdout + res.stderr


@needs_kubectl
def test_mixed_overlay_merges_builtin_and_custom_kinds(overlays: Path) -> None:
    out = _build(overlays / "overlay-mixed")
    objs = _objects(out)
    deploy, job = objs["Deployment"], objs["PyTorchJob"]
    assert deploy["metadata"]["namespace"] == job["metadata"]["namespace"] == "ml"
    tb = deploy["spec"]["template"]["spec"]["containers"][0]
    assert tb["image"] == "tb:1"
    assert {e["name"] for e in tb["env"]} == {"EXTRA", "LOGDIR"}

    master = _pytorch(job, "Master")
    assert master["image"] == "repo/train:1" and len(master["env"]) == 2
    assert master["ports"] == [{"containerPort": 23456, "name": "pytorchjob-port"}]
    assert master["volumeMounts"] == [{"mountPath": "/ckpt", "name": "ckpt"}]
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"][0]["name"] == "ckpt"

    worker_spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker_spec["replicas"] == 4
    names = [c["name"] for c in worker_spec["template"]["spec"]["containers"]]
    assert sorted(names) == ["pytorch", "sidecar"]
    env = {e["name"]: e["value"] for e in _pytorch(job, "Worker")["env"]}
    assert env == {"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "2"}
    res = _validate_stdin(out)
    assert res.returncode == 0, res.stdout + res.stderr


@needs_kubectl
def test_document_without_builtin_kinds_breaks_the_deployment(overlays: Path) -> None:
    """Why the built-in definitions are shipped: a custom document replaces kustomize's own."""
    path = overlays / "overlay-mixed" / "pytorchjob-openapi.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["definitions"] = {k: v for k, v in doc["definitions"].items() if not k.startswith("io.k8s.api.apps.")}
    path.write_text(json.dumps(doc), encoding="utf-8")
    tb = _objects(_build(overlays / "overlay-mixed"))["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert "image" not in tb and [e["name"] for e in tb["env"]] == ["EXTRA"]


def test_committed_k8s_definitions_are_generated() -> None:
    """Needs the PyPI package kubernetes-validate (not a dependency): skipped without it."""
    import importlib.util

    from k8sddp.kustomizegen import k8s_definitions

    spec = importlib.util.find_spec("kubernetes_validate")  # its data only; no import
    if spec is None or spec.origin is None:
        pytest.skip("kubernetes-validate is not installed")
    src = Path(spec.origin).parent / "kubernetes-json-schema" / "v1.32.0-local" / "_definitions.json"
    if not src.is_file():
        pytest.skip(f"{src} not in this kubernetes-validate")
    expected = dumps(k8s_definitions(json.loads(src.read_text(encoding="utf-8"))))
    assert (schemas_dir() / K8S_DEFINITIONS_FILE).read_text(encoding="utf-8") == expected
