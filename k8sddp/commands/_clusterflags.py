"""The cluster flags every cluster command shares (``-n``, ``--context``, ``--kubeconfig``) and
the one place they become a :class:`k8sddp.cluster.client.Cluster`.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from ..cluster.client import Cluster

__all__ = ["add_cluster_flags", "add_kind_flag", "connect", "parse_count", "parse_duration", "parse_seconds"]


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``-n/--namespace``, ``--context`` and ``--kubeconfig`` (as kubectl names them)."""
    group = parser.add_argument_group("cluster")
    group.add_argument("-n", "--namespace", help="namespace (default: the context's, else 'default')")
    group.add_argument("--context", help="kubeconfig context to use (default: its current context)")
    group.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account)",
    )


def add_kind_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--kind`` (the job kinds ``submit`` creates: ``pytorchjob``, ``trainjob``; default: look the name up)."""
    from ..cluster.locate import kind_choices

    choices = kind_choices()
    parser.add_argument(
        "--kind", choices=choices, type=str.lower,
        help=f"the job's kind ({', '.join(choices)}); default: the one kind that has a job of this name (exit 2 when several do)",
    )


def connect(args: argparse.Namespace) -> Cluster:
    """Build the :class:`Cluster` from the parsed flags (imports the kubernetes client).

    Raises:
        UsageError: no configuration, a missing kubeconfig or context (exit 2).
        ClusterError: an unusable configuration (exit 3).
    """
    from ..cluster.client import Cluster

    return Cluster.connect(kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str) -> float:
    """``"90"`` or ``"90s"`` -> 90.0; ``"10m"``, ``"1h30m"``, ``"500ms"`` as kubectl's durations.

    Raises:
        argparse.ArgumentTypeError: not a positive, finite duration (``nan`` and ``inf`` too).
    """
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pos, value = 0, 0.0
        for m in _DURATION.finditer(text):
            if m.start() != pos:
                break
            value += float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]
            pos = m.end()
        if pos != len(text) or not text:
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 90, 90s, 10m, 1h)") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the duration must be positive and finite")
    return value


def parse_seconds(text: str) -> float:
    """A finite number of seconds >= 0 (``--restart-backoff``): ``"0"``, ``"2.5"``.

    Raises:
        argparse.ArgumentTypeError: not a number, negative, ``nan`` or ``inf``.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be finite and >= 0")
    return value


def parse_count(text: str) -> int:
    """A whole number >= 0 (``--max-restarts``).

    Raises:
        argparse.ArgumentTypeError: not an integer, or negative.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
    return value


def require_name(name: str) -> str:
    """Reject names the API would refuse before any request.

    Raises:
        UsageError: empty or containing '/'.
    """
    if not name or "/" in name:
        raise UsageError(f"{name!r} is not a job name")
    return name
