"""Kubeflow Trainer v2.3.0 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``).

Structure: ``schemas/trainjob.structure.json`` (generated from the v2.3.0 CRD: KDP130, KDP102,
KDP132 removed fields, KDP133 reserved ``PET_*`` env, KDP136 runtimeRef), and against the runtime
the input holds: KDP134 (no trainer ``node`` container) and KDP135 (runtime patches the webhook
rejects). Guardrails: on the *effective* trainer container (:func:`.trainermerge.resolve`: the
runtime's ``node`` container, the runtime patches, then ``spec.trainer``), each finding placed
where it can be fixed: the ``spec.trainer.env`` entry that sets the value, else ``spec.runtimeRef``
(the runtime's container sets it or the mount is the runtime's), else ``spec.trainer.env``. A
runtime the input lacks is KDP230 (unverifiable, never a pass). Strict: KDP308 on
``spec.activeDeadlineSeconds``; KDP340 when the runtime lacks the failure policy; KDP309 when
``numProcPerNode``, ``--nproc-per-node`` and the GPU limit of the effective container disagree.

A TrainJob, TrainingRuntime or ClusterTrainingRuntime under ``kubeflow.org`` is KDP131
(:class:`MisgroupedTrainerKind`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from .. import guardvars as gv
from ..schemagen_trainer import REMOVED_FIELDS, TRAINER_GROUP, TRAINER_VERSION
from ..validate import checks, strictchecks
from ..validate.envchecks import check_env_settings
from ..validate.envresolve import EnvValue, effective_env
from ..validate.jobparts import MAPPING, as_list, get
from ..validate.rawfinding import RawFinding
from .base import CheckContext, Kind, PodTemplateView, StatusModel
from .registry import register
from .trainermerge import NODE, Resolved, job_controller_env, resolve, runtime_key
from .trainerpolicy import describe, failure_policy_problems
from .trainingruntime import guard_findings, short, structure_message

__all__ = ["MisgroupedTrainerKind", "TRAINJOB", "TrainJobKind"]

#: Containers whose env a runtime patch may not set (plugins/jobset/jobset.go Validate).
PATCH_ENV_FORBIDDEN = (NODE, "dataset-initializer", "model-initializer")
#: validation.IsDomainPrefixedPath: a DNS-1123 subdomain, "/", a non-empty path.
DOMAIN_PREFIXED_PATH = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-A-Za-z0-9_.~!$&'()*+,;=:@/%]+$")
#: The variables behind each guard rule, to find where a value comes from.
RULE_VARIABLES: dict[str, tuple[str, ...]] = {
    "KDP201": (gv.ASYNC_ERROR_HANDLING, gv.LEGACY_ASYNC_ERROR_HANDLING),
    "KDP202": (gv.FAULTHANDLER,),
    "KDP301": (gv.PG_TIMEOUT,),
    "KDP302": (gv.WATCHDOG_TIMEOUT,),
    "KDP303": (gv.MAX_HANG_RESTARTS,),
    "KDP304": (gv.FR_DUMP_TEMP_FILE,),
    "KDP305": (gv.ARTIFACT_DIR,),
    "KDP306": gv.SAFETY_NETS,
}


class TrainJobKind(Kind):
    """The Trainer v2 TrainJob.

    Status (v2.3.0 trainjob_types.go): conditions Suspended, Complete, Failed; pods are the
    JobSet's, labelled ``jobset.sigs.k8s.io/jobset-name`` (the TrainJob's name),
    ``jobset.sigs.k8s.io/replicatedjob-name`` and ``batch.kubernetes.io/job-completion-index``
    (the node rank); the training container is ``node``. The conditions are the JobSet's
    ``Completed``/``Failed`` copied with their reason and message (plugins/jobset/jobset.go
    ``Status``), ``jobsStatus`` the JobSet's ``replicatedJobsStatus``.
    """

    group: ClassVar[str] = TRAINER_GROUP
    kind: ClassVar[str] = "TrainJob"
    versions: ClassVar[tuple[str, ...]] = (TRAINER_VERSION,)
    references: ClassVar[tuple[tuple[str, str], ...]] = ((TRAINER_GROUP, "TrainingRuntime"), (TRAINER_GROUP, "ClusterTrainingRuntime"))
    status: ClassVar[StatusModel] = StatusModel(
        plural="trainjobs",
        version=TRAINER_VERSION,
        condition_types=("Suspended", "Complete", "Failed"),
        final_conditions=frozenset({"Complete", "Failed"}),
        pod_labels={
            "job-name": "jobset.sigs.k8s.io/jobset-name",
            "replica-type": "jobset.sigs.k8s.io/replicatedjob-name",
            "replica-index": "batch.kubernetes.io/job-completion-index",
        },
        container=NODE,
        # the replicatedJobs of the stock runtimes (v2.3.0 manifests/base/runtimes): the trainer
        # Job, the initializers, the MPI/DeepSpeed launcher; a runtime may name its own
        replicas=(NODE, "dataset-initializer", "model-initializer", "launcher"),
        open_replicas=True,
        log_replica=NODE,
        replica_status="jobsStatus",
    )
    submit_role: ClassVar[str] = "job"
    local_runner: ClassVar[str] = "jobset"

    def referenced_objects(self, obj: Mapping[str, Any], namespace: str | None) -> list[tuple[str, str, str | None, str]]:
        """The runtime of ``spec.runtimeRef`` (a ``TrainingRuntime`` in the TrainJob's namespace, a
        ``ClusterTrainingRuntime`` cluster-wide); none for another group or kind (KDP136) or no name."""
        group, kind, name = runtime_key(obj)
        if group != TRAINER_GROUP or kind not in ("TrainingRuntime", "ClusterTrainingRuntime") or not name:
            return []
        return [(group, kind, namespace if kind == "TrainingRuntime" else None, name)]

    def check_api_version(self, obj: Mapping[str, Any]) -> RawFinding | None:
        """KDP130 for a version of ``trainer.kubeflow.org`` that is not served."""
        wrong = super().check_api_version(obj)
        return RawFinding("KDP130", wrong.path, wrong.message) if wrong is not None else None

    def check_structure(self, obj: Mapping[str, Any]) -> list[RawFinding]:
        """KDP130, KDP102, KDP132, KDP133, KDP136 (the schema) and the runtime patches' managers (KDP135)."""
        message = structure_message(self.kind)

        def located(rule_id: str, path: tuple[Any, ...], raw: str, instance: Any = None) -> str:
            if rule_id == "KDP132":
                field = str(path[1]) if len(path) > 1 else "?"
                return f"spec.{field} was removed in Trainer v2.2 (the API server prunes it silently, so it never reaches the pods); use {REMOVED_FIELDS.get(field, 'runtimePatches')}"
            if rule_id == "KDP133":
                name = get(obj, *path)
                return f"spec.trainer.env sets {name!r}, which the torch plugin injects itself: the Trainer webhook rejects the TrainJob; remove it"
            if rule_id == "KDP136":
                return f"runtimeRef must name apiGroup {TRAINER_GROUP!r} and kind TrainingRuntime or ClusterTrainingRuntime: {short(raw)}"
            return message(rule_id, path, raw)

        findings = checks.schema_findings("trainjob.structure.json", obj, located, "KDP130")
        findings = [RawFinding(f.rule_id, f.path[:-1], f.message) if f.rule_id == "KDP133" and f.path[-1:] == ("name",) else f for f in findings]
        for i, patch in enumerate(as_list(get(obj, "spec", "runtimePatches"))):
            manager = get(patch, "manager")
            if isinstance(manager, str) and not DOMAIN_PREFIXED_PATH.match(manager):
                findings.append(RawFinding("KDP135", ("spec", "runtimePatches", i, "manager"), f"manager {manager!r} is not a domain-prefixed path (example.com/team): the Trainer webhook rejects it"))
        return findings

    def _resolved(self, obj: Mapping[str, Any], ctx: CheckContext) -> Resolved:
        return resolve(obj, ctx.objects, ctx.namespace)

    def pod_templates(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[PodTemplateView]:
        """One view: the runtime's trainer pod template (after the runtime patches) with the effective
        ``node`` container. The template is the runtime's, so ``path`` is ``spec.runtimeRef`` and
        ``container_index`` is ``None``; with the runtime missing, the template is empty and the
        container holds ``spec.trainer`` alone (its env still names the ConfigMaps it reads)."""
        resolved = self._resolved(obj, ctx)
        if resolved.container is None:
            return []
        return [PodTemplateView(NODE, ("spec", "runtimeRef"), {"spec": resolved.pod_spec}, None, resolved.container)]

    def effective_env(self, obj: Mapping[str, Any], view: PodTemplateView, ctx: CheckContext) -> dict[str, EnvValue]:
        """The kubelet's resolution of the effective ``node`` container (runtime env and envFrom,
        ``spec.trainer.env`` over them, the ``PET_*`` variables), with ``JOB_COMPLETION_INDEX``
        that the Job controller adds to the pods of an Indexed Job (:func:`.trainermerge.job_controller_env`)."""
        if view.container is None:
            return {}
        resolved = self._resolved(obj, ctx)
        container = view.container
        if resolved.runtime is not None and resolved.job_index is not None:
            rjobs = as_list(get(resolved.runtime, "spec", "template", "spec", "replicatedJobs"))
            job_spec = get(rjobs[resolved.job_index], "template", "spec") if resolved.job_index < len(rjobs) else None
            container = job_controller_env(container, job_spec)
        return effective_env(container, ctx.namespace, ctx.objects)

    def check(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """The API version, the structure, the checks against the runtime, the guardrails."""
        wrong = self.check_api_version(obj)
        if wrong is not None:
            return [wrong]
        structure = self.check_structure(obj)
        return structure + self._check_against_runtime(obj, ctx) + self.check_guardrails(obj, ctx)

    def _check_against_runtime(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """KDP135 (patches) and KDP134 (overrides with nowhere to go), against the runtime in the input."""
        findings: list[RawFinding] = []
        resolved = self._resolved(obj, ctx)
        if resolved.runtime is None:
            return findings
        rjobs = {get(r, "name"): r for r in as_list(get(resolved.runtime, "spec", "template", "spec", "replicatedJobs")) if isinstance(r, MAPPING)}
        for i, patch in enumerate(as_list(get(obj, "spec", "runtimePatches"))):
            for j, rpatch in enumerate(as_list(get(patch, "trainingRuntimeSpec", "template", "spec", "replicatedJobs"))):
                base = ("spec", "runtimePatches", i, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", j)
                name = get(rpatch, "name")
                if name not in rjobs:
                    findings.append(RawFinding("KDP135", (*base, "name"), f"{resolved.where} has no replicatedJob {name!r}: the Trainer webhook rejects the patch"))
                    continue
                have = {get(c, "name") for field in ("containers", "initContainers") for c in as_list(get(rjobs[name], "template", "spec", "template", "spec", field))}
                pod = ("template", "spec", "template", "spec")
                for field in ("containers", "initContainers"):
                    for k, c in enumerate(as_list(get(rpatch, *pod, field))):
                        cname = get(c, "name")
                        if cname not in have:
                            findings.append(RawFinding("KDP135", (*base, *pod, field, k), f"replicatedJob {name!r} of {resolved.where} has no container {cname!r}: the Trainer webhook rejects the patch"))
        for i, patch in enumerate(as_list(get(obj, "spec", "runtimePatches"))):
            for j, rpatch in enumerate(as_list(get(patch, "trainingRuntimeSpec", "template", "spec", "replicatedJobs"))):
                for k, c in enumerate(as_list(get(rpatch, "template", "spec", "template", "spec", "containers"))):
                    if get(c, "name") in PATCH_ENV_FORBIDDEN and as_list(get(c, "env")):
                        path = ("spec", "runtimePatches", i, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", j, "template", "spec", "template", "spec", "containers", k, "env")
                        findings.append(RawFinding("KDP135", path, f"a runtime patch may not set env of container {get(c, 'name')!r} (the Trainer webhook rejects it); put it in spec.trainer.env"))
        if resolved.container is None:
            findings.append(
                RawFinding(
                    "KDP134",
                    ("spec", "runtimeRef"),
                    f"{resolved.where} has no trainer Job with a {NODE!r} container: spec.trainer (image, command, env, resources) would be dropped, and the guards cannot reach the training process",
                )
            )
        return findings

    def _place(self, obj: Mapping[str, Any], resolved: Resolved, rule_id: str, field: str, ctx: CheckContext) -> tuple[tuple[Any, ...], str]:
        """Where a guard finding of the effective container is fixed, and the hint saying so."""
        names = RULE_VARIABLES.get(rule_id, ())
        trainer_env = as_list(get(obj, "spec", "trainer", "env"))
        if field == "env":
            for i, entry in enumerate(trainer_env):
                if get(entry, "name") in names:
                    return ("spec", "trainer", "env", i), "the value comes from spec.trainer.env"
            runtime_env = effective_env(resolved.runtime_container, ctx.namespace, ctx.objects) if resolved.runtime_container else {}
            if any(n in runtime_env for n in names):
                return ("spec", "runtimeRef"), f"the value comes from the {NODE} container of {resolved.where}: fix it there, or override it in spec.trainer.env"
            where = ("spec", "trainer", "env") if trainer_env else (("spec", "trainer") if isinstance(get(obj, "spec", "trainer"), MAPPING) else ("spec",))
            return where, f"neither the {NODE} container of {resolved.where} nor spec.trainer.env sets it: add it to the runtime (for every TrainJob) or to spec.trainer.env"
        return ("spec", "runtimeRef"), f"mount it in the {NODE} container of {resolved.where}, or add the volume and mount with a runtimePatch"

    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """The guard rules on the effective trainer container and the settings in ``spec.trainer.env``
        that void them (KDP213, KDP216, KDP217); KDP230 when the runtime is missing;
        under strict KDP308 (deadline), KDP340 (the runtime's failure policy) and KDP309 (process counts)."""
        resolved = self._resolved(obj, ctx)
        ref_path = ("spec", "runtimeRef") if isinstance(get(obj, "spec", "runtimeRef"), MAPPING) else ("spec",)
        if resolved.runtime is None:
            group, kind, name = runtime_key(obj)
            if not name:
                return []  # (layer 1: runtimeRef.name is required)
            searched = ctx.objects.searched(group, kind, ctx.namespace if kind == "TrainingRuntime" else None, name)
            if searched:
                where = f"{resolved.where} is in neither the input nor {searched}"
                fix = "install the runtime, or add its manifest to the input"
            else:
                where = f"{resolved.where} is not in the input{ctx.objects.elsewhere_object(group, kind, ctx.namespace, name) if kind == 'TrainingRuntime' else ''}"
                fix = "add the runtime's manifest to the input (or validate against the cluster: validate --cluster)"
            return [RawFinding("KDP230", ref_path, f"{where}: the trainer container's guards cannot be verified; {fix}")]
        findings: list[RawFinding] = []
        if resolved.container is not None:
            env = effective_env(resolved.container, ctx.namespace, ctx.objects)
            who = f"TrainJob trainer ({resolved.where}, container {NODE}): "
            for rule_id, field, message in guard_findings(resolved.container, resolved.pod_spec, env, ctx.profile, who):
                path, hint = self._place(obj, resolved, rule_id, field, ctx)
                findings.append(RawFinding(rule_id, path, f"{message} ({hint})"))
            trainer = get(obj, "spec", "trainer")
            if isinstance(trainer, MAPPING):
                # judged on the effective env, reported only where spec.trainer.env sets the value
                # (the runtime's own settings are the runtime's findings; PET_* there is KDP133)
                settings = check_env_settings(env, trainer, ("spec", "trainer"), "TrainJob trainer, container node")
                findings += [f for f in settings if f.path[:3] == ("spec", "trainer", "env") and f.rule_id != "KDP215"]
        if ctx.profile == "strict":
            deadline = get(obj, "spec", "activeDeadlineSeconds")
            if not isinstance(deadline, int) or isinstance(deadline, bool) or deadline < 1:
                findings.append(
                    RawFinding("KDP308", ("spec", "activeDeadlineSeconds") if deadline is not None else ("spec",),
                               "spec.activeDeadlineSeconds is not set (or not a positive integer); the JobSet restarts retryable failures, and a deadline is the only bound on the time they take")
                )
            problems = failure_policy_problems(get(resolved.runtime, "spec", "template", "spec"))
            if problems and resolved.container is not None:
                findings.append(RawFinding("KDP340", ref_path, f"{resolved.where} lacks the exit-code failure policy: {describe(problems)}"))
            if resolved.container is not None:
                findings.extend(self._check_sizes(obj, resolved))
        return findings

    def _check_sizes(self, obj: Mapping[str, Any], resolved: Resolved) -> list[RawFinding]:
        """Strict KDP309 on the effective ``node`` container: ``spec.trainer.numProcPerNode`` (the
        value of ``PET_NPROC_PER_NODE``; unset is ``auto``, one process per GPU), torchrun's
        ``--nproc-per-node`` in the effective command (it wins over the variable), and the GPU limit
        (``resourcesPerNode`` over the runtime's). Placed on ``spec.trainer.numProcPerNode`` when set,
        else on the field that brings the disagreeing count."""
        assert resolved.container is not None
        nproc = get(obj, "spec", "trainer", "numProcPerNode")
        facts = strictchecks.size_facts(str(nproc) if nproc is not None else None, resolved.container)
        said = strictchecks.disagreement(facts)
        if said is None:
            return []
        said = said.replace("nprocPerNode", "numProcPerNode")
        trainer = get(obj, "spec", "trainer")
        if nproc is not None:
            path: tuple[Any, ...] = ("spec", "trainer", "numProcPerNode")
        elif isinstance(get(trainer, "resourcesPerNode"), MAPPING):
            path = ("spec", "trainer", "resourcesPerNode")
        elif isinstance(get(trainer, "command"), list) or isinstance(get(trainer, "args"), list):
            path = ("spec", "trainer", "command" if isinstance(get(trainer, "command"), list) else "args")
        else:
            path = ("spec", "runtimeRef")
        return [RawFinding("KDP309", path, f"TrainJob trainer ({resolved.where}, container {NODE}): process counts disagree ({said}); they must be equal, one process per GPU")]


class MisgroupedTrainerKind(Kind):
    """A Trainer v2 kind under ``kubeflow.org`` (the v1 training operator's group): KDP131."""

    group: ClassVar[str] = "kubeflow.org"
    versions: ClassVar[tuple[str, ...]] = ()
    status: ClassVar[StatusModel] = TrainJobKind.status

    def __init__(self, kind: str) -> None:
        # One instance per Trainer kind name: the class attribute of the other kinds is an
        # instance attribute here.
        self.kind = kind  # type: ignore[misc]
        self._kind = kind

    def check(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """KDP131 at ``apiVersion``."""
        return [
            RawFinding(
                "KDP131",
                ("apiVersion",),
                f"{self._kind} is served as {TRAINER_GROUP}/{TRAINER_VERSION}, not {obj.get('apiVersion')!r}: "
                f"kubectl finds no such kind, so nothing is checked or run; use apiVersion: {TRAINER_GROUP}/{TRAINER_VERSION}",
            )
        ]

    def check_structure(self, obj: Mapping[str, Any]) -> list[RawFinding]:
        """Nothing beyond :meth:`check`."""
        return []

    def pod_templates(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[PodTemplateView]:
        """None: the object would never be served."""
        return []

    def effective_env(self, obj: Mapping[str, Any], view: PodTemplateView, ctx: CheckContext) -> dict[str, EnvValue]:
        """None: the object would never be served."""
        return {}

    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """Nothing beyond :meth:`check`."""
        return []


#: The registered instance.
TRAINJOB = register(TrainJobKind())
for _name in ("TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"):
    register(MisgroupedTrainerKind(_name))
