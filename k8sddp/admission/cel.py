"""The CEL that enforces the ``baseline`` profile in the API server, built from the catalogue.

Rules, names and values come from :mod:`k8sddp.catalogue` and :mod:`k8sddp.guardvars`; nothing
here restates them. The expressions use only standard CEL (``has``, ``all``, ``exists``,
``filter``, ``map``, ``in``, ``size``, ``matches``, ``contains``) so that the same text runs in
a ValidatingAdmissionPolicy (Kubernetes >= 1.30, ``admissionregistration.k8s.io/v1``), in
Kyverno's ``validate.cel`` and in ``cel-python`` (the tests).

Semantics, per ``pytorch`` container of every replica (Kubernetes env rules as in
``../shared/reference/NOTES.md``: an ``env`` entry wins over ``envFrom``):

- a guard variable set in ``env`` with a literal ``value`` is checked;
- one set with ``valueFrom``, or absent from ``env`` in a container that has ``envFrom`` (a
  ConfigMap or Secret may supply it), is **unverifiable**:
  CEL cannot read the object a reference names. The policy denies it, with a message that
  says so. This is the one difference from ``k8sddp validate`` and the webhook, which read
  the ConfigMaps (``docs/admission.md``);
- KDP201: the effective ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` or, where that name is absent,
  ``NCCL_ASYNC_ERROR_HANDLING`` is one of ``guardvars.ASYNC_ERROR_HANDLING_ACCEPTED``;
- KDP202: ``PYTHONFAULTHANDLER`` is non-empty;
- KDP005: a ``k8sddp.dev/exempt`` annotation names only guardrail rules (the layers
  ``validate`` lets an object exempt) and comes with a non-blank ``k8sddp.dev/exempt-reason``;
  a valid exemption lifts the rules it names. Where ``validate`` would apply the valid part of
  a partly bad exemption, the policy applies none: both deny the object (KDP005).
"""

from __future__ import annotations

import dataclasses

from .. import guardvars as gv
from ..catalogue import RULES, Rule, get_rule
from ..validate.exemptions import EXEMPT_ANNOTATION, EXEMPTABLE_LAYERS, REASON_ANNOTATION

__all__ = [
    "CelValidation",
    "EXEMPT_ANNOTATION",
    "EXEMPT_REASON_ANNOTATION",
    "MATCH_CONDITIONS",
    "VALIDATIONS",
    "VARIABLES",
    "cel_string",
]

EXEMPT_REASON_ANNOTATION = REASON_ANNOTATION

CONTAINER = "pytorch"


