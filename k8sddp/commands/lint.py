"""``k8sddp lint PATH... [--format F] [--fail-on error|warning] [--fix]``.

Exit codes (``../shared/CONTRACT.md``): 0 nothing at or above ``--fail-on``; 1 findings at or
above it (a file that does not parse is such a finding, KDP500); 2 usage error or an unreadable
path or configuration.
"""

from __future__ import annotations

import argparse
import sys

from ..findings import Severity
from ..reporters import REPORTERS, render


def _ids(text: str) -> list[str]:
    return [t.strip().upper() for t in text.split(",") if t.strip()]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``lint`` subcommand."""
    p = subparsers.add_parser(
        "lint",
        help="check training scripts for distributed hang patterns (KDP5xx)",
        description="Check Python training scripts for the patterns that hang or damage DDP/FSDP jobs "
        "(rules KDP500-KDP513; docs/lint.md). Configuration: [tool.k8sddp.lint] in the nearest "
        "pyproject.toml; silence one line with '# noqa: KDP5nn'.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="Python files or folders ('-' for standard input)")
    p.add_argument("--format", default="text", choices=sorted(REPORTERS), help="output format (default: text)")
    p.add_argument("--fail-on", default="error", choices=["error", "warning"],
                   help="lowest severity that makes the exit code 1 (default: error)")
    p.add_argument("--fix", action="store_true", help="apply safe fixes in place (adds timeout= to init_process_group)")
    p.add_argument("--config", metavar="FILE", help="pyproject.toml to use instead of the nearest one")
    p.add_argument("--show-exempted", action="store_true",
                   help="text format: list each finding silenced by '# noqa' (default: only count them)")
    p.add_argument("--select", type=_ids, metavar="IDS", help="comma-separated rule id prefixes to check")
    p.add_argument("--ignore", type=_ids, metavar="IDS", help="comma-separated rule id prefixes to skip")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Lint, print the report in ``--format``, return the exit code."""
    from ..lint import lint_paths

    result = lint_paths(args.paths, config_file=args.config, select=args.select, ignore=args.ignore, fix=args.fix)
    if args.format == "text":
        from ..reporters import text

        sys.stdout.write(text.render(result.report, tool="lint", show_exempted=args.show_exempted))
    else:
        sys.stdout.write(render(result.report, args.format, tool="lint"))
    if args.fix:
        print(f"lint: fixed {result.fixed} finding(s) in {len(result.fixed_files)} file(s)", file=sys.stderr)
    return result.report.exit_code(Severity(args.fail_on))
