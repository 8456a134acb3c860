"""ValidatingAdmissionPolicies for the Kubeflow Trainer v2 runtimes: the baseline guards, in CEL.

A ``TrainingRuntime`` or ``ClusterTrainingRuntime`` holds the pod template every TrainJob that
names it runs, so unlike a TrainJob it can be judged alone. The validations are
:data:`k8sddp.admission.cel.VALIDATIONS` unchanged (KDP005 exemptions, KDP106 duplicate guards,
KDP201, KDP202, KDP213): they read ``variables.pytorchContainers``, one list per replicated Job of
the containers to check. Here that variable holds the first container named ``node`` of the
trainer Job, the replicated Job labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``
(:func:`k8sddp.kinds.trainermerge.trainer_job`, :func:`~k8sddp.kinds.trainermerge.node_container`:
the container the Trainer v2.3.0 torch plugin writes a TrainJob's overrides and ``PET_*`` env
into, ``pkg/runtime/framework/plugins/torch/torch.go`` ``EnforceMLPolicy``), so the same
expressions judge it as ``validate`` does. Initializer and launcher Jobs are not checked.

What CEL cannot check, and the k8sddp webhook and ``validate`` do (``docs/admission.md``):

- a guard a TrainJob sets in ``spec.trainer.env`` for a runtime that lacks it: the runtime policy
  denies the runtime all the same (``validate`` too: a runtime is the place to set the guards for
  every job), and a TrainJob is judged on its runtime only by the webhook, which reads it;
- the strict rules (the exit-code failure policy KDP340, ``/dev/shm``, the artifact volume) are
  not part of the exported baseline, as for the PyTorchJob policy.

One policy per kind: a ``ClusterTrainingRuntime`` is cluster-scoped, so its binding's
``namespaceSelector`` never skips it (``admissionregistration.k8s.io/v1`` ``MatchResources``:
"If the object itself is cluster scoped, it never skips the policy").
"""

from __future__ import annotations

import copy
from typing import Any

from ..kinds.trainermerge import ANCESTOR_LABEL, ANCESTOR_TRAINER, NODE
from ..schemagen_trainer import TRAINER_GROUP, TRAINER_VERSION
from .cel import VARIABLES, cel_string
from .policy import DEFAULT_EXEMPT_LABEL, POLICY_NAME, vap_objects

__all__ = ["RUNTIME_PLURALS", "runtime_containers_expression", "runtime_vap_objects"]

#: kind -> the resource a policy matches (Trainer v2.3.0 CRDs ``spec.names.plural``).
RUNTIME_PLURALS = {"TrainingRuntime": "trainingruntimes", "ClusterTrainingRuntime": "clustertrainingruntimes"}


def runtime_containers_expression() -> str:
    """CEL: one list per trainer Job of the runtime (one at most) holding its first ``node`` container.

    A replicated Job is the trainer Job when its ``template.metadata.labels`` carry
    ``ANCESTOR_LABEL: ANCESTOR_TRAINER``; a runtime without one gives ``[]`` (nothing to check:
    ``validate``'s KDP134 reports it).
    """
    spec = "object.spec.template.spec"
    labels = "j.template.metadata.labels"
    is_trainer = (
        f"has(j.template) && has(j.template.metadata) && has({labels}) && "
        f"{cel_string(ANCESTOR_LABEL)} in {labels} && {labels}[{cel_string(ANCESTOR_LABEL)}] == {cel_string(ANCESTOR_TRAINER)}"
    )
    pod = "j.template.spec.template.spec"
    nodes = (
        f"(has(j.template.spec) && has(j.template.spec.template) && has({pod}) && has({pod}.containers) ? "
        f"{pod}.containers.filter(c, c.name == {cel_string(NODE)}) : [])"
    )
    return (
        f"has(object.spec) && has(object.spec.template) && has({spec}) && has({spec}.replicatedJobs) ?\n"
        f"  {spec}.replicatedJobs.filter(j, {is_trainer}).map(j,\n"
        f"    [{nodes}].map(ns, size(ns) > 0 ? [ns[0]] : [])[0]\n"
        "  )\n"
        "  : []"
    )


def runtime_vap_objects(
    *, name: str = POLICY_NAME, exempt_label: tuple[str, str] | None = DEFAULT_EXEMPT_LABEL, failure_policy: str = "Fail",
    actions: list[str] | None = None,
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and binding per Trainer runtime kind, named ``<name>-<plural>``.

    Args:
        name: the prefix of the objects' names.
        exempt_label: ``(key, value)`` of the namespaces not bound (a TrainingRuntime's; a
            ClusterTrainingRuntime has none); ``None``: every namespace.
        failure_policy: ``Fail`` or ``Ignore``.
        actions: the bindings' ``validationActions`` (``policy export --mode``); default ``["Deny"]``.

    Returns:
        ``[policy, binding, policy, binding]`` in :data:`RUNTIME_PLURALS` order.
    """
    out: list[dict[str, Any]] = []
    for plural in RUNTIME_PLURALS.values():
        # the first pair is the PyTorchJob policy and its binding: same validations, other objects
        policy, binding = vap_objects(name=f"{name}-{plural}", exempt_label=exempt_label, failure_policy=failure_policy,
                                      actions=actions)[:2]
        policy = copy.deepcopy(policy)
        policy["spec"]["matchConstraints"]["resourceRules"] = [
            {"apiGroups": [TRAINER_GROUP], "apiVersions": [TRAINER_VERSION], "operations": ["CREATE", "UPDATE"], "resources": [plural]}
        ]
        variables = [{"name": "pytorchContainers", "expression": runtime_containers_expression()}]
        variables += [{"name": n, "expression": e} for n, e in VARIABLES if n not in ("replicas", "pytorchContainers")]
        policy["spec"]["variables"] = variables
        out += [policy, binding]
    return out
