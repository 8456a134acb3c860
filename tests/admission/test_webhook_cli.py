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
    with pytest.raises(SystemExit) as exc:
        main(["webhook", "serve"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--shutdown-delay", "-3", "must be a finite number of seconds >= 0"),
        ("--cert-check-interval", "-1", ">= 0"),
        ("--lookup-cache-seconds", "-1", ">= 0"),
        ("--idle-timeout", "0", "> 0"),
        ("--request-timeout", "-1", "> 0"),
        ("--lookup-timeout", "0", "> 0"),
        ("--lookup-timeout", "nan", "finite"),
        ("--idle-timeout", "inf", "finite"),
        ("--shutdown-delay", "soon", "is not a number of seconds"),
        ("--max-request-bytes", "0", "must be > 0"),
        ("--max-request-bytes", "-5", "must be > 0"),
        ("--max-connections", "0", "must be > 0"),
        ("--port", "65536", "is not a TCP port"),
        ("--port", "-1", "is not a TCP port"),
        ("--path", "validate", "must start with /"),
        ("--path", "/a b", "must start with /"),
    ],
)
def test_numeric_and_path_flags_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, fragment: str
) -> None:
    """Review 6 items 3 and 12: a negative --shutdown-delay used to hang SIGTERM; now exit 2."""
    cert, key = make_cert(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["webhook", "serve", "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
              "--no-configmap-lookup", f"{flag}={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and fragment in err and "Traceback" not in err


def test_missing_kubeconfig_names_both_ways_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review 6 item 7: outside a cluster the error says --kubeconfig or --no-configmap-lookup."""
    cert, key = make_cert(tmp_path)
    code = main(["webhook", "serve", "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
                 "--kubeconfig", str(tmp_path / "absent")])
    err = capsys.readouterr().err
    assert code == 2 and "--no-configmap-lookup" in err and "--kubeconfig" in err


def test_selector_without_configmap_lookup_names_the_selector(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert, key = make_cert(tmp_path)
    code = main(["webhook", "serve", "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
                 "--no-configmap-lookup", "--exempt-namespace-selector", "a=b", "--kubeconfig", str(tmp_path / "absent")])
    err = capsys.readouterr().err
    assert code == 2 and "drop --exempt-namespace-selector" in err and "--no-configmap-lookup" not in err
