"""Webhook latency and throughput at a fixed request rate over HTTPS on loopback.

Starts ``k8sddp webhook serve`` as its own process (self-signed certificate, no ConfigMap
look-ups), then sends AdmissionReview v1 requests on a fixed schedule (open loop: request i is
due at ``t0 + i / rate``) over persistent keep-alive HTTPS connections, as the API server does.
Latency is measured from the *scheduled* time to the complete response, so a stalled server
shows up as queueing instead of silently lowering the rate (no coordinated omission). Half the
reviews are guarded jobs (allowed), half Kubeflow-style jobs without guards (denied).

Bounded in count (``--count``) and time (``--max-seconds``). Target (issue 6): p99 < 10 ms at
200 requests/s. Usage::

    python bench/webhook_latency.py                      # 200 req/s, 2000 requests (+200 warm-up)
    python bench/webhook_latency.py --rate 400 --count 4000 --json bench/out/webhook.json
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import ipaddress
import json
import os
import queue
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _make_cert(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k8sddp-bench")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    crt, k = folder / "tls.crt", folder / "tls.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return crt, k


def _payloads() -> list[bytes]:
    from k8sddp.render import load_spec, render_spec

    good = render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml"))).objects[0]
    bad = json.loads(json.dumps(good))
    for replica in bad["spec"]["pytorchReplicaSpecs"].values():
        c = replica["template"]["spec"]["containers"][0]
        c["env"] = [e for e in c["env"] if not e["name"].startswith(("TORCH_NCCL", "PYTHONFAULT"))]
    out = []
    for obj in (good, bad):
        review = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()), "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
                "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
                "namespace": "default", "name": obj["metadata"]["name"], "operation": "CREATE",
                "userInfo": {"username": "bench"}, "object": obj, "oldObject": None, "dryRun": False,
            },
        }
        out.append(json.dumps(review).encode())
    return out


def _start_server(crt: Path, key: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "k8sddp", "webhook", "serve", "--tls-cert-file", str(crt),
         "--tls-private-key-file", str(key), "--address", "127.0.0.1", "--port", "0",
         "--no-configmap-lookup", "--shutdown-delay", "0", "--log-level", "warning"],
        cwd=REPO, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    # --log-level warning hides the "serving" line; find the port from /proc instead of the log.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        port = _listening_port(proc.pid)
        if port:
            return proc, port
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start listening within 30 s")


def _listening_port(pid: int) -> int | None:
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")
                  if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")}
        with open("/proc/net/tcp") as fh:
            for line in fh.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                    return int(parts[1].split(":")[1], 16)
    except OSError:
        return None
    return None


def run(rate: float, count: int, warmup: int, connections: int, max_seconds: float) -> dict[str, Any]:
    """Run the benchmark; returns the figures (latencies in milliseconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        crt, key = _make_cert(Path(tmp))
        proc, port = _start_server(crt, key)
        try:
            ctx = ssl.create_default_context(cafile=str(crt))
            payloads = _payloads()
            todo: queue.Queue[tuple[int, float] | None] = queue.Queue()
            results: list[tuple[int, float, float, int]] = []  # (i, sched->done, send->done, status)
            lock = threading.Lock()

            def worker() -> None:
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
                while True:
                    item = todo.get()
                    if item is None:
                        conn.close()
                        return
                    i, due = item
                    sent = time.perf_counter()
                    try:
                        conn.request("POST", "/validate", body=payloads[i % 2],
                                     headers={"Content-Type": "application/json"})
                        resp = conn.getresponse()
                        body = resp.read()
                        status = resp.status if json.loads(body)["response"]["allowed"] is (i % 2 == 0) else 599
                    except (OSError, http.client.HTTPException, ValueError, KeyError):
                        conn.close()
                        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
                        status = 0
                    done = time.perf_counter()
                    with lock:
                        results.append((i, (done - due) * 1000, (done - sent) * 1000, status))

            threads = [threading.Thread(target=worker, daemon=True) for _ in range(connections)]
            for t in threads:
                t.start()
            total = warmup + count
            t0 = time.perf_counter() + 0.2
            stop_at = t0 + max_seconds
            for i in range(total):
                due = t0 + i / rate
                if due > stop_at:
                    break
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                todo.put((i, due))
            for _ in threads:
                todo.put(None)
            for t in threads:
                t.join(30)
            wall = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(30)
    measured = sorted((r for r in results if r[0] >= warmup), key=lambda r: r[0])
    lat = sorted(r[1] for r in measured)
    svc = sorted(r[2] for r in measured)
    ok = [r for r in measured if r[3] == 200]

    def pct(xs: list[float], p: float) -> float:
        return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))] if xs else float("nan")

    span = (max(r[0] for r in measured) - min(r[0] for r in measured) + 1) / rate if measured else 0
    return {
        "target_rate_per_s": rate, "requests": len(measured), "warmup": warmup, "connections": connections,
        "ok": len(ok), "errors": len(measured) - len(ok), "wall_s": round(wall, 3),
        "throughput_per_s": round(len(ok) / span, 1) if span else 0.0,
        "latency_ms": {"p50": round(pct(lat, 50), 3), "p90": round(pct(lat, 90), 3), "p99": round(pct(lat, 99), 3),
                       "max": round(lat[-1], 3) if lat else None, "mean": round(statistics.fmean(lat), 3) if lat else None},
        "service_ms": {"p50": round(pct(svc, 50), 3), "p99": round(pct(svc, 99), 3)},
        "cpus": os.cpu_count(), "python": sys.version.split()[0],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=200.0, help="requests per second (default 200)")
    p.add_argument("--count", type=int, default=2000, help="measured requests (default 2000)")
    p.add_argument("--warmup", type=int, default=200, help="requests sent first and not measured (default 200)")
    p.add_argument("--connections", type=int, default=8, help="keep-alive connections (default 8)")
    p.add_argument("--max-seconds", type=float, default=60.0, help="stop sending after this many seconds (default 60)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args()
    figures = run(args.rate, args.count, args.warmup, args.connections, args.max_seconds)
    lat = figures["latency_ms"]
    print(f"webhook over HTTPS on loopback: {figures['requests']} requests at {figures['target_rate_per_s']:g}/s "
          f"({figures['connections']} keep-alive connections, {figures['cpus']} CPUs)")
    print(f"  latency ms (scheduled -> response): p50 {lat['p50']}  p90 {lat['p90']}  p99 {lat['p99']}  "
          f"max {lat['max']}  mean {lat['mean']}")
    print(f"  service ms (sent -> response):      p50 {figures['service_ms']['p50']}  p99 {figures['service_ms']['p99']}")
    print(f"  throughput {figures['throughput_per_s']}/s, errors {figures['errors']}, wall {figures['wall_s']} s")
    verdict = "met" if lat["p99"] < 10 and figures["errors"] == 0 else "NOT met"
    print(f"  target p99 < 10 ms (issue 6, at 200/s), here at {figures['target_rate_per_s']:g}/s: {verdict}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
