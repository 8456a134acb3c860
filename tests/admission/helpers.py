"""Shared helpers for the admission tests: certificates, a running webhook, HTTPS requests,
and a fake Kubernetes API server (plain HTTP on loopback) for the look-up tests."""

from __future__ import annotations

import datetime
import http.client
import http.server
import json
import os
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from k8sddp.admission.review import AdmissionDecider
from k8sddp.admission.server import WebhookApp, WebhookServer
from k8sddp.admission.tlsreload import ReloadingTLS

REPO = Path(__file__).resolve().parents[2]
KUBEFLOW_EXAMPLES = REPO.parent / "shared" / "reference" / "kubeflow" / "examples"


def make_cert(folder: Path, *, name: str = "cert", common_name: str = "k8sddp-webhook.test") -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for ``localhost``/``127.0.0.1``; returns (cert, key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def client_context(*cafiles: Path) -> ssl.SSLContext:
    """A client context that trusts exactly ``cafiles`` and checks the host name."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.load_verify_locations(cadata="".join(Path(p).read_text() for p in cafiles))
    return ctx


@contextmanager
def running_webhook(
    cert: Path, key: Path, *, decider: AdmissionDecider | None = None, max_body_bytes: int | None = None,
    check_interval: float = 1.0, **server_kwargs: Any,
) -> Iterator[WebhookServer]:
    """A webhook on 127.0.0.1 (free port) in a thread; stopped on exit. ``server_kwargs`` go to
    :class:`WebhookServer` (``idle_timeout`` defaults to 10 s here)."""
    tls = ReloadingTLS(str(cert), str(key), check_interval=check_interval)
    kwargs: dict[str, Any] = {}
    if max_body_bytes is not None:
        kwargs["max_body_bytes"] = max_body_bytes
    app = WebhookApp(decider or AdmissionDecider(), tls, **kwargs)
    server = WebhookServer(("127.0.0.1", 0), app, **{"idle_timeout": 10.0, **server_kwargs})
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        t.join(10)


def review(obj: dict[str, Any] | None, *, operation: str = "CREATE", namespace: str = "team-a",
           old: dict[str, Any] | None = None, kind: tuple[str, str, str] = ("kubeflow.org", "v1", "PyTorchJob"),
           uid: str | None = None) -> dict[str, Any]:
    """An AdmissionReview v1 request as the API server sends it."""
    group, version, k = kind
    req: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": k},
        "resource": {"group": group, "version": version, "resource": k.lower() + "s"},
        "requestKind": {"group": group, "version": version, "kind": k},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if obj and isinstance(obj.get("metadata"), dict):
        req["name"] = obj["metadata"].get("name", "")
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def post(server: WebhookServer, ctx: ssl.SSLContext, body: bytes | dict[str, Any], *, path: str = "/validate",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """POST over HTTPS to the server; returns (status, headers, body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn = http.client.HTTPSConnection("127.0.0.1", server.server_address[1], context=ctx, timeout=30)
    try:
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get(server: WebhookServer, ctx: ssl.SSLContext, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", server.server_address[1], context=ctx, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class FakeApiServer:
    """A tiny stand-in for the Kubernetes API on 127.0.0.1 (plain HTTP): GET of ConfigMaps,
    Namespaces and other objects (``objects``, by path) from dicts, 403 for names in ``forbidden``, a wait of ``delays[name]`` seconds
    before answering for a ConfigMap; records every path requested."""

    def __init__(self) -> None:
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.forbidden: set[str] = set()
        self.delays: dict[str, float] = {}
        self.requests: list[str] = []
        #: Other objects by URL path without the leading slash (custom resources).
        self.objects: dict[str, dict[str, Any]] = {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                outer.requests.append(self.path)
                parts = self.path.split("?")[0].strip("/").split("/")
                status, body = 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
                if "/".join(parts) in outer.objects:
                    status, body = 200, outer.objects["/".join(parts)]
                elif parts[:3] == ["api", "v1", "namespaces"]:
                    if len(parts) == 6 and parts[4] == "configmaps":
                        ns, name = parts[3], parts[5]
                        time.sleep(outer.delays.get(name, 0.0))
                        if name in outer.forbidden:
                            status, body = 403, {"kind": "Status", "reason": "Forbidden", "code": 403}
                        elif (ns, name) in outer.configmaps:
                            status = 200
                            body = {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": name, "namespace": ns}, "data": outer.configmaps[(ns, name)]}
                    elif len(parts) == 4 and parts[3] in outer.namespaces:
                        status = 200
                        body = {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": parts[3], "labels": outer.namespaces[parts[3]]}}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.handle_error = lambda *args: None  # type: ignore[method-assign]  # late writes to a gone client
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def api_client(self) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)


def rendered_job() -> dict[str, Any]:
    """The PyTorchJob ``k8sddp render examples/ddpjob.yaml`` produces (guarded: passes baseline)."""
    from k8sddp.render import load_spec, render_spec

    return render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml"))).objects[0]


def env_of(job: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """Each replica's pytorch container env list (mutable, for building cases)."""
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for c in replica["template"]["spec"]["containers"]:
            if c["name"] == "pytorch":
                yield c.setdefault("env", [])


def remove_env(job: dict[str, Any], *names: str) -> dict[str, Any]:
    for env in env_of(job):
        env[:] = [e for e in env if e["name"] not in names]
    return job


if os.environ.get("K8SDDP_TEST_DEBUG"):  # pragma: no cover
    import logging

    logging.basicConfig(level=logging.DEBUG)
