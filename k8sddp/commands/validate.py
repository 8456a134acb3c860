"""``k8sddp validate PATH... | -``: check manifests against structure and a guardrail profile."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._clusterflags import add_cluster_flags, connect
from .argtypes import positive_int as _positive_int

FORMATS = ("text", "json", "github", "sarif", "junit")


def register(sub: Any) -> None:
    """Add the ``validate`` subcommand to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "validate",
        help="check PyTorchJob manifests against the guardrails",
        description="Check manifests (files, folders, or - for stdin) for structure and guardrail violations. "
        "With --cluster (and the cluster flags of submit), references the input lacks are read from the API server. "
        "Exit codes: 0 clean, 1 findings, 2 usage error, unreadable or empty input, or output that cannot be written, "
        "3 --cluster: the API server could not be read (unreachable, forbidden).",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="manifest files, folders (recursive), or - for stdin")
    p.add_argument("--profile", choices=("baseline", "strict"), default=None, help="guardrail profile (default: baseline, or the config's)")
    p.add_argument("--format", dest="fmt", default="text", help="output format: " + "|".join(FORMATS))
    p.add_argument("--config", help="repository configuration file (exemptions, default profile)")
    p.add_argument("--fail-on", choices=("error", "warning"), default="error", help="lowest severity that fails (default: error)")
    p.add_argument("--jobs", type=_positive_int, default=None, help="worker processes (default: every core)")
    p.add_argument(
        "--cluster",
        action="store_true",
        help="read what the input refers to but lacks (a TrainJob's ClusterTrainingRuntime or TrainingRuntime, "
        "the ConfigMaps the training containers read env from) from the API server, read-only (GET by name); "
        "a failed read exits 3",
    )
    add_cluster_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Validate and print the report; return the exit code."""
    from ..errors import ClusterError, UsageError
    from ..findings import Severity
    from ..reporters import REPORTERS
    from ..validate import load_config, validate_paths

    if args.fmt not in REPORTERS:
        raise UsageError(f"unknown --format {args.fmt!r}; available: {', '.join(REPORTERS)}")
    config = load_config(args.config) if args.config else None
    profile = args.profile or (config.profile if config and config.profile else "baseline")
    given = [flag for flag, value in (("-n", args.namespace), ("--context", args.context), ("--kubeconfig", args.kubeconfig)) if value]
    if given and not args.cluster:
        raise UsageError(f"{', '.join(given)} only apply with --cluster (validate reads the input alone otherwise)")
    cluster = connect(args) if args.cluster else None
    try:
        report = validate_paths(args.paths, profile=profile, config=config, jobs=args.jobs, cluster=cluster,
                                namespace=cluster.namespace if cluster is not None else None)
    except (UsageError, ClusterError) as exc:
        if args.fmt == "sarif":
            # A SARIF consumer must see a failed analysis, not an empty (or clean) one.
            from ..reporters.sarif import render_failed

            sys.stdout.write(render_failed(str(exc), tool="validate"))
        raise
    finally:
        if cluster is not None:
            cluster.close()
    sys.stdout.write(REPORTERS[args.fmt](report, tool="validate"))
    if report.documents == 0 and not report.findings:
        # Exit 0 per the contract (nothing to report), but a mistyped folder or an empty pipe
        # (`render ... | validate -` after render failed) must not pass unnoticed.
        print("k8sddp validate: warning: no Kubernetes documents in the input", file=sys.stderr)
    return report.exit_code(Severity(args.fail_on))
