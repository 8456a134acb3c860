"""``k8sddp diagnose DIR | --job NAME [-n NS] [--format text|json] [--plot FILE] [--restart N]``.

Exit codes (``../shared/CONTRACT.md``): 0 the report was written (whatever it found: diagnose
reports, it does not judge); 2 usage, a folder that holds no attempt, output that cannot be
written; 3 the cluster (``--job`` on a cluster: unreachable, forbidden, no such job).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import UsageError
from ._clusterflags import add_cluster_flags


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``diagnose`` subcommand."""
    p = subparsers.add_parser(
        "diagnose",
        help="name the rank and phase that diverged in a failed run (traces, stacks, flight recorder)",
        description="Align every rank's heartbeat trace, stacks, failure records and flight-recorder dump "
        "by step and collective sequence number and name the culprit: rank, node, phase, step, and the "
        "collective at which the ranks parted. Reads an artifact volume (K8SDDP_ARTIFACT_DIR: every "
        "node's runs/<attempt>/ folders), a 'submit --local' job (--job NAME), or a cluster job's "
        "claim through a short-lived reader pod (--job NAME; docs/diagnose.md lists its RBAC).",
    )
    p.add_argument("dir", nargs="?", metavar="DIR", help="the artifact volume, or one attempt folder")
    p.add_argument("--job", metavar="NAME", help="a job: its 'submit --local' folder if there is one, else the cluster's")
    p.add_argument("--local-dir", metavar="DIR", help="--job: the local folder (default ./.k8sddp-local/NAME)")
    p.add_argument("--cluster", action="store_true", help="--job: read from the cluster even if a local folder exists")
    p.add_argument("--claim", metavar="PVC", help="--job on a cluster: the claim to read (default: the one "
                   "mounted where K8SDDP_ARTIFACT_DIR points)")
    p.add_argument("--image", metavar="IMAGE", default=None,
                   help="--job on a cluster: the reader pod's image (default: busybox; it needs sh and tar)")
    p.add_argument("--format", default="text", choices=["text", "json"], help="output format (default: text)")
    p.add_argument("--plot", metavar="FILE", help="write a timeline of every rank's phases (.png or .svg)")
    p.add_argument("--restart", type=int, default=0, metavar="N",
                   help="which restart: 0 the newest (default), 1 the one before, ...")
    p.add_argument("--seconds", type=float, default=30.0, metavar="S",
                   help="--plot: the last S seconds before the failure (default 30)")
    add_cluster_flags(p)
    p.set_defaults(handler=run)


def resolve_source(args: argparse.Namespace) -> tuple[Path, object | None]:
    """The folder to read, and a cleanup handle (a temporary copy from the cluster) or ``None``.

    Raises:
        UsageError: neither or both of DIR and --job; a missing folder.
        ClusterError: the cluster read failed.
    """
    if bool(args.dir) == bool(args.job):
        raise UsageError("give either DIR or --job NAME")
    if args.dir:
        return Path(args.dir), None
    local = Path(args.local_dir) if args.local_dir else Path(".k8sddp-local") / args.job
    if not args.cluster and local.is_dir():
        return local, None
    if args.local_dir and not args.cluster:
        raise UsageError(f"--local-dir {local}: no such folder")
    from ..diagnose.remote import fetch_job_artifacts

    tmp = fetch_job_artifacts(args)
    return Path(tmp.name), tmp


def run(args: argparse.Namespace) -> int:
    """Handler: diagnose and print."""
    from ..diagnose import diagnose_dir
    from ..diagnose.text import render_text

    if args.restart < 0:
        raise UsageError("--restart must be >= 0")
    if not (0 < args.seconds <= 7 * 86400):  # nan, inf, <= 0: matplotlib's ValueError traceback
        raise UsageError(f"--seconds must be a number > 0 and <= 604800, got {args.seconds}")
    if args.plot and not args.plot.lower().endswith((".png", ".svg")):
        raise UsageError(f"--plot {args.plot}: the file name must end in .png or .svg")
    path, cleanup = resolve_source(args)
    try:
        try:
            diag = diagnose_dir(path, restart=args.restart)
        except (FileNotFoundError, IndexError) as exc:
            raise UsageError(str(exc).strip("'\"")) from None
        if args.plot:
            from ..diagnose.load import load
            from ..diagnose.plot import write_plot

            gen, _ = load(path, generation=args.restart)
            try:
                write_plot(diag, gen, Path(args.plot), seconds=args.seconds)
            except OSError as exc:
                raise UsageError(f"--plot {args.plot}: cannot write: {exc.strerror or exc}") from None
        if args.format == "json":
            text = json.dumps(diag.as_dict(), indent=2, default=str) + "\n"
        else:
            text = render_text(diag)
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise UsageError(f"cannot write the report: {exc.strerror or exc}") from None
    finally:
        if cleanup is not None:
            cleanup.cleanup()  # type: ignore[attr-defined]
    return 0
