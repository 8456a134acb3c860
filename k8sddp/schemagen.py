"""Generate the JSON Schemas in ``schemas/`` from the PyTorchJob and Trainer v2 CRDs and the rule catalogue.

Regenerate (and commit the result) with::

    python -m k8sddp.schemagen --crd ../shared/reference/kubeflow/kubeflow.org_pytorchjobs.yaml

``tests/test_schemas.py`` fails when the committed files differ from what this module generates.

Outputs:
    ``ddpjob.schema.json``  the DDPJob spec that ``k8sddp render`` reads (k8sddp/ddpjobschema.py), with
        the CRD's pod types (volumes, containers, affinity, security contexts) embedded as ``$defs``.
    ``pytorchjob.structure.json``  layer 1: the CRD's ``openAPIV3Schema`` (converted once: descriptions
        dropped, unknown fields rejected where the API server would prune them, int-or-string kept as
        ``anyOf``), ``metadata`` as the API server checks it, the operator webhook's rules and the enums
        the CRD forgot. Each ``allOf`` branch carries ``x-k8sddp-rule`` with its catalogue id.
    ``pytorchjob.baseline.json`` / ``pytorchjob.strict.json``  layer 2: the guardrail profiles. They
        read the ``env`` of the ``pytorch`` container literally; k8sddp applies them to a copy of the
        job whose ``env`` is the *effective* environment (``envFrom`` and ``valueFrom`` resolved as the
        kubelet does), so other tools using them on raw manifests get the stricter, literal-only check.
    ``trainjob.structure.json`` / ``trainingruntime.structure.json``  layer 1 for Kubeflow Trainer
        v2.3.0 (:mod:`k8sddp.schemagen_trainer`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import bounds
from . import guardvars as gv
from .atomic import write_text_atomic
from .ddpjobschema import POD_DEFINITIONS, ddpjob_schema
from .schemabase import (  # (re-exported: the schema vocabulary's old home)
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_VALUE,
    QUALIFIED_NAME,
    RULE_KEY,
    SAFETY_NET_OFF,
    SCHEMA_BASE,
    SCHEMA_DIALECT,
    UNRESOLVED_KEY,
    convert_openapi,
    crd_schema,
    metadata_rule,
)
from .schemagen_ray import generate_ray
from .schemagen_trainer import trainer_schemas

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
    "container_rules",
    "convert_openapi",
    "crd_schema",
    "dump",
    "generate",
    "guard_schema",
    "main",
    "metadata_rule",
    "pod_definitions",
    "structure_schema",
]

DEFAULT_CRD = Path(__file__).resolve().parent.parent.parent / "shared/reference/kubeflow/kubeflow.org_pytorchjobs.yaml"
DEFAULT_KUBERAY = Path(__file__).resolve().parent.parent.parent / "shared/reference/kuberay"
RESTART_POLICIES = ["Always", "OnFailure", "Never", "ExitCode"]  # kubeflow common v1 RestartPolicy
CLEAN_POD_POLICIES = ["All", "Running", "None"]  # kubeflow common v1 CleanPodPolicy


# -- structure -----------------------------------------------------------------------------------


def _replica(template_spec: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    """A schema for every entry of ``spec.pytorchReplicaSpecs`` whose pod spec satisfies ``template_spec``.

    ``required``: the replica must have ``template.spec`` at all (the operator's webhook rejects a
    replica without containers; without this a replica with no template passed every rule).
    """
    template: dict[str, Any] = {"properties": {"spec": template_spec}}
    replica: dict[str, Any] = {"properties": {"template": template}}
    if required:
        template["required"] = ["spec"]
        replica["required"] = ["template"]
    return {"properties": {"spec": {"properties": {"pytorchReplicaSpecs": {"additionalProperties": replica}}}}}


def structure_schema(crd_path: Path) -> dict[str, Any]:
    """Layer 1: everything the API server and the Kubeflow operator would refuse."""
    metadata = metadata_rule()
    job_name = {
        RULE_KEY: "KDP103",
        "properties": {"metadata": {"properties": {"name": {"type": "string", "maxLength": 63, "pattern": DNS1035_LABEL}}}},
    }
    pytorch_container = {
        RULE_KEY: "KDP104",
        **_replica(
            {
                "required": ["containers"],
                "properties": {
                    "containers": {
                        "minItems": 1,
                        "contains": {"required": ["name"], "properties": {"name": {"const": "pytorch"}}},
                        "items": {"required": ["image"], "properties": {"image": {"type": "string", "minLength": 1}}},
                    }
                },
            },
            required=True,
        ),
    }
    replica_specs = {
        RULE_KEY: "KDP105",
        "properties": {
            "spec": {
                "required": ["pytorchReplicaSpecs"],
                "not": {
                    "required": ["nprocPerNode", "elasticPolicy"],
                    "properties": {"elasticPolicy": {"required": ["nProcPerNode"]}},
                },
                "if": {"required": ["elasticPolicy"]},
                "then": {"properties": {"pytorchReplicaSpecs": {"required": ["Worker"]}}},
                "properties": {
                    "pytorchReplicaSpecs": {
                        "type": "object",
                        "minProperties": 1,
                        "propertyNames": {"enum": ["Master", "Worker"]},
                        "properties": {
                            "Master": {"required": ["replicas"], "properties": {"replicas": {"const": 1}}},
                            "Worker": {"properties": {"replicas": {"minimum": 1}}},
                        },
                    }
                },
            }
        },
    }
    enums = {
        RULE_KEY: "KDP107",
        "properties": {
            "spec": {
                "properties": {
                    "runPolicy": {"properties": {"cleanPodPolicy": {"enum": CLEAN_POD_POLICIES}}},
                    "pytorchReplicaSpecs": {
                        "additionalProperties": {"properties": {"restartPolicy": {"enum": RESTART_POLICIES}}}
                    },
                }
            }
        },
    }
    quantity = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": bounds.NONNEGATIVE_QUANTITY_PATTERN}]}
    resources = {
        "items": {
            "properties": {
                "resources": {
                    "properties": {
                        "requests": {"additionalProperties": quantity},
                        "limits": {"additionalProperties": quantity},
                    }
                }
            }
        }
    }
    quantities = {
        RULE_KEY: "KDP115",
        **_replica({"properties": {"containers": resources, "initContainers": resources}}),
    }
    crd = {RULE_KEY: "KDP101", **crd_schema(crd_path)}
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_BASE + "pytorchjob.structure.json",
        "title": "Kubeflow PyTorchJob v1: structure (k8sddp layer 1)",
        "description": "What the API server and the Kubeflow training operator accept. Generated by "
        "`python -m k8sddp.schemagen`; each allOf branch names its k8sddp rule in x-k8sddp-rule.",
        "allOf": [crd, metadata, job_name, pytorch_container, replica_specs, enums, quantities],
    }


# -- guardrails ----------------------------------------------------------------------------------


def _env_has(name: str, value_schema: dict[str, Any]) -> dict[str, Any]:
    return {"contains": {"required": ["name", "value"], "properties": {"name": {"const": name}, "value": value_schema}}}


def _env_lacks(name: str) -> dict[str, Any]:
    return {"not": {"contains": {"required": ["name"], "properties": {"name": {"const": name}}}}}


def _pytorch_container(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply ``rules`` (each an annotated schema of one container) to every ``pytorch`` container."""
    return _replica(
        {
            "properties": {
                "containers": {
                    "items": {
                        "if": {"required": ["name"], "properties": {"name": {"const": "pytorch"}}},
                        "then": {"allOf": rules},
                    }
                }
            }
        }
    )


