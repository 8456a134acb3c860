"""The Trainer v2 equivalent of PyTorchJob's ``restartPolicy: ExitCode``: one source for render and validate.

k8sddp's runtime exits 1-127 for a final error and >= 128 for a retryable one (docs/runtime.md).
Trainer v2 has no ExitCode policy; its JobSet does the same with four settings of the runtime's
trainer Job (the ``replicatedJobs`` entry labelled as the trainer ancestor):

1. the Job's ``podFailurePolicy`` (Kubernetes batch/v1) rule ``FailJob`` on ``onExitCodes``
   ``In`` 1-127 of container ``node``: the Job fails with reason ``PodFailurePolicy``;
   a rule ``Ignore`` on the pod condition ``DisruptionTarget`` (preemption, eviction, node drain)
   before it, so those recreate the pod without counting;
2. the Job's ``backoffLimit: 0`` (with the pod's ``restartPolicy: Never``, which a
   ``podFailurePolicy`` requires): any other failure (exit >= 128) fails the Job with reason
   ``BackoffLimitExceeded``;
3. the JobSet's ``failurePolicy.rules``: ``FailJobSet`` on ``onJobFailureReasons:
   [PodFailurePolicy]``; a failure no rule matches gets ``RestartJobSet``, which recreates every
   Job of the set while ``failurePolicy.maxRestarts`` allows (JobSet v0.12.0 CRD,
   ``failurePolicy.rules``: "If no matching rule is found, the RestartJobSet action is applied");
4. the TrainJob's ``spec.activeDeadlineSeconds`` bounds it all (strict KDP308).

Sources: Kubernetes docs "Handling retriable and non-retriable pod failures with Pod failure
policy" (batch/v1 JobSpec.podFailurePolicy, reasons PodFailurePolicy and BackoffLimitExceeded);
kubernetes-sigs/jobset v0.12.0 api/jobset/v1alpha2/jobset_types.go (FailurePolicy, FailurePolicyRule,
FailJobSet, RestartJobSet) and config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml.
"""

from __future__ import annotations

from typing import Any

from ..validate.jobparts import MAPPING, as_list, get
from .trainermerge import NODE, trainer_job

__all__ = [
    "DEFAULT_MAX_RESTARTS",
    "FINAL_EXIT_CODES",
    "failure_policy_problems",
    "jobset_failure_policy",
    "pod_failure_policy",
]

#: Exit codes after which a retry cannot help (k8sddp runtime, docs/runtime.md): 1-127.
FINAL_EXIT_CODES = tuple(range(1, 128))
#: JobSet restarts for retryable failures (exit >= 128) before the set fails.
DEFAULT_MAX_RESTARTS = 3
#: The Job condition reason a podFailurePolicy FailJob rule gives (batch/v1 JobReasonPodFailurePolicy).
REASON_POD_FAILURE_POLICY = "PodFailurePolicy"


def pod_failure_policy() -> dict[str, Any]:
    """The trainer Job's ``podFailurePolicy``."""
    return {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": NODE, "operator": "In", "values": list(FINAL_EXIT_CODES)}},
        ]
    }


def jobset_failure_policy(max_restarts: int = DEFAULT_MAX_RESTARTS) -> dict[str, Any]:
    """The JobSet's ``failurePolicy`` (``max_restarts``: restarts of the whole set for retryable failures)."""
    return {
        "maxRestarts": max_restarts,
        "rules": [{"name": "finalExitCode", "action": "FailJobSet", "onJobFailureReasons": [REASON_POD_FAILURE_POLICY]}],
    }


def _fails_final_codes(rules: list[Any]) -> bool:
    """The first ``onExitCodes`` rule of container ``node`` (or of every container) that takes any
    exit code 1-127 is ``FailJob`` and takes all of them."""
    final = set(FINAL_EXIT_CODES)
    for rule in rules:
        codes = rule.get("onExitCodes") if isinstance(rule, MAPPING) else None
        if not isinstance(codes, MAPPING) or codes.get("containerName") not in (None, NODE):
            continue
        values = {v for v in as_list(codes.get("values")) if isinstance(v, int)}
        op = codes.get("operator")
        if (op == "In" and values & final) or (op == "NotIn" and not final <= values):
            covered = final <= values if op == "In" else not values & final
            return covered and rule.get("action") == "FailJob"
    return False


def failure_policy_problems(jobset_spec: Any) -> list[tuple[tuple[Any, ...], str]]:
    """What a runtime's JobSet spec (``spec.template.spec``) lacks of the failure policy above.

    Returns:
        ``(path from the JobSet spec, what is missing)``; ``[]`` when it has all of it, or when it
        has no trainer Job (KDP134 says so).
    """
    found = trainer_job(jobset_spec)
    if found is None:
        return []
    index, rjob = found
    job = ("replicatedJobs", index, "template", "spec")
    problems: list[tuple[tuple[Any, ...], str]] = []
    job_spec = get(rjob, "template", "spec")
    job_spec = job_spec if isinstance(job_spec, MAPPING) else {}
    if not _fails_final_codes(as_list(get(job_spec, "podFailurePolicy", "rules"))):
        problems.append(
            ((*job, "podFailurePolicy") if "podFailurePolicy" in job_spec else job,
             "the trainer Job's podFailurePolicy has no FailJob rule on exit codes 1-127 of container node (final errors)")
        )
    restart = get(job_spec, "template", "spec", "restartPolicy")
    if isinstance(job_spec.get("podFailurePolicy"), MAPPING) and restart != "Never":
        problems.append(
            ((*job, "template", "spec", "restartPolicy") if restart is not None else (*job, "template"),
             f"the trainer pod's restartPolicy is {restart or 'unset'}, not Never: the API server rejects a Job with a podFailurePolicy otherwise")
        )
    if job_spec.get("backoffLimit") != 0:
        problems.append(
            ((*job, "backoffLimit") if "backoffLimit" in job_spec else job,
             f"the trainer Job's backoffLimit is {job_spec.get('backoffLimit', 'unset (6)')}, not 0: retryable exits recreate single pods "
             "instead of restarting the whole JobSet's rendezvous")
        )
    policy = get(jobset_spec, "failurePolicy")
    rules = as_list(get(policy, "rules"))
    fails = any(
        isinstance(r, MAPPING) and r.get("action") == "FailJobSet" and REASON_POD_FAILURE_POLICY in as_list(r.get("onJobFailureReasons"))
        for r in rules
    )
    if not fails:
        problems.append(
            (("failurePolicy",) if isinstance(policy, MAPPING) else (),
             "the JobSet's failurePolicy has no FailJobSet rule on onJobFailureReasons [PodFailurePolicy]: a final error restarts the set")
        )
    max_restarts = get(policy, "maxRestarts")
    if not isinstance(max_restarts, int) or max_restarts < 1:
        problems.append(
            (("failurePolicy",) if isinstance(policy, MAPPING) else (),
             "the JobSet's failurePolicy.maxRestarts is not a positive number: a retryable exit (>= 128) fails the set at once")
        )
    return problems


def describe(problems: list[tuple[tuple[Any, ...], str]]) -> str:
    """One sentence of all problems."""
    return "; ".join(m for _, m in problems)
