"""The HTTPS server of ``k8sddp webhook serve``: AdmissionReview in, AdmissionReview out.

Built on the standard library's ``ThreadingHTTPServer`` (one thread per connection, HTTP/1.1
keep-alive as the API server's Go client uses it) with ``ssl``; TLS is mandatory and the
certificate follows its files (:class:`k8sddp.admission.tlsreload.ReloadingTLS`). The TLS
handshake runs in the connection's thread, not in the accept loop, so a slow client cannot
stall other connections.

Endpoints (all over HTTPS):

- ``POST /validate``: an AdmissionReview v1. 200 with the response review; 400 (JSON
  ``Status``) for a body that is not a review or a bad ``Content-Length``; 405 for another
  method; 408 when the request is not received within ``request_timeout``; 411 without
  ``Content-Length``; 413 over ``max_body_bytes``; 503 when the bodies held in memory would pass
  their budget; 500 if the validator itself crashes (logged with the traceback).
- ``GET /healthz``: 200 while the process serves.
- ``GET /readyz``: 200 when a certificate is loaded and the server is not draining, else 503.

Limits against slow or many clients (:mod:`k8sddp.admission.limits`): a connection may idle
``idle_timeout`` seconds between requests; each request (line, headers, body) must arrive whole
within ``request_timeout`` seconds of its first byte; the TLS handshake gets
``min(idle_timeout, request_timeout)`` per read; at most ``max_connections`` connections are
served at once, and a connection past that is answered 503 (``/healthz`` still 200, so a flood
does not get the pod restarted) and closed; request bodies held at once are capped at
``BODY_BUDGET_FACTOR`` x ``max_body_bytes``.

Every response carries ``X-K8sddp-Version`` and ``X-K8sddp-Catalogue-Version`` headers; the
review responses also carry both as ``auditAnnotations`` (what the API server records).
Logs are one JSON object per line on stderr (:class:`JsonFormatter`).
"""

from __future__ import annotations

import http.server
import io
import json
import logging
import socket
import ssl
import sys
import threading
import time
from typing import Any

from .._version import __version__
from ..catalogue import CATALOGUE_VERSION
from .limits import DeadlineReader, Slots
from .review import AdmissionDecider, MalformedReview, parse_review, response_review
from .tlsreload import ReloadingTLS

__all__ = [
    "BODY_BUDGET_FACTOR",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_REQUEST_TIMEOUT",
    "JsonFormatter",
    "WebhookApp",
    "WebhookServer",
    "configure_logging",
]

log = logging.getLogger("k8sddp.webhook")

#: An object in etcd is at most 1.5 MiB (etcd ``--max-request-bytes`` default); an UPDATE review
#: carries ``object`` and ``oldObject`` plus JSON overhead, so 4 MiB admits any real review.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: Seconds a keep-alive connection may sit between requests (the API server reopens one).
DEFAULT_IDLE_TIMEOUT = 30.0
#: Seconds from a request's first byte until it is read whole. The API server sends a review
#: at once and waits at most the webhook's ``timeoutSeconds`` (<= 30 s, chart 5 s) in total.
DEFAULT_REQUEST_TIMEOUT = 10.0
#: Connections served at once. The API server keeps a few keep-alive connections per
#: instance; past this a new connection is answered 503 and closed.
DEFAULT_MAX_CONNECTIONS = 128
#: Request bodies held in memory at once are capped at this many times ``max_body_bytes``
#: (default 16 x 4 MiB = 64 MiB, under the chart's 256 MiB memory limit); past it: 503.
BODY_BUDGET_FACTOR = 16
#: How long a refused connection (over ``max_connections``) may take to be told so.
_REFUSE_SECONDS = 2.0
#: Refusals answered at once; past this a connection over the limit is closed unanswered.
_MAX_REFUSERS = 8

_STD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (RFC 3339 UTC), ``level``, ``logger``, ``msg`` and
    every ``extra=`` field; ``exc`` holds a formatted traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record (it may be replaced)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(level: str = "info", stream: Any = None) -> None:
    """Send the ``k8sddp`` loggers to ``stream`` (default: the current stderr) as JSON lines at
    ``level`` (``debug``, ``info``, ``warning``, ``error``)."""
    handler: logging.Handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("k8sddp")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


