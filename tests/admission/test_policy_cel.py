"""The exported VAP/Kyverno CEL gives the same verdict as `k8sddp validate --profile baseline`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("celpy")

from k8sddp import kinds  # noqa: E402
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


#: libyaml where PyYAML was built with it, as the validator reads files (k8sddp/validate/yamlbuild.py):
#: the corpus test below parses every manifest of the test tree (383 files: 5.3 s of CPU in pure
#: Python, 0.7 s with libyaml, the same documents from both).
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _jobs(path: Path) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.load_all(path.read_text(), Loader=_LOADER))
    except (yaml.YAMLError, UnicodeDecodeError):  # the validator's fixtures include non-UTF-8 files
        return []
    # The policy matches kubeflow.org pytorchjobs only (KubeDL's PyTorchJob is another kind).
    return [d for d in docs if isinstance(d, dict) and kinds.lookup(d.get("apiVersion"), d.get("kind")) is kinds.PYTORCHJOB]


def _structure_ok(job: dict[str, Any]) -> bool:
    report = validate_objects([job])
    return not any(RULES[f.rule_id].layer == "structure" or f.rule_id in ("KDP001", "KDP002", "KDP003", "KDP004")
                   for f in report.findings)


def prune_nulls(job: dict[str, Any]) -> Any:
    from k8sddp.validate.checks import prune_nulls as prune

    return prune(job)


def _file_level_problems(path: Path) -> bool:
    """Input findings (duplicate keys, alias bombs...) that PyYAML's last-wins reading hides."""
    from k8sddp.validate import validate_paths

    return any(f.rule_id < "KDP100" for f in validate_paths([str(path)], jobs=1).findings)


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
        if "envFrom" in text or "valueFrom" in text or "$(" in text:
            continue  # not literal: the two documented differences (ConfigMaps, $(VAR) references)
        if _file_level_problems(path):
            continue  # another document of the file is unreadable (KDP001-004): the policy sees one object
        # The API server prunes null fields of a custom resource when it decodes it, before any
        # admission policy runs (validate prunes them likewise: checks.prune_nulls).
        assert vap.evaluate(prune_nulls(jobs[0])).allowed is _cli_verdict(path, capsys), path
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
    # The PyTorchJob policy and binding, then the TrainJob's (k8sddp.admission.celtrainer).
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2
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


