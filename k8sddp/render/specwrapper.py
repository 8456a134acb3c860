"""Registers k8sddp's DDPJob spec as a wrapper that ``validate`` unwraps by rendering it
(:class:`k8sddp.kinds.ddpjob.DDPJobSpec`, given :func:`k8sddp.render.render_spec`).

The registration lives here, with the render function, because rendering self-checks through
the validate engine, which finds wrappers through the kinds registry: the kinds package cannot
import render. ``k8sddp/render/__init__.py`` imports this module, and ``k8sddp/validate/__init__.py``
imports the render package, so the wrapper is registered before anything is validated.
"""

from __future__ import annotations

from ..kinds.ddpjob import DDPJobSpec
from ..kinds.registry import register_wrapper
from .engine import render_spec

__all__ = ["DDPJOB"]

#: The registered instance.
DDPJOB = register_wrapper(DDPJobSpec(render_spec))
