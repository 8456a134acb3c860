"""Bounded retries with backoff for calls to the Kubernetes API server.

What is retried (the transient failures client-go also retries): HTTP 429 TooManyRequests
(honouring ``Retry-After``), HTTP 500/502/503/504, and transport failures (connection refused,
reset, closed without a response, read timeout). Everything else (400, 401, 403, 404, 409, 422, ...)
is final at once. Retries are bounded both in count (``max_attempts``) and in time
(``budget_seconds``): a ``Retry-After`` that would end past the budget ends the retries instead.

Retrying a non-idempotent call (a create) is only safe when the caller can tell whether an earlier
attempt landed; :mod:`k8sddp.cluster.client` does that with a submission marker (see
``create_job``). This module only decides *when* to try again.

Environment (documented in docs/cluster.md): ``K8SDDP_API_MAX_ATTEMPTS`` (default 5) and
``K8SDDP_API_RETRY_BUDGET_SECONDS`` (default 30).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["RetryPolicy", "call_with_retries", "is_transport_error", "retry_after_seconds"]

T = TypeVar("T")

#: HTTP statuses retried: 429 and the gateway/server errors client-go retries.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry.

    Attributes:
        max_attempts: total attempts, the first included (>= 1).
        budget_seconds: wall-clock bound on all attempts and waits together (seconds).
        base_delay: first backoff delay (seconds); doubles per attempt.
        max_delay: cap on one backoff delay (seconds).
        sleep: the sleep function (tests may pass a recorder).
    """

    max_attempts: int = 5
    budget_seconds: float = 30.0
    base_delay: float = 0.25
    max_delay: float = 8.0
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> RetryPolicy:
        """The default policy, overridden by ``K8SDDP_API_MAX_ATTEMPTS`` and
        ``K8SDDP_API_RETRY_BUDGET_SECONDS`` when set.

        Raises:
            UsageError: a variable that is not a positive number (exit 2).
        """
        from ..errors import UsageError

        env = os.environ if environ is None else environ
        kwargs: dict[str, Any] = {}
        for name, key, kind in (("K8SDDP_API_MAX_ATTEMPTS", "max_attempts", int),
                                ("K8SDDP_API_RETRY_BUDGET_SECONDS", "budget_seconds", float)):
            if not env.get(name):
                continue
            try:
                value = kind(env[name])
            except ValueError:
                value = 0
            if value <= 0:
                raise UsageError(f"{name}={env[name]!r}: expected a positive number")
            kwargs[key] = value
        return cls(**kwargs)

    def backoff(self, attempt: int) -> float:
        """Delay before attempt ``attempt + 1`` (``attempt`` counts from 1), with +-25 % jitter."""
        delay = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return float(delay * random.uniform(0.75, 1.25))


def is_transport_error(exc: BaseException) -> bool:
    """True for failures below HTTP: refused, reset, closed early, timed out (urllib3/OSError)."""
    try:
        import urllib3.exceptions as u3
    except ImportError:  # pragma: no cover - urllib3 ships with kubernetes
        return isinstance(exc, OSError)
    return isinstance(
        exc,
        (
            u3.ProtocolError,
            u3.NewConnectionError,
            u3.ConnectTimeoutError,
            u3.ReadTimeoutError,
            u3.MaxRetryError,
            u3.IncompleteRead,
            ConnectionError,
            TimeoutError,
        ),
    )


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and status > 0 else None


def retry_after_seconds(exc: BaseException) -> float | None:
    """The ``Retry-After`` header of an ``ApiException`` in seconds, or ``None``.

    Only the delta-seconds form is read (the API server sends that form).
    """
    headers = getattr(exc, "headers", None)
    if not headers:
        return None
    try:
        value = headers.get("Retry-After") or headers.get("retry-after")
    except AttributeError:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return None


def is_retryable(exc: BaseException) -> bool:
    """True when ``exc`` is a transient failure worth another attempt (never a k8sddp error:
    those come from nested calls that already retried)."""
    from ..errors import K8sddpError

    if isinstance(exc, K8sddpError):
        return False
    status = _status(exc)
    if status is not None:
        return status in RETRYABLE_STATUSES
    return is_transport_error(exc)


def call_with_retries(
    fn: Callable[[int], T],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Call ``fn(attempt)`` until it returns, retrying transient failures within ``policy``.

    Args:
        fn: the call; receives the 1-based attempt number (a create uses it to know that an
            earlier attempt may have landed).
        policy: bounds on attempts and time.
        on_retry: called as ``on_retry(attempt, exc, delay_seconds)`` before each wait.

    Returns:
        What ``fn`` returned.

    Raises:
        The last exception from ``fn`` when it is not retryable, or when the attempts or the time
        budget are spent.
    """
    start = time.monotonic()
    attempt = 1
    while True:
        try:
            return fn(attempt)
        except Exception as exc:
            if not is_retryable(exc) or attempt >= policy.max_attempts:
                raise
            delay = policy.backoff(attempt)
            hinted = retry_after_seconds(exc)
            if hinted is not None:
                delay = max(delay, hinted)
            elapsed = time.monotonic() - start
            if elapsed + delay > policy.budget_seconds:
                raise
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            policy.sleep(delay)
            attempt += 1
