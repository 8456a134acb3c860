"""``k8sddp policy export``: print native admission policies that enforce ``baseline``.

``--format vap`` gives a ValidatingAdmissionPolicy and its binding (Kubernetes >= 1.30),
``--format kyverno`` a Kyverno ClusterPolicy (Kyverno >= 1.11). Exit codes: 0 written,
2 usage error (a name that is not a DNS-1123 subdomain, conflicting flags, ``--failure-policy``
with ``--format kyverno``, a ``--mode`` the format cannot express) or unwritable ``--out``.
``--mode deny|warn|audit`` (or ``warn,audit``, ``deny,audit``) sets the binding's
``validationActions`` so a platform team can roll out in Warn or Audit first. See
``docs/admission.md``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from typing import Any

from ..errors import UsageError

#: metadata.name of cluster-scoped objects (the VAP, its binding, a Kyverno ClusterPolicy):
#: an RFC 1123 subdomain (Kubernetes ``IsDNS1123Subdomain``: <= 253 characters).
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _object_name(text: str) -> str:
    """argparse type: a DNS-1123 subdomain, as the API server requires of these names."""
    if len(text) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a valid object name: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 253 characters (RFC 1123 subdomain)"
        )
    return text


#: ``--kind`` -> (module relative to this package, function) giving the ValidatingAdmissionPolicy
#: objects; ``("", "")`` is :func:`k8sddp.admission.policy.vap_objects`. Imported on use.
_VAP_EXPORTS: dict[str, tuple[str, str]] = {
    "pytorchjob": ("", ""),
    "runtimes": ("..admission.runtimepolicy", "runtime_vap_objects"),
    "ray": ("..admission.raypolicy", "ray_vap_objects"),
}


def register(subparsers: Any) -> None:
    """Add ``policy export`` to the CLI."""
    p = subparsers.add_parser("policy", help="native admission policies (VAP, Kyverno)")
    sub = p.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    sub.required = True
    e = sub.add_parser(
        "export",
        help="print a ValidatingAdmissionPolicy or Kyverno ClusterPolicy for the baseline profile",
        description="Print admission policy objects that enforce the baseline profile in the API server.",
    )
    e.add_argument("--format", choices=["vap", "kyverno"], required=True,
                   help="vap: ValidatingAdmissionPolicy + binding; kyverno: ClusterPolicy")
    e.add_argument("--kind", choices=list(_VAP_EXPORTS), default="pytorchjob",
                   help="pytorchjob (default: the PyTorchJob and TrainJob policies); runtimes: one policy and "
                   "binding per Trainer runtime kind (TrainingRuntime, ClusterTrainingRuntime; --format vap only); "
                   "ray: one per KubeRay kind (RayJob, RayCluster, RayService, RayCronJob; --format vap only)")
    e.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml",
                   help="yaml (documents separated by ---) or json (a v1 List)")
    e.add_argument("--out", default=None, metavar="FILE", help="write to FILE atomically instead of stdout")
    e.add_argument("--name", type=_object_name, default=None,
                   help="object name, an RFC 1123 subdomain (default k8sddp-baseline)")
    ns = e.add_mutually_exclusive_group()
    ns.add_argument("--exempt-namespace-label", default=None, metavar="KEY=VALUE",
                    help="namespaces with this label are not checked (default k8sddp.dev/guardrails=disabled)")
    ns.add_argument("--no-namespace-exemption", action="store_true", help="check every namespace")
    e.add_argument("--failure-policy", choices=["Fail", "Ignore"], default=None,
                   help="--format vap only: what an expression error does (default Fail); "
                   "an error with --format kyverno")
    e.add_argument("--mode", default="deny", metavar="deny|warn|audit",
                   help="what a violation does: deny (refuse), warn (admit, the client sees a warning), "
                   "audit (admit, an audit annotation records it), or a comma list such as warn,audit; "
                   "vap: the binding's validationActions; kyverno: deny or audit only (default deny)")
    e.set_defaults(handler=run)


def _block_dumper() -> Any:
    import yaml

    class Dumper(yaml.SafeDumper):
        """SafeDumper that prints multi-line strings (the CEL) as ``|`` blocks."""

    def _str(dumper: yaml.SafeDumper, data: str) -> Any:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, _str)
    return Dumper


def _label(text: str) -> tuple[str, str]:
    from ..admission.selector import SelectorError, parse_selector

    try:
        sel = parse_selector(text)
    except SelectorError as exc:
        raise UsageError(f"--exempt-namespace-label: {exc}") from exc
    reqs = sel.requirements
    if len(reqs) != 1 or reqs[0].op != "in" or len(reqs[0].values) != 1 or "=" not in text:
        raise UsageError(f"--exempt-namespace-label {text!r}: expected one KEY=VALUE")
    return reqs[0].key, reqs[0].values[0]


def _write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically; a failure names ``path``, not the temporary file."""
    from ..atomic import write_text_atomic

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, FileNotFoundError):
            why = "its folder does not exist"
        raise UsageError(f"cannot write --out {path}: {why}") from exc


def run(args: argparse.Namespace) -> int:
    """Build the objects and print or write them.

    Raises:
        UsageError: a bad ``--exempt-namespace-label`` or ``--mode``, ``--failure-policy`` with
            ``--format kyverno``, or an unwritable ``--out``.
    """
    import yaml

    _BlockDumper = _block_dumper()
    from ..admission.policy import DEFAULT_EXEMPT_LABEL, POLICY_NAME, kyverno_policy, vap_objects

    if args.failure_policy is not None and args.format != "vap":
        raise UsageError(
            "--failure-policy applies to --format vap only; a Kyverno ClusterPolicy has its own "
            "spec.failurePolicy (default Fail), which the exported policy leaves at its default"
        )
    from ..admission.policy import parse_mode

    try:
        actions = parse_mode(args.mode)
    except ValueError as exc:
        raise UsageError(f"--mode {exc}") from exc
    if args.format == "kyverno" and actions not in (["Deny"], ["Audit"]):
        raise UsageError(
            f"--mode {args.mode} cannot be expressed by a Kyverno ClusterPolicy: its "
            "validationFailureAction is Enforce (deny) or Audit (audit); use one of those"
        )
    exempt: tuple[str, str] | None = DEFAULT_EXEMPT_LABEL
    if args.no_namespace_exemption:
        exempt = None
    elif args.exempt_namespace_label:
        exempt = _label(args.exempt_namespace_label)
    name = args.name or POLICY_NAME
    if args.kind != "pytorchjob" and args.format != "vap":
        raise UsageError(f"--kind {args.kind} is exported as ValidatingAdmissionPolicies only (--format vap)")
    if args.format == "vap":
        module, function = _VAP_EXPORTS[args.kind]
        export = getattr(importlib.import_module(module, __package__), function) if module else vap_objects
        objs = export(name=name, exempt_label=exempt, failure_policy=args.failure_policy or "Fail", actions=actions)
    else:
        objs = [kyverno_policy(name=name, exempt_label=exempt, audit=actions == ["Audit"])]
    if args.output == "json":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2) + "\n"
    else:
        text = yaml.dump_all(objs, Dumper=_BlockDumper, sort_keys=False, width=100, explicit_start=True)
    if args.out:
        _write_atomic(args.out, text)
    else:
        sys.stdout.write(text)
    return 0
