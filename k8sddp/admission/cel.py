"""The CEL that enforces the ``baseline`` profile in the API server, built from the catalogue.

Rules, names and values come from :mod:`k8sddp.catalogue` and :mod:`k8sddp.guardvars`; nothing
here restates them. The expressions use only standard CEL (``has``, ``all``, ``exists``,
``filter``, ``map``, ``in``, ``size``, ``matches``, ``contains``) so that the same text runs in
a ValidatingAdmissionPolicy (Kubernetes >= 1.30, ``admissionregistration.k8s.io/v1``), in
Kyverno's ``validate.cel`` and in ``cel-python`` (the tests).

Semantics, per ``pytorch`` container of every replica (Kubernetes env rules as in
``../shared/reference/NOTES.md``: an ``env`` entry wins over ``envFrom``):

- a guard variable set in ``env`` with a literal ``value`` is checked; where a name appears
  more than once the kubelet uses the last entry, and so does the policy;
- KDP106 (guard names only): a guard variable set more than once in ``env`` is denied, as
  ``validate`` denies every duplicate env name. The policy does not look at other names
  (the CRD's ``x-kubernetes-list-type: map`` does; a list-wide check would be quadratic);
- one set with ``valueFrom``, or absent from ``env`` in a container that has ``envFrom`` (a
  ConfigMap or Secret may supply it), is **unverifiable**:
  CEL cannot read the object a reference names. The policy denies it, with a message that
  says so. ``k8sddp validate`` and the webhook read the ConfigMaps instead
  (``docs/admission.md``, first difference);
- one whose value holds ``$(`` (a ``$(VAR)`` reference, which the kubelet expands from the
  variables defined before it) is **unverifiable** too: CEL cannot expand it. ``validate``
  expands it as the kubelet does (second difference);
- KDP201: the effective ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` or, where that name is absent,
  ``NCCL_ASYNC_ERROR_HANDLING`` is one of ``guardvars.ASYNC_ERROR_HANDLING_ACCEPTED``;
- KDP202: ``PYTHONFAULTHANDLER`` is non-empty;
- KDP213: the effective ``TORCH_NCCL_BLOCKING_WAIT`` or, where that name is absent,
  ``NCCL_BLOCKING_WAIT`` is not a literal true as torch reads it (y/yes/1/t/true in any case);
  one the policy cannot read (``valueFrom``, ``envFrom``) is not held against the job, as in
  ``validate``;
- KDP005: a ``k8sddp.dev/exempt`` annotation names only guardrail rules (the layers
  ``validate`` lets an object exempt) and comes with a non-blank ``k8sddp.dev/exempt-reason``;
  a valid exemption lifts the rules it names. "Blank" and the spaces around rule ids are
  Python's ``str.isspace()`` characters (:data:`WHITESPACE`, what ``str.strip()`` removes),
  spelled out in a regex class because RE2's ``\\s`` is ASCII-only. Where ``validate`` would
  apply the valid part of a partly bad exemption, the policy applies none: both deny the
  object (KDP005).
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
    "WHITESPACE",
    "cel_string",
]

EXEMPT_REASON_ANNOTATION = REASON_ANNOTATION

CONTAINER = "pytorch"


#: The characters ``str.isspace()`` accepts (what ``str.strip()`` and ``str.split()`` remove):
#: ASCII tab..carriage return, the four information separators, space, NEL, no-break space and
#: Unicode's Zs/Zl/Zp spaces. ``tests/admission`` checks it against all of Unicode.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)
#: Regex class of one whitespace / one non-whitespace character (literal characters, so RE2
#: in the API server and Python's ``re`` in the tests read it alike).
_WS = "[" + WHITESPACE + "]"
_NON_WS = "[^" + WHITESPACE + "]"


def cel_string(text: str) -> str:
    """``text`` as a single-quoted CEL string literal: backslash and quote escaped, control
    characters and non-space whitespace as ``\\u`` escapes with four hex digits (the YAML stays printable)."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch != " " and (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch.isspace()):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def _entries(name: str) -> str:
    """The env entries of container ``c`` named ``name`` (more than one only where the CRD lacks
    ``x-kubernetes-list-type: map``; the kubelet then uses the last)."""
    return f"(has(c.env) ? c.env.filter(e, e.name == {cel_string(name)}) : [])"


def _last(var: str) -> str:
    return f"{var}[size({var}) - 1]"


def _entry_status(var: str, ok: str) -> str:
    """Status of env entry ``var``: 'unverifiable' (valueFrom, or a value holding ``$(``, which
    the kubelet would expand), 'ok' when the literal value ``v`` (``''`` if omitted) satisfies
    ``ok``, else 'bad'."""
    value = f"[has({var}.value) ? {var}.value : '']"
    return (
        f"(has({var}.valueFrom) ? 'unverifiable' : "
        f"{value}.exists(v, v.contains('$(')) ? 'unverifiable' : "
        f"{value}.all(v, {ok}) ? 'ok' : 'bad')"
    )


_ENV_FROM = "(has(c.envFrom) && size(c.envFrom) > 0)"


