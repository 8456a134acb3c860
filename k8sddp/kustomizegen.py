"""Generate the OpenAPI document k8sddp ships for kustomize's ``openapi:`` field.

Why: kustomize knows merge keys only for built-in kinds. A strategic-merge patch on a PyTorchJob
replaces whole ``containers`` and ``env`` lists, so an overlay that adds one variable to the Worker
drops the guard variables (``../shared/reference/NOTES.md``, "Kubernetes semantics"). A document
given in a kustomization's ``openapi: {path: ...}`` field supplies merge keys for custom resources,
but *replaces* kustomize's built-in schema, so it must carry the built-in workload kinds too.

The document (Swagger 2.0 ``definitions``, the form kustomize reads; each kind found through its
``x-kubernetes-group-version-kind``) is built from two sources:

* ``org.kubeflow.v1.PyTorchJob``: the CRD's own ``openAPIV3Schema`` (descriptions dropped), with the
  strategic-merge directives (``x-kubernetes-patch-merge-key``, ``x-kubernetes-patch-strategy``)
  copied from Kubernetes' ``PodTemplateSpec`` onto the same fields of every replica's ``template``:
  ``containers``, ``initContainers``, ``ephemeralContainers``, ``env``, ``volumes`` and
  ``imagePullSecrets`` by ``name``, ``volumeMounts`` by ``mountPath``, ``ports`` by
  ``containerPort``, ... exactly as kustomize merges a Deployment's pod template. (Merging
  ``volumeMounts`` by ``name`` or ``ports`` by ``name`` would be wrong: one volume may be mounted at
  two paths, and ports need no name.)
* the built-in kinds people patch beside a job (:data:`BUILTIN_KINDS`) with their whole dependency
  closure, from Kubernetes' OpenAPI definitions (v1.32, as published in the PyPI package
  ``kubernetes-validate`` 1.37.0 file ``kubernetes-json-schema/v1.32.0-local/_definitions.json``,
  converted back from JSON Schema to Swagger form, descriptions dropped). Shipped as
  ``schemas/kustomize-k8s-definitions.json``.

Regenerate (and commit) with::

    pip download --no-deps kubernetes-validate==1.37.0 && unzip -o kubernetes_validate-1.37.0-*.whl \\
        'kubernetes_validate/kubernetes-json-schema/v1.32.0-local/_definitions.json'
    python -m k8sddp.kustomizegen k8s \\
        --definitions kubernetes_validate/kubernetes-json-schema/v1.32.0-local/_definitions.json
    python -m k8sddp.kustomizegen openapi --crd ../shared/reference/kubeflow/kubeflow.org_pytorchjobs.yaml

``tests/test_kustomize.py`` fails when the committed ``schemas/pytorchjob-kustomize-openapi.json``
differs from what the second command generates.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "BUILTIN_KINDS",
    "K8S_DEFINITIONS_FILE",
    "OPENAPI_FILE",
    "PYTORCHJOB_DEFINITION",
    "build_openapi",
    "k8s_definitions",
    "pytorchjob_definition",
]

K8S_DEFINITIONS_FILE = "kustomize-k8s-definitions.json"
OPENAPI_FILE = "pytorchjob-kustomize-openapi.json"
PYTORCHJOB_DEFINITION = "org.kubeflow.v1.PyTorchJob"
K8S_SOURCE = "kubernetes-validate 1.37.0: kubernetes-json-schema/v1.32.0-local/_definitions.json"

#: Built-in kinds kept in the document (with everything they reference). Kinds not listed here
#: lose their merge keys in a kustomization that uses the document: keep those in another one.
BUILTIN_KINDS: tuple[str, ...] = (
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.apps.v1.StatefulSet",
    "io.k8s.api.apps.v1.DaemonSet",
    "io.k8s.api.apps.v1.ReplicaSet",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.batch.v1.CronJob",
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.PodTemplate",
    "io.k8s.api.core.v1.ReplicationController",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.ServiceAccount",
    "io.k8s.api.core.v1.PersistentVolumeClaim",
)

#: JSON-Schema ``oneOf`` definitions and their Swagger originals (Kubernetes' swagger.json).
_SWAGGER_SCALARS = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
}
_PATCH_KEYS = ("x-kubernetes-patch-merge-key", "x-kubernetes-patch-strategy")


# -- built-in definitions -------------------------------------------------------------------------


def _to_swagger(node: Any, *, under_properties: bool = False) -> Any:
    """One JSON-Schema node of ``_definitions.json`` back in Swagger 2.0 form."""
    if isinstance(node, list):
        return [_to_swagger(x) for x in node]
    if not isinstance(node, dict):
        return node
    if under_properties:
        return {k: _to_swagger(v) for k, v in node.items()}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "description":
            continue
        if key == "$ref":
            out[key] = value.replace("#/$defs/", "#/definitions/")
        elif key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            out[key] = kinds[0] if len(kinds) == 1 else kinds
        elif key == "properties":
            props = _to_swagger(value, under_properties=True)
            for name in ("apiVersion", "kind"):  # the enums openapi2jsonschema added
                if isinstance(props.get(name), dict):
                    props[name].pop("enum", None)
            out[key] = props
        else:
            out[key] = _to_swagger(value)
    return out


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            ref = n.get("$ref")
            if isinstance(ref, str):
                found.add(ref.rsplit("/", 1)[-1])
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return found


def k8s_definitions(source: dict[str, Any], roots: tuple[str, ...] = BUILTIN_KINDS) -> dict[str, Any]:
    """The ``roots`` and their dependency closure, in Swagger form, sorted by name.

    Args:
        source: a parsed ``_definitions.json`` of kubernetes-validate (``$defs`` or ``definitions``).
        roots: definition names to keep.

    Raises:
        KeyError: a root or a referenced definition is missing from ``source``.
    """
    defs = source.get("$defs") or source["definitions"]
    keep: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        todo.extend(_refs(defs[name]) - keep)
    out: dict[str, Any] = {}
    for name in sorted(keep):
        out[name] = dict(_SWAGGER_SCALARS[name]) if name in _SWAGGER_SCALARS else _to_swagger(defs[name])
    return out


# -- the PyTorchJob definition --------------------------------------------------------------------


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _copy_directives(crd: Any, k8s: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> None:
    """Copy the patch directives of the Kubernetes schema ``k8s`` onto the same fields of ``crd``."""
    if not isinstance(crd, dict) or depth > 40:
        return
    k8s = _resolve(k8s, defs)
    for key in _PATCH_KEYS:
        if key in k8s:
            crd[key] = k8s[key]
    for name, sub in crd.get("properties", {}).items():
        k8s_sub = k8s.get("properties", {}).get(name)
        if isinstance(k8s_sub, dict):
            for key in _PATCH_KEYS:  # a property's directives sit beside its $ref, not inside
                if key in k8s_sub:
                    sub[key] = k8s_sub[key]
            _copy_directives(sub, k8s_sub, defs, depth + 1)
    if isinstance(crd.get("items"), dict) and isinstance(k8s.get("items"), dict):
        _copy_directives(crd["items"], k8s["items"], defs, depth + 1)
    if isinstance(crd.get("additionalProperties"), dict) and isinstance(k8s.get("additionalProperties"), dict):
        _copy_directives(crd["additionalProperties"], k8s["additionalProperties"], defs, depth + 1)


def _drop_descriptions(node: Any, *, under_properties: bool = False) -> Any:
    if isinstance(node, list):
        return [_drop_descriptions(x) for x in node]
    if not isinstance(node, dict):
        return node
    if under_properties:
        return {k: _drop_descriptions(v) for k, v in node.items()}
    return {
        k: _drop_descriptions(v, under_properties=k == "properties")
        for k, v in node.items()
        if k != "description"
    }


def pytorchjob_definition(crd: dict[str, Any], k8s_defs: dict[str, Any]) -> dict[str, Any]:
    """The PyTorchJob definition: the CRD's served version's schema plus patch directives.

    Args:
        crd: the parsed PyTorchJob CustomResourceDefinition.
        k8s_defs: the Swagger definitions of :func:`k8s_definitions` (needs ``PodTemplateSpec``).

    Raises:
        ValueError: not the PyTorchJob CRD, or no served version with a schema.
    """
    spec = crd.get("spec") or {}
    if crd.get("kind") != "CustomResourceDefinition" or (spec.get("names") or {}).get("kind") != "PyTorchJob":
        raise ValueError("not the PyTorchJob CustomResourceDefinition")
    version = next((v for v in spec.get("versions", []) if v.get("served") and v.get("schema")), None)
    if version is None:
        raise ValueError("the CRD has no served version with a schema")
    schema = _drop_descriptions(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    replica = schema["properties"]["spec"]["properties"]["pytorchReplicaSpecs"]["additionalProperties"]
    _copy_directives(replica["properties"]["template"],
                     {"$ref": "#/definitions/io.k8s.api.core.v1.PodTemplateSpec"}, k8s_defs)
    schema["x-kubernetes-group-version-kind"] = [
        {"group": spec["group"], "kind": "PyTorchJob", "version": version["name"]}
    ]
    return schema


def build_openapi(crd: dict[str, Any], k8s_defs: dict[str, Any]) -> dict[str, Any]:
    """The whole document for kustomize's ``openapi: {path: ...}``."""
    definitions = dict(k8s_defs)
    definitions[PYTORCHJOB_DEFINITION] = pytorchjob_definition(crd, k8s_defs)
    return {
        "swagger": "2.0",
        "info": {
            "title": "k8sddp: PyTorchJob (kubeflow.org/v1) with strategic-merge keys, and Kubernetes workload kinds",
            "version": "v1",
            "x-k8sddp-sources": {
                "PyTorchJob": "Kubeflow PyTorchJob CRD (kubeflow/trainer v1.9.4)",
                "kubernetes": K8S_SOURCE,
            },
        },
        "paths": {},
        "definitions": dict(sorted(definitions.items())),
    }


