"""The interface every workload kind implements, the data it hands to the shared checks, and the
interface of the wrappers that hold other objects (:class:`Wrapper`; the layouts: :mod:`k8sddp.kinds.wrappers`)."""

from __future__ import annotations

import abc
import dataclasses
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ..findings import RawFinding

if TYPE_CHECKING:  # (nothing under validate/ at run time: that would run validate/__init__.py, which loads the engine)
    from ..validate.envresolve import EnvValue
    from ..validate.objindex import ObjectIndex

__all__ = ["CheckContext", "Inner", "Kind", "PodTemplateView", "StatusModel", "StatusReading", "Unwrapped", "Wrapper"]

_MAPPING = (dict, Mapping)


@dataclasses.dataclass(frozen=True)
class PodTemplateView:
    """One pod template of a workload object, and its training container.

    Attributes:
        group: the replica or group name, as messages name it (``Worker``, ``head``,
            ``workerGroupSpecs[small]``, a Trainer ``replicatedJobs`` name).
        path: keys and list indices from the object's root to the pod *template* (the object
            holding ``metadata`` and ``spec``), e.g. ``("spec", "pytorchReplicaSpecs", "Worker", "template")``.
        template: the pod template at ``path`` (a mapping; may lack ``spec`` in a broken manifest).
        container_index: index in ``template.spec.containers`` of the training container, or
            ``None`` when there is none (a structure finding reports that).
        container: the training container as the kind resolves it; normally the one at
            ``container_index``, but a kind that merges overrides (a TrainJob's trainer over its
            runtime's ``node`` container) puts the merged container here.
    """

    group: str
    path: tuple[Any, ...]
    template: Mapping[str, Any]
    container_index: int | None
    container: Mapping[str, Any] | None

    @property
    def pod_spec(self) -> Mapping[str, Any]:
        """``template.spec``, or ``{}`` if it is not a mapping."""
        spec = self.template.get("spec")
        return spec if isinstance(spec, _MAPPING) else {}

    @property
    def container_path(self) -> tuple[Any, ...] | None:
        """Path from the object's root to the training container, or ``None``."""
        if self.container_index is None:
            return None
        return (*self.path, "spec", "containers", self.container_index)


@dataclasses.dataclass(frozen=True)
class StatusReading:
    """A kind's state read from one ``status`` by :meth:`StatusModel.read`.

    Attributes:
        state: the state (a condition type, or the value of :attr:`StatusModel.state_field`);
            ``""`` when the controller has not reported one yet.
        reason: its reason (``""`` when none).
        message: its message (``""`` when none).
        detail: the value of :attr:`StatusModel.detail_field` (a RayJob's Ray job status
            ``RUNNING``), ``""`` when the kind has none or it is not set.
        final: nothing changes after this state.
        failed: a final state that means failure.
    """

    state: str
    reason: str
    message: str
    detail: str
    final: bool
    failed: bool


