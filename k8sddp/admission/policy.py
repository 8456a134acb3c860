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

__all__ = ["DEFAULT_EXEMPT_LABEL", "MODES", "POLICY_NAME", "kyverno_policy", "parse_mode", "vap_objects"]

POLICY_NAME = "k8sddp-baseline"
#: Namespaces carrying this label (key, value) are not checked (``docs/admission.md``).
DEFAULT_EXEMPT_LABEL = ("k8sddp.dev/guardrails", "disabled")


#: ``--mode`` words and the binding's ``validationActions`` they stand for
#: (admissionregistration.k8s.io/v1 ``ValidationAction``: Deny, Warn, Audit). Deny refuses the
#: request; Warn returns the message as a warning to the client (kubectl prints it) and admits;
#: Audit writes ``validation.policy.admission.k8s.io/validation_failure`` into the audit event and
#: admits. The API server refuses Deny together with Warn ("redundant"), so does :func:`parse_mode`.
MODES: dict[str, str] = {"deny": "Deny", "warn": "Warn", "audit": "Audit"}


def parse_mode(text: str) -> list[str]:
    """``deny``, ``warn``, ``audit`` or a comma list (``warn,audit``) -> ``validationActions``.

    Args:
        text: the ``--mode`` value, case-insensitive; spaces around words are ignored.

    Returns:
        The actions in the order Deny, Warn, Audit, without repeats (``["Warn", "Audit"]``).

    Raises:
        ValueError: an unknown word, an empty list, or ``deny`` with ``warn`` (the API server's
            ValidatingAdmissionPolicyBinding validation refuses that pair).
    """
    words = [w.strip().lower() for w in text.split(",")]
    if not words or any(not w for w in words):
        raise ValueError(f"{text!r}: expected deny, warn, audit or a comma list of them")
    unknown = [w for w in words if w not in MODES]
    if unknown:
        raise ValueError(f"{text!r}: unknown mode {unknown[0]!r} (expected deny, warn or audit)")
    if "deny" in words and "warn" in words:
        raise ValueError(f"{text!r}: deny and warn together are refused by the API server "
                         "(a denied request's message reaches the client already); use deny,audit or warn,audit")
    return [MODES[m] for m in MODES if m in words]


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
    failure_policy: str = "Fail", actions: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding.

    Args:
        name: name of both objects.
        exempt_label: ``(key, value)``; namespaces with this label are not bound. ``None``
            binds every namespace.
        failure_policy: ``Fail`` (an expression error counts as a failed validation) or ``Ignore``.
            With ``Fail`` the error follows the binding's actions like any failed validation (a
            warning under Warn, an audit annotation under Audit: the API server's validating
            policy dispatcher applies ``validationActions`` to both).
        actions: the binding's ``validationActions`` (:func:`parse_mode`); default ``["Deny"]``.

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
            "validationActions": list(actions or ["Deny"]),
        },
    }
    selector = _namespace_selector(exempt_label)
    if selector:
        binding["spec"]["matchResources"] = {"namespaceSelector": selector}
    return [policy, binding, *_trainer_vap(f"{name}-trainjob", selector, failure_policy, list(actions or ["Deny"]))]


def _trainer_vap(name: str, selector: dict[str, Any], failure_policy: str, actions: list[str]) -> list[dict[str, Any]]:
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
        "spec": {"policyName": name, "validationActions": actions},
    }
    if selector:
        binding["spec"]["matchResources"] = {"namespaceSelector": selector}
    return [policy, binding]


def kyverno_policy(
    *, name: str = POLICY_NAME, exempt_label: tuple[str, str] | None = DEFAULT_EXEMPT_LABEL,
    audit: bool = False,
) -> dict[str, Any]:
    """A Kyverno ``ClusterPolicy`` with the same CEL variables, validations and conditions.

    ``background`` is off: the conditions read ``request``, which a background scan lacks.

    Args:
        name: the policy's name.
        exempt_label: ``(key, value)``; namespaces with this label are excluded.
        audit: ``validationFailureAction: Audit`` (admit and report) instead of ``Enforce``.
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
        "spec": {"validationFailureAction": "Audit" if audit else "Enforce", "background": False, "rules": [rule, trainjob]},
    }
