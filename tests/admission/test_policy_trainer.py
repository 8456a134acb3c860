"""The exported TrainJob policy (VAP and the Kyverno rule) agrees with `validate` on what CEL can
see on a TrainJob alone (KDP133, KDP136), evaluated with cel-python."""

from __future__ import annotations

import copy
from typing import Any

import pytest

celpy = pytest.importorskip("celpy")

from k8sddp.admission.policy import kyverno_policy, vap_objects  # noqa: E402
from k8sddp.render import load_spec, render_runtime, render_spec  # noqa: E402
from k8sddp.validate import validate_objects  # noqa: E402

from ..conftest import REPO  # noqa: E402
from .celeval import PolicyEvaluator  # noqa: E402


def _job() -> dict[str, Any]:
    (job,) = render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml")), "trainjob").objects
    return job


def _cases() -> list[tuple[str, dict[str, Any], set[str]]]:
    good = _job()
    reserved = copy.deepcopy(good)
    reserved["spec"]["trainer"]["env"].append({"name": "PET_NODE_RANK", "value": "0"})
    ref = copy.deepcopy(good)
    ref["spec"]["runtimeRef"]["kind"] = "Runtime"
    no_env = copy.deepcopy(good)
    del no_env["spec"]["trainer"]["env"]
    return [("good", good, set()), ("reserved", reserved, {"KDP133"}), ("runtime-ref", ref, {"KDP136"}), ("no-env", no_env, set())]


@pytest.mark.parametrize("policy", ["vap", "kyverno"])
def test_policy_agrees_with_validate(policy: str) -> None:
    objects = vap_objects()
    assert [o["metadata"]["name"] for o in objects] == ["k8sddp-baseline", "k8sddp-baseline", "k8sddp-baseline-trainjob", "k8sddp-baseline-trainjob"]
    chosen = objects[2] if policy == "vap" else {**kyverno_policy(), "spec": {"rules": kyverno_policy()["spec"]["rules"][1:]}}
    evaluator = PolicyEvaluator(chosen)
    runtime = render_runtime().objects[0]
    for name, job, rules in _cases():
        result = evaluator.evaluate(job)
        found = {f.rule_id for f in validate_objects([runtime, job], profile="baseline").failing() if f.object_ref.startswith("TrainJob")}
        assert found & {"KDP133", "KDP136"} == rules, name
        assert result.allowed == (not rules), (name, result.messages)
        assert all(any(r in m for r in rules) for m in result.messages), name
