"""``k8sddp delete NAME [--kind pytorchjob|trainjob]``: delete a job (its controller then removes its pods).

The kind is ``--kind``, else the one kind with a job of that name (:mod:`k8sddp.cluster.locate`).
Prints ``pytorchjob.kubeflow.org "NAME" deleted`` (``trainjob.trainer.kubeflow.org ...``) as kubectl
does; ``--wait`` blocks until the job is gone. Exit 0; 2 when jobs of several kinds have the name
and no ``--kind`` says which; 3 (not found, forbidden, unreachable).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._clusterflags import add_cluster_flags, add_kind_flag, parse_duration, require_name


def register(subparsers: Any) -> None:
    """Add the ``delete`` subcommand."""
    p = subparsers.add_parser("delete", help="delete a PyTorchJob or TrainJob")
    p.add_argument("name", help="the job's name")
    add_kind_flag(p)
    p.add_argument("--wait", action="store_true", help="block until the job (and, Foreground, its pods) are gone")
    p.add_argument("--timeout", type=parse_duration, default=120.0, help="bound on --wait (default 120 s)")
    add_cluster_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``k8sddp delete``.

    Raises:
        UsageError: jobs of several kinds have the name and ``--kind`` is not given.
        ClusterError: not found (404), forbidden, unreachable, or still there after ``--timeout``.
    """
    from ..cluster.locate import find_job
    from ..cluster.resources import Resource
    from ._clusterflags import connect

    name = require_name(args.name)
    cluster = connect(args)
    kind, _ = find_job(cluster, name, args.kind)
    cluster.delete_job(name, propagation="Foreground" if args.wait else "Background", kind=kind)
    if args.wait:
        cluster.wait_job_gone(name, timeout=args.timeout, kind=kind)
    sys.stdout.write(f'{Resource.of(kind).singular} "{name}" deleted\n')
    return 0
