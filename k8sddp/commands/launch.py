"""``k8sddp launch -- CMD...``: the training container's main process (``docs/runtime.md``)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``launch`` subcommand."""
    p = subparsers.add_parser(
        "launch",
        help="run torchrun under the guard: refuse missing guard variables, map exit codes",
        description=(
            "Run CMD (torchrun ... -m k8sddp train --task ...) as the container's main process: "
            "refuse to start when mandatory guard variables are missing, forward signals, and exit "
            "0 on success, >= 128 for retryable failures (hang 142, preemption 143, lost worker 137, "
            "not started 147) and 1-127 for final ones (task error 1, configuration 2, repeated "
            "hang 10). See docs/runtime.md."
        ),
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...", help="the command to run")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler: run the launcher; returns the pod's exit code."""
    from ..diagnose.live import launcher_view
    from ..runtime.launcher import launch

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return launch(cmd, analyse=launcher_view)
