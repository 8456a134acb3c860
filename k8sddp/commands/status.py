"""``k8sddp status NAME``: a PyTorchJob's conditions, replica counts and pods.

Prints the current state (last true condition, its reason and message), every condition with its
time, the operator's replica counts, and one line per pod (found by the operator's labels; see
:mod:`k8sddp.cluster.pods`). ``-o yaml|json`` prints the job object instead. Exit 0 whatever the
job's state (like ``kubectl get``); 3 when the job or the API cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._clusterflags import add_cluster_flags, require_name


def register(subparsers: Any) -> None:
    """Add the ``status`` subcommand."""
    p = subparsers.add_parser("status", help="show a PyTorchJob's conditions, replicas and pods")
    p.add_argument("name", help="the PyTorchJob's name")
    p.add_argument("-o", "--output", choices=("yaml", "json"), help="print the job object instead")
    add_cluster_flags(p)
    p.set_defaults(handler=run)


def format_status(obj: dict[str, Any], pods: list[dict[str, Any]] | None) -> str:
    """The text ``status`` prints for a job object and its pods."""
    from ..jobstatus import job_state, pods_summary

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
        lines.extend(f"  {p}" for p in pods_summary(pods))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Handle ``k8sddp status``.

    Raises:
        ClusterError: the job does not exist (404) or the API failed.
    """
    from ..cluster.output import format_objects
    from ..cluster.pods import job_selector
    from ..errors import ClusterError
    from ._clusterflags import connect

    name = require_name(args.name)
    cluster = connect(args)
    obj = cluster.get_job(name)
    if args.output:
        sys.stdout.write(format_objects([obj], args.output))
        return 0
    try:
        pods: list[dict[str, Any]] | None = cluster.list_pods(job_selector(name))
    except ClusterError as exc:
        sys.stderr.write(f"note: cannot list pods: {exc}\n")
        pods = None
    sys.stdout.write(format_status(obj, pods))
    return 0
