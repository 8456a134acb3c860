"""``k8sddp logs NAME [--kind K] [--replica R] [--index N] [-f]``: the training container's logs.

The kind is ``--kind``, else the one kind with a job of that name (:mod:`k8sddp.cluster.locate`).
Pods are found by the controller's labels (:mod:`k8sddp.cluster.pods`): for a PyTorchJob by default
the Master's pod (or, for a Worker-only job, every pod), for a TrainJob every ``node`` pod (the
JobSet's trainer Job), several pods' lines prefixed with their pod's name; ``--replica``
(PyTorchJob: ``master``, ``worker``; TrainJob: any replicatedJob of its runtime, ``node``,
``dataset-initializer``, ``model-initializer``, ``launcher``, ...) and ``--index`` (replica index; a TrainJob's node rank, the Job completion
index) narrow it. The container is the kind's training container (``pytorch``, ``node``). ``-f``
follows until the containers end. Exit 0; 2 for a replica the kind does not have, or a name that
jobs of several kinds have without ``--kind``; 3 when no pod matches or the API fails.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from ..errors import UsageError
from ._clusterflags import add_cluster_flags, add_kind_flag, require_name

#: a replicatedJob name (JobSet: a DNS-1123 label)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def register(subparsers: Any) -> None:
    """Add the ``logs`` subcommand."""
    p = subparsers.add_parser("logs", help="print (or follow) the logs of a PyTorchJob's or TrainJob's pods")
    p.add_argument("name", help="the job's name")
    add_kind_flag(p)
    p.add_argument("--replica", type=str.lower,
                   help="replica type: master or worker (PyTorchJob), a replicatedJob such as node (TrainJob)")
    p.add_argument("--index", type=int, help="replica index (0-based; a TrainJob's node rank)")
    p.add_argument("-f", "--follow", action="store_true", help="stream until the containers end")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines of each pod")
    add_cluster_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``k8sddp logs``.

    Raises:
        UsageError: a negative ``--index`` or ``--tail``, a replica the job's kind does not have,
            jobs of several kinds with the name and no ``--kind``.
        ClusterError: no such job, no pods, or the API failed.
    """
    from ..cluster.locate import find_job
    from ..cluster.pods import select_pods, stream_logs
    from ._clusterflags import connect

    if args.index is not None and args.index < 0:
        raise UsageError("--index must be >= 0")
    if args.tail is not None and args.tail < 0:
        raise UsageError("--tail must be >= 0")
    name = require_name(args.name)
    cluster = connect(args)
    kind, _ = find_job(cluster, name, args.kind)
    if args.replica is not None and args.replica not in kind.status.replicas:
        if not kind.status.open_replicas:
            raise UsageError(f"--replica {args.replica!r}: a {kind.kind} has replicas {', '.join(kind.status.replicas)}")
        if not _DNS_LABEL.fullmatch(args.replica):
            raise UsageError(f"--replica {args.replica!r}: not a replicatedJob name (a DNS-1123 label: lower case "
                             f"letters, digits, '-'); the stock runtimes have {', '.join(kind.status.replicas)}")
    pods = select_pods(cluster, name, replica=args.replica, index=args.index, kind=kind)
    open_replicas = kind.status.open_replicas
    stream_logs(cluster, pods, follow=args.follow, tail_lines=args.tail, container=kind.status.container,
                replica_label=kind.status.pod_labels.get("replica-type", "") if open_replicas else "",
                training_replica=kind.status.log_replica)
    return 0
