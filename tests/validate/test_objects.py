"""``validate_objects`` (the entry point of submit and the admission webhook): the same rules on
already-parsed objects, with the namespace they will be applied to and ConfigMaps from elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from k8sddp.validate import validate_objects, validate_paths

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _load(rel: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / rel).read_text()) if d is not None]


def test_same_rules_as_files_without_lines() -> None:
    for rel in ("KDP201/fail/torch-name-wins.yaml", "KDP309/fail/nproc-vs-flag.yaml", "KDP105/fail/two-masters.yaml"):
        profile = "strict" if "KDP3" in rel or "KDP105" in rel else "baseline"
        from_file = validate_paths([str(FIXTURES / rel)], profile=profile, jobs=1).failing()
        from_objects = validate_objects(_load(rel), profile=profile).failing()
        assert [(f.rule_id, f.path, f.message) for f in from_objects] == [(f.rule_id, f.path, f.message) for f in from_file]
        assert all(f.line == 0 for f in from_objects)


def test_namespace_argument_places_namespace_less_objects() -> None:
    job, cm = _load("KDP201/pass/both-without-namespace.yaml")
    assert validate_objects([job, cm], namespace="team-a").failing() == []
    # A ConfigMap read from the cluster in the namespace the job goes to resolves it too.
    cm["metadata"]["namespace"] = "team-a"
    assert validate_objects([job], configmaps=[cm], namespace="team-a").failing() == []
    # ...but not when the job goes elsewhere.
    assert {f.rule_id for f in validate_objects([job], configmaps=[cm], namespace="team-b").failing()} == {"KDP201"}


def test_list_items_are_objects() -> None:
    job, cm = _load("KDP201/pass/configmap-key-ref.yaml")
    report = validate_objects([{"apiVersion": "v1", "kind": "List", "items": [cm, job, 7]}], profile="strict")
    assert report.checked == 1 and report.skipped == {"ConfigMap": 1}
    assert [(f.rule_id, f.path) for f in report.failing()] == [("KDP004", "items[2]")]


def test_annotation_exemptions_apply() -> None:
    report = validate_objects(_load("KDP005/pass/reason-given.yaml"))
    assert report.failing() == [] and len([f for f in report.findings if f.exempted_by]) == 2


def test_alias_bomb_objects_are_refused_fast() -> None:
    """A caller that parsed a billion-laughs document with PyYAML hands over a DAG of shared lists;
    walking it would never end."""
    import time

    lol: list[object] = ["lol"] * 9
    for _ in range(9):
        lol = [lol] * 9
    job, cm = _load("KDP201/pass/configmap-key-ref.yaml")
    job["metadata"]["annotations"] = {"lol": lol}
    loop: list[object] = []
    loop.append(loop)
    started = time.perf_counter()
    report = validate_objects([job, cm, {"apiVersion": "v1", "kind": "ConfigMap", "data": loop}])
    assert time.perf_counter() - started < 5.0
    assert [(f.rule_id, f.document) for f in report.failing()] == [("KDP003", 0), ("KDP003", 2)]
    assert "alias bomb" in report.failing()[0].message and "recursive" in report.failing()[1].message
