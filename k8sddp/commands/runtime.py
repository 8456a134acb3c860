"""``k8sddp runtime render``: the guarded Kubeflow Trainer v2 ClusterTrainingRuntime (docs/trainer.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .argtypes import positive_int


def register(sub: Any) -> None:
    """Add the ``runtime`` subcommand to ``sub`` (an argparse subparsers object)."""
    from ..render.model import DEFAULTS
    from ..render.trainer import (
        DEFAULT_RUNTIME,
        RUNTIME_ARTIFACT_CLAIM,
        RUNTIME_ARTIFACT_MOUNT,
        RUNTIME_IMAGE,
    )

    p = sub.add_parser("runtime", help="Kubeflow Trainer v2 training runtimes", description="Kubeflow Trainer v2 training runtimes.")
    rsub = p.add_subparsers(dest="runtime_command", metavar="COMMAND")
    rsub.required = True
    r = rsub.add_parser(
        "render",
        help="render the guarded ClusterTrainingRuntime",
        description="Render the ClusterTrainingRuntime a platform team installs once: the guard variables in the node "
        "container, a memory-backed /dev/shm, an artifact volume, the exit-code failure policy (final 1-127, retryable "
        ">= 128) and a `k8sddp launch` command. The output is validated (strict) before it is written. "
        "Exit codes: 0 ok, 1 an unusable option value, 2 usage error or unwritable output.",
    )
    r.add_argument("--name", default=DEFAULT_RUNTIME, help=f"the runtime's name (default {DEFAULT_RUNTIME}; `render --target trainjob` refers to it)")
    r.add_argument("--image", default=RUNTIME_IMAGE, help="the node container's default image (a TrainJob's spec.trainer.image replaces it)")
    r.add_argument("--torch-version", default=None, help="the image's torch version (older than 2.2 gets NCCL_ASYNC_ERROR_HANDLING)")
    r.add_argument("--artifact-claim", default=RUNTIME_ARTIFACT_CLAIM, help=f"PersistentVolumeClaim of the artifact volume (default {RUNTIME_ARTIFACT_CLAIM})")
    r.add_argument("--artifact-mount", default=RUNTIME_ARTIFACT_MOUNT, help=f"where it is mounted (default {RUNTIME_ARTIFACT_MOUNT})")
    r.add_argument("--shm-size", default=DEFAULTS["shmSize"], help=f"sizeLimit of /dev/shm (default {DEFAULTS['shmSize']})")
    r.add_argument("--max-restarts", type=positive_int, default=3, help="JobSet restarts for retryable failures (default 3)")
    r.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format (default yaml)")
    r.add_argument("--out", metavar="FILE", help="write to FILE atomically instead of stdout")
    r.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Render and write the runtime; return the exit code."""
    from ..render import render_runtime, to_yaml
    from .output import write_output

    result = render_runtime(
        name=args.name,
        image=args.image,
        torch_version=args.torch_version,
        artifact_claim=args.artifact_claim,
        artifact_mount=args.artifact_mount,
        shm_size=args.shm_size,
        max_restarts=args.max_restarts,
    )
    text = json.dumps(result.objects[0], indent=2) + "\n" if args.output == "json" else to_yaml(result.objects)
    write_output(text, args.out)
    return 0
