"""Kubeflow Trainer v2.3.0 ``TrainingRuntime`` and ``ClusterTrainingRuntime`` (``trainer.kubeflow.org/v1alpha1``).

Structure: ``schemas/trainingruntime.structure.json`` (generated from the v2.3.0 CRDs) and KDP134
(a trainer Job with a ``node`` container, where the controller puts a TrainJob's overrides);
pod templates: ``spec.template.spec.replicatedJobs[].template.spec.template``; training container:
the ``node`` container of the trainer Job (:mod:`.trainermerge`); guardrails: the PyTorchJob's
container rules (:func:`k8sddp.validate.checks.container_guard_findings`,
:func:`k8sddp.validate.strictchecks.pod_volume_findings`) on that container, and under strict the
failure policy (:mod:`.trainerpolicy`, KDP340).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..schemagen_trainer import RESERVED_ENV, TRAINER_GROUP, TRAINER_VERSION
from ..validate import checks
from ..validate.envchecks import check_env_settings
from ..validate.envresolve import EnvValue, effective_env
from ..validate.jobparts import MAPPING, as_list, get
from ..validate.rawfinding import RawFinding, json_path
from ..validate.strictchecks import pod_volume_findings
from .base import CheckContext, Kind, PodTemplateView, StatusModel
from .registry import register
from .trainermerge import ANCESTOR_LABEL, ANCESTOR_TRAINER, NODE, node_container, trainer_job
from .trainerpolicy import failure_policy_problems

__all__ = [
    "CLUSTER_TRAINING_RUNTIME",
    "ClusterTrainingRuntimeKind",
    "TRAINING_RUNTIME",
    "TrainingRuntimeKind",
    "guard_findings",
    "short",
    "structure_message",
]

#: The variables the Trainer controller writes into the ``node`` container over the runtime's own
#: (v2.3.0 pkg/runtime/framework/plugins/torch/torch.go ``EnforceMLPolicy`` upserts the ``PET_*``
#: env; PET_MASTER_ADDR/PORT except for the torchtune entrypoint): KDP215 when a runtime sets them.
TRAINER_ENV: dict[str, str] = {name: "the Trainer controller's torch plugin sets it in the node container" for name in RESERVED_ENV}
#: Path from a runtime's root to its JobSet spec.
JOBSET_SPEC = ("spec", "template", "spec")


def short(text: str, limit: int = 160) -> str:
    """``text`` cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def structure_message(kind: str) -> Any:
    """The message function of the Trainer structure findings of ``kind`` (for :func:`k8sddp.validate.checks.schema_findings`)."""

    def message(rule_id: str, path: tuple[Any, ...], raw: str, instance: Any = None) -> str:
        text = short(raw)
        if rule_id == "KDP102":
            return f"metadata the API server refuses: {text}"
        if "Additional properties" in raw:
            return f"not accepted by the {kind} CRD (Trainer v2.3.0): {text} (the API server prunes unknown fields silently, so the setting would be lost)"
        if path[-2:] == ("metadata", "name"):
            return f"{kind} name must be a DNS-1035 label of at most 63 characters (the CRD's CEL rule): {text}"
        return f"not accepted by the {kind} CRD (Trainer v2.3.0): {text}"

    return message


def guard_findings(
    container: Mapping[str, Any], pod: Mapping[str, Any], env: dict[str, EnvValue], profile: str, who: str
) -> list[tuple[str, str, str]]:
    """The guard rules a trainer ``node`` container fails: ``(rule id, container field, message)``.

    ``container`` is the container as it will run (a TrainJob's merged one, or a runtime's own),
    ``pod`` its pod spec, ``env`` its effective environment; the container field is ``env`` or
    ``volumeMounts`` (where the fix goes).
    """
    out = [(rule_id, "volumeMounts" if rule_id == "KDP307" else "env", message) for rule_id, message in checks.container_guard_findings(container, env, profile, who)]
    if profile == "strict":
        seen = frozenset(rule_id for rule_id, _, _ in out)
        out += [(r, field, who + m) for r, field, m in pod_volume_findings(pod, container, env, seen)]
    return out