def _baseline_container_rules() -> list[dict[str, Any]]:
    accepted = {"type": "string", "enum": list(gv.ASYNC_ERROR_HANDLING_ACCEPTED)}
    return [
        {
            RULE_KEY: "KDP201",
            "required": ["env"],
            "properties": {
                "env": {
                    "anyOf": [
                        _env_has(gv.ASYNC_ERROR_HANDLING, accepted),
                        {"allOf": [_env_lacks(gv.ASYNC_ERROR_HANDLING), _env_has(gv.LEGACY_ASYNC_ERROR_HANDLING, accepted)]},
                    ]
                }
            },
        },
        {
            RULE_KEY: "KDP202",
            "required": ["env"],
            "properties": {"env": _env_has(gv.FAULTHANDLER, {"type": "string", "minLength": 1})},
        },
    ]


def _strict_container_rules() -> list[dict[str, Any]]:
    # what the runtime takes (k8sddp/runtime/config.py): whole seconds in 1..7 days, a count in int32
    positive = {"type": "string", "pattern": bounds.decimal_range_pattern(1, bounds.MAX_DURATION_SECONDS)}
    absolute = {"type": "string", "pattern": r"^/."}
    return [
        {RULE_KEY: "KDP301", "required": ["env"], "properties": {"env": _env_has(gv.PG_TIMEOUT, positive)}},
        {RULE_KEY: "KDP302", "required": ["env"], "properties": {"env": _env_has(gv.WATCHDOG_TIMEOUT, positive)}},
        {
            RULE_KEY: "KDP303",
            "required": ["env"],
            "properties": {"env": _env_has(gv.MAX_HANG_RESTARTS, {"type": "string", "pattern": bounds.decimal_range_pattern(0, bounds.INT32_MAX)})},
        },
        {RULE_KEY: "KDP304", "required": ["env"], "properties": {"env": _env_has(gv.FR_DUMP_TEMP_FILE, absolute)}},
        {RULE_KEY: "KDP305", "required": ["env"], "properties": {"env": _env_has(gv.ARTIFACT_DIR, absolute)}},
        {
            RULE_KEY: "KDP306",
            "properties": {
                "env": {
                    "not": {
                        "contains": {
                            "anyOf": [
                                *(
                                    {"required": ["name", "value"], "properties": {"name": {"const": name}, "value": {"pattern": off}}}
                                    for name, off in SAFETY_NET_OFF.items()
                                ),
                                # Set from something that cannot be read (k8sddp's resolved view), or
                                # from valueFrom at all (other tools reading raw manifests).
                                {"required": ["name", UNRESOLVED_KEY], "properties": {"name": {"enum": list(gv.SAFETY_NETS)}}},
                                {"required": ["name", "valueFrom"], "properties": {"name": {"enum": list(gv.SAFETY_NETS)}}},
                            ]
                        }
                    }
                }
            },
        },
        {
            RULE_KEY: "KDP307",
            "required": ["volumeMounts"],
            "properties": {
                "volumeMounts": {"contains": {"required": ["mountPath"], "properties": {"mountPath": {"type": "string", "pattern": "^/dev/+shm/*$"}}}}
            },
        },
    ]