@dataclasses.dataclass(frozen=True)
class StatusModel:
    """How a kind reports its state on a cluster (read by :mod:`k8sddp.jobstatus` and :mod:`k8sddp.cluster`).

    Attributes:
        plural: the resource's plural (``pytorchjobs``).
        version: the version k8sddp reads and writes (``v1``).
        condition_types: ``status.conditions[].type`` values the controller sets, in life order.
        final_conditions: those after which nothing changes.
        pod_labels: label keys the controller puts on its pods: ``job-name``, ``replica-type``,
            ``replica-index`` (empty where a kind has no such label); KubeRay's pods carry
            ``cluster`` (the RayCluster's name) and ``group`` (the head or worker group) instead
            of ``job-name``.
        container: the training container's name in the pods (``pytorch``), or ``""`` when the
            kind picks it by position.
        state_field: the ``status`` key whose value is the state, for a kind whose controller
            reports it in a field rather than in conditions (a RayJob's ``jobDeploymentStatus``);
            ``""``: the state is the last true condition.
        final_states: values of ``state_field`` after which nothing changes.
        failed_states: the final states (or final conditions) that mean failure.
        detail_field: a second ``status`` key worth showing with the state (a RayJob's
            ``jobStatus``: the Ray job's own status), or ``""``.
        pods_owner_field: the ``status`` key naming the object whose name the pods' ``cluster``
            label carries (a RayJob's ``rayClusterName``: its pods are its RayCluster's);
            ``""``: the object's own name.
        namespaced: the resource lives in a namespace (``False``: cluster-scoped, a
            ``ClusterTrainingRuntime``).
        replicas: values of the ``replica-type`` pod label (``logs --replica``), lower case.
        open_replicas: any DNS label is a replica too (a TrainJob's replicatedJobs are named by
            its runtime: ``replicas`` are the stock ones, ``launcher`` say, or a custom one).
        log_replica: the replica whose pods ``logs`` shows by default (``master``; ``""``: every pod).
        replica_status: where ``status`` keeps the per-replica counts: ``replicaStatuses`` (a
            mapping of replica to counts, Kubeflow v1) or ``jobsStatus`` (a list of
            ``{name, active, succeeded, failed, ...}``, Trainer v2); ``""``: none.
    """

    plural: str
    version: str
    condition_types: tuple[str, ...]
    final_conditions: frozenset[str]
    pod_labels: Mapping[str, str]
    container: str
    state_field: str = ""
    final_states: frozenset[str] = frozenset()
    failed_states: frozenset[str] = frozenset({"Failed"})
    detail_field: str = ""
    pods_owner_field: str = ""
    namespaced: bool = True
    replicas: tuple[str, ...] = ()
    open_replicas: bool = False
    log_replica: str = ""
    replica_status: str = ""

    @property
    def failed_condition(self) -> str:
        """The condition type that means the job failed for good (for a condition-based kind: the
        one of :attr:`failed_states`, ``Failed``)."""
        return min(self.failed_states) if self.failed_states else "Failed"

    def read(self, status: Any) -> StatusReading:
        """The state in ``status`` (the object's ``status`` as the API returns it; anything that
        is not a mapping reads as no state yet).

        With :attr:`state_field` set, the state is that field's value, the reason and message
        are ``status.reason`` and ``status.message`` (the RayJob shape, kuberay
        ``apis/ray/v1/rayjob_types.go`` ``RayJobStatus``). Otherwise it is the type of the last
        condition in ``status.conditions`` whose ``status`` is ``"True"`` and whose type is one of
        :attr:`condition_types` (the operator appends conditions and sets superseded ones to
        ``"False"``), with that condition's reason and message.
        """
        st: Mapping[str, Any] = status if isinstance(status, _MAPPING) else {}
        detail = str(st.get(self.detail_field) or "") if self.detail_field else ""
        if self.state_field:
            state = str(st.get(self.state_field) or "")
            return StatusReading(state, str(st.get("reason") or ""), str(st.get("message") or ""), detail,
                                 state in self.final_states, state in self.final_states and state in self.failed_states)
        current: Mapping[str, Any] = {}
        conditions = st.get("conditions")
        for cond in conditions if isinstance(conditions, list) else []:
            if isinstance(cond, _MAPPING) and str(cond.get("status")) == "True" and cond.get("type") in self.condition_types:
                current = cond
        state = str(current.get("type") or "")
        final = state in self.final_conditions
        return StatusReading(state, str(current.get("reason") or ""), str(current.get("message") or ""), detail,
                             final, final and state in self.failed_states)

    def replica_counts(self, status: Any) -> dict[str, dict[str, int]]:
        """``{"Master": {"active": 1, "succeeded": 0, "failed": 0}, ...}`` from an object's ``status``
        (``{}`` when the kind keeps no counts or ``status`` holds none)."""
        keys = ("active", "succeeded", "failed")
        held = status.get(self.replica_status) if isinstance(status, _MAPPING) and self.replica_status else None
        out: dict[str, dict[str, int]] = {}
        if isinstance(held, _MAPPING):
            for rtype, counts in held.items():
                if isinstance(counts, _MAPPING):
                    out[str(rtype)] = {k: _count(counts.get(k)) for k in keys}
        elif isinstance(held, list):
            for entry in held:
                if isinstance(entry, _MAPPING) and entry.get("name"):
                    out[str(entry["name"])] = {k: _count(entry.get(k)) for k in keys}
        return out


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


@dataclasses.dataclass
class CheckContext:
    """What a kind's checks may read besides the object itself.

    Attributes:
        profile: ``baseline`` or ``strict`` (:data:`k8sddp.catalogue.PROFILES`).
        objects: the whole input's ConfigMaps and referenced objects.
        namespace: the object's namespace (its own, else the one it will be applied to; ``None``: unknown).
    """

    profile: str
    objects: ObjectIndex
    namespace: str | None = None


