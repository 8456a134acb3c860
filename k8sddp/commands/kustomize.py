"""``k8sddp kustomize openapi [-o FILE]``: the OpenAPI document for kustomize's ``openapi:`` field.

Put it inside the kustomization folder (kustomize refuses paths outside it) and name it there::

    k8sddp kustomize openapi > overlays/prod/pytorchjob-openapi.json
    # overlays/prod/kustomization.yaml:  openapi: {path: pytorchjob-openapi.json}

With it, a strategic-merge patch on a PyTorchJob merges ``containers``, ``env``, ``volumes``,
``volumeMounts`` and ``ports`` by key as for a Deployment, instead of replacing the whole lists
(and dropping the guard variables). What the document holds and how it is generated:
:mod:`k8sddp.kustomizegen`. Exit codes: 0, or 2 when ``-o`` cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..atomic import write_bytes_atomic
from ..errors import UsageError
from ..kustomizegen import OPENAPI_FILE
from ..resources import schemas_dir


def register(subparsers: Any) -> None:
    """Add ``kustomize openapi`` to ``subparsers``."""
    p = subparsers.add_parser("kustomize", help="kustomize helpers (openapi document for PyTorchJob patches)",
                              description="Helpers for kustomize users.")
    sub = p.add_subparsers(dest="kustomize_command", metavar="SUBCOMMAND")
    sub.required = True
    o = sub.add_parser(
        "openapi",
        help="print the OpenAPI document that makes kustomize merge PyTorchJob lists by key",
        description="Print the OpenAPI document for a kustomization's `openapi: {path: ...}` field: the "
        "PyTorchJob schema from the Kubeflow CRD with strategic-merge keys, plus the built-in workload "
        "kinds (a custom document replaces kustomize's built-in schema). Save it inside the "
        "kustomization folder.",
    )
    o.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of standard output")
    o.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print or write the shipped document."""
    data = (schemas_dir() / OPENAPI_FILE).read_bytes()
    if args.output:
        try:
            write_bytes_atomic(args.output, data)
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    else:
        sys.stdout.write(data.decode("utf-8"))
    return 0
