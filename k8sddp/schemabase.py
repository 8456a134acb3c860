"""What every generated schema shares: the JSON Schema dialect and ``$id`` base, the key that
names each branch's catalogue rule, the Kubernetes name patterns, the CRD conversion
(:func:`convert_openapi`, :func:`crd_schema`) and ObjectMeta's rule (:func:`metadata_rule`).

The generators (:mod:`k8sddp.schemagen` for the PyTorchJob and the DDPJob spec,
:mod:`k8sddp.schemagen_trainer`, :mod:`k8sddp.schemagen_ray`, :mod:`k8sddp.ddpjobschema`) and the
validator's checks (:mod:`k8sddp.validate.checks`) import these from here, so none of them imports
the ``python -m k8sddp.schemagen`` entry point that imports the others.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from . import bounds
from . import guardvars as gv

__all__ = [
    "DNS1035_LABEL",
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "LABEL_VALUE",
    "QUALIFIED_NAME",
    "RULE_KEY",
    "SAFETY_NET_OFF",
    "SCHEMA_BASE",
    "SCHEMA_DIALECT",
    "UNRESOLVED_KEY",
    "convert_openapi",
    "crd_schema",
    "metadata_rule",
]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE = "https://k8sddp.dev/schemas/"
RULE_KEY = "x-k8sddp-rule"


# Kubernetes apimachinery validation patterns (k8s.io/apimachinery/pkg/util/validation).
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"

#: Marks an env entry of k8sddp's resolved view whose value cannot be read from the input.
UNRESOLVED_KEY = "x-k8sddp-unresolved"

#: The values that switch each safety net off, as torch reads them
#: (torch/csrc/distributed/c10d/Utils.hpp): getCvarBool takes y/yes/1/t/true and n/no/0/f/false in
#: any case (anything else fails loudly at start-up); getCvarInt takes std::stoi's leading integer,
#: so "0", " 00", "-1" or "0x10" give a buffer of no entries.
_BOOL_OFF = r"^([nN]|[nN][oO]|0|[fF]|[fF][aA][lL][sS][eE])$"
_INT_OFF = r"^[ \t\n\v\f\r]*(-[0-9]|[+]?0+([^0-9]|$))"
SAFETY_NET_OFF: dict[str, str] = {
    "TORCH_NCCL_ENABLE_MONITORING": _BOOL_OFF,
    "TORCH_NCCL_DUMP_ON_TIMEOUT": _BOOL_OFF,
    "TORCH_FR_BUFFER_SIZE": _INT_OFF,
    "TORCH_NCCL_TRACE_BUFFER_SIZE": _INT_OFF,
}
assert set(SAFETY_NET_OFF) == set(gv.SAFETY_NETS), "every safety net needs its 'off' pattern"



#: Ranges of the Kubernetes integer formats (the Go types int32 and int64).
_INT_FORMATS = {"int32": (-bounds.INT32_MAX - 1, bounds.INT32_MAX), "int64": (-bounds.INT64_MAX - 1, bounds.INT64_MAX)}


# -- CRD conversion ------------------------------------------------------------------------------


def convert_openapi(node: Any) -> Any:
    """Convert a structural ``openAPIV3Schema`` node to JSON Schema 2020-12.

    Drops ``description`` and the ``x-kubernetes-*`` extensions the validator does not use, turns
    ``x-kubernetes-int-or-string`` into ``anyOf`` integer/string, keeps ``x-kubernetes-list-type``
    and ``x-kubernetes-list-map-keys`` (read by the list-map check), and closes objects with
    ``properties`` (the API server prunes unknown fields, or rejects them under strict field
    validation: either way the setting is lost). An integer with ``format: int32`` / ``int64``
    gets the range of that Go type (:mod:`k8sddp.bounds`): JSON Schema does not assert formats,
    and the API server refuses a value that does not fit when it decodes the object.
    """
    if isinstance(node, list):
        return [convert_openapi(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("description", "x-kubernetes-map-type", "x-kubernetes-validations", "x-kubernetes-int-or-string"):
            continue
        if key == "properties":
            out[key] = {k: convert_openapi(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") or key in ("anyOf", "allOf", "oneOf"):
            out[key] = convert_openapi(value)
        else:
            out[key] = copy.deepcopy(value)
    int_range = _INT_FORMATS.get(str(node.get("format", ""))) if node.get("type") == "integer" else None
    if int_range:
        out.setdefault("minimum", int_range[0])
        out.setdefault("maximum", int_range[1])
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    out.pop("x-kubernetes-preserve-unknown-fields", None)
    return out


def crd_schema(crd_path: Path, version: str = "v1") -> dict[str, Any]:
    """A fresh copy of :func:`_crd_schema` (callers may change it)."""
    return copy.deepcopy(_crd_schema(crd_path.resolve(), version))


@functools.lru_cache(maxsize=8)
def _crd_schema(crd_path: Path, version: str = "v1") -> dict[str, Any]:
    """The converted ``openAPIV3Schema`` of ``version`` of the CRD at ``crd_path`` (the PyTorchJob's ``v1``).

    Raises:
        KeyError: the file is not a CRD.
        ValueError: the CRD does not have exactly one such version.
    """
    import yaml

    with crd_path.open() as fh:
        crd = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: 10x faster on the 400 KB CRD
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = convert_openapi(served["schema"]["openAPIV3Schema"])
    # metadata is checked by its own rule (KDP102), as the API server checks ObjectMeta.
    schema["properties"]["metadata"] = {"type": "object"}
    # status is written by the operator; a manifest may carry a stale one (kubectl drops it).
    schema["properties"]["status"] = {"type": "object"}
    return schema


def metadata_rule() -> dict[str, Any]:
    """KDP102: ``metadata`` as the API server checks ObjectMeta (shared by every kind's structure schema)."""
    return {
        RULE_KEY: "KDP102",
        "required": ["metadata"],
        "properties": {
            "metadata": {
                "type": "object",
                "anyOf": [{"required": ["name"]}, {"required": ["generateName"]}],
                "properties": {
                    "name": {"type": "string", "maxLength": 253, "pattern": DNS1123_SUBDOMAIN},
                    "namespace": {"type": "string", "maxLength": 63, "pattern": DNS1123_LABEL},
                    "labels": {
                        "type": "object",
                        "propertyNames": {"pattern": QUALIFIED_NAME},
                        "additionalProperties": {"type": "string", "pattern": LABEL_VALUE},
                    },
                    "annotations": {
                        "type": "object",
                        "propertyNames": {"pattern": QUALIFIED_NAME},
                        "additionalProperties": {"type": "string"},
                    },
                },
            }
        },
    }