def _kdp201_status() -> str:
    accepted = "[" + ", ".join(cel_string(v) for v in gv.ASYNC_ERROR_HANDLING_ACCEPTED) + "]"
    ok = f"v in {accepted}"
    return (
        f"[{_entries(gv.ASYNC_ERROR_HANDLING)}].map(t,\n"
        f"    [{_entries(gv.LEGACY_ASYNC_ERROR_HANDLING)}].map(l,\n"
        f"      size(t) > 0 ? {_entry_status(_last('t'), ok)} :\n"
        f"      {_ENV_FROM} ? 'unverifiable' :\n"
        f"      size(l) > 0 ? {_entry_status(_last('l'), ok)} :\n"
        "      'missing'\n"
        "    )[0]\n"
        "  )[0]"
    )


def _kdp202_status() -> str:
    return (
        f"[{_entries(gv.FAULTHANDLER)}].map(f,\n"
        f"    size(f) > 0 ? {_entry_status(_last('f'), 'size(v) > 0')} :\n"
        f"    {_ENV_FROM} ? 'unverifiable' :\n"
        "    'missing'\n"
        "  )[0]"
    )


#: torch's true values (c10d getCvarBool; it lower-cases first).
_TORCH_TRUE = "(?i)^(y|yes|1|t|true)$"


def _kdp213_status() -> str:
    def true(var: str) -> str:
        return f"(has({var}.value) && {var}.value.matches({cel_string(_TORCH_TRUE)}) ? 'bad' : 'ok')"

    from ..validate.envchecks import BLOCKING_WAIT_NAMES

    return (
        f"[{_entries(BLOCKING_WAIT_NAMES[0])}].map(t,\n"
        f"    [{_entries(BLOCKING_WAIT_NAMES[1])}].map(l,\n"
        f"      size(t) > 0 ? {true(_last('t'))} :\n"
        f"      size(l) > 0 ? {true(_last('l'))} :\n"
        "      'ok'\n"
        "    )[0]\n"
        "  )[0]"
    )


_GUARD_NAMES = "[" + ", ".join(
    cel_string(n) for n in (gv.ASYNC_ERROR_HANDLING, gv.LEGACY_ASYNC_ERROR_HANDLING, gv.FAULTHANDLER)
) + "]"


def _entries_named(name_expr: str) -> str:
    """Like :func:`_entries` for a CEL expression giving the name."""
    return f"(has(c.env) ? c.env.filter(e, e.name == {name_expr}) : [])"


_ANN = "object.metadata.annotations"
_HAS_ANN = "(has(object.metadata) && has(object.metadata.annotations))"


def _exempt(rule_id: str) -> str:
    """The job validly exempts itself from ``rule_id``."""
    pattern = cel_string("(^|,)" + _WS + "*" + rule_id + _WS + "*(,|$)")
    return f"(variables.exemptionValid && {_ANN}[{cel_string(EXEMPT_ANNOTATION)}].matches({pattern}))"


def _ids_regex() -> str:
    """Comma-separated exemptable rule ids; empty items allowed (``validate`` skips them)."""
    ids = "|".join(sorted(r for r, rule in RULES.items() if rule.layer in EXEMPTABLE_LAYERS))
    return f"^{_WS}*(({ids}){_WS}*)?(,{_WS}*(({ids}){_WS}*)?)*$"


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
        f"{_ANN}[{cel_string(EXEMPT_REASON_ANNOTATION)}].matches({cel_string(_NON_WS)})",
    ),
    # Per replica, per pytorch container: 'ok', 'bad', 'missing' or 'unverifiable'.
    ("kdp201", f"variables.pytorchContainers.map(cs, cs.map(c,\n  {_kdp201_status()}\n))"),
    ("kdp202", f"variables.pytorchContainers.map(cs, cs.map(c,\n  {_kdp202_status()}\n))"),
    ("kdp213", f"variables.pytorchContainers.map(cs, cs.map(c,\n  {_kdp213_status()}\n))"),
    # Guard variables set more than once in env, per pytorch container (KDP106).
    (
        "duplicateGuards",
        "variables.pytorchContainers.map(cs, cs.map(c,\n  "
        + _GUARD_NAMES
        + f".filter(n, size({_entries_named('n')}) > 1)\n))",
    ),
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
        "container the variable comes from envFrom or valueFrom, which CEL cannot read, or its value "
        "holds a $(VAR) reference, which CEL cannot expand. Set it with a literal value in env "
        "(`k8sddp fix` does), or use the k8sddp webhook, which reads ConfigMaps and expands "
        f"references. Rule: {rule.title}"
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


def _duplicate_validation() -> CelValidation:
    rule = get_rule("KDP106")
    msg = (
        f"k8sddp {rule.id} ({rule.name}): a guard variable ({gv.ASYNC_ERROR_HANDLING}, "
        f"{gv.LEGACY_ASYNC_ERROR_HANDLING} or {gv.FAULTHANDLER}) is set more than once in the env of "
        f"a pytorch container; keep one entry. {rule.title}"
    )
    return CelValidation(
        rule=rule,
        expression="variables.duplicateGuards.all(cs, cs.all(d, size(d) == 0))",
        message=msg,
        message_expression=cel_string(msg),
    )


#: The validations, in catalogue order. KDP106 is not exemptable (a structure rule).
VALIDATIONS: tuple[CelValidation, ...] = (
    _exemption_validation(),
    _duplicate_validation(),
    _guard_validation("KDP201", "kdp201"),
    _guard_validation("KDP202", "kdp202"),
    _guard_validation("KDP213", "kdp213"),
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
