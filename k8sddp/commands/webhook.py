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
from .argtypes import port as _port
from .argtypes import positive_int as _count
from .argtypes import seconds as _seconds
from .argtypes import seconds_or_zero as _seconds_or_zero

log = logging.getLogger("k8sddp.webhook")


def _url_path(text: str) -> str:
    """argparse type: an absolute URL path (``/validate``), as ``clientConfig.service.path``."""
    if not text.startswith("/") or any(ch.isspace() or ch in "?#" for ch in text):
        raise argparse.ArgumentTypeError(f"{text!r}: must start with / and hold no spaces, ? or #")
    return text


def register(subparsers: Any) -> None:
    """Add ``webhook serve`` to the CLI. Numeric flags are checked by argparse (exit 2)."""
    p = subparsers.add_parser("webhook", help="validating admission webhook for PyTorchJobs")
    sub = p.add_subparsers(dest="webhook_command", metavar="SUBCOMMAND")
    sub.required = True
    s = sub.add_parser(
        "serve",
        help="serve AdmissionReview v1 over HTTPS",
        description="Serve the k8sddp validating admission webhook (AdmissionReview v1) over HTTPS. "
        "ConfigMap look-ups need the kubernetes package (pip install 'k8sddp[cluster]') and an "
        "in-cluster service account or --kubeconfig; --no-configmap-lookup runs without both.",
    )
    s.add_argument("--tls-cert-file", required=True, help="PEM certificate chain; reloaded when it changes")
    s.add_argument("--tls-private-key-file", required=True, help="PEM private key; reloaded when it changes")
    s.add_argument("--address", default="0.0.0.0",
                   help="listen address (default 0.0.0.0: in a pod the Service reaches the pod IP; "
                   "use 127.0.0.1 on a workstation)")
    s.add_argument("--port", type=_port, default=8443, help="listen port (default 8443; 0 picks a free one)")
    s.add_argument("--path", type=_url_path, default="/validate",
                   help="review endpoint path, starting with / (default /validate)")
    s.add_argument("--profile", choices=sorted(PROFILES), default="baseline", help="guardrail profile (default baseline)")
    s.add_argument("--max-request-bytes", type=_count, default=None,
                   help="largest request body in bytes, larger gets HTTP 413 (default 4 MiB)")
    s.add_argument("--no-configmap-lookup", action="store_true",
                   help="do not read ConfigMaps named by envFrom/valueFrom (their variables stay unverifiable); "
                   "needed to run without the kubernetes package or a cluster configuration")
    s.add_argument("--exempt-namespace-selector", default=None, metavar="SELECTOR",
                   help="label selector; jobs in namespaces it matches are admitted unchecked (needs get on namespaces)")
    s.add_argument("--kubeconfig", default=None, help="kubeconfig for look-ups outside a pod (default: in-cluster)")
    s.add_argument("--context", default=None, help="kubeconfig context")
    s.add_argument("--lookup-timeout", type=_seconds, default=2.0,
                   help="seconds all API look-ups of one review may take together, one try each "
                   "(default 2; keep well under the webhook's timeoutSeconds)")
    s.add_argument("--lookup-cache-seconds", type=_seconds_or_zero, default=5.0,
                   help="seconds a look-up is reused, 0 disables the cache (default 5)")
    s.add_argument("--cert-check-interval", type=_seconds_or_zero, default=1.0,
                   help="seconds between checks of the certificate files, 0: every connection (default 1)")
    s.add_argument("--idle-timeout", type=_seconds, default=30.0,
                   help="seconds a keep-alive connection may wait between requests (default 30)")
    s.add_argument("--request-timeout", type=_seconds, default=10.0,
                   help="seconds from a request's first byte until its request line, headers and body "
                   "are all received, however slowly they trickle; later gets 408 (default 10)")
    s.add_argument("--max-connections", type=_count, default=128,
                   help="connections served at once; one more gets HTTP 503 and is closed (default 128)")
    s.add_argument("--shutdown-delay", type=_seconds_or_zero, default=5.0,
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
    max_bytes = DEFAULT_MAX_BODY_BYTES if args.max_request_bytes is None else args.max_request_bytes
    selector = None
    if args.exempt_namespace_selector:
        try:
            selector = parse_selector(args.exempt_namespace_selector)
        except SelectorError as exc:
            raise UsageError(f"--exempt-namespace-selector: {exc}") from exc
    lookup = None
    if not args.no_configmap_lookup or selector is not None:
        from ..admission.lookup import KubeLookup

        # With --no-configmap-lookup only the namespace exemption needs the cluster.
        way_out = "drop --exempt-namespace-selector" if args.no_configmap_lookup else (
            "run with --no-configmap-lookup (guard variables from ConfigMaps then stay unverifiable)")
        lookup = KubeLookup(
            kubeconfig=args.kubeconfig, context=args.context,
            timeout_seconds=args.lookup_timeout, cache_seconds=args.lookup_cache_seconds,
            way_out=way_out,
        )
    tls = ReloadingTLS(args.tls_cert_file, args.tls_private_key_file, check_interval=args.cert_check_interval)
    decider = AdmissionDecider(
        profile=args.profile,
        configmaps=None if args.no_configmap_lookup else lookup,
        namespaces=lookup if selector is not None else None,
        exempt_selector=selector,
        runtimes=None if args.no_configmap_lookup else lookup,
        lookup_timeout=args.lookup_timeout,
    )
    app = WebhookApp(decider, tls, max_body_bytes=max_bytes, path=args.path)
    try:
        server = WebhookServer(
            (args.address, args.port), app, idle_timeout=args.idle_timeout,
            request_timeout=args.request_timeout, max_connections=args.max_connections,
        )
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
            "max_request_bytes": max_bytes, "lookup_timeout_s": args.lookup_timeout,
            "request_timeout_s": args.request_timeout, "max_connections": args.max_connections,
        },
    )
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
    log.info("stopped")
    return 0
