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
