"""SARIF and JUnit reporters: SARIF checked against the published SARIF 2.1.0 schema, JUnit parsed back."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from k8sddp.catalogue import RULES, VALIDATOR_LAYERS
from k8sddp.findings import Finding, Report, Severity
from k8sddp.reporters import REPORTERS, render
from k8sddp.reporters.sarif import artifact_uri

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _report() -> Report:
    return Report(
        findings=[
            Finding("KDP201", Severity.ERROR, "TORCH_NCCL_ASYNC_ERROR_HANDLING is not set; expected 3",
                    file="jobs/train job.yaml", line=12, column=11,
                    path="spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env",
                    document=1, object_ref="PyTorchJob/ml/train"),
            Finding("KDP001", Severity.ERROR, "mapping values are not allowed here <&> \"q\"",
                    file="<stdin>", line=3, column=0),
            Finding("KDP107", Severity.WARNING, "cleanPodPolicy 'Runing' is unknown",
                    file="jobs/a.yaml", line=0, document=0, object_ref="PyTorchJob/default/a"),
            Finding("KDP202", Severity.INFO, "PYTHONFAULTHANDLER is not set",
                    file="jobs/a.yaml", line=5, column=3, document=0,
                    object_ref="PyTorchJob/default/a", exempted_by="annotation k8sddp.dev/exempt: legacy image"),
            Finding("KDP201", Severity.INFO, "TORCH_NCCL_ASYNC_ERROR_HANDLING is not set",
                    file="/elsewhere/b.yaml", line=7, column=1, exempted_by="config .k8sddp.yaml"),
            Finding("KDP999", Severity.ERROR, "a rule the catalogue does not know", file="c.yaml", line=1),
        ],
        files=4, documents=5, checked=3, skipped=Counter({"Service": 2}),
    )


def test_registered() -> None:
    assert {"sarif", "junit"} <= set(REPORTERS)


@pytest.mark.parametrize("tool", ["validate", "lint"])
@pytest.mark.parametrize("report", [Report(), _report()], ids=["empty", "findings"])
def test_sarif_matches_published_schema(sarif_validator, report: Report, tool: str) -> None:
    doc = json.loads(render(report, "sarif", tool=tool))
    errors = sorted(sarif_validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    assert doc["version"] == "2.1.0"
    assert len(doc["runs"]) == 1


def test_sarif_rules_come_from_catalogue() -> None:
    run = json.loads(render(_report(), "sarif", tool="validate"))["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    # validate lists every input/structure/baseline/strict rule, once, in catalogue order
    assert ids == [r.id for r in RULES.values() if r.layer in VALIDATOR_LAYERS]
    kdp201 = rules[ids.index("KDP201")]
    cat = RULES["KDP201"]
    assert kdp201["name"] == cat.name
    assert kdp201["shortDescription"]["text"] == cat.title
    assert kdp201["fullDescription"]["text"] == cat.why
    assert cat.source in kdp201["help"]["text"] and cat.why in kdp201["help"]["markdown"]
    assert kdp201["defaultConfiguration"]["level"] == "error"


def test_sarif_results_point_at_rules_and_regions() -> None:
    run = json.loads(render(_report(), "sarif", tool="validate"))["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["KDP201", "KDP001", "KDP107", "KDP202", "KDP201", "KDP999"]
    for res in results:
        if "ruleIndex" in res:
            assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
    assert "ruleIndex" not in results[5]  # unknown to the catalogue: no descriptor to point at

    first = results[0]
    assert first["level"] == "error"
    assert "PyTorchJob/ml/train" in first["message"]["text"]
    assert "spec.pytorchReplicaSpecs.Worker" in first["message"]["text"]
    loc = first["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "jobs/train%20job.yaml", "uriBaseId": "%SRCROOT%"}
    assert loc["region"] == {"startLine": 12, "startColumn": 11}

    assert results[1]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "%3Cstdin%3E"
    assert results[1]["locations"][0]["physicalLocation"]["region"] == {"startLine": 3}
    assert results[2]["level"] == "warning"
    assert results[2]["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}
    # fingerprints differ between findings and do not depend on the line
    fps = [r["partialFingerprints"]["k8sddpFinding/v1"] for r in results]
    assert len(set(fps)) == len(fps)
    moved = _report()
    moved.findings[0] = Finding(**{**moved.findings[0].__dict__, "line": 40})
    moved_run = json.loads(render(moved, "sarif", tool="validate"))["runs"][0]
    assert moved_run["results"][0]["partialFingerprints"] == results[0]["partialFingerprints"]


def test_sarif_exemptions_are_suppressions() -> None:
    results = json.loads(render(_report(), "sarif", tool="validate"))["runs"][0]["results"]
    annotated, configured = results[3], results[4]
    assert annotated["level"] == "error"  # the rule's level, not "note": the result is suppressed
    assert annotated["suppressions"] == [
        {"kind": "inSource", "status": "accepted", "justification": "annotation k8sddp.dev/exempt: legacy image"}
    ]
    assert configured["suppressions"][0]["kind"] == "external"
    assert configured["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "file:///elsewhere/b.yaml"}
    assert all("suppressions" not in r for r in results[:3])


def test_artifact_uri(tmp_path: Path) -> None:
    assert artifact_uri("a/b.yaml", root=tmp_path) == ("a/b.yaml", True)
    assert artifact_uri(str(tmp_path / "x y" / "c.yaml"), root=tmp_path) == ("x%20y/c.yaml", True)
    assert artifact_uri("../out.yaml", root=tmp_path / "sub") == (
        (tmp_path / "out.yaml").as_uri(), False)
    assert artifact_uri("<stdin>", root=tmp_path) == ("%3Cstdin%3E", True)
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        assert artifact_uri("./k/j.yml") == ("k/j.yml", True)
    finally:
        os.chdir(old)


def test_junit_structure_and_counts() -> None:
    text = render(_report(), "junit", tool="validate")
    assert text.startswith("<?xml")
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [
        "jobs/train job.yaml", "<stdin>", "jobs/a.yaml", "/elsewhere/b.yaml", "c.yaml", "k8sddp validate"]
    assert root.get("tests") == "7" and root.get("failures") == "4" and root.get("skipped") == "2"
    a = suites[2]
    assert a.get("tests") == "2" and a.get("failures") == "1" and a.get("skipped") == "1"
    cases = a.findall("testcase")
    assert cases[0].get("classname") == "jobs/a.yaml.PyTorchJob/default/a"
    assert cases[0].find("failure").get("type") == "warning"
    assert cases[1].find("skipped").get("message").startswith("exempted (annotation")
    first = suites[0].find("testcase")
    assert first.get("name") == (
        "KDP201 nccl-async-error-handling [spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env]")
    assert first.get("line") == "12"
    assert RULES["KDP201"].why in first.find("failure").text
    summary = suites[-1].find("testcase")
    assert "3 object(s) checked" in summary.get("name")


def test_junit_escapes_markup_and_control_characters() -> None:
    report = Report(findings=[Finding("KDP001", Severity.ERROR, 'bad <x a="1">&amp; \x1b[31m\x00 end',
                                      file='we"ird<&>.yaml', line=1)])
    text = render(report, "junit", tool="validate")
    root = ET.fromstring(text)  # parses: nothing XML forbids got through
    failure = root.find("testsuite/testcase/failure")
    assert failure.get("message") == 'bad <x a="1">&amp; \\u001b[31m\\u0000 end'
    assert root.find("testsuite").get("name") == 'we"ird<&>.yaml'


def test_junit_clean_run_is_one_passing_test() -> None:
    root = ET.fromstring(render(Report(files=2, documents=2, checked=2), "junit", tool="validate"))
    assert root.get("tests") == "1" and root.get("failures") == "0"
    assert root.find("testsuite/testcase").get("name").startswith("2 file(s), 2 document(s), 2 object(s)")


def test_schema_check_has_teeth(sarif_validator) -> None:
    doc = json.loads(render(_report(), "sarif", tool="validate"))
    doc["runs"][0]["results"][0]["level"] = "fatal"
    doc["runs"][0]["results"][1]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    assert len(list(sarif_validator.iter_errors(doc))) >= 2


def test_validate_cli_sarif_and_junit_end_to_end(sarif_validator, cli, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``k8sddp validate --format sarif|junit`` on a real unguarded manifest, one rule exempted."""
    repo = Path(__file__).resolve().parent.parent
    text = (repo / "examples" / "unguarded-pytorchjob.yaml").read_text(encoding="utf-8")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "train.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "k8sddp.yaml").write_text(
        "exemptions:\n- paths: ['jobs/*']\n  rules: [KDP202]\n  reason: legacy image prints its own stacks\n",
        encoding="utf-8")
    monkeypatch.chdir(tmp_path)

    res = cli("validate", "--format", "sarif", "--config", "k8sddp.yaml", "jobs")
    assert res.code == 1, res.err
    doc = json.loads(res.out)
    assert not list(sarif_validator.iter_errors(doc))
    results = doc["runs"][0]["results"]
    by_rule = Counter(r["ruleId"] for r in results)
    assert by_rule == {"KDP201": 2, "KDP202": 2}
    for r in results:
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] == "jobs/train.yaml"
        line = loc["region"]["startLine"]
        assert 1 < line <= len(text.splitlines())
        assert ("suppressions" in r) == (r["ruleId"] == "KDP202")

    res = cli("validate", "--format", "junit", "--config", "k8sddp.yaml", "jobs")
    assert res.code == 1
    root = ET.fromstring(res.out)
    assert root.get("failures") == "2" and root.get("skipped") == "2"
