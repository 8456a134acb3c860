"""The KubeRay kinds: the generated schemas, the reference samples, and what findings say."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from k8sddp.kinds import RAYJOB, lookup
from k8sddp.schemagen import dump
from k8sddp.schemagen_ray import RAY_KINDS, dedupe, generate_ray, schema_name
from k8sddp.validate import check_text, validate_objects, validate_paths

from ..conftest import REFERENCE, REPO

KUBERAY = REFERENCE / "kuberay"
SAMPLES = KUBERAY / "examples"
FIXTURES = REPO / "tests" / "validate" / "fixtures"


def _kuberay() -> Path:
    if not KUBERAY.is_dir():
        pytest.skip(f"{KUBERAY} is not present")
    return KUBERAY


def test_committed_ray_schemas_are_generated() -> None:
    for name, schema in generate_ray(_kuberay()).items():
        assert (REPO / "schemas" / name).read_text() == dump(schema), f"schemas/{name} is stale: run python -m k8sddp.schemagen"


def test_dedupe_keeps_what_the_schema_accepts() -> None:
    """The $defs form accepts and refuses exactly what the CRD's converted schema does (checked
    with the plain jsonschema library on the samples and on a broken copy)."""
    full = json.loads((REPO / "schemas" / schema_name("RayJob")).read_text())
    jobs = [d for p in sorted(SAMPLES.glob("*.yaml")) if _kuberay() for d in yaml.safe_load_all(p.read_text()) if isinstance(d, dict) and d.get("kind") == "RayJob"]
    assert len(jobs) == 3
    validator = jsonschema.Draft202012Validator(full)
    for job in jobs:
        assert list(validator.iter_errors(job)) == []
    broken = json.loads(json.dumps(jobs[0]))
    broken["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    errors = list(validator.iter_errors(broken))
    assert errors and any("imagePullPolcy" in e.message for e in errors)
    # A repeated subtree becomes one $def; a properties map is never replaced by a $ref.
    big = {"type": "object", "properties": {"x": {"type": "string"}}}
    out = dedupe({"properties": {"a": big, "b": big}}, min_size=30)
    assert out["properties"]["a"] == out["properties"]["b"] == {"$ref": "#/$defs/a"} and out["$defs"]["a"] == big


def test_samples_pass_structure_and_fail_baseline() -> None:
    """The KubeRay v1.7.0 samples are valid RayJobs and set no guard: every group of each fails KDP201 and KDP202."""
    _kuberay()
    report = validate_paths([str(SAMPLES)], jobs=1)
    assert report.checked == 3
    rules = {f.rule_id for f in report.findings}
    assert rules == {"KDP201", "KDP202"}, rules
    mnist = [f for f in report.findings if "pytorch-mnist" in f.file and f.rule_id == "KDP201"]
    assert sorted(f.path for f in mnist) == [
        "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0]",
        "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0]",
    ]
    assert any("group workerGroupSpecs[small-group], container 'ray-worker'" in f.message for f in mnist)


def test_every_ray_kind_is_registered() -> None:
    for kind in RAY_KINDS:
        found = lookup("ray.io/v1", kind)
        assert found is not None and found.kind == kind
    assert RAYJOB.check_api_version({"apiVersion": "ray.io/v1alpha1", "kind": "RayJob"}) is not None


def test_runtime_env_value_is_located_at_runtime_env_yaml() -> None:
    text = (FIXTURES / "KDP201" / "fail" / "ray-runtime-env-zero.yaml").read_text()
    report = check_text(text, file="job.yaml")
    (finding,) = report.findings
    assert finding.rule_id == "KDP201" and finding.path == "spec.runtimeEnvYAML"
    assert "'0' (from runtimeEnvYAML)" in finding.message
    assert text.splitlines()[finding.line - 1].lstrip().startswith("runtimeEnvYAML:")


def test_sidecar_guard_is_named_in_the_message() -> None:
    report = validate_paths([str(FIXTURES / "KDP201" / "fail" / "ray-guard-on-sidecar.yaml")], jobs=1)
    (finding,) = report.findings
    assert "container 'log-agent' sets it" in finding.message and "workerGroupSpecs[gpu]" in finding.message


def test_selected_cluster_is_read_from_the_input_objects() -> None:
    """validate_objects (submit, the webhook) resolves a clusterSelector the same way as files."""
    docs = list(yaml.safe_load_all((FIXTURES / "KDP202" / "fail" / "ray-selected-cluster.yaml").read_text()))
    report = validate_objects(docs, namespace="team")
    job = [f for f in report.findings if f.object_ref.startswith("RayJob")]
    assert [f.rule_id for f in job] == ["KDP202"] and job[0].path == "spec.clusterSelector"
    assert job[0].message.startswith("selected RayCluster 'shared', group workerGroupSpecs[gpu]")
    alone = validate_objects(docs[:1], namespace="team")
    assert [f.rule_id for f in alone.findings] == ["KDP251"]
