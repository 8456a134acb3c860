"""The JSON Schemas in schemas/: generated (never hand-edited), valid JSON Schema 2020-12, usable
by other tools (plain ``jsonschema``), and tagged only with rule ids the catalogue knows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from k8sddp.catalogue import RULES
from k8sddp.render import load_spec, render_spec
from k8sddp.schemagen import RULE_KEY, dump, generate

from .conftest import REFERENCE, REPO

SCHEMAS = REPO / "schemas"
CRD = REFERENCE / "kubeflow" / "kubeflow.org_pytorchjobs.yaml"
EXAMPLES = REFERENCE / "kubeflow" / "examples"
#: The JSON Schemas (schemas/ also holds OpenAPI documents for kustomize, which are not).
ALL_SCHEMAS = sorted(p for p in SCHEMAS.glob("*.json") if "$schema" in json.loads(p.read_text()))


def _load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / name).read_text())


def _rule_tags(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if RULE_KEY in node:
            yield node[RULE_KEY]
        for value in node.values():
            yield from _rule_tags(value)
    elif isinstance(node, list):
        for value in node:
            yield from _rule_tags(value)


def _example_jobs() -> list[dict[str, Any]]:
    if not EXAMPLES.is_dir():
        pytest.skip(f"{EXAMPLES} is not present")
    return [
        doc
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "PyTorchJob"
    ]


def _rendered_job() -> dict[str, Any]:
    return render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml"))).objects[0]


def test_committed_schemas_are_generated() -> None:
    if not CRD.is_file():
        pytest.skip(f"{CRD} is not present")
    for name, schema in generate(CRD).items():
        assert (SCHEMAS / name).read_text() == dump(schema), f"schemas/{name} is stale: run python -m k8sddp.schemagen"


def test_the_schemas_are_found() -> None:
    names = {p.name for p in ALL_SCHEMAS}
    assert {"pytorchjob.structure.json", "pytorchjob.baseline.json", "pytorchjob.strict.json", "k8sddp-config.schema.json"} <= names


@pytest.mark.parametrize("path", ALL_SCHEMAS, ids=lambda p: p.name)
def test_schemas_are_valid_2020_12(path: Path) -> None:
    schema = json.loads(path.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("path", ALL_SCHEMAS, ids=lambda p: p.name)
def test_rule_tags_exist_in_the_catalogue(path: Path) -> None:
    tags = set(_rule_tags(json.loads(path.read_text())))
    assert tags <= set(RULES), f"unknown rule ids {sorted(tags - set(RULES))}"


def test_every_schema_rule_layer_is_tagged() -> None:
    tagged = {t for p in ALL_SCHEMAS for t in _rule_tags(json.loads(p.read_text()))}
    # The rules that JSON Schema can express are all tagged somewhere (the rest are code in checks.py).
    assert {"KDP101", "KDP102", "KDP103", "KDP104", "KDP105", "KDP107", "KDP201", "KDP202", "KDP301", "KDP308"} <= tagged


def test_plain_jsonschema_accepts_the_examples_with_the_structure_schema() -> None:
    validator = jsonschema.Draft202012Validator(_load("pytorchjob.structure.json"))
    jobs = _example_jobs() + [_rendered_job()]
    for job in jobs:
        errors = [e.message for e in validator.iter_errors(job)]
        assert errors == [], f"{job['metadata']['name']}: {errors}"
    broken = json.loads(json.dumps(jobs[-1]))
    broken["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    assert not validator.is_valid(broken)


def test_plain_jsonschema_with_the_guard_schemas() -> None:
    """On raw manifests the guard schemas read env literally: the render passes strict, the
    operator's examples fail baseline."""
    rendered = _rendered_job()
    assert jsonschema.Draft202012Validator(_load("pytorchjob.strict.json")).is_valid(rendered)
    baseline = jsonschema.Draft202012Validator(_load("pytorchjob.baseline.json"))
    assert baseline.is_valid(rendered)
    for job in _example_jobs():
        assert not baseline.is_valid(job), job["metadata"]["name"]
