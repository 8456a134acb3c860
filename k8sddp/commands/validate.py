"""``k8sddp validate PATH... | -``: check manifests against structure and a guardrail profile."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .argtypes import positive_int as _positive_int

FORMATS = ("text", "json", "github", "sarif", "junit")


def register(sub: Any) -> None:
    """Add the ``validate`` subcommand to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "validate",
        help="check PyTorchJob manifests against the guardrails",
        description="Check manifests (files, folders, or - for stdin) for structure and guardrail violations. "
        "Exit codes: 0 clean, 1 findings, 2 usage error, unreadable or empty input, or output that cannot be written.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="manifest files, folders (recursive), or - for stdin")
    p.add_argument("--profile", choices=("baseline", "strict"), default=None, help="guardrail profile (default: baseline, or the config's)")
    p.add_argument("--format", dest="fmt", default="text", help="output format: " + "|".join(FORMATS))
    p.add_argument("--config", help="repository configuration file (exemptions, default profile)")
    p.add_argument("--fail-on", choices=("error", "warning"), default="error", help="lowest severity that fails (default: error)")
    p.add_argument("--jobs", type=_positive_int, default=None, help="worker processes (default: every core)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Validate and print the report; return the exit code."""
    from ..errors import UsageError
    from ..findings import Severity
    from ..reporters import REPORTERS
    from ..validate import load_config, validate_paths

    if args.fmt not in REPORTERS:
        raise UsageError(f"unknown --format {args.fmt!r}; available: {', '.join(REPORTERS)}")
    config = load_config(args.config) if args.config else None
    profile = args.profile or (config.profile if config and config.profile else "baseline")
    try:
        report = validate_paths(args.paths, profile=profile, config=config, jobs=args.jobs)
    except UsageError as exc:
        if args.fmt == "sarif":
            # A SARIF consumer must see a failed analysis, not an empty (or clean) one.
            from ..reporters.sarif import render_failed

            sys.stdout.write(render_failed(str(exc), tool="validate"))
        raise
    sys.stdout.write(REPORTERS[args.fmt](report, tool="validate"))
    if report.documents == 0 and not report.findings:
        # Exit 0 per the contract (nothing to report), but a mistyped folder or an empty pipe
        # (`render ... | validate -` after render failed) must not pass unnoticed.
        print("k8sddp validate: warning: no Kubernetes documents in the input", file=sys.stderr)
    return report.exit_code(Severity(args.fail_on))
