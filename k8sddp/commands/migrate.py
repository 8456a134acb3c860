"""``k8sddp migrate FILE``: Kubeflow PyTorchJobs into Trainer v2 TrainJobs (docs/migrate.md)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

#: Read at most this much (the API server stores objects up to about 1.5 MiB; as `fix`).
MAX_INPUT_BYTES = 16 * 1024 * 1024
#: A runtime's name: a DNS-1123 subdomain (Kubernetes object names), leaving room for ``-JOB``.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_RUNTIME_NAME = 253 - 64


def runtime_name(text: str) -> str:
    """``--runtime-name``: a DNS-1123 subdomain of at most :data:`MAX_RUNTIME_NAME` characters."""
    if not _NAME.fullmatch(text) or len(text) > MAX_RUNTIME_NAME:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Kubernetes object name (lower-case letters, digits, '-' and '.', at most {MAX_RUNTIME_NAME})")
    return text


def register(sub: Any) -> None:
    """Add the ``migrate`` subcommand to ``sub`` (an argparse subparsers object)."""
    from ..kinds.trainerpolicy import DEFAULT_MAX_RESTARTS
    from ..render.model import DEFAULTS
    from ..render.trainer import DEFAULT_RUNTIME, RUNTIME_ARTIFACT_CLAIM
    from .argtypes import positive_int

    p = sub.add_parser(
        "migrate",
        help="turn Kubeflow PyTorchJobs into Trainer v2 TrainJobs",
        description="Turn every Kubeflow PyTorchJob (kubeflow.org/v1) of FILE into a Trainer v2 TrainJob "
        "(trainer.kubeflow.org/v1alpha1) that refers to k8sddp's guarded ClusterTrainingRuntime (written into the "
        "output too), or to the job's own TrainingRuntime when its pod template has what a TrainJob cannot carry. "
        "Other objects pass through as written; comments move with the values they belong to. Notes go to standard "
        "error (FILE:LINE: info|lost|error: ...), what is lost also as comments above the TrainJob. The output is "
        "checked with validate (strict when the PyTorchJob passed strict). Exit codes: 0 migrated faithfully, "
        "1 something has no v2 equivalent or the output fails validate (output written), or a job cannot be "
        "migrated or the YAML is invalid (nothing written), 2 usage error, unreadable input, no PyTorchJob in it, "
        "or unwritable output.",
    )
    p.add_argument("file", metavar="FILE", help="manifest file, or - for standard input")
    p.add_argument("--out", metavar="FILE", help="write to FILE atomically instead of standard output")
    p.add_argument("--runtime-name", metavar="NAME", type=runtime_name, default=DEFAULT_RUNTIME,
                   help=f"the guarded ClusterTrainingRuntime the TrainJobs refer to (default {DEFAULT_RUNTIME}); a job "
                   "that needs its own runtime gets the TrainingRuntime NAME-JOB")
    p.add_argument("--runtime", choices=("guarded", "stock"), default="guarded",
                   help="guarded (default): k8sddp's runtime (guards, /dev/shm, exit-code failure policy); stock: "
                   "Trainer's torch-distributed (no guards: the baseline variables go to spec.trainer.env; refused "
                   "for a job that needs its own runtime)")
    p.add_argument("--no-runtime", action="store_true",
                   help="leave the shared guarded runtime out of the output (it is installed in the cluster already)")
    p.add_argument("--artifact-claim", metavar="CLAIM", default=RUNTIME_ARTIFACT_CLAIM,
                   help=f"the guarded runtimes' artifact PersistentVolumeClaim (default {RUNTIME_ARTIFACT_CLAIM}, as `runtime render`)")
    p.add_argument("--shm-size", metavar="SIZE", default=DEFAULTS["shmSize"], help=f"their /dev/shm sizeLimit (default {DEFAULTS['shmSize']})")
    p.add_argument("--max-restarts", metavar="N", type=positive_int, default=DEFAULT_MAX_RESTARTS,
                   help=f"their JobSet restarts for retryable failures (default {DEFAULT_MAX_RESTARTS})")
    p.add_argument("-q", "--quiet", action="store_true", help="print only lost and error notes")
    p.set_defaults(handler=run)


def _read(name: str) -> str:
    from ..errors import UsageError

    try:
        if name == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1) if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
            if not data.strip():
                raise UsageError("-: nothing on standard input")
        else:
            with open(name, "rb") as fh:
                data = fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"{name}: larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB, the input limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{name}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from exc


def run(args: argparse.Namespace) -> int:
    """Migrate, write the output, print the notes; return the exit code."""
    from ..errors import UsageError
    from .output import write_output
    try:
        from ..migrate import migrate_text
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "ruamel":
            raise
        raise UsageError("k8sddp migrate needs ruamel.yaml (round-trip YAML, to keep comments): pip install 'k8sddp[migrate]'") from exc
    from ..migrate.convert import INFO
    from ..migrate.document import ERROR

    if args.runtime == "stock" and args.no_runtime:
        raise UsageError("--no-runtime: the stock runtime is never written; drop one of the two")
    name = "<stdin>" if args.file == "-" else args.file
    result = migrate_text(_read(args.file), name, runtime_name=args.runtime_name, stock=args.runtime == "stock",
                          include_runtime=not args.no_runtime,
                          runtime_options={"artifact_claim": args.artifact_claim, "shm_size": args.shm_size,
                                           "max_restarts": args.max_restarts})
    for notice in result.notices:
        if not (args.quiet and notice.note.level == INFO):
            print(f"k8sddp migrate: {notice.format(name)}", file=sys.stderr)
    if result.text is None:
        errors = sum(n.note.level == ERROR for n in result.notices)
        print(f"k8sddp migrate: {errors} error(s): nothing written", file=sys.stderr)
        return 1
    write_output(result.text, args.out)
    return result.exit_code
