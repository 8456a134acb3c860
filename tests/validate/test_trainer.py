"""Kubeflow Trainer v2 kinds: the reference examples, the merge order, the failure policy.

The reference examples (../shared/reference/kubeflow-trainer/, Trainer v2.3.0) pass the structure
layer; the stock runtimes fail baseline for the missing guards; a TrainJob alone is unverifiable
(KDP230); with its runtime beside it the missing guards are reported on the TrainJob too.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.kinds.trainermerge import resolve, strategic_merge
from k8sddp.kinds.trainerpolicy import (
    failure_policy_problems,
    jobset_failure_policy,
    pod_failure_policy,
)
from k8sddp.validate import validate_objects, validate_paths
from k8sddp.validate.engine import new_index

from ..conftest import REFERENCE

TRAINER = REFERENCE / "kubeflow-trainer"
EXAMPLES = sorted((TRAINER / "examples").glob("*.yaml")) if TRAINER.is_dir() else []
RUNTIMES = sorted((TRAINER / "runtimes").glob("*.yaml")) if TRAINER.is_dir() else []


def _skip_without_reference() -> None:
    if not TRAINER.is_dir():
        pytest.skip(f"{TRAINER} is not present")


@pytest.mark.parametrize("path", RUNTIMES, ids=lambda p: p.name)
def test_stock_runtimes_pass_structure_and_fail_baseline(path: Path) -> None:
    report = validate_paths([str(path)], profile="baseline", jobs=1)
    assert report.checked == 1
    failing = report.failing()
    assert {f.rule_id for f in failing} == {"KDP201", "KDP202"}
    assert all(f.line > 0 and "container node" in f.message and "is not set" in f.message for f in failing)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_alone_pass_structure(path: Path) -> None:
    report = validate_paths([str(path)], profile="baseline", jobs=1)
    failing = report.failing()
    assert report.checked >= 1
    assert [f for f in failing if f.rule_id < "KDP200"] == []
    # Each TrainJob of the stock runtime is unverifiable without it, never a pass.
    for f in failing:
        if f.object_ref.startswith("TrainJob/") and "torch-distributed" in f.message:
            assert f.rule_id == "KDP230" and f.path == "spec.runtimeRef"


def test_examples_with_the_stock_runtime_report_on_each_trainjob() -> None:
    _skip_without_reference()
    report = validate_paths([str(p) for p in EXAMPLES] + [str(TRAINER / "runtimes" / "torch_distributed.yaml")], profile="baseline", jobs=1)
    failing = report.failing()
    assert [f for f in failing if f.rule_id not in ("KDP201", "KDP202")] == []
    jobs = {f.object_ref for f in failing if f.object_ref.startswith("TrainJob/")}
    assert jobs == {"TrainJob/multi-node-example", "TrainJob/runtime-patches-example", "TrainJob/kueue-example", "TrainJob/multi-step-example"}
    patched = [f for f in failing if f.object_ref == "TrainJob/runtime-patches-example"]
    # That example has spec.trainer.env (without the guards): the finding points there.
    assert {f.path for f in patched} == {"spec.trainer.env"} and all("neither the node container" in f.message for f in patched)


def _runtime(env: list[dict[str, Any]], **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "rt"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": "init", "template": {"spec": {"template": {"spec": {"containers": [{"name": "init", "image": "busybox"}]}}}}},
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "base:1", "env": env, **container}]}}},
                            },
                        },
                    ]
                }
            },
        },
    }


def _trainjob(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tj"}, "spec": {"runtimeRef": {"name": "rt"}, **spec}}


def _index(*objects: dict[str, Any]) -> Any:
    index = new_index()
    for obj in objects:
        index.add(obj)
    return index


def test_merge_order_follows_the_controller() -> None:
    runtime = _runtime(
        [{"name": "A", "value": "runtime"}, {"name": "B", "value": "runtime"}],
        command=["python", "old.py"],
        resources={"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1"}},
        volumeMounts=[{"name": "ckpt", "mountPath": "/ckpt"}],
    )
    job = _trainjob(
        trainer={
            "image": "mine:2",
            "command": ["torchrun", "train.py"],
            "numNodes": 4,
            "env": [{"name": "B", "value": "trainjob"}, {"name": "C", "value": "trainjob"}],
            "resourcesPerNode": {"limits": {"cpu": "8", "nvidia.com/gpu": "1"}},
        },
        runtimePatches=[
            {
                "manager": "example.com/x",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {
                                    "name": "node",
                                    "template": {
                                        "spec": {
                                            "template": {
                                                "spec": {
                                                    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                                                    "containers": [{"name": "node", "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}],
                                                }
                                            }
                                        }
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        ],
    )
    resolved = resolve(job, _index(runtime), None)
    c = resolved.container
    assert c is not None and resolved.job_index == 1
    assert c["image"] == "mine:2" and c["command"] == ["torchrun", "train.py"]
    env = {e["name"]: e for e in c["env"]}
    # spec.trainer.env replaces by name and appends; the runtime's other entries stay, in order.
    assert [e["name"] for e in c["env"]][:3] == ["A", "B", "C"]
    assert env["A"]["value"] == "runtime" and env["B"]["value"] == "trainjob" and env["C"]["value"] == "trainjob"
    # The torch plugin's PET_* come after, from the TrainJob's numNodes and name.
    assert env["PET_NNODES"]["value"] == "4" and env["PET_MASTER_ADDR"]["value"] == "tj-node-0-0.tj" and env["PET_MASTER_PORT"]["value"] == "29500"
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"].endswith("job-completion-index']")
    # resourcesPerNode merges per resource name over the runtime's.
    assert c["resources"] == {"limits": {"cpu": "8", "memory": "4Gi", "nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}}
    # The runtime patch joined the mounts by mountPath and the volumes by name.
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/ckpt", "/dev/shm"]
    assert [v["name"] for v in resolved.pod_spec["volumes"]] == ["shm"]
    # The runtime itself is untouched.
    assert runtime["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"] == "runtime"


def test_guard_in_the_runtime_is_overridden_by_the_trainjob() -> None:
    guards = [{"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "3"}, {"name": "PYTHONFAULTHANDLER", "value": "1"}]
    good = validate_objects([_runtime(guards), _trainjob(trainer={"numNodes": 2})])
    assert good.failing() == []
    bad = validate_objects([_runtime(guards), _trainjob(trainer={"env": [{"name": "PYTHONFAULTHANDLER", "value": ""}]})])
    (finding,) = bad.failing()
    assert finding.rule_id == "KDP202" and finding.object_ref == "TrainJob/tj" and finding.path == "spec.trainer.env[0]"
    # The runtime sets a bad value: the TrainJob's finding points at the runtime reference.
    worse = validate_objects([_runtime([guards[0], {"name": "PYTHONFAULTHANDLER", "value": ""}]), _trainjob()])
    on_job = [f for f in worse.failing() if f.object_ref == "TrainJob/tj"]
    assert [(f.rule_id, f.path) for f in on_job] == [("KDP202", "spec.runtimeRef")]
    assert "the value comes from the node container of ClusterTrainingRuntime 'rt'" in on_job[0].message


def test_misgrouped_trainjob() -> None:
    job = _trainjob()
    job["apiVersion"] = "kubeflow.org/v1alpha1"
    (finding,) = validate_objects([job]).failing()
    assert finding.rule_id == "KDP131" and finding.path == "apiVersion"


def test_failure_policy_is_what_validate_demands() -> None:
    runtime = _runtime([])
    spec = runtime["spec"]["template"]["spec"]
    assert len(failure_policy_problems(spec)) == 4
    fixed = copy.deepcopy(spec)
    fixed["failurePolicy"] = jobset_failure_policy()
    fixed["replicatedJobs"][1]["template"]["spec"].update(backoffLimit=0, podFailurePolicy=pod_failure_policy())
    assert [m for _, m in failure_policy_problems(fixed)] == ["the trainer pod's restartPolicy is unset, not Never: the API server rejects a Job with a podFailurePolicy otherwise"]
    fixed["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    assert failure_policy_problems(fixed) == []
    # A rule on exit codes that stops short of 127 is not the policy.
    fixed["replicatedJobs"][1]["template"]["spec"]["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"] = [1, 2]
    assert [m for _, m in failure_policy_problems(fixed)] and "podFailurePolicy" in failure_policy_problems(fixed)[0][1]


def test_strategic_merge_deletes_with_null_and_replaces_plain_lists() -> None:
    base = {"a": 1, "tolerations": [{"key": "x"}], "containers": [{"name": "n", "image": "i"}]}
    merged = strategic_merge(base, {"a": None, "tolerations": [{"key": "y"}], "containers": [{"name": "n", "args": ["x"]}]})
    assert merged == {"tolerations": [{"key": "y"}], "containers": [{"name": "n", "image": "i", "args": ["x"]}]}
    assert yaml.safe_dump(base)  # (base untouched)
    assert base["a"] == 1
