"""The exported KubeRay policies, evaluated with cel-python on the Ray fixtures of KDP201/KDP202."""

from __future__ import annotations

import pytest
import yaml

from k8sddp.admission.raypolicy import RAY_PLURALS, ray_vap_objects

from ..conftest import REPO

pytest.importorskip("celpy")

from ..admission.celeval import PolicyEvaluator  # noqa: E402

FIXTURES = REPO / "tests" / "validate" / "fixtures"


def _evaluators() -> dict[str, PolicyEvaluator]:
    objs = ray_vap_objects()
    policies = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
    assert [p["spec"]["matchConstraints"]["resourceRules"][0]["resources"] for p in policies] == [[p] for p in RAY_PLURALS.values()]
    return {kind: PolicyEvaluator(p) for kind, p in zip(RAY_PLURALS, policies, strict=True)}


def test_pod_env_guards_are_enforced_and_runtime_env_is_not_read() -> None:
    ev = _evaluators()
    cases = {
        "KDP201/fail/ray-worker-group-missing.yaml": False,
        "KDP201/fail/ray-guard-on-sidecar.yaml": False,
        "KDP202/fail/ray-head-missing.yaml": False,
        "KDP202/pass/raycluster.yaml": True,
        "KDP150/pass/raycronjob.yaml": True,
        "KDP152/pass/rayservice.yaml": True,
        # CEL cannot parse runtimeEnvYAML: the 0 there passes the policy (the webhook denies it).
        "KDP201/fail/ray-runtime-env-zero.yaml": True,
        # ... and a pod env without the guard that the runtime env supplies is denied.
        "KDP201/pass/ray-runtime-env-sets-it.yaml": False,
    }
    for name, allowed in cases.items():
        (obj,) = yaml.safe_load_all((FIXTURES / name).read_text())
        result = ev[obj["kind"]].evaluate(obj)
        assert result.applies and result.allowed is allowed, (name, result.messages)
    (obj,) = yaml.safe_load_all((FIXTURES / "KDP201/fail/ray-worker-group-missing.yaml").read_text())
    assert any("KDP201" in m for m in ev["RayJob"].evaluate(obj).messages)


@pytest.mark.parametrize(
    ("fixture", "allowed"),
    [
        ("KDP201/fail/ray-runtime-env-zero.yaml", False),  # the webhook parses runtimeEnvYAML
        ("KDP202/fail/ray-head-missing.yaml", False),
        ("KDP202/pass/raycluster.yaml", True),
        ("KDP152/pass/rayservice.yaml", True),
        ("KDP150/pass/raycronjob.yaml", True),
    ],
)
def test_webhook_serves_the_ray_kinds(fixture: str, allowed: bool) -> None:
    from k8sddp.admission.review import AdmissionDecider

    (obj,) = yaml.safe_load_all((FIXTURES / fixture).read_text())
    request = {"uid": "u1", "operation": "CREATE", "namespace": "ml", "object": obj, "kind": {"group": "ray.io", "version": "v1", "kind": obj["kind"]}}
    verdict = AdmissionDecider().decide(request)
    assert verdict.reason != "not-a-pytorchjob" and verdict.allowed is allowed, verdict
