"""The KubeRay kinds' StatusModels on real status shapes (tests/data/kuberay/status.yaml: captured
from the real ray-operator v1.6.1, or reduced from its controller code), and on malformed ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.kinds import PYTORCHJOB, RAYCLUSTER, RAYCRONJOB, RAYJOB, RAYSERVICE, Kind, lookup
from k8sddp.kinds.ray import (
    JOB_DEPLOYMENT_FINAL,
    JOB_DEPLOYMENT_STATUSES,
    POD_LABELS,
    RAY_JOB_STATUSES,
    RAY_JOB_TERMINAL,
    RAYCLUSTER_CONDITIONS,
    RAYCLUSTER_STATES,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "kuberay" / "status.yaml"
CASES: dict[str, dict[str, Any]] = {c["name"]: c for c in yaml.safe_load(DATA.read_text())["cases"]}
KINDS: dict[str, Kind] = {"RayJob": RAYJOB, "RayCluster": RAYCLUSTER, "RayService": RAYSERVICE, "RayCronJob": RAYCRONJOB}

#: name -> (state, reason, detail, final, failed), from what the controller code says each means.
EXPECTED: dict[str, tuple[str, str, str, bool, bool]] = {
    "rayjob-new": ("", "", "", False, False),
    "rayjob-initializing": ("Initializing", "", "", False, False),
    "rayjob-running": ("Running", "", "", False, False),
    "rayjob-submission-failed": ("Failed", "SubmissionFailed", "", True, True),
    "rayjob-succeeded": ("Complete", "", "SUCCEEDED", True, False),
    "rayjob-stopped": ("Complete", "", "STOPPED", True, False),
    "rayjob-app-failed": ("Failed", "AppFailed", "FAILED", True, True),
    "rayjob-deadline": ("Failed", "DeadlineExceeded", "RUNNING", True, True),
    "rayjob-retrying": ("Retrying", "AppFailed", "FAILED", False, False),
    "rayjob-validation-failed": ("ValidationFailed", "ValidationFailed", "", True, True),
    "raycluster-provisioning": ("", "", "", False, False),
    "raycluster-ready": ("ready", "", "", False, False),
    "raycluster-suspended": ("suspended", "", "", False, False),
    "rayservice-ready": ("Ready", "NonZeroServeEndpoints", "", False, False),
    "rayservice-upgrading": ("UpgradeInProgress", "BothActivePendingClustersExist", "", False, False),
    "raycronjob-scheduled": ("", "", "", False, False),
}


def test_every_case_has_an_expectation() -> None:
    assert sorted(CASES) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_status_reads_as_the_controller_means_it(name: str) -> None:
    case = CASES[name]
    reading = KINDS[case["kind"]].status.read(case["status"])
    assert (reading.state, reading.reason, reading.detail, reading.final, reading.failed) == EXPECTED[name], case["source"]
    assert reading.message == str(case["status"].get("message") or "") or case["kind"] != "RayJob"
    if reading.state == "Complete":  # a RayJob completes only once its Ray job is terminal
        assert reading.detail in RAY_JOB_TERMINAL


def test_captured_shapes_use_only_the_modelled_values() -> None:
    # what the real operator wrote is inside what the models list (no stray type or state)
    for case in CASES.values():
        status = case["status"]
        if case["kind"] == "RayJob":
            assert status.get("jobDeploymentStatus", "Initializing") in JOB_DEPLOYMENT_STATUSES, case["name"]
            assert status.get("jobStatus", "PENDING") in RAY_JOB_STATUSES, case["name"]
            if isinstance(status.get("rayClusterStatus"), dict):
                for cond in status["rayClusterStatus"]["conditions"]:
                    assert cond["type"] in RAYCLUSTER_CONDITIONS
        if case["kind"] == "RayCluster":
            assert status.get("state", "ready") in RAYCLUSTER_STATES
            assert {c["type"] for c in status["conditions"]} <= set(RAYCLUSTER_CONDITIONS), case["name"]
        if case["kind"] == "RayService":
            assert {c["type"] for c in status["conditions"]} <= set(RAYSERVICE.status.condition_types)


def test_the_models_follow_the_kuberay_types() -> None:
    # kuberay apis/ray/v1/raycluster_types.go: the Go name is RayClusterReplicaFailure, the value is not
    assert "ReplicaFailure" in RAYCLUSTER.status.condition_types and "RayClusterReplicaFailure" not in RAYCLUSTER.status.condition_types
    assert RAYJOB.status.condition_types == () and RAYJOB.status.state_field == "jobDeploymentStatus"
    assert RAYJOB.status.final_states == JOB_DEPLOYMENT_FINAL and RAYJOB.status.detail_field == "jobStatus"
    assert RAYJOB.status.pods_owner_field == "rayClusterName"
    for kind in KINDS.values():
        assert kind.status.pod_labels == POD_LABELS and kind.status.container == "" and kind.status.version == "v1"
        assert lookup(f"ray.io/{kind.status.version}", kind.kind) is kind
        # nothing of KubeRay's is final except a RayJob's deployment
        assert not kind.status.final_conditions
    assert {k: v for k, v in POD_LABELS.items() if k != "replica-index"} == {
        "cluster": "ray.io/cluster", "replica-type": "ray.io/node-type", "group": "ray.io/group"}


@pytest.mark.parametrize("status", [None, "Running", [], {"jobDeploymentStatus": None}, {"conditions": "x"},
                                    {"conditions": [None, "x", {"type": "Ready"}]}])
def test_malformed_status_reads_as_no_state(status: Any) -> None:
    for kind in (*KINDS.values(), PYTORCHJOB):
        reading = kind.status.read(status)
        assert (reading.state, reading.final, reading.failed) == ("", False, False), (kind.kind, status)


def test_condition_kinds_read_the_last_true_modelled_condition() -> None:
    conditions = [
        {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
        {"type": "Running", "status": "False", "reason": "PyTorchJobRunning"},
        {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "pod exited 1"},
        {"type": "SomethingNew", "status": "True"},
    ]
    reading = PYTORCHJOB.status.read({"conditions": conditions})
    assert (reading.state, reading.reason, reading.message, reading.final, reading.failed) == (
        "Failed", "PyTorchJobFailed", "pod exited 1", True, True)
    reading = PYTORCHJOB.status.read({"conditions": [*conditions[:2], {"type": "Succeeded", "status": "True"}]})
    assert (reading.state, reading.final, reading.failed) == ("Succeeded", True, False)
