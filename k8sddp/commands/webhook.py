"""``k8sddp webhook serve``: run the validating admission webhook for PyTorchJobs over HTTPS.

Exit codes (``../shared/CONTRACT.md``): 0 after a clean stop (SIGTERM/SIGINT), 2 for bad flags,
unreadable certificate files or no Kubernetes configuration for the look-ups. Deployment,
RBAC and the webhook configuration: ``docs/admission.md`` and ``charts/k8sddp-webhook``.
"""

from __future__ import annotations

import argparse
import logging
import signal
from typing import Any

from ..catalogue import CATALOGUE_VERSION, PROFILES
from ..errors import UsageError

log = logging.getLogger("k8sddp.webhook")


def register(subparsers: Any) -> None:
    """Add ``webhook serve`` to the CLI."""
    p = subparsers.add_parser("webhook", help="validating admission webhook for PyTorchJobs")
    sub = p.add_subparsers(dest="webhook_command", metavar="SUBCOMMAND")
    sub.required = True
    s = sub.add_parser(
        "serve",
        help="serve AdmissionReview v1 over HTTPS",
        description="Serve the k8sddp validating admission webhook (AdmissionReview v1) over HTTPS.",
    )
    s.add_argument("--tls-cert-file", required=True, help="PEM certificate chain; reloaded when it changes")
    s.add_argument("--tls-private-key-file", required=True, help="PEM private key; reloaded when it changes")
    s.add_argument("--address", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    s.add_argument("--port", type=int, default=8443, help="listen port (default 8443)")
    s.add_argument("--path", default="/validate", help="review endpoint path (default /validate)")
    s.add_argument("--profile", choices=sorted(PROFILES), default="baseline", help="guardrail profile (default baseline)")
    s.add_argument("--max-request-bytes", type=int, default=None,
                   help="largest request body in bytes, larger gets HTTP 413 (default 4 MiB)")
    s.add_argument("--no-configmap-lookup", action="store_true",
                   help="do not read ConfigMaps named by envFrom/valueFrom (their variables stay unverifiable)")
    s.add_argument("--exempt-namespace-selector", default=None, metavar="SELECTOR",
                   help="label selector; jobs in namespaces it matches are admitted unchecked (needs get on namespaces)")
    s.add_argument("--kubeconfig", default=None, help="kubeconfig for look-ups outside a pod (default: in-cluster)")
    s.add_argument("--context", default=None, help="kubeconfig context")
    s.add_argument("--lookup-timeout", type=float, default=2.0, help="seconds per API look-up (default 2)")
    s.add_argument("--lookup-cache-seconds", type=float, default=5.0, help="seconds a look-up is reused (default 5)")
    s.add_argument("--cert-check-interval", type=float, default=1.0,
                   help="seconds between checks of the certificate files (default 1)")
    s.add_argument("--idle-timeout", type=float, default=30.0,
                   help="seconds an idle or slow connection is kept (default 30)")
    s.add_argument("--shutdown-delay", type=float, default=5.0,
                   help="seconds to keep serving while not ready after SIGTERM (default 5)")
    s.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    s.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Build the decider, look-ups and TLS context from ``args`` and serve until signalled.

    Raises:
        UsageError: bad flag values, unreadable certificate files, no Kubernetes configuration.
    """
    from .._version import __version__
    from ..admission.review import AdmissionDecider
    from ..admission.selector import SelectorError, parse_selector
    from ..admission.server import (
        DEFAULT_MAX_BODY_BYTES,
        WebhookApp,
        WebhookServer,
        configure_logging,
    )
    from ..admission.tlsreload import ReloadingTLS

    configure_logging(args.log_level)
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a TCP port")
    max_bytes = DEFAULT_MAX_BODY_BYTES if args.max_request_bytes is None else args.max_request_bytes
    if max_bytes <= 0:
        raise UsageError("--max-request-bytes must be positive")
    selector = None
    if args.exempt_namespace_selector:
        try:
            selector = parse_selector(args.exempt_namespace_selector)
        except SelectorError as exc:
            raise UsageError(f"--exempt-namespace-selector: {exc}") from exc
    lookup = None
    if not args.no_configmap_lookup or selector is not None:
        from ..admission.lookup import KubeLookup

        lookup = KubeLookup(
            kubeconfig=args.kubeconfig, context=args.context,
            timeout_seconds=args.lookup_timeout, cache_seconds=args.lookup_cache_seconds,
        )
    tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file, check_interval=args.cert_check_interval)
    decider = AdmissionDecider(
        profile=args.profile,
        configmaps=None if args.no_configmap_lookup else lookup,
        namespaces=lookup if selector is not None else None,
        exempt_selector=selector,
    )
    app = WebhookApp(decider, tls, max_body_bytes=max_bytes, path=args.path)
    try:
        server = WebhookServer((args.address, args.port), app, idle_timeout=args.idle_timeout)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.address}:{args.port}: {exc}") from exc

    def _on_signal(signum: int, _frame: Any) -> None:
        if not app.draining:
            server.drain_and_stop(args.shutdown_delay)

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    log.info(
        "serving",
        extra={
            "address": server.server_address[0], "port": server.server_address[1], "path": args.path,
            "profile": args.profile, "version": __version__, "catalogue_version": CATALOGUE_VERSION,
            "configmap_lookup": not args.no_configmap_lookup,
            "exempt_namespace_selector": str(selector) if selector else None,
            "max_request_bytes": max_bytes,
        },
    )
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
    log.info("stopped")
    return 0
