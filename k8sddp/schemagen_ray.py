"""Generate the KubeRay structure schemas (``schemas/ray.<kind>.structure.json``) from the v1.7.0 CRDs.

Called by ``python -m k8sddp.schemagen`` (``--kuberay`` names the folder holding the CRDs,
``ray.io_{rayjobs,rayclusters,rayservices,raycronjobs}.yaml``, verbatim from ray-project/kuberay
v1.7.0 ``ray-operator/config/crd/bases/``). Each schema is the CRD's ``v1`` ``openAPIV3Schema``
converted by :func:`k8sddp.schemabase.convert_openapi` (rule KDP150), ``metadata`` as the API server
checks it (KDP102), and the Ray container rule (KDP151: ``containers[0]`` of the head group and of
every worker group has an image). Subtrees that occur more than once (the pod template of every
group, a RayCronJob's RayJob spec) are stored once under ``$defs``: the four files shrink from
2.2 MB to a fraction of it, and the instance paths of findings are unchanged.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from .schemabase import RULE_KEY, SCHEMA_BASE, SCHEMA_DIALECT, convert_openapi, metadata_rule

#: The KubeRay kinds, their CRD file and the path of their RayClusterSpec from the object's root.
RAY_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "RayJob": ("ray.io_rayjobs.yaml", ("spec", "rayClusterSpec")),
    "RayCluster": ("ray.io_rayclusters.yaml", ("spec",)),
    "RayService": ("ray.io_rayservices.yaml", ("spec", "rayClusterConfig")),
    "RayCronJob": ("ray.io_raycronjobs.yaml", ("spec", "jobTemplate", "rayClusterSpec")),
}

#: Subtrees smaller than this (characters of compact JSON) are not worth a ``$ref``.
_DEDUPE_MIN = 2000


#: Keys whose value maps names to schemas, and keys whose value is data, not a schema.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs")
_DATA_KEYS = ("default", "enum", "const", "examples", "required")


def schema_name(kind: str) -> str:
    """``RayJob`` -> ``ray.rayjob.structure.json``."""
    return f"ray.{kind.lower()}.structure.json"


def _key(node: Any) -> str:
    return json.dumps(node, sort_keys=True, separators=(",", ":"))


def dedupe(schema: dict[str, Any], min_size: int = _DEDUPE_MIN) -> dict[str, Any]:
    """``schema`` with every repeated subtree of at least ``min_size`` characters moved to ``$defs``
    (named after the key it first appears under) and replaced by a ``$ref``; deterministic."""
    counts: Counter[str] = Counter()
    names: dict[str, str] = {}

    def children(node: dict[str, Any]) -> list[tuple[str, Any, bool]]:
        """``(key, value, value is a schema)``: the values of a name-to-schema map are schemas, the
        map itself (``properties``) and data (``default``, ``enum``) are not."""
        out = []
        for k, v in node.items():
            if k in _SCHEMA_MAPS and isinstance(v, dict):
                out += [(str(name), sub, True) for name, sub in v.items()]
            elif k not in _DATA_KEYS:
                out.append((str(k), v, True))
        return out

    def count(node: Any, where: str) -> None:
        if isinstance(node, dict):
            key = _key(node)
            if len(key) >= min_size:
                counts[key] += 1
                names.setdefault(key, where)
            for k, v, _ in children(node):
                count(v, k)
        elif isinstance(node, list):
            for v in node:
                count(v, where)

    count(schema, "root")
    defs: dict[str, Any] = {}
    chosen: dict[str, str] = {}

    def replace(node: Any, top: bool = False) -> Any:
        if isinstance(node, dict):
            key = _key(node)
            if not top and counts.get(key, 0) > 1:
                if key not in chosen:
                    base = names[key]
                    name, n = base, 1
                    while name in defs:
                        n += 1
                        name = f"{base}{n}"
                    chosen[key] = name
                    defs[name] = None  # reserve, then fill (a subtree never contains itself)
                    defs[name] = _rebuild(node, replace)
                return {"$ref": f"#/$defs/{chosen[key]}"}
            return _rebuild(node, replace)
        if isinstance(node, list):
            return [replace(v) for v in node]
        return node

    out = replace(schema, top=True)
    if defs:
        out["$defs"] = defs
    return out


def _rebuild(node: dict[str, Any], replace: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in _SCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: replace(sub) for name, sub in v.items()}
        elif k in _DATA_KEYS:
            out[k] = v
        else:
            out[k] = replace(v)
    return out


def _at(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node = schema
    for part in path:
        node = node["properties"][part]
    return node


def _ray_container_rule(cluster_path: tuple[str, ...]) -> dict[str, Any]:
    """KDP151: ``containers[0]`` of the head group and of every worker group has a non-empty image."""
    first = {"required": ["containers"], "properties": {"containers": {"minItems": 1, "prefixItems": [{"required": ["image"], "properties": {"image": {"type": "string", "minLength": 1}}}]}}}
    group = {"required": ["template"], "properties": {"template": {"required": ["spec"], "properties": {"spec": first}}}}
    cluster: dict[str, Any] = {"properties": {"headGroupSpec": group, "workerGroupSpecs": {"items": group}}}
    for part in reversed(cluster_path):
        cluster = {"properties": {part: cluster}}
    return cluster


def ray_structure_schema(kind: str, kuberay_dir: Path) -> dict[str, Any]:
    """Layer 1 of one KubeRay kind (``RayJob``, ``RayCluster``, ``RayService``, ``RayCronJob``).

    Raises:
        KeyError: an unknown kind, or a CRD file without a ``v1`` version.
        OSError: the CRD file cannot be read.
    """
    import yaml

    file, cluster_path = RAY_KINDS[kind]
    with (kuberay_dir / file).open() as fh:
        crd = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = convert_openapi(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["status"] = {"type": "object"}
    _at(schema, cluster_path)  # (the cluster spec must be where RAY_KINDS says: KeyError otherwise)
    body = {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_BASE + schema_name(kind),
        "title": f"KubeRay {kind} ray.io/v1: structure (k8sddp layer 1)",
        "description": f"What the API server accepts for a {kind} (KubeRay v1.7.0 CRD), and the Ray container KubeRay "
        "uses (containers[0] of every group). Generated by `python -m k8sddp.schemagen`; each allOf branch names "
        "its k8sddp rule in x-k8sddp-rule.",
        "allOf": [{RULE_KEY: "KDP150", **schema}, metadata_rule(), {RULE_KEY: "KDP151", **_ray_container_rule(cluster_path)}],
    }
    return dedupe(body)


def generate_ray(kuberay_dir: Path) -> dict[str, dict[str, Any]]:
    """The four KubeRay structure schemas, keyed by file name."""
    return {schema_name(kind): ray_structure_schema(kind, kuberay_dir) for kind in RAY_KINDS}
