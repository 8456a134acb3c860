"""The exported policies of the other kinds, type-checked by the real API server against the real
CRDs the kube tier installs: the TrainJob policy (`policy export --format vap`, its second pair),
the Trainer runtime policies (`--kind runtimes`, Trainer v2.3.0 CRDs) and the KubeRay policies
(`--kind ray`, KubeRay v1.7.0 CRDs). ``status.typeChecking`` (written by the
validatingadmissionpolicy-status-controller) must hold no expression warning: a misspelled
field or a type error in any expression shows there. Only the policies are applied, no binding,
so nothing else in the tier is affected."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from k8sddp.admission.policy import vap_objects
from k8sddp.admission.raypolicy import ray_vap_objects
from k8sddp.admission.runtimepolicy import runtime_vap_objects

from .conftest import Kube

_CRDS = {"trainer.kubeflow.org": "trainjobs.trainer.kubeflow.org", "ray.io": "rayjobs.ray.io"}


def _policies(tag: str) -> list[dict[str, Any]]:
    objs = vap_objects(name=f"k8sddp-tk-{tag}")[2:3] + runtime_vap_objects(name=f"k8sddp-tk-{tag}") + ray_vap_objects(name=f"k8sddp-tk-{tag}")
    return [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]


def test_policies_of_every_kind_type_check_against_the_real_crds(kube: Kube) -> None:
    tag = uuid.uuid4().hex[:6]
    policies = _policies(tag)
    for group, crd in _CRDS.items():
        if kube.get("crd", crd) is None:
            pytest.skip(f"the kube tier has no {crd} CRD ({group})")
    assert {p["spec"]["matchConstraints"]["resourceRules"][0]["resources"][0] for p in policies} == {
        "trainjobs", "trainingruntimes", "clustertrainingruntimes", "rayjobs", "rayclusters", "rayservices", "raycronjobs"}
    kube.apply(*policies)
    try:
        for policy in policies:
            name = policy["metadata"]["name"]

            def checked(name: str = name) -> dict[str, Any] | None:
                obj = kube.get("validatingadmissionpolicy", name) or {}
                st = obj.get("status") or {}
                return st if st.get("observedGeneration") == obj["metadata"]["generation"] else None

            status = kube.wait_until(f"type checking of {name}", checked, timeout=90)
            assert not (status.get("typeChecking") or {}).get("expressionWarnings"), (name, status)
            assert not [c for c in status.get("conditions") or [] if c.get("status") == "False"], (name, status)
    finally:
        for policy in policies:
            kube.kubectl("delete", "validatingadmissionpolicy", policy["metadata"]["name"], "--ignore-not-found", check=False)
