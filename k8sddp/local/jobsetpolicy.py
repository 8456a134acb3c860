"""How a Job's ``podFailurePolicy`` and a JobSet's ``failurePolicy`` judge a failure: pure functions.

Sources: Kubernetes batch/v1 (docs "Handling retriable and non-retriable pod failures with Pod
failure policy"; pkg/controller/job/pod_failure_policy.go: the rules are read in order, the first
that matches decides; an ``onExitCodes`` rule looks at the containers named ``containerName``, or
all, and never at exit code 0; ``FailJob`` fails the Job with reason ``PodFailurePolicy``,
``Ignore`` recreates the pod without counting it, ``Count`` (and no match) counts it against
``backoffLimit``; past the limit the Job fails with reason ``BackoffLimitExceeded``) and
kubernetes-sigs/jobset v0.12.0 pkg/controllers/failure_policy.go (no ``failurePolicy``: the set
fails, reason ``FailedJobs``; else the first rule whose ``onJobFailureReasons`` and
``targetReplicatedJobs`` match the failed Job decides, no match means ``RestartJobSet``;
``RestartJobSet`` fails the set with ``ReachedMaxRestarts`` once ``maxRestarts`` restarts were
made; ``RestartJobSetAndIgnoreMaxRestarts`` restarts without counting; messages end
``(first failed job: NAME)``; constants from pkg/constants/constants.go).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["JobSetDecision", "PodFailure", "jobset_decision", "pod_failure"]

REASON_POD_FAILURE_POLICY = "PodFailurePolicy"
REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"


@dataclasses.dataclass(frozen=True)
class PodFailure:
    """What the Job controller does with a failed pod.

    Attributes:
        action: ``FailJob``, ``Ignore`` or ``Count``.
        rule: index of the rule that matched (``None``: none did).
    """

    action: str
    rule: int | None


def _matches_exit_codes(codes: Mapping[str, Any], container: str, code: int) -> bool:
    if code == 0 or codes.get("containerName") not in (None, container):
        return False
    values = {v for v in codes.get("values") or [] if isinstance(v, int)}
    if codes.get("operator") == "In":
        return code in values
    if codes.get("operator") == "NotIn":
        return code not in values
    return False


def pod_failure(rules: list[Any], container: str, code: int) -> PodFailure:
    """The first rule of ``podFailurePolicy.rules`` that matches container ``container`` exiting
    ``code`` (a local run has no pod conditions: ``onPodConditions`` rules never match); no match is
    ``Count``. ``FailIndex`` (per-index backoff) is read as ``FailJob``: a local Job has no
    ``backoffLimitPerIndex``."""
    for i, rule in enumerate(rules):
        if not isinstance(rule, Mapping):
            continue
        codes = rule.get("onExitCodes")
        if isinstance(codes, Mapping) and _matches_exit_codes(codes, container, code):
            action = str(rule.get("action") or "Count")
            return PodFailure("FailJob" if action == "FailIndex" else action, i)
    return PodFailure("Count", None)


@dataclasses.dataclass(frozen=True)
class JobSetDecision:
    """What the JobSet controller does when one of its Jobs failed.

    Attributes:
        restart: recreate every Job of the set (``False``: the set Failed).
        counts: the restart counts against ``maxRestarts``.
        reason: the set's Failed reason, or its Restarting reason.
        message: the condition's message.
    """

    restart: bool
    counts: bool
    reason: str
    message: str


def jobset_decision(policy: Mapping[str, Any] | None, *, job: str, replicated_job: str, reason: str, restarts: int) -> JobSetDecision:
    """The JobSet's decision for the failed Job ``job`` (of ``replicated_job``, failed with ``reason``).

    Args:
        policy: the JobSet's ``failurePolicy`` (``None``: none).
        job: the failed Job's full name (``<jobset>-node-0``).
        replicated_job: its ``replicatedJobs`` entry.
        reason: the Job's failure reason (``PodFailurePolicy``, ``BackoffLimitExceeded``).
        restarts: restarts made so far that count against ``maxRestarts``.
    """
    first = f" (first failed job: {job})"
    if policy is None:
        return JobSetDecision(False, False, "FailedJobs", "jobset failed due to one or more job failures" + first)
    rule: Mapping[str, Any] | None = None
    for candidate in policy.get("rules") or []:
        if not isinstance(candidate, Mapping):
            continue
        reasons = candidate.get("onJobFailureReasons") or []
        targets = candidate.get("targetReplicatedJobs") or []
        if (not reasons or reason in reasons) and (not targets or replicated_job in targets):
            rule = candidate
            break
    action = str(rule.get("action")) if rule is not None else "RestartJobSet"
    restarting = f"FailurePolicy_{rule.get('name')}" if rule is not None else "DefaultFailurePolicy"
    if action == "FailJobSet":
        return JobSetDecision(False, False, "FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action" + first)
    if action in ("RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts"):
        return JobSetDecision(True, False, restarting, "applying RestartJobSetAndIgnoreMaxRestarts failure policy action" + first)
    max_restarts = policy.get("maxRestarts")
    limit = max_restarts if isinstance(max_restarts, int) and not isinstance(max_restarts, bool) else 0
    if restarts >= limit:
        return JobSetDecision(False, False, "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts" + first)
    return JobSetDecision(True, True, restarting, "applying RestartJobSet failure policy action" + first)
