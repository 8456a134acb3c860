"""The server certificate follows its files: rotation in place and a symlink swap (as kubelet does)."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import time
from pathlib import Path

import pytest

from k8sddp.admission.tlsreload import ReloadingTLS
from k8sddp.errors import UsageError

from .helpers import client_context, get, make_cert, running_webhook


def _served_cert(port: int, ctx: ssl.SSLContext) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, ctx.wrap_socket(
        raw, server_hostname="localhost"
    ) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return der


def _pem_to_der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def _wait_for(port: int, ctx: ssl.SSLContext, want: bytes, seconds: float = 15.0) -> bytes:
    deadline = time.monotonic() + seconds
    got = b""
    while time.monotonic() < deadline:
        got = _served_cert(port, ctx)
        if got == want:
            return got
        time.sleep(0.05)
    return got


def test_rotated_files_are_served_to_new_connections(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    a_cert, a_key = make_cert(tmp_path, name="a", common_name="a.test")
    b_cert, b_key = make_cert(tmp_path, name="b", common_name="b.test")
    shutil.copy(a_cert, live / "tls.crt")
    shutil.copy(a_key, live / "tls.key")
    ctx = client_context(a_cert, b_cert)
    with running_webhook(live / "tls.crt", live / "tls.key", check_interval=0.0) as srv:
        port = srv.server_address[1]
        assert _served_cert(port, ctx) == _pem_to_der(a_cert)
        # Replace both files atomically (key first: a reader may briefly see a mismatched pair).
        for src, dst in ((b_key, "tls.key"), (b_cert, "tls.crt")):
            shutil.copy(src, live / (dst + ".tmp"))
            os.replace(live / (dst + ".tmp"), live / dst)
        assert _wait_for(port, ctx, _pem_to_der(b_cert)) == _pem_to_der(b_cert)
        assert srv.app.tls.reloads >= 1
        assert get(srv, ctx, "/healthz")[0] == 200


def test_symlink_swap_like_a_mounted_secret(tmp_path: Path) -> None:
    a_dir, b_dir = tmp_path / "..2026_a", tmp_path / "..2026_b"
    a_dir.mkdir()
    b_dir.mkdir()
    a_cert, a_key = make_cert(a_dir, name="tls", common_name="a.test")
    b_cert, b_key = make_cert(b_dir, name="tls", common_name="b.test")
    data = tmp_path / "..data"
    data.symlink_to(a_dir.name)
    (tmp_path / "tls.crt").symlink_to("..data/tls.crt")
    (tmp_path / "tls.key").symlink_to("..data/tls.key")
    ctx = client_context(a_cert, b_cert)
    with running_webhook(tmp_path / "tls.crt", tmp_path / "tls.key", check_interval=0.0) as srv:
        port = srv.server_address[1]
        assert _served_cert(port, ctx) == _pem_to_der(a_cert)
        tmp_link = tmp_path / "..data_tmp"
        tmp_link.symlink_to(b_dir.name)
        os.replace(tmp_link, data)
        assert _wait_for(port, ctx, _pem_to_der(b_cert)) == _pem_to_der(b_cert)


def test_broken_new_pair_keeps_the_old_certificate(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    tls = ReloadingTLS(str(cert), str(key), check_interval=0.0)
    first = tls.context()
    key.write_text("not a key\n")
    assert tls.context() is first  # load failed: still serving the old pair
    assert tls.reloads == 0
    make_cert(tmp_path)  # a good pair again (same names)
    assert tls.context() is not first and tls.reloads == 1


def test_unreadable_files_at_start_are_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot load TLS certificate"):
        ReloadingTLS(str(tmp_path / "none.crt"), str(tmp_path / "none.key"))


def test_mismatched_pair_is_named_as_such(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Review 6 item 13: a key from another pair logs "do not match", not NO_CERTIFICATE_ASSIGNED."""
    import subprocess

    cert, key = make_cert(tmp_path)
    _, other_key = make_cert(tmp_path, name="other")
    with pytest.raises(UsageError, match="certificate and private key do not match"):
        ReloadingTLS(str(cert), str(other_key))
    # A different key type (RSA key, EC certificate) is OpenSSL's NO_CERTIFICATE_ASSIGNED.
    rsa_key = tmp_path / "rsa.key"
    if subprocess.run(["openssl", "genrsa", "-out", str(rsa_key), "2048"], capture_output=True).returncode != 0:
        pytest.skip("openssl not available")
    with pytest.raises(UsageError, match="certificate and private key do not match"):
        ReloadingTLS(str(cert), str(rsa_key))
    tls = ReloadingTLS(str(cert), str(key), check_interval=0.0)
    first = tls.context()
    shutil.copy(rsa_key, key)  # caught mid-rotation: new key, old certificate
    import logging

    root = logging.getLogger("k8sddp")
    was = root.propagate
    root.propagate = True  # configure_logging() turns it off; caplog listens at the root logger
    try:
        with caplog.at_level("ERROR", logger="k8sddp.webhook"):
            assert tls.context() is first
    finally:
        root.propagate = was
    assert any("do not match" in getattr(r, "error", "") for r in caplog.records)
