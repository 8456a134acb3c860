"""k8sddp's own ``DDPJob`` spec (``k8sddp.dev/v1alpha1``), given to ``validate`` (KDP012).

A DDPJob is not applied to a cluster: ``k8sddp render`` turns it into a PyTorchJob. So it is a
:class:`~k8sddp.kinds.wrappers.Wrapper` here, not a :class:`~k8sddp.kinds.Kind` (``submit`` and the
webhook never treat it as a workload): its schema (``schemas/ddpjob.schema.json``) is checked,
each problem a located KDP012; a spec that passes is rendered (:func:`k8sddp.render.render_spec`)
and the PyTorchJob it renders to is checked like any other, under the profile asked for. A spec
that the render model refuses (``elastic.minNodes`` above ``maxNodes``...) is one KDP012 at the
path the model names.

Rendering checks its output through the validate engine, and the engine reaches this wrapper
through the kinds registry: so the wrapper is given the render function rather than importing
it. The render package registers the instance (:data:`k8sddp.render.specwrapper.DDPJOB`), and
``k8sddp.validate`` imports the render package, so every validation knows DDPJob specs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jsonschema_rs

from ..errors import SpecError, ValidationError
from ..findings import RawFinding
from ..resources import load_schema
from ..validate.envchecks import hide_credential_values
from .base import CheckContext, Inner, Unwrapped, Wrapper

__all__ = ["DDPJobSpec"]

_SCHEMA = "ddpjob.schema.json"


@functools.cache
def _validator() -> Any:
    return jsonschema_rs.validator_for(load_schema(_SCHEMA))


def _path_of(dotted: str) -> tuple[Any, ...]:
    """``spec.env[0].value`` -> ``("spec", "env", 0, "value")`` (a render model error's path)."""
    out: list[Any] = []
    for part in dotted.replace("]", "").replace("[", ".").split("."):
        if part:
            out.append(int(part) if part.isdigit() else part)
    return tuple(out)


class DDPJobSpec(Wrapper):
    """``k8sddp.dev/v1alpha1`` DDPJob: schema, then render; holds the PyTorchJob it renders to.

    Args:
        render: :func:`k8sddp.render.render_spec` (a checked spec -> an object with ``.objects``,
            the rendered manifests as dicts); raises :class:`~k8sddp.errors.SpecError` for a spec
            it refuses and :class:`~k8sddp.errors.ValidationError` when its output fails its own check.
    """

    kind: ClassVar[str] = "DDPJob"
    api_versions: ClassVar[tuple[str, ...]] = ("k8sddp.dev/v1alpha1",)

    def __init__(self, render: Callable[[dict[str, Any]], Any]) -> None:
        self.render = render

    def unwrap(self, obj: Mapping[str, Any], ctx: CheckContext) -> Unwrapped:
        """KDP012 for every schema error (at its path); else the rendered objects, checked by the
        engine at the spec's root."""
        errors = sorted(_validator().iter_errors(obj), key=lambda e: [str(p) for p in e.instance_path])
        if errors:
            return Unwrapped(
                [],
                [
                    RawFinding("KDP012", tuple(e.instance_path),
                               hide_credential_values(obj, list(e.instance_path), f"not a valid DDPJob spec (schemas/{_SCHEMA}): {e.message}"))
                    for e in errors
                ],
            )
        try:
            rendered = self.render(dict(obj))
        except SpecError as exc:
            return Unwrapped([], [RawFinding("KDP012", _path_of(exc.path), f"`k8sddp render` refuses this spec: {exc.message}")])
        except ValidationError as exc:
            # The render's self-check failed: a k8sddp bug, reported rather than hidden.
            return Unwrapped([], [RawFinding("KDP012", (), f"the rendered PyTorchJob fails its own check (please report): {exc}")])
        return Unwrapped([Inner((), o) for o in rendered.objects])
