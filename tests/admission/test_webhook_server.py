"""The webhook over real HTTPS on 127.0.0.1: verdicts, protocol answers, limits, health."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp._version import __version__
from k8sddp.admission.review import AdmissionDecider
from k8sddp.admission.server import configure_logging
from k8sddp.catalogue import CATALOGUE_VERSION

from .helpers import (
    KUBEFLOW_EXAMPLES,
    client_context,
    get,
    make_cert,
    post,
    remove_env,
    rendered_job,
    review,
    running_webhook,
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(certs: tuple[Path, Path]) -> Any:
    with running_webhook(*certs, max_body_bytes=256 * 1024) as srv:
        yield srv


@pytest.fixture(scope="module")
def ctx(certs: tuple[Path, Path]) -> ssl.SSLContext:
    return client_context(certs[0])


def _response(body: bytes) -> dict[str, Any]:
    out = json.loads(body)
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    return out["response"]


def test_guarded_job_is_allowed_with_versions_and_uid(server: Any, ctx: ssl.SSLContext) -> None:
    req = review(rendered_job(), uid="4b1d-uid-1")
    status, headers, body = post(server, ctx, req)
    assert status == 200
    resp = _response(body)
    assert resp["uid"] == "4b1d-uid-1"
    assert resp["allowed"] is True
    assert "status" not in resp
    assert resp["auditAnnotations"]["k8sddp-version"] == __version__
    assert resp["auditAnnotations"]["catalogue-version"] == CATALOGUE_VERSION
    assert resp["auditAnnotations"]["profile"] == "baseline"
    assert headers["x-k8sddp-version"] == __version__
    assert headers["x-k8sddp-catalogue-version"] == CATALOGUE_VERSION


def test_kubeflow_example_is_denied_with_findings(server: Any, ctx: ssl.SSLContext) -> None:
    path = KUBEFLOW_EXAMPLES / "pytorch_job_mnist_nccl.yaml"
    if not path.exists():
        pytest.skip("../shared/reference not present")
    job = yaml.safe_load(path.read_text())
    status, _, body = post(server, ctx, review(job, uid="u-2"))
    assert status == 200
    resp = _response(body)
    assert resp["uid"] == "u-2" and resp["allowed"] is False
    assert resp["status"]["code"] == 403 and resp["status"]["reason"] == "Forbidden"
    msg = resp["status"]["message"]
    assert "KDP201" in msg and "KDP202" in msg and "TORCH_NCCL_ASYNC_ERROR_HANDLING" in msg
    assert CATALOGUE_VERSION in msg
    assert resp["auditAnnotations"]["failed-rules"] == "KDP201,KDP202"


def test_one_missing_variable_names_only_its_rule(server: Any, ctx: ssl.SSLContext) -> None:
    job = remove_env(rendered_job(), "PYTHONFAULTHANDLER")
    resp = _response(post(server, ctx, review(job))[2])
    assert resp["allowed"] is False
    assert "KDP202" in resp["status"]["message"] and "KDP201" not in resp["status"]["message"]


def test_exempted_rule_is_allowed_and_reported_as_warning(server: Any, ctx: ssl.SSLContext) -> None:
    job = remove_env(rendered_job(), "PYTHONFAULTHANDLER")
    job["metadata"]["annotations"] = {"k8sddp.dev/exempt": "KDP202", "k8sddp.dev/exempt-reason": "debug build"}
    resp = _response(post(server, ctx, review(job))[2])
    assert resp["allowed"] is True
    assert any(w.startswith("KDP202 exempted") and "debug build" in w for w in resp["warnings"])
    assert all(len(w) <= 256 for w in resp["warnings"])


def test_unchanged_update_delete_and_other_kinds_are_allowed(server: Any, ctx: ssl.SSLContext) -> None:
    bad = remove_env(rendered_job(), "PYTHONFAULTHANDLER")
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"]["labels"]["new"] = "label"
    resp = _response(post(server, ctx, review(relabelled, operation="UPDATE", old=bad))[2])
    assert resp["allowed"] is True
    changed = copy.deepcopy(bad)
    changed["spec"]["runPolicy"]["backoffLimit"] = 5
    resp = _response(post(server, ctx, review(changed, operation="UPDATE", old=bad))[2])
    assert resp["allowed"] is False
    deleting = copy.deepcopy(changed)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    assert _response(post(server, ctx, review(deleting, operation="UPDATE", old=bad))[2])["allowed"] is True
    assert _response(post(server, ctx, review(None, operation="DELETE"))[2])["allowed"] is True
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    resp = _response(post(server, ctx, review(pod, kind=("", "v1", "Pod")))[2])
    assert resp["allowed"] is True and "is not checked" in resp["warnings"][0]


def test_create_without_object_is_denied_400(server: Any, ctx: ssl.SSLContext) -> None:
    resp = _response(post(server, ctx, review(None, uid="u-none"))[2])
    assert resp["uid"] == "u-none" and resp["allowed"] is False and resp["status"]["code"] == 400


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}).encode(), "admission.k8s.io/v1"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "no request"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}).encode(), "no uid"),
    ],
)
def test_malformed_review_gets_400_status(server: Any, ctx: ssl.SSLContext, body: bytes, fragment: str) -> None:
    status, headers, out = post(server, ctx, body)
    assert status == 400
    data = json.loads(out)
    assert data["kind"] == "Status" and data["code"] == 400 and data["reason"] == "BadRequest"
    assert fragment in data["message"]
    assert headers["x-k8sddp-catalogue-version"] == CATALOGUE_VERSION


def test_body_over_limit_gets_413_without_reading_it(server: Any, ctx: ssl.SSLContext) -> None:
    # Only the headers are sent: the server must answer from Content-Length alone.
    out = _raw(server, ctx, b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 300000\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close" in head
    assert "exceeds the limit of 262144 bytes" in json.loads(body)["message"]


def _raw(server: Any, ctx: ssl.SSLContext, data: bytes) -> bytes:
    chunks: list[bytes] = []
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=30) as raw, ctx.wrap_socket(
        raw, server_hostname="localhost"
    ) as s:
        s.sendall(data)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def test_missing_content_length_gets_411(server: Any, ctx: ssl.SSLContext) -> None:
    out = _raw(server, ctx, b"POST /validate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n{}")
    assert out.startswith(b"HTTP/1.1 411 ")


def test_keep_alive_serves_several_reviews_on_one_connection(server: Any, ctx: ssl.SSLContext) -> None:
    import http.client

    conn = http.client.HTTPSConnection("127.0.0.1", server.server_address[1], context=ctx, timeout=30)
    try:
        for i in range(3):
            conn.request("POST", "/validate", body=json.dumps(review(rendered_job(), uid=f"k{i}")))
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read())["response"]["uid"] == f"k{i}"
    finally:
        conn.close()


def test_health_readiness_and_unknown_paths(server: Any, ctx: ssl.SSLContext) -> None:
    assert get(server, ctx, "/healthz") == (200, b"ok\n")
    assert get(server, ctx, "/readyz") == (200, b"ok\n")
    assert get(server, ctx, "/nope")[0] == 404
    assert post(server, ctx, review(rendered_job()), path="/mutate")[0] == 404


def test_readiness_fails_while_draining(certs: tuple[Path, Path], ctx: ssl.SSLContext) -> None:
    with running_webhook(*certs) as srv:
        srv.app.draining = True
        assert get(srv, ctx, "/readyz") == (503, b"draining\n")
        assert get(srv, ctx, "/healthz")[0] == 200


def test_plain_http_is_refused(server: Any) -> None:
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=30) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = s.recv(1024)
        except ConnectionResetError:
            data = b""
    assert not data.startswith(b"HTTP/1.1 200")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_old_tls_versions_are_refused(server: Any, certs: tuple[Path, Path]) -> None:
    ctx = client_context(certs[0])
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with contextlib.suppress(ssl.SSLError):
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        get(server, ctx, "/healthz")


def test_logs_are_json_lines_with_the_decision(certs: tuple[Path, Path], ctx: ssl.SSLContext) -> None:
    stream = io.StringIO()
    configure_logging("info", stream)
    try:
        with running_webhook(*certs) as srv:
            job = remove_env(rendered_job(), "PYTHONFAULTHANDLER")
            post(srv, ctx, review(job, uid="log-1", namespace="ns-log"))
            post(srv, ctx, b"garbage")
    finally:
        logging.getLogger("k8sddp").handlers.clear()
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    admission = [r for r in records if r["msg"] == "admission"]
    assert len(admission) == 1
    rec = admission[0]
    assert rec["uid"] == "log-1" and rec["namespace"] == "ns-log" and rec["allowed"] is False
    assert rec["rules"] == ["KDP202"] and rec["level"] == "info" and rec["duration_ms"] > 0
    assert rec["ts"].endswith("Z")
    assert any(r["msg"] == "malformed review" and r["level"] == "warning" for r in records)


def test_validator_crash_gives_500_not_a_dropped_connection(certs: tuple[Path, Path], ctx: ssl.SSLContext) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    with running_webhook(*certs, decider=AdmissionDecider(validate=broken)) as srv:
        status, _, out = post(srv, ctx, review(rendered_job()))
    assert status == 500 and json.loads(out)["reason"] == "InternalError"


def test_strict_profile_is_used_when_configured(certs: tuple[Path, Path], ctx: ssl.SSLContext) -> None:
    job = rendered_job()
    del job["spec"]["runPolicy"]["activeDeadlineSeconds"]
    with running_webhook(*certs, decider=AdmissionDecider(profile="strict")) as srv:
        resp = _response(post(srv, ctx, review(job))[2])
    assert resp["allowed"] is False and "KDP308" in resp["status"]["message"]
    assert resp["auditAnnotations"]["profile"] == "strict"
    with running_webhook(*certs) as srv:  # baseline does not check the deadline
        assert _response(post(srv, ctx, review(job))[2])["allowed"] is True
