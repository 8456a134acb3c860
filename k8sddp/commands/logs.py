"""``k8sddp logs NAME [--replica master|worker] [--index N] [-f]``: the training container's logs.

Pods are found by the operator's labels (:mod:`k8sddp.cluster.pods`): by default the Master's pod
(or, for a Worker-only job, every pod, each line prefixed with its pod's name); ``--replica`` and
``--index`` narrow it. ``-f`` follows until the containers end. Exit 0, or 3 when no pod matches or
the API fails.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import UsageError
from ._clusterflags import add_cluster_flags, require_name


def register(subparsers: Any) -> None:
    """Add the ``logs`` subcommand."""
    p = subparsers.add_parser("logs", help="print (or follow) the logs of a PyTorchJob's pods")
    p.add_argument("name", help="the PyTorchJob's name")
    p.add_argument("--replica", choices=("master", "worker"), type=str.lower, help="replica type")
    p.add_argument("--index", type=int, help="replica index (0-based)")
    p.add_argument("-f", "--follow", action="store_true", help="stream until the containers end")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines of each pod")
    add_cluster_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``k8sddp logs``.

    Raises:
        UsageError: a negative ``--index`` or ``--tail``.
        ClusterError: no pods, or the API failed.
    """
    from ..cluster.pods import select_pods, stream_logs
    from ._clusterflags import connect

    if args.index is not None and args.index < 0:
        raise UsageError("--index must be >= 0")
    if args.tail is not None and args.tail < 0:
        raise UsageError("--tail must be >= 0")
    name = require_name(args.name)
    cluster = connect(args)
    pods = select_pods(cluster, name, replica=args.replica, index=args.index)
    stream_logs(cluster, pods, follow=args.follow, tail_lines=args.tail)
    return 0
