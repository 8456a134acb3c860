"""The ``PET_*`` variables and ``JOB_COMPLETION_INDEX`` of a TrainJob's effective trainer, as the
real Trainer v2.3.0 torch plugin and the Job controller set them (tests/kube/test_trainer.py
compares these with the real controllers; here the rules one by one)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from k8sddp import kinds
from k8sddp.kinds.trainermerge import JOB_COMPLETION_INDEX, resolve
from k8sddp.render import render_runtime
from k8sddp.validate.engine import new_index


def _runtime(resources: dict[str, Any] | None = None) -> dict[str, Any]:
    runtime: dict[str, Any] = copy.deepcopy(render_runtime().objects[0])
    if resources is not None:
        runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    return runtime


def _job(trainer: dict[str, Any] | None) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "j", "namespace": "a"},
        "spec": {"runtimeRef": {"name": "k8sddp-torch"}},
    }
    if trainer is not None:
        job["spec"]["trainer"] = trainer
    return job


def _pet(job: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    index = new_index()
    index.add(runtime)
    container = resolve(job, index, "a").container
    assert container is not None
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", []) if e["name"].startswith("PET_")}


@pytest.mark.parametrize(
    ("trainer", "runtime_resources", "want"),
    [
        ({"numProcPerNode": 3}, None, "3"),
        ({"resourcesPerNode": {"requests": {"cpu": "1500m"}}}, None, "2"),  # Quantity.Value() rounds up
        ({"resourcesPerNode": {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}}, None, "2"),  # the request wins
        ({"resourcesPerNode": {"limits": {"cpu": "3"}}}, None, "3"),
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "2", "cpu": "8"}}}, None, "auto"),
        ({"resourcesPerNode": {"requests": {"amd.com/gpu": 1}}}, None, "auto"),
        ({"resourcesPerNode": {"requests": {"memory": "1Gi"}}}, {"requests": {"cpu": "6"}}, "1"),  # whole, not merged
        ({}, {"requests": {"cpu": "6"}}, "6"),  # the runtime's node container
        ({}, {}, "1"),
    ],
)
def test_nproc_per_node(trainer: dict[str, Any], runtime_resources: dict[str, Any] | None, want: str) -> None:
    assert _pet(_job(trainer), _runtime(runtime_resources))["PET_NPROC_PER_NODE"] == want


def test_master_variables_and_node_count() -> None:
    pet = _pet(_job({"numNodes": 4}), _runtime())
    assert pet["PET_NNODES"] == "4" and pet["PET_MASTER_ADDR"] == "j-node-0-0.j" and pet["PET_MASTER_PORT"] == "29500"
    assert pet["PET_NODE_RANK"] == {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


def test_torchtune_gets_no_master_variables() -> None:
    pet = _pet(_job({"command": ["tune", "run"]}), _runtime())
    assert "PET_MASTER_ADDR" not in pet and "PET_MASTER_PORT" not in pet and "PET_NNODES" in pet


def test_no_trainer_no_pet() -> None:
    assert _pet(_job(None), _runtime()) == {}


@pytest.mark.parametrize(("mode", "present"), [(None, True), ("Indexed", True), ("NonIndexed", False)])
def test_job_completion_index_in_the_effective_env(mode: str | None, present: bool) -> None:
    runtime = _runtime()
    if mode is not None:
        runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = mode
    index = new_index()
    index.add(runtime)
    ctx = kinds.CheckContext("baseline", index, "a")
    job = _job({})
    (view,) = kinds.TRAINJOB.pod_templates(job, ctx)
    env = kinds.TRAINJOB.effective_env(job, view, ctx)
    assert (JOB_COMPLETION_INDEX in env) is present
    if present:
        assert env[JOB_COMPLETION_INDEX].value is None  # a field reference: the pod's own index
