"""Slow and numerous clients (review 6 item 5) and the HTTP answers of review 6 item 12, over
real TLS on 127.0.0.1. Time bounds are generous: the machine is shared."""

from __future__ import annotations

import json
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import client_context, get, make_cert, post, rendered_job, review, running_webhook


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("tls"))


def _connect(server: Any, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=30)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def _read_all(s: ssl.SSLSocket) -> bytes:
    chunks = []
    try:
        while chunk := s.recv(65536):
            chunks.append(chunk)
    except (ConnectionError, ssl.SSLError):
        pass
    return b"".join(chunks)


def _trickle(s: ssl.SSLSocket, data: bytes, every: float, limit: float) -> float:
    """Send ``data`` one byte per ``every`` seconds until the server closes; seconds taken."""
    t0 = time.monotonic()
    for b in data:
        try:
            s.sendall(bytes([b]))
        except (ConnectionError, ssl.SSLError, OSError):
            break
        if time.monotonic() - t0 > limit:
            break
        time.sleep(every)
    return time.monotonic() - t0


def test_trickled_body_is_cut_at_the_request_deadline(certs: tuple[Path, Path]) -> None:
    ctx = client_context(certs[0])
    with running_webhook(*certs, request_timeout=1.5, idle_timeout=10) as srv, _connect(srv, ctx) as s:
        t0 = time.monotonic()
        s.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        _trickle(s, b"x" * 1000, every=0.25, limit=8)  # each byte well inside the idle timeout
        out = _read_all(s)
        took = time.monotonic() - t0
    assert took < 7, f"a trickled body was kept {took:.1f} s with a 1.5 s request deadline"
    assert out.startswith(b"HTTP/1.1 408 "), out[:200]
    assert b"not received within 1.5 s" in out


def test_trickled_headers_are_cut_at_the_request_deadline(certs: tuple[Path, Path]) -> None:
    ctx = client_context(certs[0])
    with running_webhook(*certs, request_timeout=1.5, idle_timeout=10) as srv:
        with _connect(srv, ctx) as s:
            t0 = time.monotonic()
            _trickle(s, b"POST /validate HTTP/1.1\r\n" + b"X-Pad: 1\r\n" * 100, every=0.25, limit=8)
            _read_all(s)
            took = time.monotonic() - t0
        assert took < 7, f"trickled headers were kept {took:.1f} s with a 1.5 s request deadline"
        # Keep-alive idle time is not request time: a quiet connection still serves later.
        with _connect(srv, ctx) as s:
            time.sleep(2.0)
            body = json.dumps(review(rendered_job(), uid="late")).encode()
            s.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
            assert _read_all(s).startswith(b"HTTP/1.1 200 ")


def test_connections_over_the_limit_get_503_and_healthz_still_answers(certs: tuple[Path, Path]) -> None:
    ctx = client_context(certs[0])
    with running_webhook(*certs, max_connections=3, idle_timeout=20) as srv:
        held = [_connect(srv, ctx) for _ in range(3)]  # idle keep-alive connections, handshake done
        try:
            time.sleep(0.3)
            status, headers, body = post(srv, ctx, review(rendered_job()))
            assert status == 503
            data = json.loads(body)
            assert data["reason"] == "ServiceUnavailable" and "limit of 3 connections" in data["message"]
            assert headers["retry-after"] == "1" and headers["connection"] == "close"
            assert get(srv, ctx, "/healthz") == (200, b"ok\n")
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 10
        while True:  # the held slots come back once the server sees the closes
            status, _, _ = post(srv, ctx, review(rendered_job()))
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status == 200
        assert srv.connections.used <= 1


def test_http_answers(certs: tuple[Path, Path]) -> None:
    """405 for a wrong method, 400 for a bad Content-Length, a clean Server header."""
    ctx = client_context(certs[0])
    with running_webhook(*certs) as srv:
        import http.client

        conn = http.client.HTTPSConnection("127.0.0.1", srv.server_address[1], context=ctx, timeout=30)
        conn.request("GET", "/validate")
        resp = conn.getresponse()
        assert resp.status == 405 and resp.getheader("Allow") == "POST"
        assert json.loads(resp.read())["reason"] == "MethodNotAllowed"
        assert resp.getheader("Server") == resp.getheader("Server", "").strip()
        assert resp.getheader("Server", "").startswith("k8sddp-webhook/")
        conn.close()
        assert post(srv, ctx, b"", path="/healthz")[0] == 405
        for bad in (b"-1", b"abc", b"1e3"):
            with _connect(srv, ctx) as s:
                s.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: " + bad + b"\r\n\r\n{}")
                out = _read_all(s)
            assert out.startswith(b"HTTP/1.1 400 "), out[:100]
            assert b"is not a byte count" in out


@pytest.mark.parametrize(
    ("drop", "fragment"), [("kind", "no kind"), ("operation", "operation None"), ("object", None)]
)
def test_review_missing_request_fields(certs: tuple[Path, Path], drop: str, fragment: str | None) -> None:
    ctx = client_context(certs[0])
    req = review(rendered_job(), uid="u-drop")
    del req["request"][drop]
    with running_webhook(*certs) as srv:
        status, _, body = post(srv, ctx, req)
    if fragment is None:  # a CREATE without object: a review answer that denies it (code 400)
        resp = json.loads(body)["response"]
        assert status == 200 and resp["allowed"] is False and resp["status"]["code"] == 400
    else:
        assert status == 400 and fragment in json.loads(body)["message"]


def test_pod_warning_names_the_core_group(certs: tuple[Path, Path]) -> None:
    ctx = client_context(certs[0])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    with running_webhook(*certs) as srv:
        resp = json.loads(post(srv, ctx, review(pod, kind=("", "v1", "Pod")))[2])["response"]
    assert resp["allowed"] is True
    assert resp["warnings"][0].startswith("k8sddp webhook: Pod (core/v1) is not checked")
