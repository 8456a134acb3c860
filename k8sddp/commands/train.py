"""``k8sddp train --task MODULE:ATTR``: one guarded DDP worker (run by torchrun; ``docs/runtime.md``)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``train`` subcommand."""
    p = subparsers.add_parser(
        "train",
        help="run one watchdog-guarded DDP worker (inside torchrun)",
        description=(
            "Run one worker: process group with K8SDDP_PG_TIMEOUT_SECONDS, heartbeat watchdog, "
            "atomic checkpoints and resume, SIGTERM -> final checkpoint and exit 143. "
            "Needs the 'train' extra (torch). See docs/runtime.md."
        ),
    )
    p.add_argument("--task", required=True, metavar="MODULE:ATTR",
                   help="the Task to train, e.g. k8sddp.runtime.demo:task")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler: run the worker."""
    try:
        import torch  # noqa: F401
    except ImportError:
        from ..errors import UsageError

        raise UsageError("k8sddp train needs torch: pip install 'k8sddp[train]'") from None
    from ..runtime.worker import run_worker

    return run_worker(args.task)
