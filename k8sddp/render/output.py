"""What every render shares: the sandboxed Jinja environment over ``templates/`` with YAML-safe
values, the parse of its output back into objects, and the strict self-check of what was
rendered (:func:`failing_findings`, through the validate engine).

Both the spec renders (:mod:`k8sddp.render.engine`) and the runtime render
(:func:`k8sddp.render.trainer.render_runtime`, which the ``trainjob`` target's companions use)
build on this module, so neither imports the other.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import Any

import jinja2
import yaml
from jinja2.sandbox import SandboxedEnvironment

from ..errors import K8sddpError
from ..findings import Finding
from ..resources import templates_dir
from ..validate.engine import validate_objects
from ..validate.yamlio import load_documents

__all__ = ["RenderResult", "failing_findings", "render_text", "to_yaml", "yaml_value"]


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


def render_text(template: str, context: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Render ``template`` (a file in ``templates/``) with ``context``; the objects it produced and
    its text.

    Raises:
        K8sddpError: the template failed, or produced invalid YAML (a k8sddp bug).
    """
    try:
        text = _environment().get_template(template).render(**context)
    except jinja2.TemplateError as exc:
        raise K8sddpError(f"template {template} failed: {exc}") from exc
    docs, problems = load_documents(text)
    if problems:
        raise K8sddpError(f"template {template} produced invalid YAML: {problems[0].message} (line {problems[0].line})")
    return [d.data for d in docs if d.data is not None], text


def failing_findings(objects: list[dict[str, Any]], companions: list[dict[str, Any]]) -> list[Finding]:
    """The strict findings of ``objects``, validated with ``companions`` (objects they refer to)
    in the input; findings of the companions themselves are left out."""
    report = validate_objects([*companions, *objects], file="<rendered>", profile="strict")
    return [f for f in report.failing() if f.document >= len(companions)]
