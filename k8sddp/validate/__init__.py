"""Validate workload manifests: structure (layer 1) and guardrail profiles (layer 2).

Which objects are checked, and how, is asked of the kinds registry (:mod:`k8sddp.kinds`): the
PyTorchJob today, and the jobs inside the wrappers it knows (AppWrapper, Katib Experiment).

Public API::

    validate_paths(paths, *, profile="baseline", config=None, jobs=None) -> Report
    validate_text(text, *, file="<stdin>", profile="baseline", config=None) -> Report
    validate_objects(objects, *, file="<input>", profile="baseline", configmaps=(), namespace=None) -> Report
    load_config(path) -> Config

Rules: :mod:`k8sddp.catalogue`; schemas: ``schemas/pytorchjob.{structure,baseline,strict}.json``.
"""

from __future__ import annotations

# (the render package registers the DDPJob wrapper, which validates a spec by rendering it:
# k8sddp/render/specwrapper.py; render imports the engine below, never this package's names)
from .. import render as _render  # noqa: F401
from ..findings import Report
from .engine import check_profile, check_text, expand_paths, validate_objects, validate_paths
from .exemptions import Config, load_config

__all__ = ["Config", "expand_paths", "load_config", "validate_objects", "validate_paths", "validate_text"]


def validate_text(text: str, *, file: str = "<stdin>", profile: str = "baseline", config: Config | None = None) -> Report:
    """Validate one manifest text (YAML documents, or JSON when ``file`` ends in ``.json``).

    Raises:
        UsageError: unknown profile.
    """
    check_profile(profile)
    return check_text(text, file=file, profile=profile, config=config)
