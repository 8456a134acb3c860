"""Render a short DDPJob spec into a guarded Kubeflow PyTorchJob or Trainer v2 TrainJob.

Public API::

    load_spec(source, *, sets=()) -> dict        read, override, check (SpecError located)
    render_spec(spec, target="pytorchjob")       .objects (dicts) and .text; targets: TARGETS
    render_runtime(**options) -> RenderResult    the guarded ClusterTrainingRuntime
    to_yaml(objects) -> str                      deterministic YAML
"""

from .engine import RenderResult, render_spec, to_yaml
from .spec import apply_sets, check_spec, load_spec
from .specwrapper import DDPJOB
from .targets import TARGETS, Target, register_target
from .trainer import render_runtime

__all__ = [
    "DDPJOB",
    "RenderResult",
    "TARGETS",
    "Target",
    "apply_sets",
    "check_spec",
    "load_spec",
    "register_target",
    "render_runtime",
    "render_spec",
    "to_yaml",
]
