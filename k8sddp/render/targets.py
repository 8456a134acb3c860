"""What ``render --target`` can produce: one entry per target.

A :class:`Target` names its Jinja template and turns a checked DDPJob spec (and the PyTorchJob model
of :func:`k8sddp.render.model.build_model`, which holds every decision about guards, sizes and
volumes) into the template's context. ``companions`` are objects the output refers to and is
validated with but that are not written (a TrainJob's runtime). Add a target with
:func:`register_target`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from .trainer import render_runtime, trainjob_context

__all__ = ["TARGETS", "Target", "get_target", "no_companions", "register_target"]


def no_companions() -> list[dict[str, Any]]:
    """The companions of a target whose output stands alone: none."""
    return []


@dataclasses.dataclass(frozen=True)
class Target:
    """One render target.

    Attributes:
        name: the ``--target`` value.
        template: the template's file name in ``templates/``.
        context: ``(DDPJob spec, model) -> template context``; may raise
            :class:`~k8sddp.errors.SpecError` for what the target cannot express.
        companions: objects the output is validated with (``[]``: none).
    """

    name: str
    template: str
    context: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
    companions: Callable[[], list[dict[str, Any]]] = dataclasses.field(default_factory=lambda: no_companions)


TARGETS: dict[str, Target] = {}


def register_target(target: Target) -> Target:
    """Make ``target`` known under its name.

    Raises:
        ValueError: a target of that name exists.
    """
    if target.name in TARGETS:
        raise ValueError(f"render target {target.name!r} is registered twice")
    TARGETS[target.name] = target
    return target


def get_target(name: str) -> Target:
    """The target named ``name``.

    Raises:
        UsageError: no such target.
    """
    if name not in TARGETS:
        raise UsageError(f"unknown render target {name!r}; expected one of {', '.join(TARGETS)}")
    return TARGETS[name]


def _pytorchjob(ddp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    return model


def _trainjob(ddp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    return trainjob_context(ddp, model)


def _default_runtime() -> list[dict[str, Any]]:
    return render_runtime().objects


PYTORCHJOB = register_target(Target("pytorchjob", "pytorchjob.yaml.j2", _pytorchjob))
TRAINJOB = register_target(Target("trainjob", "trainjob.yaml.j2", _trainjob, _default_runtime))


def _ray(ddp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    from .raymodel import build_ray_model

    return build_ray_model(ddp, model)


RAYJOB = register_target(Target("rayjob", "rayjob.yaml.j2", _ray))
RAYCLUSTER = register_target(Target("raycluster", "raycluster.yaml.j2", _ray))
