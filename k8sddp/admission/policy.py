"""Native admission policies for the ``baseline`` profile: Kubernetes VAP and Kyverno.

``k8sddp policy export --format vap`` prints a ``ValidatingAdmissionPolicy`` and its
``ValidatingAdmissionPolicyBinding`` (``admissionregistration.k8s.io/v1``, Kubernetes >= 1.30);
``--format kyverno`` prints a Kyverno ``ClusterPolicy`` (Kyverno >= 1.11, ``validate.cel``) with
the same CEL. A second policy (``<name>-trainjob``; a second Kyverno rule) holds what CEL can check
on a Trainer v2 TrainJob alone (:mod:`k8sddp.admission.celtrainer`). Both are pure functions of the catalogue (:mod:`k8sddp.admission.cel`), so the
objects change only when the catalogue does; its version is in their annotations.
"""

from __future__ import annotations

from typing import Any

from .._version import __version__
from ..catalogue import CATALOGUE_VERSION
from .cel import MATCH_CONDITIONS, VALIDATIONS, VARIABLES
from .celtrainer import TRAINJOB_VALIDATIONS

__all__ = ["DEFAULT_EXEMPT_LABEL", "POLICY_NAME", "kyverno_policy", "vap_objects"]

POLICY_NAME = "k8sddp-baseline"
#: Namespaces carrying this label (key, value) are not checked (``docs/admission.md``).
DEFAULT_EXEMPT_LABEL = ("k8sddp.dev/guardrails", "disabled")


def _annotations() -> dict[str, str]:
    return {
        "k8sddp.dev/version": __version__,
        "k8sddp.dev/catalogue-version": CATALOGUE_VERSION,
        "k8sddp.dev/profile": "baseline",
        "k8sddp.dev/rules": ",".join(v.rule.id for v in VALIDATIONS),
    }


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": "k8sddp", "app.kubernetes.io/component": "admission-policy"}


def _namespace_selector(exempt_label: tuple[str, str] | None) -> dict[str, Any]:
    if exempt_label is None:
        return {}
    key, value = exempt_label
    return {"matchExpressions": [{"key": key, "operator": "NotIn", "values": [value]}]}


def vap_objects(
    *, name: str = POLICY_NAME, exempt_label: tuple[str, str] | None = DEFAULT_EXEMPT_LABEL,
    failure_policy: str = "Fail",
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding.

    Args:
        name: name of both objects.
        exempt_label: ``(key, value)``; namespaces with this label are not bound. ``None``
            binds every namespace.
        failure_policy: ``Fail`` (deny when an expression errors) or ``Ignore``.

    Returns:
        ``[policy, binding]`` as plain dicts ready for YAML or JSON.
    """
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": _labels(), "annotations": _annotations()},
        "spec": {
            "failurePolicy": failure_policy,
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["kubeflow.org"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["pytorchjobs"],
                }],
            },
            "matchConditions": [{"name": n, "expression": e} for n, e in MATCH_CONDITIONS],
            "variables": [{"name": n, "expression": e} for n, e in VARIABLES],
            "validations": [v.as_vap() for v in VALIDATIONS],
            "auditAnnotations": [{
                "key": "catalogue-version",
                "valueExpression": f"'{CATALOGUE_VERSION}'",
            }],
        },
    }
    binding: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": _labels(), "annotations": _annotations()},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
        },
    }
    selector = _namespace_selector(exempt_label)
    if selector:
        binding["spec"]["matchResources"] = {"namespaceSelector": selector}
    return [policy, binding, *_trainer_vap(f"{name}-trainjob", selector, failure_policy)]


def _trainer_vap(name: str, selector: dict[str, Any], failure_policy: str) -> list[dict[str, Any]]:
    """The TrainJob policy and binding (:mod:`k8sddp.admission.celtrainer`)."""
    annotations = _annotations() | {"k8sddp.dev/rules": ",".join(v.rule.id for v in TRAINJOB_VALIDATIONS)}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": _labels(), "annotations": annotations},
        "spec": {
            "failurePolicy": failure_policy,
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["trainer.kubeflow.org"],
                    "apiVersions": ["v1alpha1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["trainjobs"],
                }],
            },
            "matchConditions": [{"name": n, "expression": e} for n, e in MATCH_CONDITIONS],
            "validations": [v.as_vap() for v in TRAINJOB_VALIDATIONS],
        },
    }
    binding: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": _labels(), "annotations": annotations},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    if selector:
        binding["spec"]["matchResources"] = {"namespaceSelector": selector}
    return [policy, binding]


def kyverno_policy(
    *, name: str = POLICY_NAME, exempt_label: tuple[str, str] | None = DEFAULT_EXEMPT_LABEL,
) -> dict[str, Any]:
    """A Kyverno ``ClusterPolicy`` with the same CEL variables, validations and conditions.

    ``background`` is off: the conditions read ``request``, which a background scan lacks.

    Args:
        name: the policy's name.
        exempt_label: ``(key, value)``; namespaces with this label are excluded.
    """
    rule: dict[str, Any] = {
        "name": "pytorchjob-baseline-guardrails",
        "match": {"any": [{"resources": {
            "kinds": ["kubeflow.org/v1/PyTorchJob"],
            "operations": ["CREATE", "UPDATE"],
        }}]},
        "celPreconditions": [{"name": n, "expression": e} for n, e in MATCH_CONDITIONS],
        "validate": {
            "cel": {
                "variables": [{"name": n, "expression": e} for n, e in VARIABLES],
                "expressions": [
                    {"expression": v.expression, "message": v.message, "messageExpression": v.message_expression}
                    for v in VALIDATIONS
                ],
            },
        },
    }
    trainjob: dict[str, Any] = {
        "name": "trainjob-structure",
        "match": {"any": [{"resources": {
            "kinds": ["trainer.kubeflow.org/v1alpha1/TrainJob"],
            "operations": ["CREATE", "UPDATE"],
        }}]},
        "celPreconditions": [{"name": n, "expression": e} for n, e in MATCH_CONDITIONS],
        "validate": {"cel": {"expressions": [
            {"expression": v.expression, "message": v.message, "messageExpression": v.message_expression}
            for v in TRAINJOB_VALIDATIONS
        ]}},
    }
    if exempt_label is not None:
        key, value = exempt_label
        rule["exclude"] = {"any": [{"resources": {"namespaceSelector": {"matchLabels": {key: value}}}}]}
        trainjob["exclude"] = rule["exclude"]
    annotations = _annotations() | {
        "policies.kyverno.io/title": "k8sddp baseline guardrails for PyTorchJobs",
        "policies.kyverno.io/category": "k8sddp",
        "policies.kyverno.io/severity": "high",
        "policies.kyverno.io/subject": "PyTorchJob",
        "policies.kyverno.io/description": (
            "Every replica's pytorch container must set TORCH_NCCL_ASYNC_ERROR_HANDLING (1 or 3) and "
            "PYTHONFAULTHANDLER with literal values (rules " + ", ".join(v.rule.id for v in VALIDATIONS)
            + " of the k8sddp catalogue). Generated by `k8sddp policy export --format kyverno`."
        ),
    }
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": name, "labels": _labels(), "annotations": annotations},
        "spec": {"validationFailureAction": "Enforce", "background": False, "rules": [rule, trainjob]},
    }