class WebhookApp:
    """What the handler needs: the decider, the limits, and the readiness state.

    Args:
        decider: decides each review.
        tls: the certificate holder (readiness needs a loaded certificate).
        max_body_bytes: largest accepted request body (bytes); larger gets 413.
        path: the review endpoint's path (the ``clientConfig.service.path`` of the webhook).
    """

    def __init__(
        self,
        decider: AdmissionDecider,
        tls: ReloadingTLS,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        path: str = "/validate",
    ) -> None:
        self.decider = decider
        self.tls = tls
        self.max_body_bytes = max_body_bytes
        self.path = path
        self.draining = False

    def readiness(self) -> tuple[bool, str]:
        """``(ready, reason)``: ready once a certificate is loaded and until draining starts."""
        if self.draining:
            return False, "draining"
        if not self.tls.ready:
            return False, "no certificate"
        return True, "ok"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"k8sddp-webhook/{__version__}"
    sys_version = ""
    wbufsize = -1  # buffer headers and body into one write (no Nagle/delayed-ACK stall)
    server: WebhookServer

    def version_string(self) -> str:
        return self.server_version  # no trailing space from an empty sys_version

    def setup(self) -> None:
        super().setup()
        conn = self.connection
        srv = self.server
        if isinstance(conn, ssl.SSLSocket):
            conn.settimeout(min(srv.idle_timeout, srv.request_timeout))
            conn.do_handshake()
        self.reader = DeadlineReader(conn, idle_timeout=srv.idle_timeout, request_timeout=srv.request_timeout)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        self.reader.next_request()
        super().handle_one_request()

    # -- plumbing ---------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("http", extra={"remote": self.client_address[0], "detail": format % args})

    def _send(self, code: int, body: bytes, content_type: str = "application/json",
              close: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-K8sddp-Version", __version__)
        self.send_header("X-K8sddp-Catalogue-Version", CATALOGUE_VERSION)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _status(self, code: int, reason: str, message: str, close: bool = False) -> None:
        body = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                "reason": reason, "message": message}
        self._send(code, json.dumps(body).encode(), close=close)

    # -- endpoints --------------------------------------------------------------------------
    def _not_allowed(self, allow: str, close: bool = False) -> None:
        self.send_response(405)
        body = json.dumps({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 405,
                           "reason": "MethodNotAllowed",
                           "message": f"{self.command} is not allowed on {self.path}; use {allow}"}).encode()
        self.send_header("Allow", allow)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-K8sddp-Version", __version__)
        self.send_header("X-K8sddp-Catalogue-Version", CATALOGUE_VERSION)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        app = self.server.app
        self.reader.done_reading()
        if self.path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
        elif self.path == "/readyz":
            ready, why = app.readiness()
            self._send(200 if ready else 503, (why + "\n").encode(), "text/plain; charset=utf-8")
        elif self.path.split("?", 1)[0] == app.path:
            self._not_allowed("POST")
        else:
            self._status(404, "NotFound", f"no such endpoint {self.path}")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        app = self.server.app
        start = time.perf_counter()
        if self.path.split("?", 1)[0] != app.path:
            if self.path in ("/healthz", "/readyz"):
                self._not_allowed("GET", close=True)  # the body (if any) is not read
                return
            self._status(404, "NotFound", f"no such endpoint {self.path}; reviews go to {app.path}",
                         close=True)
            return
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._status(411, "LengthRequired", "chunked bodies are not accepted; send Content-Length",
                         close=True)
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            self._status(411, "LengthRequired", "Content-Length header missing", close=True)
            return
        length = int(length_text) if length_text.strip().isdigit() and length_text.isascii() else -1
        if length < 0:
            self._status(400, "BadRequest", f"Content-Length {length_text[:40]!r} is not a byte count",
                         close=True)
            return
        if length > app.max_body_bytes:
            log.warning("request too large", extra={"remote": self.client_address[0], "bytes": length,
                                                    "limit": app.max_body_bytes})
            self._status(413, "RequestEntityTooLarge",
                         f"body of {length} bytes exceeds the limit of {app.max_body_bytes} bytes",
                         close=True)
            return
        budget = self.server.body_budget
        if not budget.acquire(length):
            log.warning("body budget full", extra={"remote": self.client_address[0], "bytes": length,
                                                   "held": budget.used, "limit": budget.limit})
            self._status(503, "ServiceUnavailable",
                         "k8sddp webhook is holding too many request bodies; retry", close=True)
            return
        try:
            body = self._read_body(length)
        finally:
            budget.release(length)
        if body is None:
            return
        try:
            request = parse_review(body)
        except MalformedReview as exc:
            log.warning("malformed review", extra={"remote": self.client_address[0], "error": str(exc)})
            self._status(400, "BadRequest", f"malformed AdmissionReview: {exc}")
            return
        try:
            verdict = app.decider.decide(request)
        except Exception:
            log.exception("validator crashed", extra={"uid": request.get("uid")})
            self._status(500, "InternalError", "k8sddp webhook failed to evaluate the review; see its log")
            return
        out = json.dumps(response_review(verdict), separators=(",", ":")).encode()
        log.info(
            "admission",
            extra={
                "uid": verdict.uid, "operation": verdict.operation, "kind": verdict.kind,
                "namespace": verdict.namespace, "job": verdict.name, "allowed": verdict.allowed,
                "reason": verdict.reason, "rules": verdict.failed_rules(), "profile": verdict.profile,
                "warnings": len(verdict.warnings),
                "duration_ms": round((time.perf_counter() - start) * 1000, 3),
                "remote": self.client_address[0],
            },
        )
        self._send(200, out)


    def _read_body(self, length: int) -> bytes | None:
        """The body, or ``None`` (answered 408, or the client went away) with the connection
        marked for closing."""
        try:
            body = self.rfile.read(length)
        except TimeoutError as exc:
            log.warning("request timed out", extra={"remote": self.client_address[0], "error": str(exc)})
            self._status(408, "Timeout", f"k8sddp webhook: {exc}", close=True)
            return None
        self.reader.done_reading()
        if len(body) != length:
            self.close_connection = True
            return None
        return body


