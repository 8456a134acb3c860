"""The exported VAP/Kyverno CEL gives the same verdict as `k8sddp validate --profile baseline`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("celpy")

from k8sddp.admission.cel import VALIDATIONS  # noqa: E402
from k8sddp.admission.policy import kyverno_policy, vap_objects  # noqa: E402
from k8sddp.catalogue import CATALOGUE_VERSION, RULES  # noqa: E402
from k8sddp.cli import main  # noqa: E402
from k8sddp.validate import validate_objects  # noqa: E402

from .celeval import PolicyEvaluator  # noqa: E402
from .helpers import KUBEFLOW_EXAMPLES, REPO, remove_env, rendered_job  # noqa: E402

CORPUS = Path(__file__).parent / "corpus"
AGREE = sorted((CORPUS / "agree").glob("*.yaml"))


def _cli_corpora() -> list[Path]:
    """Manifests elsewhere in the test tree (the validator's fixtures, once on main)."""
    out = []
    for p in sorted((REPO / "tests").rglob("*.yaml")):
        if "admission" in p.parts or "helm" in p.parts:
            continue
        out.append(p)
    return out


@pytest.fixture(scope="module")
def vap() -> PolicyEvaluator:
    return PolicyEvaluator(vap_objects()[0])


@pytest.fixture(scope="module")
def kyverno() -> PolicyEvaluator:
    return PolicyEvaluator(kyverno_policy())


def _jobs(path: Path) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError:
        return []
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "PyTorchJob"]


def _structure_ok(job: dict[str, Any]) -> bool:
    report = validate_objects([job])
    return not any(RULES[f.rule_id].layer == "structure" or f.rule_id in ("KDP001", "KDP002", "KDP003", "KDP004")
                   for f in report.findings)


def _cli_verdict(path: Path, capsys: pytest.CaptureFixture[str]) -> bool:
    code = main(["validate", "--profile", "baseline", "--format", "json", str(path)])
    capsys.readouterr()
    assert code in (0, 1)
    return code == 0


@pytest.mark.parametrize("path", AGREE, ids=[p.stem for p in AGREE])
def test_corpus_verdict_matches_validate(path: Path, vap: PolicyEvaluator, kyverno: PolicyEvaluator,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (job,) = _jobs(path)
    assert _structure_ok(job), f"{path.name} should pass the structure layer"
    expected = path.stem.startswith("allow-")
    assert _cli_verdict(path, capsys) is expected
    for evaluator in (vap, kyverno):
        result = evaluator.evaluate(job)
        assert result.applies
        assert result.allowed is expected, result.messages


def test_kubeflow_examples_and_other_corpora_match(vap: PolicyEvaluator, capsys: pytest.CaptureFixture[str]) -> None:
    paths = sorted(KUBEFLOW_EXAMPLES.glob("*.yaml")) if KUBEFLOW_EXAMPLES.is_dir() else []
    paths += _cli_corpora()
    if not paths:
        pytest.skip("no Kubeflow examples (../shared/reference) and no other fixtures")
    compared = 0
    for path in paths:
        jobs = _jobs(path)
        if len(jobs) != 1 or not _structure_ok(jobs[0]):
            continue
        text = path.read_text()
        if "envFrom" in text or "valueFrom" in text:
            continue  # not literal: see test_the_one_difference
        assert vap.evaluate(jobs[0]).allowed is _cli_verdict(path, capsys), path
        compared += 1
    assert compared >= 5 if KUBEFLOW_EXAMPLES.is_dir() else compared >= 0


def test_rendered_example_is_allowed(vap: PolicyEvaluator, kyverno: PolicyEvaluator) -> None:
    job = rendered_job()
    assert vap.evaluate(job).allowed and kyverno.evaluate(job).allowed
    assert validate_objects([job]).exit_code() == 0


def test_the_one_difference_configmaps(vap: PolicyEvaluator, capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS / "differ" / "envfrom-configmap-in-input.yaml"
    assert _cli_verdict(path, capsys) is True
    (job,) = _jobs(path)
    result = vap.evaluate(job)
    assert not result.allowed
    assert all("cannot be verified by this admission policy" in m for m in result.messages)
    assert {m.split()[1] for m in result.messages} == {"KDP201", "KDP202"}


def test_messages_carry_catalogue_ids_and_texts(vap: PolicyEvaluator) -> None:
    job = remove_env(rendered_job(), "PYTHONFAULTHANDLER", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
    messages = vap.evaluate(job).messages
    assert len(messages) == 2
    for rule_id, msg in zip(("KDP201", "KDP202"), messages, strict=False):
        rule = RULES[rule_id]
        assert msg.startswith(f"k8sddp {rule_id} ({rule.name}): {rule.title}")
        assert rule.why in msg
    for v in VALIDATIONS:
        assert v.rule.id in v.message and v.rule.title in v.message


def test_match_conditions_skip_unchanged_updates_and_deletions(vap: PolicyEvaluator) -> None:
    bad = remove_env(rendered_job(), "PYTHONFAULTHANDLER")
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"]["labels"]["x"] = "y"
    assert not vap.evaluate(relabelled, operation="UPDATE", old=bad).applies
    changed = copy.deepcopy(bad)
    changed["spec"]["runPolicy"]["backoffLimit"] = 9
    assert not vap.evaluate(changed, operation="UPDATE", old=bad).allowed
    changed["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    assert not vap.evaluate(changed, operation="UPDATE", old=bad).applies


def test_export_cli_yaml_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "export", "--format", "vap"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    assert docs == vap_objects()  # YAML round-trips exactly (block CEL included)
    assert docs[0]["metadata"]["annotations"]["k8sddp.dev/catalogue-version"] == CATALOGUE_VERSION
    assert docs[1]["spec"]["policyName"] == docs[0]["metadata"]["name"]
    assert docs[1]["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["key"] == "k8sddp.dev/guardrails"
    out = tmp_path / "kyverno.json"
    assert main(["policy", "export", "--format", "kyverno", "-o", "json", "--out", str(out),
                 "--exempt-namespace-label", "ml.example.com/sandbox=true"]) == 0
    listed = json.loads(out.read_text())
    (pol,) = listed["items"]
    assert pol["kind"] == "ClusterPolicy" and pol["spec"]["validationFailureAction"] == "Enforce"
    assert pol["spec"]["rules"][0]["exclude"]["any"][0]["resources"]["namespaceSelector"]["matchLabels"] == {
        "ml.example.com/sandbox": "true"}
    assert main(["policy", "export", "--format", "vap", "--no-namespace-exemption"]) == 0
    assert "matchResources" not in list(yaml.safe_load_all(capsys.readouterr().out))[1]["spec"]


def test_export_cli_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["policy", "export", "--format", "vap", "--exempt-namespace-label", "a in (b)"]) == 2
    assert "expected one KEY=VALUE" in capsys.readouterr().err
    assert main(["policy", "export", "--format", "vap", "--out", str(tmp_path / "no" / "dir.yaml")]) == 2
    assert "cannot write" in capsys.readouterr().err