def dumps(doc: dict[str, Any]) -> str:
    """Stable JSON text of a generated document (2-space indent, trailing newline)."""
    return json.dumps(doc, indent=1, sort_keys=False, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m k8sddp.kustomizegen k8s|openapi ...``: regenerate the shipped files."""
    from .resources import schemas_dir

    parser = argparse.ArgumentParser(prog="python -m k8sddp.kustomizegen", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    k = sub.add_parser("k8s", help=f"regenerate schemas/{K8S_DEFINITIONS_FILE}")
    k.add_argument("--definitions", required=True, help="kubernetes-validate's _definitions.json")
    o = sub.add_parser("openapi", help=f"regenerate schemas/{OPENAPI_FILE}")
    o.add_argument("--crd", required=True, help="the PyTorchJob CRD (kubeflow.org_pytorchjobs.yaml)")
    parser.add_argument("--out-dir", default=None, help="default: the schemas/ folder")
    args = parser.parse_args(argv)
    out = Path(args.out_dir) if args.out_dir else schemas_dir()
    if args.what == "k8s":
        source = json.loads(Path(args.definitions).read_text(encoding="utf-8"))
        (out / K8S_DEFINITIONS_FILE).write_text(dumps(k8s_definitions(source)), encoding="utf-8")
    else:
        crd = yaml.safe_load(Path(args.crd).read_text(encoding="utf-8"))
        k8s_defs = json.loads((schemas_dir() / K8S_DEFINITIONS_FILE).read_text(encoding="utf-8"))
        (out / OPENAPI_FILE).write_text(dumps(build_openapi(crd, k8s_defs)), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
