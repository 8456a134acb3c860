"""``k8sddp status NAME [--kind pytorchjob|trainjob]``: a job's conditions, replica counts and pods.

The kind is ``--kind``, else the one kind with a job of that name (:mod:`k8sddp.cluster.locate`).
Prints the current state (last true condition, its reason and message), every condition with its
time, the controller's replica counts (a PyTorchJob's ``replicaStatuses``, a TrainJob's
``jobsStatus``), and one line per pod (found by the controller's labels; see
:mod:`k8sddp.cluster.pods`). ``-o yaml|json`` prints the job object instead. Exit 0 whatever the
job's state (like ``kubectl get``); 2 when jobs of several kinds have the name and no ``--kind``
says which; 3 when the job or the API cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._clusterflags import add_cluster_flags, add_kind_flag, require_name


def register(subparsers: Any) -> None:
    """Add the ``status`` subcommand."""
    p = subparsers.add_parser("status", help="show a PyTorchJob's or TrainJob's conditions, replicas and pods")
    p.add_argument("name", help="the job's name")
    add_kind_flag(p)
    p.add_argument("-o", "--output", choices=("yaml", "json"), help="print the job object instead")
    add_cluster_flags(p)
    p.set_defaults(handler=run)


def format_status(obj: dict[str, Any], pods: list[dict[str, Any]] | None) -> str:
    """The text ``status`` prints for a job object (of any job kind) and its pods."""
    from ..jobstatus import job_state, kind_of, pods_summary

    state = job_state(obj)
    lines = [state.line()]
    if state.message:
        lines.append(f"  {state.message}")
    conditions = (obj.get("status") or {}).get("conditions") or []
    if conditions:
        lines.append("conditions:")
        for c in conditions:
            when = c.get("lastTransitionTime") or c.get("lastUpdateTime") or ""
            lines.append(f"  {c.get('type', '?'):<11} {c.get('status', '?'):<5} {when:<20} {c.get('reason', '')}")
    if pods is not None:
        lines.append("pods:" if pods else "pods: none")
        lines.extend(f"  {p}" for p in pods_summary(pods, kind_of(obj).status.container))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Handle ``k8sddp status``.

    Raises:
        UsageError: jobs of several kinds have the name and ``--kind`` is not given.
        ClusterError: the job does not exist (404) or the API failed.
    """
    from ..cluster.locate import find_job
    from ..cluster.output import format_objects
    from ..cluster.pods import job_selector
    from ..errors import ClusterError
    from ._clusterflags import connect

    name = require_name(args.name)
    cluster = connect(args)
    kind, obj = find_job(cluster, name, args.kind)
    if args.output:
        sys.stdout.write(format_objects([obj], args.output))
        return 0
    try:
        pods: list[dict[str, Any]] | None = cluster.list_pods(job_selector(name, kind=kind))
    except ClusterError as exc:
        sys.stderr.write(f"note: cannot list pods: {exc}\n")
        pods = None
    sys.stdout.write(format_status(obj, pods))
    return 0
