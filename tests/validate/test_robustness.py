"""Any shape of input gives findings, never a traceback: every node of a rich, valid job is
replaced in turn by values of the wrong type, and both entry points must cope."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.validate import validate_objects, validate_text

BASE = Path(__file__).resolve().parent / "fixtures" / "KDP201" / "pass" / "optional-key-falls-back-to-envfrom.yaml"
JUNK: tuple[Any, ...] = (None, 7, "x", [1], {"a": 1})


def _rich_job() -> tuple[dict[str, Any], dict[str, Any]]:
    job, cm = yaml.safe_load_all(BASE.read_text())
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["envFrom"].append({"secretRef": {"name": "wandb"}, "prefix": "WB_"})  # can only set WB_* names
    worker["env"].append({"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    job["metadata"]["annotations"] = {"k8sddp.dev/exempt": "KDP308", "k8sddp.dev/exempt-reason": "fuzz"}
    return job, cm


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def test_base_is_valid() -> None:
    job, cm = _rich_job()
    assert validate_objects([job, cm], profile="strict").failing() == []


@pytest.mark.parametrize("target", ["job", "configmap"])
def test_every_node_replaced_by_junk(target: str) -> None:
    job, cm = _rich_job()
    root = job if target == "job" else cm
    checked = 0
    for path in list(_paths(root)):
        for junk in JUNK:
            j, c = copy.deepcopy(job), copy.deepcopy(cm)
            node = j if target == "job" else c
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = junk
            where = f"{'.'.join(map(str, path))} = {junk!r}"
            try:
                validate_objects([j, c], profile="strict")
                if checked % 4 == 0:  # the text path too, on a sample (it is slower)
                    validate_text(yaml.safe_dump_all([j, c]), profile="strict")
            except Exception as exc:  # noqa: BLE001 - the point: nothing may escape
                pytest.fail(f"{where}: {type(exc).__name__}: {exc}")
            checked += 1
    assert checked >= 25


def test_plain_timestamps_are_strings_as_the_api_server_reads_them() -> None:
    # go-yaml v2 into interface{} keeps 2024-01-01 a string; a date object crashed the schema validator.
    text = (
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: s\n  labels: {created: 2024-01-01}\n"
        "  annotations: {at: 2001-12-14t21:59:43.10-05:00}\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 1\n"
        "      template:\n        spec:\n          containers:\n          - name: pytorch\n            image: img:1\n"
        "            env:\n            - {name: TORCH_NCCL_ASYNC_ERROR_HANDLING, value: \"3\"}\n"
        "            - {name: PYTHONFAULTHANDLER, value: \"1\"}\n            - {name: START, value: 2024-01-01}\n"
    )
    report = validate_text(text, file="job.yaml")
    assert report.findings == [], [f.message for f in report.findings]
