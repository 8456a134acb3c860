"""`k8sddp webhook serve` called by the real API server through a ValidatingWebhookConfiguration.

The API server calls the webhook over TLS (``clientConfig.url`` on 127.0.0.1 with the
certificate in ``caBundle``); a denial reaches kubectl with the rule ids; ConfigMap look-ups run
as a service account with the RBAC of docs/admission.md (``get`` on configmaps, granted per
namespace), so a namespace without the grant gets the documented 403 warning. Timeout and
``failurePolicy`` (docs/admission.md "failurePolicy, timeoutSeconds"): a webhook that accepts
the connection and never answers makes the call fail after ``timeoutSeconds``, which denies under
``Fail`` and admits under ``Ignore``; a stopped webhook (connection refused) likewise.

Each configuration selects namespaces by a label only this module sets, so the other kube tests
never reach these webhooks.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..admission.helpers import make_cert, remove_env, rendered_job
from .conftest import Kube

REPO = Path(__file__).resolve().parents[2]
LABEL = "k8sddp-test/webhook"


def _vwc(name: str, url: str, ca: bytes, selector: str, *, failure: str = "Fail", timeout: int = 5) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": f"{name}.k8sddp.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": failure, "timeoutSeconds": timeout, "matchPolicy": "Equivalent",
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
            "namespaceSelector": {"matchLabels": {LABEL: selector}},
            "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["pytorchjobs"], "scope": "Namespaced"}],
        }],
    }


def _namespace(kube: Kube, selector: str) -> str:
    name = f"wh-{selector}-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name)
    kube.kubectl("label", "namespace", name, f"{LABEL}={selector}")
    return name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def webhook(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`k8sddp webhook serve` as a service account that may get ConfigMaps in namespace "granted"."""
    folder = tmp_path_factory.mktemp("webhook")
    cert, key = make_cert(folder, common_name="127.0.0.1")
    system = f"wh-system-{uuid.uuid4().hex[:6]}"
    granted, ungranted = _namespace(kube, "on"), _namespace(kube, "on")
    kube.kubectl("create", "namespace", system)
    kube.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "k8sddp-webhook", "namespace": system}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"{system}-cm"},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "k8sddp-webhook-configmaps", "namespace": granted},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{system}-cm"},
         "subjects": [{"kind": "ServiceAccount", "name": "k8sddp-webhook", "namespace": system}]},
    )
    cfg = kube.token_kubeconfig(folder, system, "k8sddp-webhook")
    port = _free_port()
    log = open(folder / "webhook.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "k8sddp", "webhook", "serve", "--tls-cert-file", str(cert),
         "--tls-private-key-file", str(key), "--address", "127.0.0.1", "--port", str(port),
         "--kubeconfig", cfg, "--lookup-cache-seconds", "0", "--shutdown-delay", "0"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)})
    kube.wait_until("the webhook to listen", lambda: _listening(port), timeout=30)
    ca = cert.read_bytes()
    kube.apply(_vwc(f"{system}-on", f"https://127.0.0.1:{port}/validate", ca, "on"))
    try:
        yield {"proc": proc, "port": port, "ca": ca, "granted": granted, "ungranted": ungranted,
               "system": system, "log": folder / "webhook.log"}
    finally:
        kube.kubectl("delete", "validatingwebhookconfiguration", f"{system}-on", check=False)
        kube.kubectl("delete", "clusterrole", f"{system}-cm", check=False)
        for ns in (granted, ungranted, system):
            kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _job(name: str, namespace: str) -> dict[str, Any]:
    job = copy.deepcopy(rendered_job())
    job["metadata"].update(name=name, namespace=namespace)
    return job


def _create(kube: Kube, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kube.kubectl("create", "-f", "-", input=yaml.safe_dump(obj), check=False)


def test_denial_reaches_kubectl_with_rule_ids(kube: Kube, webhook: dict[str, Any]) -> None:
    ns = webhook["granted"]
    res = _create(kube, remove_env(_job("bare", ns), "TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER"))
    assert res.returncode != 0
    assert f'admission webhook "{webhook["system"]}-on.k8sddp.dev" denied the request' in res.stderr
    assert "KDP201" in res.stderr and "KDP202" in res.stderr
    assert kube.get("pytorchjob", "bare", ns) is None
    res = _create(kube, _job("guarded", ns))
    assert res.returncode == 0, res.stderr
    # server-side dry run goes through the webhook too (sideEffects: None)
    res = kube.kubectl("create", "--dry-run=server", "-f", "-", check=False, input=yaml.safe_dump(
        remove_env(_job("dry", ns), "PYTHONFAULTHANDLER")))
    assert res.returncode != 0 and "KDP202" in res.stderr and "KDP201" not in res.stderr


def _from_configmap(name: str, namespace: str) -> list[dict[str, Any]]:
    job = remove_env(_job(name, namespace), "TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "guards"}}]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "guards", "namespace": namespace},
          "data": {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "1"}}
    return [cm, job]


def test_configmap_lookups_use_the_real_rbac(kube: Kube, webhook: dict[str, Any]) -> None:
    cm, job = _from_configmap("from-cm", webhook["granted"])
    kube.apply(cm)
    res = _create(kube, job)
    assert res.returncode == 0, res.stderr  # the webhook read the ConfigMap with its token
    cm, job = _from_configmap("from-cm", webhook["ungranted"])
    kube.apply(cm)
    res = _create(kube, job)
    assert res.returncode != 0
    assert "guards" in res.stderr and "KDP201" in res.stderr
    # the look-up's 403 is a warning the API server hands back to kubectl
    assert "403" in res.stderr or "Forbidden" in res.stderr or "forbidden" in res.stderr, res.stderr
    # and the webhook really was refused by RBAC (its log names the 403)
    kube.wait_until("the webhook's log", lambda: "admission" in webhook["log"].read_text())


class _Silent:
    """A TCP server that accepts connections and never answers (a hung webhook)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        """Stop listening (shutdown wakes the blocked accept, so the port really closes)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("failure", ["Fail", "Ignore"])
def test_timeout_and_failure_policy(kube: Kube, webhook: dict[str, Any], failure: str) -> None:
    hung = _Silent()
    selector = f"hang-{failure.lower()}"
    ns = _namespace(kube, selector)
    name = f"hang-{failure.lower()}-{uuid.uuid4().hex[:4]}"
    kube.apply(_vwc(name, f"https://127.0.0.1:{hung.port}/validate", webhook["ca"], selector,
                    failure=failure, timeout=2))
    try:
        t0 = time.monotonic()
        res = _create(kube, _job("slow", ns))
        took = time.monotonic() - t0
        assert took >= 2.0, took  # the API server waited timeoutSeconds
        assert took < 10.0, took  # and not kubectl's or its own default
        if failure == "Fail":
            assert res.returncode != 0
            assert f'failed calling webhook "{name}.k8sddp.dev"' in res.stderr
            assert "deadline exceeded" in res.stderr or "timeout" in res.stderr.lower(), res.stderr
            assert kube.get("pytorchjob", "slow", ns) is None
        else:
            assert res.returncode == 0, res.stderr
            assert kube.get("pytorchjob", "slow", ns) is not None
        # a stopped webhook: connection refused, decided by failurePolicy the same way
        hung.close()
        res = _create(kube, _job("refused", ns))
        if failure == "Fail":
            assert res.returncode != 0 and "connection refused" in res.stderr, res.stderr
        else:
            assert res.returncode == 0, res.stderr
    finally:
        hung.close()
        kube.kubectl("delete", "validatingwebhookconfiguration", name, check=False)
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
