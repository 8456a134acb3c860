"""``k8sddp delete NAME``: delete a PyTorchJob (the operator then removes its pods).

Prints ``pytorchjob.kubeflow.org "NAME" deleted`` as kubectl does; ``--wait`` blocks until the job
is gone. Exit 0, or 3 (not found, forbidden, unreachable).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._clusterflags import add_cluster_flags, parse_duration, require_name


def register(subparsers: Any) -> None:
    """Add the ``delete`` subcommand."""
    p = subparsers.add_parser("delete", help="delete a PyTorchJob")
    p.add_argument("name", help="the PyTorchJob's name")
    p.add_argument("--wait", action="store_true", help="block until the job (and, Foreground, its pods) are gone")
    p.add_argument("--timeout", type=parse_duration, default=120.0, help="bound on --wait (default 120 s)")
    add_cluster_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``k8sddp delete``.

    Raises:
        ClusterError: not found (404), forbidden, unreachable, or still there after ``--timeout``.
    """
    from ..cluster.client import GROUP
    from ._clusterflags import connect

    name = require_name(args.name)
    cluster = connect(args)
    cluster.delete_job(name, propagation="Foreground" if args.wait else "Background")
    if args.wait:
        cluster.wait_job_gone(name, timeout=args.timeout)
    sys.stdout.write(f'pytorchjob.{GROUP} "{name}" deleted\n')
    return 0