class _RuntimeKind(Kind):
    """What the two runtime kinds share (their CRDs' schemas are the same)."""

    group: ClassVar[str] = TRAINER_GROUP
    versions: ClassVar[tuple[str, ...]] = (TRAINER_VERSION,)
    submit_role: ClassVar[str] = "runtime"

    def check_api_version(self, obj: Mapping[str, Any]) -> RawFinding | None:
        """KDP130 for a version of ``trainer.kubeflow.org`` that is not served."""
        wrong = super().check_api_version(obj)
        return RawFinding("KDP130", wrong.path, wrong.message) if wrong is not None else None

    def check_structure(self, obj: Mapping[str, Any]) -> list[RawFinding]:
        """KDP130/KDP102 (the CRD) and KDP134 (the trainer Job and its ``node`` container)."""
        findings = checks.schema_findings("trainingruntime.structure.json", obj, structure_message(self.kind), "KDP130")
        spec = get(obj, *JOBSET_SPEC)
        if not isinstance(spec, MAPPING) or any(f.path[: len(JOBSET_SPEC) + 1] == (*JOBSET_SPEC, "replicatedJobs") for f in findings):
            return findings
        found = trainer_job(spec)
        if found is None:
            findings.append(
                RawFinding(
                    "KDP134",
                    (*JOBSET_SPEC, "replicatedJobs") if "replicatedJobs" in spec else JOBSET_SPEC,
                    f"no replicatedJob is labelled {ANCESTOR_LABEL}: {ANCESTOR_TRAINER} (in template.metadata.labels): "
                    "a TrainJob's image, command, env and resourcesPerNode, and the PET_* rendezvous env, go nowhere",
                )
            )
        elif node_container(get(found[1], "template", "spec", "template", "spec")) is None:
            findings.append(
                RawFinding(
                    "KDP134",
                    (*JOBSET_SPEC, "replicatedJobs", found[0], "template", "spec", "template", "spec"),
                    f"the trainer Job {found[1].get('name')!r} has no container named {NODE!r}: a TrainJob's image, command, env and "
                    "resourcesPerNode, and the PET_* rendezvous env, go nowhere",
                )
            )
        return findings

    def pod_templates(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[PodTemplateView]:
        """One view per ``replicatedJobs`` entry with a pod template; the training container is the
        trainer Job's ``node`` container (``None`` for the other Jobs: initializers, launchers)."""
        views = []
        found = trainer_job(get(obj, *JOBSET_SPEC))
        for i, rjob in enumerate(as_list(get(obj, *JOBSET_SPEC, "replicatedJobs"))):
            template = get(rjob, "template", "spec", "template")
            if not isinstance(template, MAPPING):
                continue
            node = node_container(template.get("spec")) if found is not None and found[0] == i else None
            path = (*JOBSET_SPEC, "replicatedJobs", i, "template", "spec", "template")
            views.append(PodTemplateView(str(get(rjob, "name")), path, template, node[0] if node else None, node[1] if node else None))
        return views

    def effective_env(self, obj: Mapping[str, Any], view: PodTemplateView, ctx: CheckContext) -> dict[str, EnvValue]:
        """The kubelet's resolution of the ``node`` container's env (before any TrainJob adds to it)."""
        return effective_env(view.container, ctx.namespace, ctx.objects) if view.container is not None else {}

    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """The guard rules on the trainer ``node`` container, the settings that void them
        (KDP213, KDP215-KDP217: :func:`k8sddp.validate.envchecks.check_env_settings`), and under
        strict KDP340 (the failure policy)."""
        findings = []
        for view in self.pod_templates(obj, ctx):
            if view.container is None or view.container_path is None:
                continue
            who = f"replicatedJob {view.group}, container {NODE}: "
            env = self.effective_env(obj, view, ctx)
            for rule_id, field, message in guard_findings(view.container, view.pod_spec, env, ctx.profile, who):
                path = (*view.container_path, field) if field in view.container else view.container_path
                findings.append(RawFinding(rule_id, path, f"{message} (set it here for every TrainJob of this runtime, or in each TrainJob's spec.trainer.env)"))
            findings += check_env_settings(env, view.container, view.container_path, f"replicatedJob {view.group}, container {NODE}", operator_env=TRAINER_ENV)
        if ctx.profile == "strict":
            spec = get(obj, *JOBSET_SPEC)
            for sub, what in failure_policy_problems(spec):
                path = (*JOBSET_SPEC, *sub) if isinstance(spec, MAPPING) else ("spec",)
                findings.append(RawFinding("KDP340", path, f"{what} (at {json_path(path) or 'the runtime'}; `k8sddp runtime render` writes the whole policy)"))
        return findings


def _status(plural: str, *, namespaced: bool) -> StatusModel:
    return StatusModel(plural=plural, version=TRAINER_VERSION, condition_types=(), final_conditions=frozenset(), pod_labels={},
                       container=NODE, namespaced=namespaced)


class TrainingRuntimeKind(_RuntimeKind):
    """A namespaced training runtime: a TrainJob of the same namespace refers to it."""

    kind: ClassVar[str] = "TrainingRuntime"
    status: ClassVar[StatusModel] = _status("trainingruntimes", namespaced=True)


class ClusterTrainingRuntimeKind(_RuntimeKind):
    """A cluster-scoped training runtime (the stock ``torch-distributed`` is one)."""

    kind: ClassVar[str] = "ClusterTrainingRuntime"
    status: ClassVar[StatusModel] = _status("clustertrainingruntimes", namespaced=False)


#: The registered instances.
TRAINING_RUNTIME = register(TrainingRuntimeKind())
CLUSTER_TRAINING_RUNTIME = register(ClusterTrainingRuntimeKind())
