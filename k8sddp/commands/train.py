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
    p.add_argument("--task", required=True, nargs=argparse.REMAINDER, metavar="MODULE:ATTR [ARGS...]",
                   help="the Task to train, e.g. k8sddp.runtime.demo:task; everything after it is "
                        "passed to the task's factory (k8sddp.runtime.demo:task --epochs 3)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler: run the worker."""
    try:
        import torch  # noqa: F401
    except ImportError:
        from ..errors import UsageError

        raise UsageError("k8sddp train needs torch: pip install 'k8sddp[train]'") from None
    from ..errors import UsageError
    from ..runtime.worker import run_worker

    if not args.task:
        raise UsageError("train: --task needs MODULE:ATTR")
    return run_worker(args.task[0], task_args=list(args.task[1:]))