def container_rules(profile: str) -> list[dict[str, Any]]:
    """The guard rules of one training container under ``profile`` (``baseline`` or ``strict``),
    each a schema of the container tagged with its rule id: the PyTorchJob profiles apply them to
    the ``pytorch`` containers, other kinds (:mod:`k8sddp.kinds`) to their effective container."""
    rules = _baseline_container_rules()
    if profile == "strict":
        rules += _strict_container_rules()
    return rules


def guard_schema(profile: str) -> dict[str, Any]:
    """Layer 2 for ``profile`` (``baseline`` or ``strict``)."""
    rules = container_rules(profile)
    branches: list[dict[str, Any]] = []
    if profile == "strict":
        branches.append(
            {
                RULE_KEY: "KDP308",
                "properties": {
                    "spec": {
                        "required": ["runPolicy"],
                        "properties": {
                            "runPolicy": {
                                "required": ["activeDeadlineSeconds"],
                                "properties": {"activeDeadlineSeconds": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        )
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_BASE + f"pytorchjob.{profile}.json",
        "title": f"Kubeflow PyTorchJob v1: k8sddp guardrails, profile {profile}",
        "description": "Checks the env of the container named pytorch in every replica literally. k8sddp "
        "applies it to the effective env (envFrom/valueFrom resolved). Generated by `python -m k8sddp.schemagen`.",
        "allOf": [_pytorch_container(rules), *branches],
    }


def pod_definitions(crd_path: Path) -> dict[str, Any]:
    """The Kubernetes pod types the DDPJob spec embeds (:data:`k8sddp.ddpjobschema.POD_DEFINITIONS`),
    taken from the pod template of the CRD at ``crd_path``, converted as :func:`convert_openapi` does.

    Raises:
        KeyError: the CRD's pod template lacks one of them.
    """
    template = crd_schema(crd_path)["properties"]["spec"]["properties"]["pytorchReplicaSpecs"]["additionalProperties"]["properties"]["template"]
    out = {}
    for name, path in POD_DEFINITIONS.items():
        node = template
        for key in path:
            node = node[key] if key == "items" else node["properties"][key]
        out[name] = node
    return out


def generate(crd_path: Path, trainer_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """All generated schemas, keyed by file name.

    Args:
        crd_path: the PyTorchJob CRD.
        trainer_dir: the folder of the Kubeflow Trainer v2.3.0 CRDs; default: ``kubeflow-trainer``
            beside the PyTorchJob CRD's folder (skipped when absent).
    """
    out = {
        "ddpjob.schema.json": ddpjob_schema(pod_definitions(crd_path)),
        "pytorchjob.structure.json": structure_schema(crd_path),
        "pytorchjob.baseline.json": guard_schema("baseline"),
        "pytorchjob.strict.json": guard_schema("strict"),
    }
    trainer_dir = trainer_dir if trainer_dir is not None else crd_path.resolve().parent.parent / "kubeflow-trainer"
    if trainer_dir.is_dir():
        out.update(trainer_schemas(trainer_dir))
    return out


def dump(schema: dict[str, Any]) -> str:
    """Serialise deterministically (sorted keys would scramble allOf order, so insertion order)."""
    return json.dumps(schema, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the generated schemas into ``--out`` (default: the repository's ``schemas/``)."""
    parser = argparse.ArgumentParser(prog="python -m k8sddp.schemagen", description=__doc__.split("\n")[0])
    parser.add_argument("--crd", type=Path, default=DEFAULT_CRD, help="the PyTorchJob CRD YAML")
    parser.add_argument("--trainer-crds", type=Path, default=None, help="the folder of the Kubeflow Trainer v2 CRDs (default: kubeflow-trainer beside the PyTorchJob CRD's folder)")
    parser.add_argument("--kuberay", type=Path, default=DEFAULT_KUBERAY, help="the folder of the KubeRay v1.7.0 CRDs")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "schemas")
    args = parser.parse_args(argv)
    if not args.crd.is_file():
        print(f"schemagen: CRD not found: {args.crd}", file=sys.stderr)
        return 2
    if not args.kuberay.is_dir():
        print(f"schemagen: KubeRay CRD folder not found: {args.kuberay}", file=sys.stderr)
        return 2
    for name, schema in {**generate(args.crd, args.trainer_crds), **generate_ray(args.kuberay)}.items():
        write_text_atomic(args.out / name, dump(schema))
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
