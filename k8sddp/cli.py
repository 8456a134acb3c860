"""The ``k8sddp`` command line: parses flags, wires the libraries, maps errors to exit codes.

Each subcommand lives in ``k8sddp/commands/<name>.py`` with ``register(subparsers)`` and a
handler ``run(args) -> int``. Heavy imports (torch, kubernetes) stay inside the handlers so that
``k8sddp validate`` starts fast and needs neither. ``sys.exit`` happens only in :func:`main`.
Exit codes: ``../shared/CONTRACT.md`` (0 ok, 1 findings, 2 usage, 3 cluster, 4 job failed,
5 wait timed out).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
from collections.abc import Sequence

from ._version import __version__
from .errors import K8sddpError

# errors writing stdout that are the user's output target, not a bug (exit 2, no traceback)
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})

#: Subcommand modules under ``k8sddp.commands``, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "render",
    "validate",
    "fix",
    "kustomize",
    "policy",
    "webhook",
    "lint",
    "launch",
    "train",
    "submit",
    "status",
    "logs",
    "delete",
    "diagnose",
    "rules",
    "incident",
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with a one-line message on usage errors (its default, kept explicit)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the full parser with every subcommand registered."""
    parser = _Parser(
        prog="k8sddp",
        description="Guardrails for PyTorch distributed training on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"k8sddp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"k8sddp.commands.{name}")
        module.register(sub)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Let every (sub)parser put itself in the namespace, so a usage error is told by the deepest
    one that ran (``k8sddp kustomize openapi extra`` shows ``kustomize openapi``'s usage)."""
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.set_defaults(_parser=child)
                _remember_parsers(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return (via ``sys.exit`` when called as a script) the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a full disk on stdout is an error here, not at interpreter exit
    except K8sddpError as exc:
        print(f"k8sddp {args.command}: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 0
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        # stdout is unwritable (`>/dev/full`, a full disk, an I/O error): the CONTRACT's 2
        print(f"k8sddp {args.command}: cannot write the output: {exc.strerror}", file=sys.stderr)
        with contextlib.suppress(OSError, ValueError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - nothing more reaches the bad stream
        code = 2
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":  # pragma: no cover
    main()
