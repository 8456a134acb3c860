"""Render a DDPJob spec for a target (a PyTorchJob, a TrainJob) and the guarded training runtime:
sandboxed Jinja, YAML-safe values, self-validated output."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
from typing import Any

import jinja2
import yaml
from jinja2.sandbox import SandboxedEnvironment

from ..errors import K8sddpError, SpecError, ValidationError
from ..findings import Finding
from ..resources import templates_dir
from ..validate import validate_objects
from ..validate.yamlio import load_documents
from .model import build_model
from .targets import get_target

__all__ = ["RenderResult", "render_runtime", "render_spec", "to_yaml"]


_SURROGATE_PAIR = re.compile(r"\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _yaml_escape(m: re.Match[str]) -> str:
    code = 0x10000 + ((int(m.group(1), 16) - 0xD800) << 10) + (int(m.group(2), 16) - 0xDC00)
    return f"\\U{code:08x}"


def yaml_value(value: Any) -> str:
    """Emit ``value`` as a JSON flow scalar/collection: valid YAML that no content can escape
    (``: ``, ``#``, quotes, newlines and ``{{ }}`` all end up inside a quoted string).

    JSON writes a character beyond U+FFFF as a surrogate pair (``\\ud800\\udc00``), which YAML
    refuses; it is written as YAML's ``\\U0001xxxx`` instead."""
    return _SURROGATE_PAIR.sub(_yaml_escape, json.dumps(value, ensure_ascii=True, separators=(", ", ": ")))


@functools.lru_cache(maxsize=1)
def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
        lstrip_blocks=False,
    )
    env.filters["y"] = yaml_value
    return env


@dataclasses.dataclass
class RenderResult:
    """The outcome of a render.

    Attributes:
        objects: the rendered Kubernetes objects (one PyTorchJob).
        text: the template's raw output (YAML with JSON flow values).
    """

    objects: list[dict[str, Any]]
    text: str


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """Deterministic block YAML for ``objects`` (``---``-separated, key order kept)."""
    return "---\n".join(yaml.safe_dump(o, sort_keys=False, default_flow_style=False, width=10_000) for o in objects)


#: The spec fields that pass settings into the pod; when a rendered job fails its guardrails,
#: these are the suspects, tried one at a time (the patch first: it can change anything).
SUSPECTS = (
    "podTemplatePatch", "env", "envFrom", "volumes", "volumeMounts", "resources", "containerSecurityContext",
    "securityContext", "initContainers", "sidecars", "hostNetwork", "affinity", "topologySpreadConstraints",
    "tolerations", "nodeSelector", "podLabels", "podAnnotations",
)


def _render_text(template: str, context: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    try:
        text = _environment().get_template(template).render(**context)
    except jinja2.TemplateError as exc:
        raise K8sddpError(f"template {template} failed: {exc}") from exc
    docs, problems = load_documents(text)
    if problems:
        raise K8sddpError(f"template {template} produced invalid YAML: {problems[0].message} (line {problems[0].line})")
    return [d.data for d in docs if d.data is not None], text


def _failing(objects: list[dict[str, Any]], companions: list[dict[str, Any]]) -> list[Finding]:
    """The strict findings of ``objects``, validated with ``companions`` (objects they refer to)
    in the input; findings of the companions themselves are left out."""
    report = validate_objects([*companions, *objects], file="<rendered>", profile="strict")
    return [f for f in report.failing() if f.document >= len(companions)]


def _render_target(spec: dict[str, Any], target: str) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]]:
    chosen = get_target(target)
    model = build_model(spec)
    objects, text = _render_text(chosen.template, chosen.context(spec, model))
    return objects, text, chosen.companions()


def _passes_without(spec: dict[str, Any], fields: list[str], target: str) -> bool:
    trial = copy.deepcopy(spec)
    for field in fields:
        del trial["spec"][field]
    try:
        objects, _, companions = _render_target(trial, target)
    except K8sddpError:
        return False
    return not _failing(objects, companions)


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
    failing = _failing(objects, companions)
    if failing:
        details = "; ".join(f"{f.rule_id} {f.path}: {f.message}" for f in failing)
        field = _culprit(spec, target)
        if field is not None:
            raise SpecError(f"the rendered {objects[0].get('kind', 'job') if objects else 'job'} would fail its guardrails because of spec.{field}: {details}",
                            path=f"spec.{field.split(',')[0]}")
        raise ValidationError(f"the rendered manifest fails its own guardrails: {details}", failing)
    return RenderResult(objects=objects, text=text)


def render_runtime(**options: Any) -> RenderResult:
    """The guarded ClusterTrainingRuntime (:func:`k8sddp.render.trainer.runtime_context` names the
    options), checked under ``strict``.

    Raises:
        SpecError: an unusable option.
        ValidationError: the output fails its own check (a k8sddp bug).
    """
    from .trainer import runtime_context

    objects, text = _render_text("clustertrainingruntime.yaml.j2", runtime_context(**options))
    failing = _failing(objects, [])
    if failing:
        details = "; ".join(f"{f.rule_id} {f.path}: {f.message}" for f in failing)
        raise ValidationError(f"the rendered runtime fails its own guardrails: {details}", failing)
    return RenderResult(objects=objects, text=text)
