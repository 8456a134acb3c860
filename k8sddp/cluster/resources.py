"""Which REST resource an object or a kind is: the one place a kind becomes an API path.

A :class:`Resource` is read from a registered kind (:mod:`k8sddp.kinds`): its group and its
:class:`~k8sddp.kinds.StatusModel` (version, plural, scope). ``submit`` finds the kind of each
object by its ``apiVersion`` and ``kind`` (:func:`resource_of`), so the client never names a kind
itself: a PyTorchJob is ``kubeflow.org/v1`` ``pytorchjobs`` (training-operator v1.9 CRD), a
TrainJob ``trainer.kubeflow.org/v1alpha1`` ``trainjobs``, a ClusterTrainingRuntime the
cluster-scoped ``clustertrainingruntimes`` (Trainer v2.3.0 CRDs, ../shared/reference/).
"""

from __future__ import annotations

import copy
import dataclasses
import secrets
import uuid
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from ..kinds.base import Kind

__all__ = ["Resource", "SUBMISSION_ANNOTATION", "prepare_for_create", "resource_of"]

#: Annotation holding a fresh id per submission: after a connection reset, a create that meets
#: AlreadyExists reads the object back and knows it is its own first attempt by this id.
SUBMISSION_ANNOTATION = "k8sddp.dev/submission-id"
#: Characters of Kubernetes' generateName suffix (k8s.io/apiserver names.SimpleNameGenerator).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclasses.dataclass(frozen=True)
class Resource:
    """A custom resource's REST coordinates.

    Attributes:
        group: API group (``kubeflow.org``).
        version: the version k8sddp reads and writes (``v1``).
        plural: the resource name in paths (``pytorchjobs``).
        kind: the kind name (``PyTorchJob``).
        namespaced: ``False`` for a cluster-scoped resource.
        needs: what installs the CRD, for the message when the server does not serve it.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    needs: str = ""

    @classmethod
    def of(cls, kind: Kind) -> Resource:
        """The resource of a registered kind."""
        return cls(kind.group, kind.status.version, kind.status.plural, kind.kind, kind.status.namespaced, _NEEDS.get(kind.group, ""))

    @property
    def name(self) -> str:
        """``pytorchjobs.kubeflow.org`` (as kubectl and the API server's messages name it)."""
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        """``group/version``."""
        return f"{self.group}/{self.version}"

    @property
    def singular(self) -> str:
        """``pytorchjob.kubeflow.org`` (kubectl's ``-o name`` and ``deleted`` lines)."""
        return f"{self.kind.lower()}.{self.group}"


#: What installs each group's CRDs (for "not served" messages; docs/cluster.md).
_NEEDS = {
    "kubeflow.org": "the Kubeflow training operator (which installs the PyTorchJob CRD)",
    "trainer.kubeflow.org": "Kubeflow Trainer v2 (which installs the TrainJob and training runtime CRDs)",
    "ray.io": "the KubeRay operator",
}


def resource_of(obj: Any) -> Resource:
    """The resource of ``obj``'s registered kind (any version of its group: the kind's own version is used).

    Raises:
        UsageError: ``obj`` is not of a kind k8sddp knows.
    """
    from .. import kinds

    kind = kinds.lookup(obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None
    if kind is None or not kind.versions:
        what = f"{obj.get('kind')} ({obj.get('apiVersion')})" if isinstance(obj, dict) else type(obj).__name__
        raise UsageError(f"{what} is not a kind k8sddp can create on a cluster")
    return Resource.of(kind)


def prepare_for_create(body: dict[str, Any], what: str = "object") -> dict[str, Any]:
    """A deep copy of ``body`` with a concrete name and a fresh submission id.

    Args:
        body: the object (not mutated).
        what: its kind, for the message.

    Raises:
        UsageError: neither ``metadata.name`` nor ``metadata.generateName``.
    """
    obj = copy.deepcopy(body)
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        prefix = meta.get("generateName")
        if not prefix:
            raise UsageError(f"the {what} has neither metadata.name nor metadata.generateName")
        meta["name"] = prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
    meta.pop("generateName", None)
    annotations = meta.get("annotations") or {}
    annotations[SUBMISSION_ANNOTATION] = uuid.uuid4().hex
    meta["annotations"] = annotations
    return obj