def _with_env(entries: list[dict[str, str]], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    job = remove_env(rendered_job(), "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for c in replica["template"]["spec"]["containers"]:
            if c["name"] == "pytorch":
                c["env"] = [*copy.deepcopy(entries), *c.get("env", [])]
    if annotations:
        job["metadata"].setdefault("annotations", {}).update(annotations)
    return job


def _rules(messages: list[str]) -> set[str]:
    return {m.split()[1] for m in messages}


def test_whitespace_class_is_pythons_isspace() -> None:
    from k8sddp.admission.cel import WHITESPACE

    assert set(WHITESPACE) == {chr(c) for c in range(0x110000) if chr(c).isspace()}


@pytest.mark.parametrize(
    ("exempt", "reason", "allowed"),
    [
        ("KDP201", "\u00a0", False),            # no-break space only: blank for str.strip()
        ("KDP201", "\u3000 \t\u2028", False),
        ("KDP201", "\x1c\x85", False),
        ("KDP201", "\u00a0debug build\u00a0", True),
        ("\u00a0KDP201\u2003,\u3000", "debug build", True),  # ids stripped like str.strip()
        ("KDP201\u200b", "debug build", False),   # zero-width space is not whitespace in either
    ],
)
def test_exempt_reason_and_ids_use_pythons_whitespace(
    vap: PolicyEvaluator, kyverno: PolicyEvaluator, exempt: str, reason: str, allowed: bool
) -> None:
    """Review 6 item 10: RE2's \\s is ASCII-only; the policy now trims what str.strip() trims."""
    job = _with_env([{"name": "PYTHONFAULTHANDLER", "value": "1"}],
                    {"k8sddp.dev/exempt": exempt, "k8sddp.dev/exempt-reason": reason})
    assert (validate_objects([job]).exit_code() == 0) is allowed
    for evaluator in (vap, kyverno):
        assert evaluator.evaluate(job).allowed is allowed


T, L, F = "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER"


@pytest.mark.parametrize(
    ("env", "rules"),
    [
        ([(T, "3"), (F, "1"), (T, "0")], {"KDP106", "KDP201"}),  # the last entry (0) is checked
        ([(T, "0"), (F, "1"), (T, "3")], {"KDP106"}),
        ([(T, "3"), (F, "1"), (F, "")], {"KDP106", "KDP202"}),
        ([(T, "3"), (L, "1"), (L, "0"), (F, "1")], {"KDP106"}),
        ([(T, "3"), (F, "1"), (T, "3")], {"KDP106"}),
    ],
)
def test_duplicate_guard_names_are_denied_like_validate(
    vap: PolicyEvaluator, env: list[tuple[str, str]], rules: set[str]
) -> None:
    """Review 6 item 9: the CEL read the first entry, the kubelet uses the last; a CRD without
    x-kubernetes-list-type: map would let the duplicate through. Both now deny (KDP106)."""
    job = _with_env([{"name": n, "value": v} for n, v in env])
    report = validate_objects([job])
    assert report.exit_code() != 0 and "KDP106" in {f.rule_id for f in report.findings}
    result = vap.evaluate(job)
    assert not result.allowed and _rules(result.messages) == rules
    # An exemption of the guard rules does not lift KDP106 (a structure rule) in either.
    exempt = _with_env([{"name": n, "value": v} for n, v in env],
                       {"k8sddp.dev/exempt": "KDP201,KDP202", "k8sddp.dev/exempt-reason": "test"})
    assert validate_objects([exempt]).exit_code() != 0
    assert _rules(vap.evaluate(exempt).messages) == {"KDP106"}


@pytest.mark.parametrize(
    ("env", "rule"),
    [
        ([("EMPTY", ""), (T, "3"), (F, "$(EMPTY)")], "KDP202"),   # kubelet: "" -> faulthandler off
        ([("THREE", "3"), (T, "$(THREE)"), (F, "1")], "KDP201"),  # kubelet: "3", but CEL cannot know
        ([(T, "3"), (F, "$$(ESCAPED)")], "KDP202"),
        ([(L, "$(X)"), (F, "1")], "KDP201"),
    ],
)
def test_dollar_references_are_unverifiable(vap: PolicyEvaluator, kyverno: PolicyEvaluator,
                                            env: list[tuple[str, str]], rule: str) -> None:
    """Review 6 item 6 (policy side): a value holding $( is denied as unverifiable, with a message
    that says so; validate expands references as the kubelet does (docs/admission.md)."""
    job = _with_env([{"name": n, "value": v} for n, v in env])
    for evaluator in (vap, kyverno):
        result = evaluator.evaluate(job)
        assert not result.allowed and _rules(result.messages) == {rule}
        assert "holds a $(VAR) reference, which CEL cannot expand" in result.messages[0]
        assert "cannot be verified by this admission policy" in result.messages[0]


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--name", "Bad_Name!"], "not a valid object name"),
        (["--name=-lead"], "not a valid object name"),
        (["--name", "a" * 254], "not a valid object name"),
        (["--exempt-namespace-label", "x=y", "--no-namespace-exemption"], "not allowed with argument"),
    ],
)
def test_export_flag_errors_exit_2(capsys: pytest.CaptureFixture[str], extra: list[str], fragment: str) -> None:
    """Review 6 item 11."""
    with pytest.raises(SystemExit) as exc:
        main(["policy", "export", "--format", "vap", *extra])
    assert exc.value.code == 2 and fragment in capsys.readouterr().err


def test_export_failure_policy_is_vap_only_and_out_errors_name_the_target(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["policy", "export", "--format", "kyverno", "--failure-policy", "Ignore"]) == 2
    assert "--failure-policy applies to --format vap only" in capsys.readouterr().err
    assert main(["policy", "export", "--format", "vap", "--failure-policy", "Ignore"]) == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out))[0]["spec"]["failurePolicy"] == "Ignore"
    assert main(["policy", "export", "--format", "vap", "--name", "team.k8sddp-baseline"]) == 0
    capsys.readouterr()
    target = tmp_path / "no" / "dir.yaml"
    assert main(["policy", "export", "--format", "vap", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write --out {target}: its folder does not exist" in err and ".k8sddp-" not in err
    assert not list(tmp_path.iterdir())
