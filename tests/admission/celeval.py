"""Evaluate the exported policy's CEL with cel-python, as the API server evaluates a
ValidatingAdmissionPolicy: matchConditions first (all true, else not applicable), then the
variables in order (each may use the ones before), then every validation."""

from __future__ import annotations

import dataclasses
from typing import Any

import celpy
from celpy import celtypes


@dataclasses.dataclass
class PolicyResult:
    """``applies``: matchConditions held; ``allowed``; ``messages`` of the failed validations."""

    applies: bool
    allowed: bool
    messages: list[str]


class PolicyEvaluator:
    """Compiles a ValidatingAdmissionPolicy's CEL once and evaluates it on objects.

    Args:
        policy: the ``ValidatingAdmissionPolicy`` object (as exported), or a Kyverno
            ``ClusterPolicy`` (its first rule's ``celPreconditions`` and ``validate.cel``).
    """

    def __init__(self, policy: dict[str, Any]) -> None:
        self.env = celpy.Environment()
        if policy["kind"] == "ValidatingAdmissionPolicy":
            spec = policy["spec"]
            conditions = spec.get("matchConditions", [])
            variables = spec.get("variables", [])
            validations = spec["validations"]
        else:
            rule = policy["spec"]["rules"][0]
            conditions = rule.get("celPreconditions", [])
            variables = rule["validate"]["cel"].get("variables", [])
            validations = rule["validate"]["cel"]["expressions"]
        self.conditions = [self._compile(c["expression"]) for c in conditions]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in variables]
        self.validations = [
            (self._compile(v["expression"]), self._compile(v["messageExpression"]) if "messageExpression" in v else None,
             v.get("message", ""))
            for v in validations
        ]

    def _compile(self, expr: str) -> Any:
        return self.env.program(self.env.compile(expr))

    def evaluate(self, obj: dict[str, Any], *, operation: str = "CREATE", old: dict[str, Any] | None = None) -> PolicyResult:
        """Evaluate on ``obj``; raises celpy's error if an expression fails (failurePolicy Fail)."""
        act: dict[str, Any] = {
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel({"operation": operation}),
        }
        for prog in self.conditions:
            if not bool(_ok(prog.evaluate(act))):
                return PolicyResult(False, True, [])
        values: dict[Any, Any] = {}
        for name, prog in self.variables:
            act["variables"] = celtypes.MapType(values)
            values[celtypes.StringType(name)] = _ok(prog.evaluate(act))
        act["variables"] = celtypes.MapType(values)
        messages = []
        for prog, msg_prog, msg in self.validations:
            if not bool(_ok(prog.evaluate(act))):
                messages.append(str(_ok(msg_prog.evaluate(act))) if msg_prog is not None else msg)
        return PolicyResult(True, not messages, messages)


def _ok(value: Any) -> Any:
    if isinstance(value, celpy.CELEvalError):
        raise value
    return value
