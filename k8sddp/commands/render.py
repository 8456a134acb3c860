"""``k8sddp render SPEC [--target pytorchjob|trainjob] [--set PATH=VALUE ...]``: DDPJob spec -> manifest."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: Any) -> None:
    """Add the ``render`` subcommand to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "render",
        help="render a DDPJob spec into a guarded PyTorchJob, TrainJob, RayJob or RayCluster",
        description="Render a DDPJob spec (file or - for stdin) into a Kubeflow PyTorchJob (or a Trainer v2 TrainJob, a KubeRay RayJob or RayCluster, --target) with the guard "
        "variables, timeouts, /dev/shm and restart policy baked in. The output is validated (strict) before "
        "it is written. Exit codes: 0 ok, 1 invalid spec, 2 usage error or unreadable input.",
    )
    p.add_argument("spec", metavar="SPEC", help="DDPJob spec file, or - for stdin")
    from ..render.targets import TARGETS

    p.add_argument(
        "--target",
        choices=tuple(TARGETS),
        default="pytorchjob",
        help="what to render (default pytorchjob); trainjob: a Kubeflow Trainer v2 TrainJob for the runtime of `k8sddp runtime render`; rayjob, raycluster: KubeRay ray.io/v1 (docs/ray.md)",
    )
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="PATH=VALUE", help="override a spec value (repeatable), e.g. spec.nodes=4")
    p.add_argument("--set-string", dest="set_strings", action="append", default=[], metavar="PATH=VALUE", help="like --set, but VALUE is always a string (spec.torchVersion=2.10)")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format (default yaml)")
    p.add_argument("--out", metavar="FILE", help="write to FILE atomically instead of stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Render and write the manifest; return the exit code."""
    from ..errors import SpecError
    from ..render import load_spec, render_spec, to_yaml
    from .output import write_output

    spec = load_spec(args.spec, sets=args.sets, set_strings=args.set_strings)
    try:
        result = render_spec(spec, args.target)
    except SpecError as exc:
        exc.file = exc.file or ("<stdin>" if args.spec == "-" else args.spec)
        raise
    if args.output == "json":
        objs: Any = result.objects[0] if len(result.objects) == 1 else {"apiVersion": "v1", "kind": "List", "items": result.objects}
        text = json.dumps(objs, indent=2) + "\n"
    else:
        text = to_yaml(result.objects)
    write_output(text, args.out)
    return 0
