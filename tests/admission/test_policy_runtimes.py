"""The exported Trainer runtime policies (`policy export --format vap --kind runtimes`), evaluated
with cel-python, agree with `validate --profile baseline` on the runtime's guard rules (KDP201,
KDP202, KDP213) for rendered, edited, fixture and stock runtimes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.admission.runtimepolicy import RUNTIME_PLURALS, runtime_vap_objects
from k8sddp.cli import main
from k8sddp.render import render_runtime
from k8sddp.validate import validate_objects

from ..conftest import REPO

pytest.importorskip("celpy")

from .celeval import PolicyEvaluator  # noqa: E402

GUARDS = {"KDP201", "KDP202", "KDP213"}
STOCK = Path("/work/shared/reference/kubeflow-trainer/runtimes")
for _c in (REPO.parent / "shared" / "reference" / "kubeflow-trainer" / "runtimes", STOCK):
    if _c.is_dir():
        STOCK = _c
        break


def _evaluators() -> dict[str, PolicyEvaluator]:
    policies = [o for o in runtime_vap_objects() if o["kind"] == "ValidatingAdmissionPolicy"]
    assert [p["spec"]["matchConstraints"]["resourceRules"][0]["resources"] for p in policies] == [[p] for p in RUNTIME_PLURALS.values()]
    return {kind: PolicyEvaluator(p) for kind, p in zip(RUNTIME_PLURALS, policies, strict=True)}


def _node(runtime: dict[str, Any]) -> dict[str, Any]:
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        for c in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "node":
                return c  # type: ignore[no-any-return]
    raise AssertionError("no node container")


def _set_env(runtime: dict[str, Any], name: str, value: str | None) -> dict[str, Any]:
    out = copy.deepcopy(runtime)
    c = _node(out)
    c["env"] = [e for e in c.get("env", []) if e["name"] != name]
    if value is not None:
        c["env"].append({"name": name, "value": value})
    return out


def _cases() -> list[tuple[str, dict[str, Any]]]:
    good = render_runtime().objects[0]
    namespaced = copy.deepcopy(good)
    namespaced.update(kind="TrainingRuntime")
    namespaced["metadata"]["namespace"] = "ml"
    no_label = copy.deepcopy(good)  # no trainer Job: nothing for either to check (KDP134 is structure)
    for rjob in no_label["spec"]["template"]["spec"]["replicatedJobs"]:
        rjob["template"].get("metadata", {}).get("labels", {}).pop("trainer.kubeflow.org/trainjob-ancestor-step", None)
    sidecar = _set_env(good, "PYTHONFAULTHANDLER", None)  # the guard moved to a sidecar does not count
    pod = sidecar["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"].append({"name": "logs", "image": "busybox", "env": [{"name": "PYTHONFAULTHANDLER", "value": "1"}]})
    cases = [
        ("rendered", good),
        ("namespaced", namespaced),
        ("no-faulthandler", _set_env(good, "PYTHONFAULTHANDLER", None)),
        ("async-0", _set_env(good, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")),
        ("blocking-wait", _set_env(good, "TORCH_NCCL_BLOCKING_WAIT", "True")),
        ("guard-on-sidecar", sidecar),
        ("no-trainer-job", no_label),
    ]
    for path in sorted(STOCK.glob("*.yaml")) if STOCK.is_dir() else []:
        cases.append((f"stock-{path.stem}", yaml.safe_load(path.read_text())))
    return cases


def test_runtime_policy_agrees_with_validate() -> None:
    ev = _evaluators()
    seen_denied = seen_allowed = 0
    for name, runtime in _cases():
        expected = {f.rule_id for f in validate_objects([runtime], profile="baseline").failing()} & GUARDS
        result = ev[runtime["kind"]].evaluate(runtime)
        assert result.applies, name
        assert result.allowed == (not expected), (name, expected, result.messages)
        for rule_id in expected:
            assert any(rule_id in m for m in result.messages), (name, rule_id, result.messages)
        seen_denied += not result.allowed
        seen_allowed += result.allowed
    assert seen_denied >= 4 and seen_allowed >= 2


def test_cli_exports_the_runtime_pairs_and_refuses_kyverno(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "export", "--format", "vap", "--kind", "runtimes", "-o", "json", "--name", "acme"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert [(o["kind"], o["metadata"]["name"]) for o in items] == [
        ("ValidatingAdmissionPolicy", "acme-trainingruntimes"), ("ValidatingAdmissionPolicyBinding", "acme-trainingruntimes"),
        ("ValidatingAdmissionPolicy", "acme-clustertrainingruntimes"), ("ValidatingAdmissionPolicyBinding", "acme-clustertrainingruntimes"),
    ]
    assert main(["policy", "export", "--format", "kyverno", "--kind", "runtimes"]) == 2
    assert "--format vap" in capsys.readouterr().err


def test_yaml_output_round_trips() -> None:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["policy", "export", "--format", "vap", "--kind", "runtimes"]) == 0
    assert list(yaml.safe_load_all(buf.getvalue())) == runtime_vap_objects()
