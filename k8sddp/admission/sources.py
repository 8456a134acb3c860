"""What the webhook reads from the cluster (read-only), and the error a read raises.

:class:`k8sddp.admission.lookup.KubeLookup` implements the three sources; the decider
(:mod:`k8sddp.admission.review`) and the runtime look-up (:mod:`k8sddp.admission.runtimes`) are
typed against them, so neither needs the other (or the Kubernetes client) for these names.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["ConfigMapSource", "LookupFailed", "NamespaceLabelSource", "RuntimeSource"]


class LookupFailed(Exception):
    """A cluster look-up (ConfigMap, Namespace) failed for a reason other than "not found"."""


class ConfigMapSource(Protocol):
    """Reads ConfigMaps (read-only). :class:`k8sddp.admission.lookup.KubeLookup` implements it."""

    def get_configmap(self, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        """The ConfigMap as a dict, or ``None`` when it does not exist.

        ``timeout``: the most seconds the call may take (``None``: the source's own limit).

        Raises:
            LookupFailed: forbidden, unreachable, timed out.
        """
        ...


class NamespaceLabelSource(Protocol):
    """Reads namespace labels. :class:`k8sddp.admission.lookup.KubeLookup` implements it."""

    def namespace_labels(self, namespace: str, *, timeout: float | None = None) -> dict[str, str] | None:
        """The namespace's labels, or ``None`` when it does not exist.

        ``timeout``: as for :meth:`ConfigMapSource.get_configmap`.

        Raises:
            LookupFailed: forbidden, unreachable, timed out.
        """
        ...


class RuntimeSource(Protocol):
    """Reads Kubeflow Trainer runtimes (read-only). :class:`k8sddp.admission.lookup.KubeLookup` implements it."""

    def get_runtime(self, kind: str, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        """The runtime as a dict, or ``None`` when it does not exist.

        Raises:
            LookupFailed: it could not be read.
        """
        ...
