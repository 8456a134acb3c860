"""ValidatingAdmissionPolicies for the KubeRay kinds: the baseline guards, in CEL.

The validations are :data:`k8sddp.admission.cel.VALIDATIONS` unchanged (KDP005 exemptions,
KDP106 duplicate guards, KDP201, KDP202): they read ``variables.pytorchContainers``, a list
per group of the containers to check. Here that variable holds ``containers[0]`` of the head
group and of every worker group (the Ray container, :mod:`k8sddp.kinds.ray`), so the same
expressions judge a Ray container as they judge a PyTorchJob's ``pytorch`` container.

One policy per kind: the API server type-checks each expression against the schema of the kind
it matches, and the RayClusterSpec sits at a different path in each (:data:`RAY_KINDS`).

What CEL cannot check, and the k8sddp webhook and ``validate`` do (``docs/admission.md``):

- ``runtimeEnvYAML`` and ``serveConfigV2`` are YAML *strings*: CEL has no YAML parser, so a guard
  that the runtime env sets to ``0`` (it wins over the pod env) passes the policy (KDP201 there,
  KDP250, KDP152 are the webhook's);
- a RayJob with ``clusterSelector`` has no pod templates: the policy has nothing to check, the
  selected RayCluster is checked when it is created (KDP251 is the webhook's);
- the strict rules (deadlines, ``RAY_TRAIN_COLLECTIVE_TIMEOUT_S``, ``/dev/shm``) are not part of
  the exported baseline, as for the PyTorchJob policy.
"""

from __future__ import annotations

import copy
from typing import Any

from ..schemagen_ray import RAY_KINDS
from .cel import VARIABLES
from .policy import DEFAULT_EXEMPT_LABEL, POLICY_NAME, vap_objects

__all__ = ["RAY_PLURALS", "ray_containers_expression", "ray_vap_objects"]

#: kind -> the resource a policy matches (KubeRay v1.7.0 CRD ``spec.names.plural``).
RAY_PLURALS = {"RayJob": "rayjobs", "RayCluster": "rayclusters", "RayService": "rayservices", "RayCronJob": "raycronjobs"}


def _has_chain(root: str, parts: tuple[str, ...]) -> str:
    tests, path = [], root
    for part in parts:
        path = f"{path}.{part}"
        tests.append(f"has({path})")
    return " && ".join(tests)


def _first_container(group: str) -> str:
    """``[containers[0]]`` of the pod template of ``group`` (a CEL expression), or ``[]``."""
    test = _has_chain(group, ("template", "spec", "containers"))
    return f"({test} && size({group}.template.spec.containers) > 0 ? [{group}.template.spec.containers[0]] : [])"


def ray_containers_expression(kind: str) -> str:
    """CEL: one list per group (head first) holding that group's Ray container, for ``kind``.

    Raises:
        KeyError: not a KubeRay kind.
    """
    parts = RAY_KINDS[kind][1]
    cluster = "object." + ".".join(parts)
    head = f"{cluster}.headGroupSpec"
    # dyn(): the head's and the workers' containers are typed by their own paths in the schema.
    return (
        f"{_has_chain('object', parts)} ?\n"
        f"  [dyn(has({head}) ? {_first_container(head)} : [])] +\n"
        f"  (has({cluster}.workerGroupSpecs) ? {cluster}.workerGroupSpecs.map(g, dyn({_first_container('g')})) : [])\n"
        "  : []"
    )


def ray_vap_objects(
    *, name: str = POLICY_NAME, exempt_label: tuple[str, str] | None = DEFAULT_EXEMPT_LABEL, failure_policy: str = "Fail",
    actions: list[str] | None = None,
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and binding per KubeRay kind, named ``<name>-<plural>``.

    Args:
        name: the prefix of the objects' names.
        exempt_label: ``(key, value)`` of the namespaces not bound; ``None``: every namespace.
        failure_policy: ``Fail`` or ``Ignore``.
        actions: the bindings' ``validationActions`` (``policy export --mode``); default ``["Deny"]``.

    Returns:
        ``[policy, binding, policy, binding, ...]`` in :data:`RAY_PLURALS` order.
    """
    out: list[dict[str, Any]] = []
    for kind, plural in RAY_PLURALS.items():
        # the first pair is the PyTorchJob policy and its binding (a TrainJob pair follows)
        policy, binding = vap_objects(name=f"{name}-{plural}", exempt_label=exempt_label, failure_policy=failure_policy,
                                      actions=actions)[:2]
        policy = copy.deepcopy(policy)
        policy["spec"]["matchConstraints"]["resourceRules"] = [
            {"apiGroups": ["ray.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": [plural]}
        ]
        variables = [{"name": "pytorchContainers", "expression": ray_containers_expression(kind)}]
        variables += [{"name": n, "expression": e} for n, e in VARIABLES if n not in ("replicas", "pytorchContainers")]
        policy["spec"]["variables"] = variables
        out += [policy, binding]
    return out
