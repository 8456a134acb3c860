"""ConfigMap and namespace look-ups through the real kubernetes client against a loopback fake API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from k8sddp.admission.lookup import KubeLookup  # noqa: E402
from k8sddp.admission.review import AdmissionDecider, configmap_names  # noqa: E402
from k8sddp.admission.selector import parse_selector  # noqa: E402

from .helpers import (  # noqa: E402
    FakeApiServer,
    client_context,
    env_of,
    make_cert,
    post,
    remove_env,
    rendered_job,
    review,
    running_webhook,
)


def _from_configmap(job: dict[str, Any], cm: str) -> dict[str, Any]:
    remove_env(job, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        c = replica["template"]["spec"]["containers"][0]
        c["envFrom"] = [{"configMapRef": {"name": cm}}]
    return job


def _decide(server: Any, ctx: Any, job: dict[str, Any], ns: str = "team-a") -> dict[str, Any]:
    status, _, body = post(server, ctx, review(job, namespace=ns))
    assert status == 200
    return json.loads(body)["response"]


def test_configmap_names_cover_envfrom_and_valuefrom() -> None:
    job = rendered_job()
    envs = list(env_of(job))
    envs[0].append({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm-b", "key": "x"}}})
    envs[0].append({"name": "S", "valueFrom": {"secretKeyRef": {"name": "secret", "key": "s"}}})
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "cm-a"}}, {"secretRef": {"name": "secret"}}, {"configMapRef": {"name": "cm-b"}},
    ]
    assert configmap_names(job) == ["cm-a", "cm-b"]


def test_guards_from_a_configmap_in_the_jobs_namespace(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    ctx = client_context(cert)
    with FakeApiServer() as api:
        api.configmaps[("team-a", "nccl-env")] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "1"}
        api.configmaps[("team-b", "nccl-env")] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "PYTHONFAULTHANDLER": "1"}
        api.forbidden.add("locked")
        lookup = KubeLookup(api.api_client(), cache_seconds=0)
        decider = AdmissionDecider(configmaps=lookup)
        with running_webhook(cert, key, decider=decider) as srv:
            job = _from_configmap(rendered_job(), "nccl-env")
            del job["metadata"]["namespace"]  # as kubectl sends a CREATE: namespace from the request
            assert _decide(srv, ctx, job, "team-a")["allowed"] is True
            bad = _decide(srv, ctx, job, "team-b")
            assert bad["allowed"] is False and "KDP201" in bad["status"]["message"]
            assert "'0'" in bad["status"]["message"] and "KDP202" not in bad["status"]["message"]
            missing = _decide(srv, ctx, job, "team-c")  # no such ConfigMap there
            assert missing["allowed"] is False and "cannot be verified" in missing["status"]["message"]
            locked = _decide(srv, ctx, _from_configmap(rendered_job(), "locked"), "team-a")
            assert locked["allowed"] is False
            assert any("ConfigMap team-a/locked unreadable: HTTP 403" in w for w in locked["warnings"])
        assert "/api/v1/namespaces/team-a/configmaps/nccl-env" in api.requests
        assert not any("secrets" in p for p in api.requests)


def test_lookup_cache_reuses_answers(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.configmaps[("ns", "cm")] = {"A": "1"}
        lookup = KubeLookup(api.api_client(), cache_seconds=60)
        assert lookup.get_configmap("ns", "cm")["data"] == {"A": "1"}  # type: ignore[index]
        assert lookup.get_configmap("ns", "cm")["data"] == {"A": "1"}  # type: ignore[index]
        assert lookup.get_configmap("ns", "absent") is None
        assert len([p for p in api.requests if p.endswith("/configmaps/cm")]) == 1


def test_unreachable_api_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: connection refused
    lookup = KubeLookup(client.ApiClient(cfg), timeout_seconds=2, cache_seconds=0)
    cert, key = make_cert(tmp_path)
    with running_webhook(cert, key, decider=AdmissionDecider(configmaps=lookup)) as srv:
        resp = _decide(srv, client_context(cert), _from_configmap(rendered_job(), "cm"))
    assert resp["allowed"] is False
    assert any("unreadable" in w for w in resp["warnings"])


def test_namespace_exempted_by_label_selector(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    ctx = client_context(cert)
    with FakeApiServer() as api:
        api.namespaces["sandbox"] = {"k8sddp.dev/guardrails": "disabled"}
        api.namespaces["prod"] = {"team": "x"}
        lookup = KubeLookup(api.api_client(), cache_seconds=0)
        decider = AdmissionDecider(
            namespaces=lookup, exempt_selector=parse_selector("k8sddp.dev/guardrails=disabled")
        )
        bad = remove_env(rendered_job(), "PYTHONFAULTHANDLER")
        with running_webhook(cert, key, decider=decider) as srv:
            exempt = _decide(srv, ctx, bad, "sandbox")
            assert exempt["allowed"] is True
            assert any("namespace sandbox is exempt" in w for w in exempt["warnings"])
            assert _decide(srv, ctx, bad, "prod")["allowed"] is False
            assert _decide(srv, ctx, bad, "no-such-ns")["allowed"] is False


def test_lookup_timeout_bounds_the_whole_review_with_one_try_per_call(tmp_path: Path) -> None:
    """Review 6 item 2: urllib3's retries made a 2 s limit take 8 s; now one try, and the
    limit is for all look-ups of a review together."""
    import time

    cert, key = make_cert(tmp_path)
    with FakeApiServer() as api:
        api.delays.update({"slow": 5.0, "slow2": 5.0})
        lookup = KubeLookup(api.api_client(), timeout_seconds=1.0, cache_seconds=0)
        decider = AdmissionDecider(configmaps=lookup, lookup_timeout=1.0)
        job = _from_configmap(rendered_job(), "slow")
        for replica in job["spec"]["pytorchReplicaSpecs"].values():
            replica["template"]["spec"]["containers"][0]["envFrom"].append({"configMapRef": {"name": "slow2"}})
        with running_webhook(cert, key, decider=decider) as srv:
            t0 = time.monotonic()
            resp = _decide(srv, client_context(cert), job)
            took = time.monotonic() - t0
        assert took < 4.5, f"review took {took:.2f} s with a 1 s look-up limit (the API answers after 5 s)"
        assert resp["allowed"] is False
        warnings = " | ".join(resp["warnings"])
        assert "ConfigMap team-a/slow unreadable: the API server did not answer within 1 s" in warnings
        assert "slow2" in warnings and "time limit of 1 s" in warnings
        assert "MaxRetryError" not in warnings and "HTTPConnectionPool" not in warnings
        assert "cannot be verified" in resp["status"]["message"]
        assert len([p for p in api.requests if p.endswith("/configmaps/slow")]) == 1  # no retries
        assert not any(p.endswith("/configmaps/slow2") for p in api.requests)


def test_missing_configmap_is_named_with_webhook_wording(tmp_path: Path) -> None:
    """Review 6 item 8: a 404 says "not found in namespace", never the CLI's "not in the input"."""
    cert, key = make_cert(tmp_path)
    with FakeApiServer() as api:
        api.forbidden.add("locked")
        decider = AdmissionDecider(configmaps=KubeLookup(api.api_client(), cache_seconds=0))
        job = _from_configmap(rendered_job(), "nope")
        envs = list(env_of(job))
        envs[0].append({"name": "PYTHONFAULTHANDLER",
                        "valueFrom": {"configMapKeyRef": {"name": "locked", "key": "x"}}})
        with running_webhook(cert, key, decider=decider) as srv:
            resp = _decide(srv, client_context(cert), job)
    msg = resp["status"]["message"]
    assert resp["allowed"] is False
    assert "k8sddp: ConfigMap nope not found in namespace team-a" in resp["warnings"]
    assert "ConfigMap 'nope' (envFrom), which was not found in namespace team-a" in msg
    assert "ConfigMap 'locked' could not be read (HTTP 403 Forbidden)" in msg
    assert "not in the input" not in msg


