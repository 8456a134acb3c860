"""``k8sddp fix FILE... [--check] [--profile baseline|strict]``: add missing guard variables in place.

What is added or corrected, and what is left for a person: :mod:`k8sddp.fix`.
Exit codes (``../shared/CONTRACT.md``): 0 done (or, with ``--check``, nothing to change);
1 with ``--check`` when a file would change, and whenever a file cannot be parsed (it is left
untouched and reported as a KDP001/KDP002 finding); 2 for a usage error or a path that cannot be
read. With ``--check`` the unified diff goes to standard output (``git apply``/``patch -p1`` take
it) and the notes to standard error; otherwise the notes go to standard output.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from ..atomic import write_bytes_atomic
from ..errors import UsageError
from ..fix import FixResult, fix_text

#: Files fix reads inside a folder given on the command line.
SUFFIXES = (".yaml", ".yml", ".json")


def register(subparsers: Any) -> None:
    """Add the ``fix`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "fix",
        help="add the missing guard variables to PyTorchJob manifests, in place",
        description="Add the guard variables a profile demands to the pytorch container of every "
        "PyTorchJob in the given files, keeping comments, key order and formatting; "
        "idempotent; files are replaced atomically. A file that does not parse is never touched.",
    )
    p.add_argument("paths", nargs="+", metavar="FILE", help="manifest files or folders (*.yaml, *.yml, *.json)")
    p.add_argument("--check", action="store_true",
                   help="change nothing: print a unified diff and exit 1 when a file would change")
    p.add_argument("--profile", choices=("baseline", "strict"), default="baseline",
                   help="what to add (default: baseline)")
    p.add_argument("--active-deadline-seconds", type=_positive_int, default=None, metavar="N",
                   help="with --profile strict: set spec.runPolicy.activeDeadlineSeconds to N where absent")
    p.set_defaults(handler=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return value


def collect(paths: list[str]) -> list[Path]:
    """The files named by ``paths`` (folders searched recursively for :data:`SUFFIXES`, sorted).

    Raises:
        UsageError: a path does not exist, or is not a file or folder.
    """
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.suffix in SUFFIXES and f.is_file())
        elif p.is_file():
            files.append(p)
        elif not p.exists():
            raise UsageError(f"{raw}: no such file or folder")
        else:
            raise UsageError(f"{raw}: not a regular file or folder")
    return files


def _read(path: Path) -> str | None:
    """The file's text, or None when it is not UTF-8 (a finding, reported by the caller)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def unified_diff(old: str, new: str, fromfile: str, tofile: str) -> str:
    """A unified diff as ``diff -u``/git print it, ``\\ No newline at end of file`` included."""
    out = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=fromfile, tofile=tofile):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


def _print_notes(result: FixResult, out: TextIO, check: bool) -> None:
    for n in result.notes:
        mark = ("would fix" if check else "fixed") if n.changed else "left"
        print(f"{result.file}:{n.line}: {mark} {n.rule_id} {n.where}: {n.text}", file=out)


def run(args: argparse.Namespace) -> int:
    """Fix (or with ``--check`` diff) every file; see the module docstring for exit codes."""
    if args.active_deadline_seconds is not None and args.profile != "strict":
        raise UsageError("--active-deadline-seconds needs --profile strict")
    files = collect(args.paths)
    notes_out = sys.stderr if args.check else sys.stdout
    changed = broken = jobs = left = 0
    for path in files:
        name = str(path)
        text = _read(path)
        if text is None:
            print(f"{name}: error KDP001 not UTF-8 text; file left unchanged", file=sys.stderr)
            broken += 1
            continue
        try:
            result = fix_text(text, file=name, profile=args.profile,
                              active_deadline_seconds=args.active_deadline_seconds)
        except RuntimeError as exc:  # the self-check refused the result: never write it
            print(f"{name}: error {exc}", file=sys.stderr)
            broken += 1
            continue
        if result.error is not None:
            e = result.error
            print(f"{e.location()}: error {e.rule_id} {e.message}", file=sys.stderr)
            broken += 1
            continue
        jobs += result.jobs
        left += sum(1 for n in result.notes if not n.changed)
        _print_notes(result, notes_out, args.check)
        if not result.changed:
            continue
        changed += 1
        if args.check:
            rel = path.as_posix().lstrip("/")
            sys.stdout.write(unified_diff(result.original, result.fixed, f"a/{rel}", f"b/{rel}"))
        else:
            try:
                write_bytes_atomic(os.path.realpath(path), result.fixed.encode("utf-8"))
            except OSError as exc:
                raise UsageError(f"{name}: cannot write: {exc.strerror or exc}") from exc
    verb = "would change" if args.check else "changed"
    summary = (f"fix: {len(files)} file(s), {jobs} PyTorchJob(s); {changed} file(s) {verb}; "
               f"{broken} not parsed (left unchanged); {left} item(s) left for you")
    if left:
        summary += f" (check with `k8sddp validate --profile {args.profile}`)"
    print(summary, file=notes_out)
    if broken or (args.check and changed):
        return 1
    return 0
