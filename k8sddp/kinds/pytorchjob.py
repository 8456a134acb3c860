"""Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``, training-operator / kubeflow trainer v1.9).

Structure: ``schemas/pytorchjob.structure.json`` (generated from the CRD,
../shared/reference/kubeflow/kubeflow.org_pytorchjobs.yaml) plus the operator webhook's rules;
pod templates: ``spec.pytorchReplicaSpecs.<Master|Worker>.template``; training container: the one
named ``pytorch`` (the operator injects its env into that one only and reads its exit code);
environment: the kubelet's resolution (:func:`k8sddp.validate.envresolve.effective_env`);
guardrails: ``schemas/pytorchjob.{baseline,strict}.json`` and :mod:`k8sddp.validate.strictchecks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..validate import checks
from ..validate.envresolve import EnvValue, effective_env
from ..validate.jobparts import MAPPING, pytorch_container, replicas
from ..validate.rawfinding import RawFinding
from .base import CheckContext, Kind, PodTemplateView, StatusModel
from .registry import register

__all__ = ["PYTORCHJOB", "PyTorchJobKind"]


class PyTorchJobKind(Kind):
    """The Kubeflow PyTorchJob.

    Status (kubeflow.org/v1 JobStatus): conditions Created, Running, Restarting, Suspended,
    Succeeded, Failed; pods labelled ``training.kubeflow.org/job-name``, ``replica-type`` (lower
    case), ``replica-index`` (kubeflow trainer v1.9 pkg/controller.v1/common/pod.go).
    """

    group: ClassVar[str] = "kubeflow.org"
    kind: ClassVar[str] = "PyTorchJob"
    versions: ClassVar[tuple[str, ...]] = ("v1",)
    #: The name of the training container (KDP104).
    container_name: ClassVar[str] = "pytorch"
    status: ClassVar[StatusModel] = StatusModel(
        plural="pytorchjobs",
        version="v1",
        condition_types=("Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed"),
        final_conditions=frozenset({"Succeeded", "Failed"}),
        pod_labels={
            "job-name": "training.kubeflow.org/job-name",
            "replica-type": "training.kubeflow.org/replica-type",
            "replica-index": "training.kubeflow.org/replica-index",
        },
        container="pytorch",
    )

    def check_structure(self, obj: Mapping[str, Any]) -> list[RawFinding]:
        """KDP101-KDP107 (:func:`k8sddp.validate.checks.check_structure`)."""
        return checks.check_structure(obj)

    def pod_templates(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[PodTemplateView]:
        """One view per replica type whose ``template`` is a mapping; the training container is the
        first one named ``pytorch`` (a second one is KDP106)."""
        views = []
        for rtype, replica in replicas(obj):
            template = replica.get("template")
            if not isinstance(template, MAPPING):
                continue
            found = pytorch_container(replica)
            views.append(
                PodTemplateView(
                    rtype,
                    ("spec", "pytorchReplicaSpecs", rtype, "template"),
                    template,
                    found[0] if found else None,
                    found[1] if found else None,
                )
            )
        return views

    def effective_env(self, obj: Mapping[str, Any], view: PodTemplateView, ctx: CheckContext) -> dict[str, EnvValue]:
        """The kubelet's resolution of the ``pytorch`` container's ``env`` and ``envFrom`` (``{}`` without one)."""
        if view.container is None:
            return {}
        return effective_env(view.container, ctx.namespace, ctx.objects)

    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """KDP2xx (and KDP3xx under strict): :func:`k8sddp.validate.checks.check_guardrails`."""
        return checks.check_guardrails(obj, ctx.profile, ctx.objects, ctx.namespace)


#: The registered instance.
PYTORCHJOB = register(PyTorchJobKind())
