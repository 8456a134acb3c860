"""The CEL that a ValidatingAdmissionPolicy can enforce on a Kubeflow Trainer v2 ``TrainJob`` alone.

A TrainJob's guards live mostly in its runtime, which CEL cannot read (a policy sees one object),
so the policy enforces only what the TrainJob itself decides (the webhook, which reads the
runtime, enforces the rest; docs/trainer.md):

- KDP133: ``spec.trainer.env`` sets none of the reserved ``PET_*`` names
  (:data:`k8sddp.schemagen_trainer.RESERVED_ENV`);
- KDP136: ``spec.runtimeRef`` names ``trainer.kubeflow.org`` and a training runtime kind (the CRD
  defaults fill both in before admission policies run).

Names and values come from the catalogue and :mod:`k8sddp.schemagen_trainer`. A valid
``k8sddp.dev/exempt`` annotation does not lift these: they are structure rules, which ``validate``
does not let an object exempt either.
"""

from __future__ import annotations

from ..schemagen_trainer import RESERVED_ENV, RUNTIME_KINDS, TRAINER_GROUP
from .cel import CelValidation, _message, cel_string, get_rule

__all__ = ["TRAINJOB_VALIDATIONS"]


def _list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(cel_string(v) for v in values) + "]"


def _reserved_env() -> CelValidation:
    rule = get_rule("KDP133")
    return CelValidation(
        rule=rule,
        expression=(
            "!has(object.spec.trainer) || !has(object.spec.trainer.env) || "
            f"object.spec.trainer.env.all(e, !(e.name in {_list(RESERVED_ENV)}))"
        ),
        message=_message(rule),
        message_expression=cel_string(_message(rule)),
    )


def _runtime_ref() -> CelValidation:
    rule = get_rule("KDP136")
    return CelValidation(
        rule=rule,
        expression=(
            f"(!has(object.spec.runtimeRef.apiGroup) || object.spec.runtimeRef.apiGroup == {cel_string(TRAINER_GROUP)}) && "
            f"(!has(object.spec.runtimeRef.kind) || object.spec.runtimeRef.kind in {_list(RUNTIME_KINDS)})"
        ),
        message=_message(rule),
        message_expression=cel_string(_message(rule)),
    )


#: The TrainJob validations, in catalogue order.
TRAINJOB_VALIDATIONS: tuple[CelValidation, ...] = (_reserved_env(), _runtime_ref())
