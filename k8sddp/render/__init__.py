"""Render a short DDPJob spec into a guarded Kubeflow PyTorchJob.

Public API::

    load_spec(source, *, sets=()) -> dict        read, override, check (SpecError located)
    render_spec(spec) -> RenderResult            .objects (dicts) and .text
    to_yaml(objects) -> str                      deterministic YAML
"""

from .engine import RenderResult, render_spec, to_yaml
from .spec import apply_sets, check_spec, load_spec

__all__ = ["RenderResult", "apply_sets", "check_spec", "load_spec", "render_spec", "to_yaml"]
