"""The kinds registry and the wrappers: dispatch by (API group, kind), unwrapping, counting."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp import kinds
from k8sddp.admission.review import AdmissionDecider
from k8sddp.configrefs import containers_of, missing_configmaps
from k8sddp.validate import validate_objects, validate_text
from k8sddp.validate.objindex import ObjectIndex, api_group

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _job() -> dict[str, Any]:
    """A baseline-clean PyTorchJob (taken from a wrapper fixture's inner object)."""
    text = (FIXTURES / "KDP201/pass/appwrapper-v1beta2.yaml").read_text()
    return copy.deepcopy(yaml.safe_load(text)["spec"]["components"][1]["template"])


def test_registry_keys_by_group_and_kind() -> None:
    assert kinds.lookup("kubeflow.org/v1", "PyTorchJob") is kinds.PYTORCHJOB
    assert kinds.lookup("kubeflow.org/v2", "PyTorchJob") is kinds.PYTORCHJOB  # the kind reports the version
    assert kinds.lookup("training.kubedl.io/v1alpha1", "PyTorchJob") is None
    assert kinds.lookup("v1", "ConfigMap") is None
    assert kinds.skip_label("training.kubedl.io/v1alpha1", "PyTorchJob") == "PyTorchJob (training.kubedl.io)"
    assert kinds.skip_label("v1", "Service") == "Service"
    assert kinds.lookup_wrapper("workload.codeflare.dev/v1beta2", "AppWrapper") is not None
    assert kinds.lookup_wrapper("workload.codeflare.dev/v1alpha9", "AppWrapper") is None
    assert api_group("v1") == "" and api_group("kubeflow.org/v1") == "kubeflow.org"


def test_registering_a_second_kind_under_one_key_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        kinds.register(kinds.PyTorchJobKind())


def test_other_group_is_skipped_and_served_group_other_version_is_kdp101() -> None:
    job = _job()
    kubedl = {**job, "apiVersion": "training.kubedl.io/v1alpha1"}
    del kubedl["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    report = validate_objects([kubedl])
    assert report.checked == 0 and report.findings == []
    assert report.skipped == {"PyTorchJob (training.kubedl.io)": 1}
    v2 = validate_objects([{**job, "apiVersion": "kubeflow.org/v2"}])
    assert [f.rule_id for f in v2.findings] == ["KDP101"] and v2.checked == 1


def test_pytorchjob_views_and_effective_env() -> None:
    job = _job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].insert(0, {"name": "sidecar", "image": "busybox"})
    ctx = kinds.CheckContext("baseline", ObjectIndex(), "ml")
    views = {v.group: v for v in kinds.PYTORCHJOB.pod_templates(job, ctx)}
    assert sorted(views) == ["Master", "Worker"]
    worker = views["Worker"]
    assert worker.container_index == 1 and worker.container is not None and worker.container["name"] == "pytorch"
    assert worker.container_path == ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 1)
    env = kinds.PYTORCHJOB.effective_env(job, worker, ctx)
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"].value == "3"
    assert [g for g, _ in containers_of(job)] == ["Master", "Worker", "Worker"]


def test_wrapped_findings_carry_the_path_through_both_wrappers() -> None:
    job = _job()
    del job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"][1]  # PYTHONFAULTHANDLER
    job["metadata"] = {}  # Katib names the trial's job
    experiment = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": "lr"},
        "spec": {"trialTemplate": {"trialSpec": job}},
    }
    wrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw", "namespace": "ml"},
        "spec": {"components": [{"template": experiment}]},
    }
    report = validate_objects([wrapper])
    assert report.checked == 1 and not report.skipped
    [finding] = report.findings
    assert finding.rule_id == "KDP202"
    assert finding.path == "spec.components[0].template.spec.trialTemplate.trialSpec.spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env"
    assert finding.object_ref == "AppWrapper/ml/aw:Experiment/ml/lr:PyTorchJob/ml/lr-xxxxxxxx"


def test_wrapper_annotation_exemption_covers_its_jobs() -> None:
    job = _job()
    del job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"][1]
    text = yaml.safe_dump(
        {
            "apiVersion": "mcad.ibm.com/v1beta1",
            "kind": "AppWrapper",
            "metadata": {"name": "aw", "annotations": {"k8sddp.dev/exempt": "KDP202", "k8sddp.dev/exempt-reason": "crash stacks go to our own handler"}},
            "spec": {"resources": {"GenericItems": [{"generictemplate": job}, {"generictemplate": "oops"}]}},
        }
    )
    report = validate_text(text, file="aw.yaml")
    by_rule = {f.rule_id: f for f in report.findings}
    assert "crash stacks go to our own handler" in by_rule["KDP202"].exempted_by
    assert by_rule["KDP004"].path == "spec.resources.GenericItems[1].generictemplate" and by_rule["KDP004"].line > 0
    assert [f.rule_id for f in report.failing()] == ["KDP004"]


def test_missing_configmaps_looks_into_registered_kinds_only() -> None:
    job = _job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "nccl"}}]
    assert missing_configmaps([job], namespace="ml") == [("ml", "nccl")]
    assert missing_configmaps([{**job, "apiVersion": "training.kubedl.io/v1alpha1"}], namespace="ml") == []


def test_object_index_holds_referenced_kinds() -> None:
    index = ObjectIndex({("trainer.kubeflow.org", "ClusterTrainingRuntime")}, default_namespace="ml")
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": "torch-distributed"}}
    other = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    assert index.wants(runtime) and index.wants(cm) and not index.wants(other)
    for obj in (runtime, other, cm):
        index.add(obj)
    assert index.lookup("trainer.kubeflow.org", "ClusterTrainingRuntime", None, "torch-distributed") is runtime
    assert index.objects("trainer.kubeflow.org", "ClusterTrainingRuntime") == [runtime]
    assert index.lookup("apps", "Deployment", "ml", "x") is None
    assert index.get("ml", "c") == {"k": "v"}


def test_webhook_asks_the_registry() -> None:
    decider = AdmissionDecider()
    base = {"uid": "u1", "operation": "CREATE", "namespace": "ml", "object": _job()}
    kubedl = decider.decide({**base, "kind": {"group": "training.kubedl.io", "version": "v1alpha1", "kind": "PyTorchJob"}})
    assert kubedl.allowed and kubedl.reason == "not-a-pytorchjob"
    assert "kubeflow.org pytorchjobs" in kubedl.warnings[0]
    checked = decider.decide({**base, "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}})
    assert checked.allowed and checked.reason != "not-a-pytorchjob"


@pytest.mark.parametrize("first", ["k8sddp.kinds", "k8sddp.kinds.wrappers", "k8sddp.validate", "k8sddp.configrefs", "k8sddp.cluster.pods"])
def test_import_order_does_not_matter(first: str) -> None:
    code = f"import {first}; import k8sddp.kinds as k; assert k.lookup('kubeflow.org/v1', 'PyTorchJob') is k.PYTORCHJOB"
    subprocess.run([sys.executable, "-c", code], check=True)
