"""Retry bounds and Status parsing, without a server."""

from __future__ import annotations

import pytest

from k8sddp.cluster.apierrors import Call, parse_status, translate
from k8sddp.cluster.retry import RetryPolicy, call_with_retries


class Answer(Exception):
    def __init__(self, status: int, retry_after: str | None = None, body: str = "") -> None:
        super().__init__(status)
        self.status = status
        self.headers = {"Retry-After": retry_after} if retry_after else {}
        self.body = body


def test_attempts_and_retry_after_are_bounded() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=4, budget_seconds=100, base_delay=0.5, sleep=sleeps.append)
    calls: list[int] = []

    def always_503(attempt: int) -> None:
        calls.append(attempt)
        raise Answer(503)

    with pytest.raises(Answer):
        call_with_retries(always_503, policy)
    assert calls == [1, 2, 3, 4] and len(sleeps) == 3
    assert all(0.375 <= s <= 2.5 for s in sleeps) and sleeps[2] > sleeps[0]

    sleeps.clear()
    policy = RetryPolicy(max_attempts=5, budget_seconds=3, sleep=sleeps.append)
    with pytest.raises(Answer):  # Retry-After 10 s would end past the 3 s budget: give up now
        call_with_retries(lambda a: (_ for _ in ()).throw(Answer(429, "10")), policy)
    assert sleeps == []


def test_final_statuses_are_not_retried() -> None:
    calls: list[int] = []

    def conflict(attempt: int) -> None:
        calls.append(attempt)
        raise Answer(409)

    with pytest.raises(Answer):
        call_with_retries(conflict, RetryPolicy(sleep=lambda s: None))
    assert calls == [1]


def test_status_from_a_non_json_body() -> None:
    st = parse_status(Answer(502, body="<html>Bad Gateway</html>"))
    assert st.code == 502 and st.message == "<html>Bad Gateway</html>"
    err = translate(Answer(502, body="<html>Bad Gateway</html>"), Call("get", "pods", "ns"), attempts=5)
    assert err.status == 502 and "after 5 attempts" in str(err)


def test_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = RetryPolicy.from_env({"K8SDDP_API_MAX_ATTEMPTS": "2", "K8SDDP_API_RETRY_BUDGET_SECONDS": "1.5"})
    assert (policy.max_attempts, policy.budget_seconds) == (2, 1.5)
    from k8sddp.errors import UsageError

    for bad in ("0", "x", "-1"):
        with pytest.raises(UsageError):
            RetryPolicy.from_env({"K8SDDP_API_MAX_ATTEMPTS": bad})


def _status_body(code: int, reason: str, message: str, details: dict[str, str]) -> str:
    import json

    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                       "reason": reason, "details": details, "code": code})


def test_a_missing_namespace_is_named_not_the_job() -> None:
    """A create in a namespace that does not exist: the real API server answers 404 with
    ``details.kind: namespaces``; the job is not what is missing."""
    body = _status_body(404, "NotFound", 'namespaces "other" not found', {"name": "other", "kind": "namespaces"})
    err = translate(Answer(404, body=body), Call("create", "trainjobs.trainer.kubeflow.org", "other", "demo2"))
    assert str(err) == 'namespace "other" not found: cannot create trainjobs.trainer.kubeflow.org "demo2" in namespace "other"'
    assert err.status == 404
    body = _status_body(404, "NotFound", 'trainjobs.trainer.kubeflow.org "x" not found', {"name": "x", "kind": "trainjobs"})
    err = translate(Answer(404, body=body), Call("get", "trainjobs.trainer.kubeflow.org", "ml", "x"))
    assert str(err) == 'trainjobs.trainer.kubeflow.org "x" not found in namespace "ml"'


def test_cluster_scoped_calls_name_no_namespace() -> None:
    """A ClusterTrainingRuntime has no namespace: no ``in namespace ""`` in the messages."""
    call = Call("get", "clustertrainingruntimes.trainer.kubeflow.org", "", "k8sddp-torch", "https://h:6443")
    assert call.what() == 'get clustertrainingruntimes.trainer.kubeflow.org "k8sddp-torch"'
    body = _status_body(403, "Forbidden", "no", {})
    err = translate(Answer(403, body=body), call)
    assert 'in namespace ""' not in str(err) and "RBAC ClusterRole" in str(err)
    body = _status_body(409, "AlreadyExists", "exists", {})
    err = translate(Answer(409, body=body), Call("create", "clustertrainingruntimes.trainer.kubeflow.org", "", "k8sddp-torch"))
    assert str(err).startswith('clustertrainingruntimes.trainer.kubeflow.org "k8sddp-torch" already exists; ')
