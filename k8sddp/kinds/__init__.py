"""Workload kinds: one module per kind, and the wrappers that hold them.

``validate``, the admission webhook and ``submit`` never test ``kind == ...`` themselves: they ask
the registry. An object's ``(API group, kind)`` finds

- a :class:`Kind` (:func:`lookup`): it is checked (``Kind.check``) and counted as checked; a
  version of the group that the kind does not serve is KDP101;
- else a :class:`Wrapper` (:func:`lookup_wrapper`, by exact ``apiVersion``): the objects it holds
  are checked the same way (recursively), their findings placed at the wrapper's file and line
  with a JSON path through it;
- a DDPJob spec (:mod:`.ddpjob`) is such a wrapper: its schema is checked (KDP012) and the
  PyTorchJob it renders to is checked as an inner object (the render package registers it with
  the render function: :mod:`k8sddp.render.specwrapper`);
- else nothing: the object is skipped and counted by :func:`skip_label` (a kind name that a
  registered kind has in another group is counted with its group, ``PyTorchJob (training.kubedl.io)``).

Every check receives a :class:`CheckContext`: the profile, the object's namespace and an
:class:`~k8sddp.validate.objindex.ObjectIndex` of the whole input (ConfigMaps, and the objects of
the kinds in ``Kind.references``), so a kind can resolve references to other objects.

To add a kind: write ``k8sddp/kinds/<kind>.py`` with a :class:`Kind` subclass that sets ``group``,
``kind``, ``versions``, ``references`` and ``status``, implements ``check_structure`` (its CRD
schema), ``pod_templates`` (a :class:`PodTemplateView` per pod template, with the training
container resolved), ``effective_env`` and ``check_guardrails``; register an instance with
:func:`register` at module level, and import the module below. ``check_guardrails`` should hand
each training container's effective env to
:func:`k8sddp.validate.envchecks.check_env_settings` (blocking wait, operator-set names,
unread names, literal credentials: KDP213, KDP215-KDP217; the names the kind's controller sets
go in ``operator_env``), and call :func:`~k8sddp.validate.envchecks.check_template_restart_policy`
where the controller overwrites the pod template's ``restartPolicy`` (KDP214); unrendered
template text is reported by the engine for every kind (:mod:`k8sddp.validate.templates`). A new wrapper layout: a
:class:`Wrapper` subclass in :mod:`.wrappers`, registered with :func:`register_wrapper`.
"""

from __future__ import annotations

from .base import CheckContext, Kind, PodTemplateView, StatusModel, StatusReading
from .pytorchjob import PYTORCHJOB, PyTorchJobKind  # (importing a kind module registers it)
from .ray import RAYCLUSTER, RAYCRONJOB, RAYJOB, RAYSERVICE, RayKind
from .registry import (
    job_kinds,
    kinds,
    lookup,
    lookup_wrapper,
    referenced_kinds,
    register,
    register_wrapper,
    skip_label,
)
from .trainingruntime import (
    CLUSTER_TRAINING_RUNTIME,
    TRAINING_RUNTIME,
    ClusterTrainingRuntimeKind,
    TrainingRuntimeKind,
)
from .trainjob import TRAINJOB, MisgroupedTrainerKind, TrainJobKind
from .wrappers import Inner, Unwrapped, Wrapper, placeholder_filter

__all__ = [
    "CLUSTER_TRAINING_RUNTIME",
    "CheckContext",
    "ClusterTrainingRuntimeKind",
    "Inner",
    "Kind",
    "MisgroupedTrainerKind",
    "PYTORCHJOB",
    "PodTemplateView",
    "PyTorchJobKind",
    "RAYCLUSTER",
    "RAYCRONJOB",
    "RAYJOB",
    "RAYSERVICE",
    "RayKind",
    "StatusModel",
    "StatusReading",
    "TRAINING_RUNTIME",
    "TRAINJOB",
    "TrainJobKind",
    "TrainingRuntimeKind",
    "Unwrapped",
    "Wrapper",
    "job_kinds",
    "kinds",
    "lookup",
    "lookup_wrapper",
    "placeholder_filter",
    "referenced_kinds",
    "register",
    "register_wrapper",
    "skip_label",
]
