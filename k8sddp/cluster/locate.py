"""Which kind a job named on the command line is: ``status``, ``logs`` and ``delete NAME``.

With ``--kind`` the name is read as that kind. Without it, every kind ``submit`` creates
(:func:`k8sddp.kinds.job_kinds`: PyTorchJob, TrainJob) is asked for the name in the namespace (one
GET each; a kind whose CRD the cluster does not serve has no such job, nor one that the credentials
may not read, unless no kind can be read at all: that is the 403): exactly one answer is that
job; two are ambiguous (:class:`UsageError`, exit 2: say ``--kind``); none is
:class:`ClusterError` 404 (exit 3): the API server's own "not found" when the cluster serves one
of the kinds only, else a message naming the kinds looked at (and that the cluster serves none of
them, when that is why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ClusterError, UsageError
from .resources import Resource

if TYPE_CHECKING:
    from ..kinds.base import Kind
    from .client import Cluster

__all__ = ["find_job", "kind_choices"]


def kind_choices() -> list[str]:
    """The ``--kind`` values: the lower-case names of the kinds ``submit`` creates."""
    from .. import kinds

    return list(kinds.job_kinds())


def find_job(cluster: Cluster, name: str, kind_name: str | None = None) -> tuple[Kind, dict[str, Any]]:
    """The kind and the object of job ``name`` in the connection's namespace.

    Args:
        cluster: the connection.
        name: the job's name.
        kind_name: a ``--kind`` value (``pytorchjob``, ``trainjob``), or ``None`` to look the name up.

    Raises:
        UsageError: ``kind_name`` is not a known kind, or (without it) jobs of several kinds have the name.
        ClusterError: no such job (404), the API refused or failed.
    """
    from .. import kinds

    jobs = kinds.job_kinds()
    if kind_name is not None:
        kind = jobs.get(kind_name.lower())
        if kind is None:
            raise UsageError(f"--kind {kind_name!r}: expected one of {', '.join(jobs)}")
        return kind, cluster.get_job(name, kind=kind)
    found: list[tuple[Kind, dict[str, Any]]] = []
    unserved: list[str] = []
    missing: list[ClusterError] = []
    forbidden: list[tuple[Kind, ClusterError]] = []
    for kind in jobs.values():
        try:
            found.append((kind, cluster.get_job(name, kind=kind)))
        except ClusterError as exc:
            if exc.status == 403:  # RBAC for one kind only: the others may still have the name
                forbidden.append((kind, exc))
                continue
            if exc.status != 404:
                raise
            if cluster.crd_installed(kind):
                missing.append(exc)
            else:
                unserved.append(kind.kind)
    if len(found) == 1:
        return found[0]
    if forbidden and not found and not missing:
        raise forbidden[0][1]
    names = " and ".join(k.kind for k in jobs.values())
    if found:
        which = ", ".join(f"--kind {k.kind.lower()}" for k, _ in found)
        raise UsageError(f'{names} are both named "{name}" in namespace "{cluster.namespace}": say which with {which.replace(", ", " or ")}')
    if len(unserved) == len(jobs) - len(forbidden) and not missing and unserved:
        needs = "; ".join(f"{k.kind} ({Resource.of(k).api_version}) needs {Resource.of(k).needs or 'its operator'}" for k in jobs.values())
        raise ClusterError(
            f"the API server at {cluster.server} serves none of {names} (their CRDs are not installed): {needs}; see docs/cluster.md",
            status=404,
            reason="NotFound",
        )
    note = "".join(f"; no {k.kind} either: this cluster does not serve {Resource.of(k).api_version} ({Resource.of(k).needs})"
                   for k in jobs.values() if k.kind in unserved)
    note += "".join(f"; {k.kind}s were not looked at: these credentials may not get {Resource.of(k).name}" for k, _ in forbidden)
    if len(missing) == 1:  # the one kind the cluster serves: the API server's own words
        raise ClusterError(f"{missing[0]}{note}", status=404, reason="NotFound")
    skipped = set(unserved) | {k.kind for k, _ in forbidden}
    looked = " or ".join(k.kind for k in jobs.values() if k.kind not in skipped)
    raise ClusterError(f'{looked} "{name}" not found in namespace "{cluster.namespace}"{note}', status=404, reason="NotFound")