def test_without_lookups_the_reason_names_the_flag(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    with running_webhook(cert, key, decider=AdmissionDecider()) as srv:
        resp = _decide(srv, client_context(cert), _from_configmap(rendered_job(), "cm"))
    assert "ConfigMap 'cm' (envFrom), which was not read (the webhook runs with --no-configmap-lookup)" in (
        resp["status"]["message"])


def test_refused_connection_is_one_readable_warning(tmp_path: Path) -> None:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"
    lookup = KubeLookup(client.ApiClient(cfg), timeout_seconds=2, cache_seconds=0)
    with pytest.raises(Exception) as exc:
        lookup.get_configmap("ns", "cm")
    assert str(exc.value) == "cannot connect to the API server (connection refused or unreachable)"


@pytest.mark.parametrize("content", ["not: a: kubeconfig: [", "-----BEGIN CERTIFICATE-----\nMIIB\n", "[1, 2]"])
def test_bad_kubeconfig_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str) -> None:
    """Review 6 item 4: a file that is not a kubeconfig exits 2 with one line, no traceback."""
    from k8sddp.cli import main

    cert, key = make_cert(tmp_path)
    kc = tmp_path / "kc"
    kc.write_text(content)
    code = main(["webhook", "serve", "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
                 "--address", "127.0.0.1", "--port", "0", "--kubeconfig", str(kc)])
    err = capsys.readouterr().err
    assert code == 2
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("{")]
    assert len(lines) == 1, err
    assert "cannot load a Kubernetes configuration" in lines[0] and "--no-configmap-lookup" in lines[0]
    assert "Traceback" not in err
