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
from ..validate.envchecks import check_env_settings, check_template_restart_policy
from ..validate.envresolve import EnvValue, effective_env
from ..validate.jobparts import MAPPING, get, pytorch_container, replicas
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
        replicas=("master", "worker"),
        log_replica="master",
        replica_status="replicaStatuses",
    )
    submit_role: ClassVar[str] = "job"
    local_runner: ClassVar[str] = "operator"

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

    def operator_env(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """The variables the v1 operator adds to the pytorch container of ``obj``, each with when
        it does (kubeflow trainer v1.9.4 pkg/controller.v1/pytorch/envvar.go ``setPodEnv``,
        master.go, elastic.go; ``nprocPerNode`` defaults to ``auto``, pytorch_defaults.go, so
        PET_NPROC_PER_NODE is always set). A ``*`` key is a prefix."""
        out = {"PET_NNODES": "the operator always sets it", "PET_NPROC_PER_NODE": "the operator always sets it (from spec.nprocPerNode)"}
        if isinstance(get(obj, "spec", "pytorchReplicaSpecs", "Master"), MAPPING):
            why = "the operator sets it when the job has a Master"
            for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NODE_RANK"):
                out[name] = why
        if isinstance(get(obj, "spec", "elasticPolicy"), MAPPING):
            why = "the operator sets it for an elastic job (spec.elasticPolicy)"
            out.update({"PET_RDZV_*": why, "PET_MAX_RESTARTS": why, "PET_STANDALONE": why})
        return out

    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """KDP2xx (and KDP3xx under strict): :func:`k8sddp.validate.checks.check_guardrails`, then
        the settings that void or override them (:mod:`k8sddp.validate.envchecks`)."""
        findings = checks.check_guardrails(obj, ctx.profile, ctx.objects, ctx.namespace)
        operator_env = self.operator_env(obj)
        for view in self.pod_templates(obj, ctx):
            findings += check_template_restart_policy(
                view.template, view.path, f"replica {view.group}", f"spec.pytorchReplicaSpecs.{view.group}.restartPolicy"
            )
            if view.container is None or view.container_path is None:
                continue
            env = self.effective_env(obj, view, ctx)
            findings += check_env_settings(env, view.container, view.container_path, f"replica {view.group}, container pytorch", operator_env=operator_env)
        return findings


#: The registered instance.
PYTORCHJOB = register(PyTorchJobKind())
