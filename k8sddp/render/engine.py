"""Render a DDPJob spec for a target (a PyTorchJob, a TrainJob) and the guarded training runtime:
sandboxed Jinja, YAML-safe values, self-validated output."""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

import jinja2
import yaml
from jinja2.sandbox import SandboxedEnvironment

from ..errors import K8sddpError, ValidationError
from ..resources import templates_dir
from ..validate import validate_objects
from ..validate.yamlio import load_documents
from .model import build_model
from .targets import get_target

__all__ = ["RenderResult", "render_runtime", "render_spec", "to_yaml"]


def yaml_value(value: Any) -> str:
    """Emit ``value`` as a JSON flow scalar/collection: valid YAML that no content can escape
    (``: ``, ``#``, quotes, newlines and ``{{ }}`` all end up inside a quoted string)."""
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": "))


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


def _render(template: str, context: dict[str, Any], companions: list[dict[str, Any]]) -> RenderResult:
    """Render ``template`` and check the output (structure and ``strict``), with ``companions``
    (objects it refers to) in the input but not in the result."""
    try:
        text = _environment().get_template(template).render(**context)
    except jinja2.TemplateError as exc:
        raise K8sddpError(f"template {template} failed: {exc}") from exc
    docs, problems = load_documents(text)
    if problems:
        raise K8sddpError(f"template {template} produced invalid YAML: {problems[0].message} (line {problems[0].line})")
    objects = [d.data for d in docs if d.data is not None]
    report = validate_objects([*companions, *objects], file="<rendered>", profile="strict")
    failing = [f for f in report.failing() if f.document >= len(companions)]
    if failing:
        details = "; ".join(f"{f.rule_id} {f.path}: {f.message}" for f in failing)
        raise ValidationError(f"the rendered manifest fails its own guardrails: {details}", failing)
    return RenderResult(objects=objects, text=text)


def render_spec(spec: dict[str, Any], target: str = "pytorchjob") -> RenderResult:
    """Render a checked DDPJob spec (see :func:`k8sddp.render.load_spec`) for ``target``
    (:data:`k8sddp.render.targets.TARGETS`: ``pytorchjob``, ``trainjob``).

    The output is parsed back and must pass structure and the ``strict`` profile before it is
    returned (a TrainJob together with the runtime it refers to): a template or model bug can
    never ship an unguarded manifest.

    Raises:
        UsageError: unknown target.
        SpecError: inconsistent spec (see :func:`k8sddp.render.model.build_model`), or one the
            target cannot express.
        ValidationError: the rendered manifest failed its own check (a k8sddp bug; findings attached).
        K8sddpError: the template failed to render.
    """
    chosen = get_target(target)
    model = build_model(spec)
    return _render(chosen.template, chosen.context(spec, model), chosen.companions())


def render_runtime(**options: Any) -> RenderResult:
    """The guarded ClusterTrainingRuntime (:func:`k8sddp.render.trainer.runtime_context` names the
    options), checked under ``strict``.

    Raises:
        SpecError: an unusable option.
        ValidationError: the output fails its own check (a k8sddp bug).
    """
    from .trainer import runtime_context

    return _render("clustertrainingruntime.yaml.j2", runtime_context(**options), [])
