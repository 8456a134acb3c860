"""`k8sddp webhook serve` as a process: starts, logs JSON, answers over HTTPS, stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from k8sddp.cli import main

from .helpers import REPO, client_context, make_cert, post, rendered_job, review


class _Addr:
    def __init__(self, port: int) -> None:
        self.server_address = ("127.0.0.1", port)


def test_serve_process_end_to_end(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "k8sddp", "webhook", "serve", "--tls-cert-file", str(cert),
         "--tls-private-key-file", str(key), "--address", "127.0.0.1", "--port", "0",
         "--no-configmap-lookup", "--shutdown-delay", "0"],
        cwd=REPO, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        start = json.loads(line)
        assert start["msg"] == "serving" and start["catalogue_version"] and start["configmap_lookup"] is False
        addr = _Addr(int(start["port"]))
        status, _, body = post(addr, client_context(cert), review(rendered_job(), uid="cli-1"))  # type: ignore[arg-type]
        assert status == 200 and json.loads(body)["response"]["allowed"] is True
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        rest = [json.loads(x) for x in proc.stderr.read().splitlines() if x.startswith("{")]
        assert any(r["msg"] == "admission" and r["uid"] == "cli-1" for r in rest)
        assert rest[-1]["msg"] == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert, key = make_cert(tmp_path)
    base = ["webhook", "serve", "--tls-cert-file", str(cert), "--tls-private-key-file", str(key), "--no-configmap-lookup"]
    assert main([*base[:3], str(tmp_path / "missing.crt"), *base[4:]]) == 2
    assert "cannot load TLS certificate" in capsys.readouterr().err
    assert main([*base, "--exempt-namespace-selector", "a in b", "--kubeconfig", str(tmp_path / "none")]) == 2
    assert "--exempt-namespace-selector" in capsys.readouterr().err
    assert main([*base, "--max-request-bytes", "0"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["webhook", "serve"])
    assert exc.value.code == 2
