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
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ._version import __version__
from .errors import K8sddpError

#: Subcommand modules under ``k8sddp.commands``, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "render",
    "runtime",
    "migrate",
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
    if sys.stdin is None:
        # A closed standard input (`<&-`) reads as an empty one: `validate -` says "no input".
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115  (lives as long as the process)
    if sys.stdout is None:
        _say(f"k8sddp {args.command}: cannot write output: standard output is closed")
        code = 2
    else:
        code = _run(args)
    if argv is None:
        sys.exit(code)
    return code


def _say(message: str) -> None:
    """One line on standard error, if there is one."""
    if sys.stderr is not None:
        with contextlib.suppress(OSError):
            print(message, file=sys.stderr)


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's final flush of what could not be
    written (a closed pipe, a full disk) neither fails nor prints 'Exception ignored'."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class _PipeSafeStdout:
    """Standard output that, once its reader has gone (``| head``), drops the rest quietly.

    Without it a ``BrokenPipeError`` stops the command half-way and the exit code depends on how
    much output the pipe took before it closed: ``lint | head`` gave 0 or 1 from run to run, and
    under ``set -o pipefail`` a lint with findings could pass CI. With it the command runs to its
    end and exits with its own code (0, 1, ...); other write errors (a full disk) still raise.
    """

    def __init__(self, stream: TextIO) -> None:
        """``stream``: the text stream to wrap (``sys.stdout``)."""
        self._stream = stream
        self.closed_pipe = False

    def _guard(self, action: Callable[[], int | None]) -> int | None:
        if self.closed_pipe:
            return None
        try:
            return action()
        except BrokenPipeError:
            self.closed_pipe = True
            _silence_stdout()
            return None

    def write(self, text: str) -> int:
        """Write ``text``; after a closed pipe, report it written and drop it."""
        self._guard(lambda: self._stream.write(text))
        return len(text)

    def flush(self) -> None:
        """Flush the wrapped stream, unless its reader has gone."""
        self._guard(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _run(args: argparse.Namespace) -> int:
    """Run the handler; map errors to exit codes (``../shared/CONTRACT.md``): a closed pipe ends
    quietly with the command's own code (``_PipeSafeStdout``), output that cannot be written is 2,
    one line."""
    real = sys.stdout
    sys.stdout = _PipeSafeStdout(real)  # type: ignore[assignment]
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # inside the try: a full disk shows up here, not at exit
    except K8sddpError as exc:
        _say(f"k8sddp {args.command}: {exc}")
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        _silence_stdout()
        code = 0
    except OSError as exc:
        # Writing standard output failed (ENOSPC on >/dev/full, EIO, EBADF): files the commands
        # write themselves are reported by the commands, with their names.
        _silence_stdout()
        where = f"{exc.filename}: " if exc.filename else "standard output: "
        _say(f"k8sddp {args.command}: cannot write output: {where}{exc.strerror or exc}")
        code = 2
    finally:
        sys.stdout = real
    return code


if __name__ == "__main__":  # pragma: no cover
    main()
