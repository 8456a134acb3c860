"""Render a DDPJob spec for a target (a PyTorchJob, a TrainJob): sandboxed Jinja, YAML-safe values,
self-validated output; a spec whose output fails its guardrails is refused naming the field to
blame. (The templates and the self-check: :mod:`k8sddp.render.output`; the guarded training
runtime: :func:`k8sddp.render.trainer.render_runtime`.)"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import K8sddpError, SpecError, ValidationError
from .model import build_model
from .output import RenderResult, failing_findings, render_text, to_yaml, yaml_value
from .targets import get_target
from .trainer import render_runtime

__all__ = ["RenderResult", "render_runtime", "render_spec", "to_yaml", "yaml_value"]  # (all but render_spec re-exported)


#: The spec fields that pass settings into the pod; when a rendered job fails its guardrails,
#: these are the suspects, tried one at a time (the patch first: it can change anything).
SUSPECTS = (
    "podTemplatePatch", "env", "envFrom", "volumes", "volumeMounts", "resources", "containerSecurityContext",
    "securityContext", "initContainers", "sidecars", "hostNetwork", "affinity", "topologySpreadConstraints",
    "tolerations", "nodeSelector", "podLabels", "podAnnotations",
)


def _render_target(spec: dict[str, Any], target: str) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]]:
    chosen = get_target(target)
    model = build_model(spec)
    objects, text = render_text(chosen.template, chosen.context(spec, model))
    return objects, text, chosen.companions()


def _passes_without(spec: dict[str, Any], fields: list[str], target: str) -> bool:
    trial = copy.deepcopy(spec)
    for field in fields:
        del trial["spec"][field]
    try:
        objects, _, companions = _render_target(trial, target)
    except K8sddpError:
        return False
    return not failing_findings(objects, companions)


def _culprit(spec: dict[str, Any], target: str) -> str | None:
    """The first of :data:`SUSPECTS` without which the spec renders a job that passes; else, when
    several fail the job each on their own, all the suspects the spec sets, if the job passes
    without them (``"env, podTemplatePatch"``); else ``None``."""
    present = [f for f in SUSPECTS if f in spec["spec"]]
    for field in present:
        if _passes_without(spec, [field], target):
            return field
    if len(present) > 1 and _passes_without(spec, present, target):
        return ", spec.".join(present)
    return None


def render_spec(spec: dict[str, Any], target: str = "pytorchjob") -> RenderResult:
    """Render a checked DDPJob spec (see :func:`k8sddp.render.load_spec`) for ``target``
    (:data:`k8sddp.render.targets.TARGETS`: ``pytorchjob``, ``trainjob``).

    The output is parsed back and must pass structure and the ``strict`` profile before it is
    returned (a TrainJob together with the runtime it refers to): neither a template or model bug
    nor any spec field (``podTemplatePatch`` included) can ship an unguarded manifest.

    Raises:
        UsageError: unknown target.
        SpecError: inconsistent spec (see :func:`k8sddp.render.model.build_model`), one the target
            cannot express, or a spec whose rendered job would fail a guardrail: ``path`` names
            the field that did it, the message the findings.
        ValidationError: the rendered manifest failed its own check and no spec field explains it
            (a k8sddp bug; findings attached).
        K8sddpError: the template failed to render.
    """
    objects, text, companions = _render_target(spec, target)
    failing = failing_findings(objects, companions)
    if failing:
        details = "; ".join(f"{f.rule_id} {f.path}: {f.message}" for f in failing)
        field = _culprit(spec, target)
        if field is not None:
            raise SpecError(f"the rendered {objects[0].get('kind', 'job') if objects else 'job'} would fail its guardrails because of spec.{field}: {details}",
                            path=f"spec.{field.split(',')[0]}")
        raise ValidationError(f"the rendered manifest fails its own guardrails: {details}", failing)
    return RenderResult(objects=objects, text=text)
