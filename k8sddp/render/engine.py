"""Render a DDPJob spec into a PyTorchJob: sandboxed Jinja, YAML-safe values, self-validated output."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any

import jinja2
import yaml
from jinja2.sandbox import SandboxedEnvironment

from ..errors import K8sddpError, ValidationError
from ..resources import templates_dir
from ..validate import validate_objects
from ..validate.yamlio import load_documents
from .model import build_model
from .raymodel import build_ray_model

__all__ = ["RenderResult", "TARGETS", "Target", "render_spec", "to_yaml"]

TEMPLATE = "pytorchjob.yaml.j2"


@dataclasses.dataclass(frozen=True)
class Target:
    """One ``render --target``: its template and the model function that fills it."""

    template: str
    build: Callable[[dict[str, Any]], dict[str, Any]]


def _pytorchjob_context(spec: dict[str, Any]) -> dict[str, Any]:
    model = build_model(spec)
    return {**model, "pod_spec": model["pod"]}


#: ``render --target`` name -> template and model (one entry per kind k8sddp renders).
TARGETS: dict[str, Target] = {
    "pytorchjob": Target(TEMPLATE, _pytorchjob_context),
    "rayjob": Target("rayjob.yaml.j2", build_ray_model),
    "raycluster": Target("raycluster.yaml.j2", build_ray_model),
}


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


def render_spec(spec: dict[str, Any], target: str = "pytorchjob") -> RenderResult:
    """Render a checked DDPJob spec (see :func:`k8sddp.render.load_spec`) as ``target`` (:data:`TARGETS`).

    The output is parsed back and must pass structure and the ``strict`` profile before it is
    returned: a template or model bug can never ship an unguarded manifest.

    Raises:
        SpecError: inconsistent spec (see :func:`k8sddp.render.model.build_model`).
        ValidationError: the rendered manifest failed its own check (a k8sddp bug; findings attached).
        K8sddpError: the template failed to render.
    """
    chosen = TARGETS[target]
    context = chosen.build(spec)
    try:
        text = _environment().get_template(chosen.template).render(**context)
    except jinja2.TemplateError as exc:
        raise K8sddpError(f"template {chosen.template} failed: {exc}") from exc
    docs, problems = load_documents(text)
    if problems:
        raise K8sddpError(f"template {chosen.template} produced invalid YAML: {problems[0].message} (line {problems[0].line})")
    objects = [d.data for d in docs if d.data is not None]
    report = validate_objects(objects, file="<rendered>", profile="strict")
    failing = report.failing()
    if failing:
        details = "; ".join(f"{f.rule_id} {f.path}: {f.message}" for f in failing)
        raise ValidationError(f"the rendered manifest fails its own guardrails: {details}", failing)
    return RenderResult(objects=objects, text=text)