class Kind(abc.ABC):
    """One workload kind: an API group and kind name, and everything the checks need to know of it.

    Subclasses set the class attributes and implement the abstract methods; :func:`k8sddp.kinds.register`
    makes them known. An object is handed to :meth:`check` only when its group and kind match;
    a version not in :attr:`versions` is reported by :meth:`check_api_version`.

    Attributes:
        group: API group (``kubeflow.org``).
        kind: kind name (``PyTorchJob``).
        versions: versions the CRD serves that k8sddp checks (``("v1",)``).
        references: ``(group, kind)`` of other objects this kind resolves by name (a TrainJob's
            runtime): the input's objects of those kinds are put in :attr:`CheckContext.objects`.
        status: how the kind reports status.
        submit_role: what ``submit`` does with an object of the kind: ``job`` (created, then
            followed by ``--wait``, ``status``, ``logs``, ``delete``), ``runtime`` (applied before the
            jobs that refer to it), ``""`` (validated, not created).
        local_runner: how ``submit --local`` runs an object of the kind: ``operator`` (the Kubeflow
            v1 operator's per-pod policy, :mod:`k8sddp.local.runner`), ``jobset`` (a JobSet's,
            :mod:`k8sddp.local.jobset`), ``""`` (it cannot).
    """

    group: ClassVar[str]
    kind: ClassVar[str]
    versions: ClassVar[tuple[str, ...]]
    references: ClassVar[tuple[tuple[str, str], ...]] = ()
    status: ClassVar[StatusModel]
    submit_role: ClassVar[str] = ""
    local_runner: ClassVar[str] = ""

    @property
    def api_versions(self) -> tuple[str, ...]:
        """``group/version`` for each served version."""
        return tuple(f"{self.group}/{v}" for v in self.versions)

    def check_api_version(self, obj: Mapping[str, Any]) -> RawFinding | None:
        """KDP101 when ``obj.apiVersion`` is this group with a version that is not served."""
        if obj.get("apiVersion") in self.api_versions:
            return None
        expected = " or ".join(repr(a) for a in self.api_versions)
        return RawFinding("KDP101", ("apiVersion",), f"apiVersion {obj.get('apiVersion')!r} is not served for {self.kind}; expected {expected}")

    def referenced_objects(self, obj: Mapping[str, Any], namespace: str | None) -> list[tuple[str, str, str | None, str]]:
        """The objects of :attr:`references` kinds that ``obj`` names: ``(group, kind, namespace,
        name)``, namespace ``None`` for a cluster-scoped kind. ``namespace`` is ``obj``'s own, else
        the one it is applied to. ``validate --cluster`` reads those the input lacks from the API
        server (:mod:`k8sddp.validate.fromcluster`). Default: none."""
        return []

    @abc.abstractmethod
    def check_structure(self, obj: Mapping[str, Any]) -> list[RawFinding]:
        """Layer 1: the kind's CRD structure schema and the controller's admission rules (KDP1xx)."""

    @abc.abstractmethod
    def pod_templates(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[PodTemplateView]:
        """Every pod template of ``obj`` (references resolved through ``ctx.objects``), with its
        training container; templates that are not mappings are left out (layer 1 reports them)."""

    @abc.abstractmethod
    def effective_env(self, obj: Mapping[str, Any], view: PodTemplateView, ctx: CheckContext) -> dict[str, EnvValue]:
        """The training container's effective environment in ``view``, as the process will see it
        (kubelet resolution, plus what the kind's controller or runtime layers on top)."""

    @abc.abstractmethod
    def check_guardrails(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """Layer 2 (``baseline``, and ``strict`` when ``ctx.profile`` says so)."""

    def check(self, obj: Mapping[str, Any], ctx: CheckContext) -> list[RawFinding]:
        """All checks of one object: the API version, then structure and guardrails."""
        wrong = self.check_api_version(obj)
        if wrong is not None:
            return [wrong]
        return self.check_structure(obj) + self.check_guardrails(obj, ctx)


# -- wrappers: objects that hold other objects (the layouts: :mod:`k8sddp.kinds.wrappers`) ----


@dataclasses.dataclass(frozen=True)
class Inner:
    """One object held by a wrapper.

    Attributes:
        path: keys and list indices from the wrapper's root to the inner object.
        obj: the inner object, with the metadata the wrapper's controller fills in (namespace, name).
        placeholders: the template placeholders the wrapper's controller substitutes before it
            creates the object (``None``: none); see :func:`placeholder_filter`.
    """

    path: tuple[Any, ...]
    obj: Any
    placeholders: re.Pattern[str] | None = None


@dataclasses.dataclass
class Unwrapped:
    """What a wrapper holds: the inner objects and the wrapper's own findings (paths from its root)."""

    inner: list[Inner]
    findings: list[RawFinding] = dataclasses.field(default_factory=list)


class Wrapper(abc.ABC):
    """A kind that holds other objects.

    Attributes:
        kind: kind name (``AppWrapper``).
        api_versions: the exact ``apiVersion`` values this layout applies to.
    """

    kind: ClassVar[str]
    api_versions: ClassVar[tuple[str, ...]]

    @abc.abstractmethod
    def unwrap(self, obj: Mapping[str, Any], ctx: CheckContext) -> Unwrapped:
        """The objects ``obj`` holds (entries that are absent are left out; a held value that is not
        an object is yielded as it is, and the engine reports it as KDP004)."""