class WebhookServer(http.server.ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that wraps each accepted socket in the current TLS context.

    Args:
        address: ``(host, port)``; port 0 picks a free one (see ``server_address``).
        app: the application state.
        idle_timeout: seconds a connection may sit idle between requests (> 0); the API
            server reopens closed keep-alive connections.
        request_timeout: seconds from a request's first byte until the whole request (line,
            headers, body) is read (> 0); later gets 408 or a closed connection. The TLS
            handshake gets ``min(idle_timeout, request_timeout)`` per read.
        max_connections: connections served at once (> 0); another one gets 503 and is closed.

    Raises:
        OSError: the address cannot be bound.
    """

    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        app: WebhookApp,
        *,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.app = app
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self.connections = Slots(max_connections)
        self.body_budget = Slots(BODY_BUDGET_FACTOR * app.max_body_bytes)
        self._refusers = Slots(_MAX_REFUSERS)
        self._last_refusal_log = 0.0
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if self.connections.acquire():
            super().process_request(request, client_address)
            return
        now = time.monotonic()
        if now - self._last_refusal_log > 1.0:  # at most one line a second under a flood
            self._last_refusal_log = now
            log.warning("connection limit reached", extra={"remote": client_address[0],
                                                           "limit": self.connections.limit})
        if not self._refusers.acquire():
            self.shutdown_request(request)
            return
        threading.Thread(target=self._refuse, args=(request,), name="refuse", daemon=True).start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def _refuse(self, sock: Any) -> None:
        """Answer a connection over ``max_connections``: 503 (``/healthz``: 200), then close.

        Everything (handshake, reading the request head, writing) gets ``_REFUSE_SECONDS``.
        """
        deadline = time.monotonic() + _REFUSE_SECONDS
        try:
            sock.settimeout(_REFUSE_SECONDS)
            if isinstance(sock, ssl.SSLSocket):
                sock.do_handshake()
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 16384:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                sock.settimeout(left)
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
            if head.startswith(b"GET /healthz "):
                code, reason, body = 200, "OK", b"ok\n"
                ctype = "text/plain; charset=utf-8"
            else:
                code, reason, ctype = 503, "Service Unavailable", "application/json"
                body = json.dumps({
                    "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 503,
                    "reason": "ServiceUnavailable",
                    "message": f"k8sddp webhook is serving its limit of {self.connections.limit} "
                               "connections; retry",
                }).encode()
            head_out = (
                f"HTTP/1.1 {code} {reason}\r\nServer: k8sddp-webhook/{__version__}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\nRetry-After: 1\r\n"
                f"X-K8sddp-Version: {__version__}\r\nX-K8sddp-Catalogue-Version: {CATALOGUE_VERSION}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.sendall(head_out + body)
        except (OSError, ValueError):
            pass
        finally:
            self.shutdown_request(sock)
            self._refusers.release()

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        sock.settimeout(min(self.idle_timeout, self.request_timeout))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctx = self.app.tls.context()
        return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError, OSError)):
            log.debug("connection error", extra={"remote": client_address[0], "error": repr(exc)})
        else:  # pragma: no cover - a bug in the handler
            log.exception("handler error", extra={"remote": client_address[0]})

    def drain_and_stop(self, delay: float) -> threading.Thread:
        """Report not ready, keep serving ``delay`` seconds (so endpoints drop this pod), then stop.

        Returns the thread doing it (join it to wait for the stop).
        """
        self.app.draining = True
        log.info("draining", extra={"delay_s": delay})

        def _stop() -> None:
            time.sleep(delay)
            self.shutdown()

        t = threading.Thread(target=_stop, name="drain", daemon=True)
        t.start()
        return t
