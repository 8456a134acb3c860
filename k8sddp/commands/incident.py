"""``k8sddp incident new DIR [--out FOLDER] [--restart N]`` and ``k8sddp incident check FOLDER``.

Exit codes: ``new`` 0 written, 2 usage/unreadable/unwritable; ``check`` 0 every record valid,
1 findings (each ``file: path: message``), 2 a folder that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..atomic import write_text_atomic
from ..errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``incident new`` and ``incident check``."""
    p = subparsers.add_parser("incident", help="write or check incident records (trigger, hypothesis, guardrail)",
                              description="Incident records: Markdown with YAML front matter validated by "
                              "schemas/incident.schema.json, pre-filled from 'k8sddp diagnose' and the run records.")
    sub = p.add_subparsers(dest="incident_command", metavar="ACTION")
    sub.required = True
    new = sub.add_parser("new", help="write a record for the newest failure in an artifact volume")
    new.add_argument("dir", metavar="DIR", help="the artifact volume (or one attempt folder)")
    new.add_argument("--out", default="docs/incidents", metavar="FOLDER", help="where to write (default docs/incidents/)")
    new.add_argument("--restart", type=int, default=0, metavar="N", help="which restart (0: the newest)")
    new.set_defaults(handler=run_new)
    chk = sub.add_parser("check", help="validate every record in a folder (for CI)")
    chk.add_argument("dir", metavar="FOLDER", help="folder of *.md records, or one record's file")
    chk.set_defaults(handler=run_check)
    p.set_defaults(handler=lambda a: p.error("give an action: new or check"))


def run_new(args: argparse.Namespace) -> int:
    """Handler: write a new record, print its path."""
    from ..diagnose.analyze import analyse
    from ..diagnose.incident import render_record
    from ..diagnose.load import load

    try:
        gen, count = load(Path(args.dir), generation=args.restart)
    except (FileNotFoundError, IndexError) as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    diag = analyse(gen, restarts=count, root=args.dir)
    if not diag.culprits:  # running, finished, unreadable: no failure to record
        raise UsageError(f"{args.dir}: nothing to record: {diag.verdict}")
    name, text = render_record(diag, gen)
    out = Path(args.out)
    target = out / name
    n = 2
    while target.exists():
        target = out / f"{name[:-3]}-{n}.md"
        n += 1
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, text)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    print(target)
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Handler: validate the records; 1 when any is invalid."""
    from ..diagnose.incident import check_record

    folder = Path(args.dir)
    if folder.is_file():  # one record (a pre-commit hook passes files)
        files = [folder]
    elif not folder.is_dir():
        raise UsageError(f"{folder}: no such folder or file")
    else:
        files = sorted(p for p in folder.glob("*.md") if p.name.lower() != "readme.md")
    problems = [msg for f in files for msg in check_record(f)]
    for msg in problems:
        print(msg)
    print(f"k8sddp incident check: {len(files)} record(s), {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0