def cel_string(text: str) -> str:
    """``text`` as a single-quoted CEL string literal (backslash, quote and newline escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def _entries(name: str) -> str:
    """The env entries of container ``c`` named ``name`` (0 or 1: env is a list-map)."""
    return f"(has(c.env) ? c.env.filter(e, e.name == {cel_string(name)}) : [])"


def _entry_status(var: str, ok: str) -> str:
    """Status of env entry ``var``: 'unverifiable' (valueFrom), 'ok' when the literal value ``v``
    (``''`` if omitted) satisfies ``ok``, else 'bad'. Values are taken literally, as
    ``k8sddp validate`` takes them (no ``$(VAR)`` expansion)."""
    return (
        f"(has({var}.valueFrom) ? 'unverifiable' : "
        f"[has({var}.value) ? {var}.value : ''].all(v, {ok}) ? 'ok' : 'bad')"
    )


_ENV_FROM = "(has(c.envFrom) && size(c.envFrom) > 0)"


def _kdp201_status() -> str:
    accepted = "[" + ", ".join(cel_string(v) for v in gv.ASYNC_ERROR_HANDLING_ACCEPTED) + "]"
    ok = f"v in {accepted}"
    return (
        f"[{_entries(gv.ASYNC_ERROR_HANDLING)}].map(t,\n"
        f"    [{_entries(gv.LEGACY_ASYNC_ERROR_HANDLING)}].map(l,\n"
        f"      size(t) > 0 ? {_entry_status('t[0]', ok)} :\n"
        f"      {_ENV_FROM} ? 'unverifiable' :\n"
        f"      size(l) > 0 ? {_entry_status('l[0]', ok)} :\n"
        "      'missing'\n"
        "    )[0]\n"
        "  )[0]"
    )


def _kdp202_status() -> str:
    return (
        f"[{_entries(gv.FAULTHANDLER)}].map(f,\n"
        f"    size(f) > 0 ? {_entry_status('f[0]', 'size(v) > 0')} :\n"
        f"    {_ENV_FROM} ? 'unverifiable' :\n"
        "    'missing'\n"
        "  )[0]"
    )


_ANN = "object.metadata.annotations"
_HAS_ANN = "(has(object.metadata) && has(object.metadata.annotations))"


def _exempt(rule_id: str) -> str:
    """The job validly exempts itself from ``rule_id``."""
    pattern = cel_string(r"(^|,)\s*" + rule_id + r"\s*(,|$)")
    return f"(variables.exemptionValid && {_ANN}[{cel_string(EXEMPT_ANNOTATION)}].matches({pattern}))"


def _ids_regex() -> str:
    """Comma-separated exemptable rule ids; empty items allowed (``validate`` skips them)."""
    ids = "|".join(sorted(r for r, rule in RULES.items() if rule.layer in EXEMPTABLE_LAYERS))
    return rf"^\s*(({ids})\s*)?(,\s*(({ids})\s*)?)*$"


#: ``spec.variables`` of the policy, in order (each may use the ones before it).
VARIABLES: tuple[tuple[str, str], ...] = (
    (
        "replicas",
        "has(object.spec) && has(object.spec.pytorchReplicaSpecs) ? object.spec.pytorchReplicaSpecs : {}",
    ),
    (
        # One list per replica: its containers named pytorch.
        "pytorchContainers",
        "variables.replicas.map(r, [variables.replicas[r]].map(s,\n"
        "  has(s.template) && has(s.template.spec) && has(s.template.spec.containers) ?\n"
        f"  s.template.spec.containers.filter(c, c.name == {cel_string(CONTAINER)}) : []\n"
        ")[0])",
    ),
    (
        "hasExemption",
        f"{_HAS_ANN} && {cel_string(EXEMPT_ANNOTATION)} in {_ANN}",
    ),
    (
        "exemptionValid",
        f"variables.hasExemption && {_ANN}[{cel_string(EXEMPT_ANNOTATION)}].matches({cel_string(_ids_regex())}) && "
        f"{cel_string(EXEMPT_REASON_ANNOTATION)} in {_ANN} && "
        f"{_ANN}[{cel_string(EXEMPT_REASON_ANNOTATION)}].matches('\\\\S')",
    ),
    # Per replica, per pytorch container: 'ok', 'bad', 'missing' or 'unverifiable'.
    ("kdp201", f"variables.pytorchContainers.map(cs, cs.map(c,\n  {_kdp201_status()}\n))"),
    ("kdp202", f"variables.pytorchContainers.map(cs, cs.map(c,\n  {_kdp202_status()}\n))"),
)


@dataclasses.dataclass(frozen=True)
class CelValidation:
    """One validation: ``expression`` must be true; else ``messageExpression`` (or ``message``).

    Attributes:
        rule: the catalogue rule it enforces.
        expression: CEL, true when the object complies.
        message: static message (catalogue id, name, title).
        message_expression: CEL yielding the message (chooses "unverifiable" wording).
        reason: the ``metav1.StatusReason`` of the denial.
    """

    rule: Rule
    expression: str
    message: str
    message_expression: str
    reason: str = "Forbidden"

    def as_vap(self) -> dict[str, str]:
        """The ``spec.validations[]`` entry of a ValidatingAdmissionPolicy."""
        return {
            "expression": self.expression,
            "message": self.message,
            "messageExpression": self.message_expression,
            "reason": self.reason,
        }


def _message(rule: Rule) -> str:
    return f"k8sddp {rule.id} ({rule.name}): {rule.title} Why: {rule.why}"


def _unverifiable_message(rule: Rule) -> str:
    return (
        f"k8sddp {rule.id} ({rule.name}): cannot be verified by this admission policy: in the pytorch "
        "container the variable comes from envFrom or valueFrom, or holds a $(VAR) reference, which "
        "CEL cannot read. Set it with a literal value in env (`k8sddp fix` does), or use the k8sddp "
        f"webhook, which reads ConfigMaps. Rule: {rule.title}"
    )


def _guard_validation(rule_id: str, var: str) -> CelValidation:
    rule = get_rule(rule_id)
    return CelValidation(
        rule=rule,
        expression=f"{_exempt(rule_id)} || variables.{var}.all(cs, cs.all(s, s == 'ok'))",
        message=_message(rule),
        message_expression=(
            f"variables.{var}.exists(cs, cs.exists(s, s == 'unverifiable')) ? "
            f"{cel_string(_unverifiable_message(rule))} : {cel_string(_message(rule))}"
        ),
    )


def _exemption_validation() -> CelValidation:
    rule = get_rule("KDP005")
    msg = (
        f"k8sddp {rule.id} ({rule.name}): {rule.title} The {EXEMPT_ANNOTATION} annotation must list "
        f"catalogue rule ids separated by commas, and {EXEMPT_REASON_ANNOTATION} must give a reason."
    )
    return CelValidation(
        rule=rule,
        expression="!variables.hasExemption || variables.exemptionValid",
        message=msg,
        message_expression=cel_string(msg),
    )


#: The validations, in catalogue order.
VALIDATIONS: tuple[CelValidation, ...] = (
    _exemption_validation(),
    _guard_validation("KDP201", "kdp201"),
    _guard_validation("KDP202", "kdp202"),
)

#: ``matchConditions``: which requests are evaluated at all (all must be true).
MATCH_CONDITIONS: tuple[tuple[str, str], ...] = (
    # Finalizer removal and other edits of a job being deleted must never be blocked.
    ("not-being-deleted", "!has(object.metadata.deletionTimestamp)"),
    # An UPDATE that leaves spec alone (labels, annotations, finalizers) is not re-checked, so
    # jobs created before the policy stay editable.
    (
        "spec-changed",
        "request.operation != 'UPDATE' || oldObject == null || !has(oldObject.spec) || "
        "!has(object.spec) || object.spec != oldObject.spec",
    ),
)
