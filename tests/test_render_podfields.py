"""render for production GPU jobs: GPUs by default, the pass-through pod fields, collisions with
what render adds, and no field or patch that can void a guard.

Golden files: ``python tests/golden/regen.py`` regenerates them (tests/golden/regen.py lists each
golden file and its spec).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.errors import SpecError
from k8sddp.render import load_spec, render_spec, to_yaml
from k8sddp.validate import validate_objects

from .conftest import REPO
from .golden.regen import GOLDEN, render

EXAMPLE = REPO / "examples" / "ddpjob.yaml"
GPU_EXAMPLE = REPO / "examples" / "ddpjob-gpu.yaml"


def _spec(**changes: Any) -> dict[str, Any]:
    ddp = yaml.safe_load(EXAMPLE.read_text())
    ddp["spec"].update(copy.deepcopy(changes))
    return ddp


def _pod(job: dict[str, Any], replica: str = "Master") -> dict[str, Any]:
    return job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]


def _job(**changes: Any) -> dict[str, Any]:
    return render_spec(_spec(**changes)).objects[0]


@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_golden_renders(golden: str) -> None:
    assert render(GOLDEN[golden]) == (REPO / "tests" / "golden" / golden).read_text(), "run: python tests/golden/regen.py"


def test_gpus_default_to_one_per_process_with_requests_equal_to_limits() -> None:
    spec = _spec()
    del spec["spec"]["gpusPerNode"]
    job = render_spec(spec).objects[0]
    res = _pod(job, "Worker")["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "2"
    assert job["spec"]["nprocPerNode"] == "2"
    # gpusPerNode alone sets the processes; 0 is a CPU job
    del spec["spec"]["procsPerNode"]
    spec["spec"]["gpusPerNode"] = 8
    job = render_spec(spec).objects[0]
    assert job["spec"]["nprocPerNode"] == "8" and "--nproc-per-node=8" in _pod(job)["containers"][0]["command"]
    cpu = _job(gpusPerNode=0)
    assert all("gpu" not in k for kind in _pod(cpu)["containers"][0]["resources"].values() for k in kind)
    amd = _job(gpusPerNode=2, gpuResource="amd.com/gpu")
    assert _pod(amd)["containers"][0]["resources"]["requests"]["amd.com/gpu"] == "2"


def test_gpu_example_is_production_shaped_and_strict_clean() -> None:
    job = render_spec(load_spec(str(GPU_EXAMPLE))).objects[0]
    report = validate_objects([job], profile="strict")
    assert report.findings == []
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 7
    c = _pod(job, "Worker")["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert c["resources"]["requests"]["vpc.amazonaws.com/efa"] == c["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"


def test_host_network_sets_the_dns_policy_and_sidecars_are_native() -> None:
    job = _job(hostNetwork=True, sidecars=[{"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}],
               initContainers=[{"name": "prep", "image": "busybox:1.36"}])
    pod = _pod(job)
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert [(c["name"], c.get("restartPolicy")) for c in pod["initContainers"]] == [("log-shipper", "Always"), ("prep", None)]
    assert [c["name"] for c in pod["containers"]] == ["pytorch"]  # no plain second container: the pod can fail
    assert "dnsPolicy" not in _pod(_job())


def test_render_adds_no_privileged_container_or_host_path_and_strict_warns_when_asked() -> None:
    job = render_spec(load_spec(str(REPO / "tests" / "golden" / "ddpjob-podfields.yaml"))).objects[0]
    text = to_yaml([job])
    assert "privileged" not in text and "hostPath" not in text
    asked = _job(containerSecurityContext={"privileged": True},
                 volumes=[{"name": "nvme", "hostPath": {"path": "/mnt/nvme"}}],
                 volumeMounts=[{"name": "nvme", "mountPath": "/scratch"}])
    assert _pod(asked)["containers"][0]["securityContext"] == {"privileged": True}
    rules = sorted({f.rule_id for f in validate_objects([asked], profile="strict").findings})
    assert rules == ["KDP320", "KDP321"]
    assert validate_objects([asked], profile="strict").exit_code() == 0  # warnings, not errors


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"volumes": [{"name": "dshm", "emptyDir": {}}]}, "spec.volumes[0].name", "render's own"),
        ({"volumes": [{"name": "checkpoints", "emptyDir": {}}]}, "spec.volumes[0].name", "render's own"),
        ({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]}, "spec.volumes[1].name", "twice"),
        ({"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "/dev/shm"}]},
         "spec.volumeMounts[0].mountPath", "/dev/shm"),
        ({"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "/dev//shm/"}]},
         "spec.volumeMounts[0].mountPath", "/dev/shm"),
        ({"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "/checkpoints/k8sddp"}]},
         "spec.volumeMounts[0].mountPath", "checkpoint mount"),
        ({"volumeMounts": [{"name": "nothere", "mountPath": "/x"}]}, "spec.volumeMounts[0].name", "not in spec.volumes"),
        ({"resources": {"limits": {"cpu": "8"}}}, "spec.resources.limits.cpu", "spec.cpu"),
        ({"gpusPerNode": 2, "resources": {"limits": {"nvidia.com/gpu": 4}}}, "spec.resources.limits.nvidia.com/gpu", "gpusPerNode"),
        ({"resources": {"requests": {"rdma/ib": 1}, "limits": {"rdma/ib": 2}}}, "spec.resources.requests.rdma/ib", "overcommitted"),
        ({"resources": {"requests": {"ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "1Gi"}}},
         "spec.resources.requests.ephemeral-storage", "above its limit"),
        ({"sidecars": [{"name": "pytorch", "image": "x"}]}, "spec.sidecars[0].name", "training container"),
        ({"sidecars": [{"name": "a", "image": "x"}], "initContainers": [{"name": "a", "image": "x"}]},
         "spec.initContainers[0].name", "twice"),
        ({"sidecars": [{"name": "a", "image": "x", "restartPolicy": "Never"}]}, "spec.sidecars[0].restartPolicy", "Always"),
        ({"initContainers": [{"name": "a", "image": "x", "restartPolicy": "Always"}]}, "spec.initContainers[0].restartPolicy", "sidecar"),
        ({"podLabels": {"training.kubeflow.org/job-name": "x"}}, "spec.podLabels.training.kubeflow.org/job-name", "operator"),
        ({"podLabels": {"team": "other"}}, "spec.podLabels.team", "metadata.labels"),
        ({"podLabels": {"app.kubernetes.io/managed-by": "me"}}, "spec.podLabels.app.kubernetes.io/managed-by", "render"),
    ],
)
def test_collisions_with_what_render_adds_are_refused(changes: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        render_spec(_spec(**changes))
    assert info.value.path == path and words in str(info.value)


@pytest.mark.parametrize(
    ("patch", "rule"),
    [
        # blanks PYTHONFAULTHANDLER (the example)
        ({"spec": {"containers": [{"name": "pytorch", "env": [{"name": "PYTHONFAULTHANDLER", "value": ""}]}]}}, "KDP202"),
        # deletes the guard variable outright
        ({"spec": {"containers": [{"name": "pytorch", "env": [{"name": "K8SDDP_WATCHDOG_TIMEOUT_SECONDS", "$patch": "delete"}]}]}}, "KDP302"),
        # replaces the env list with one entry
        ({"spec": {"containers": [{"name": "pytorch", "env": [{"$patch": "replace"}, {"name": "X", "value": "1"}]}]}}, "KDP201"),
        # /dev/shm from the node's disk instead of memory
        ({"spec": {"volumes": [{"name": "dshm", "$retainKeys": ["name", "emptyDir"], "emptyDir": {"medium": None}}]}}, "KDP307"),
        # the checkpoint volume swapped for an emptyDir
        ({"spec": {"volumes": [{"name": "checkpoints", "$patch": "delete"}, {"name": "checkpoints", "emptyDir": {}}]}}, "KDP305"),
        # the GPU limit changed under the processes
        ({"spec": {"containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}]}}, "KDP309"),
        # the pytorch container renamed away (structure)
        ({"spec": {"containers": [{"$patch": "replace"}, {"name": "main", "image": "x"}]}}, "KDP104"),
        # a field the API server does not know (structure)
        ({"spec": {"containers": [{"name": "pytorch", "gpus": 8}]}}, "KDP101"),
    ],
)
def test_a_patch_that_voids_a_guard_is_refused_naming_the_field(patch: dict[str, Any], rule: str) -> None:
    with pytest.raises(SpecError) as info:
        render_spec(_spec(gpusPerNode=2, podTemplatePatch=patch))
    assert info.value.path == "spec.podTemplatePatch"
    assert rule in str(info.value)


def test_a_harmless_patch_reaches_every_replica() -> None:
    job = _job(podTemplatePatch={"metadata": {"labels": {"extra": "yes"}},
                                 "spec": {"hostIPC": True, "containers": [{"name": "pytorch", "workingDir": "/app"}]}})
    for replica in ("Master", "Worker"):
        tmpl = job["spec"]["pytorchReplicaSpecs"][replica]["template"]
        assert tmpl["metadata"]["labels"]["extra"] == "yes" and tmpl["spec"]["hostIPC"] is True
        assert tmpl["spec"]["containers"][0]["workingDir"] == "/app"


def test_a_patch_the_merge_rules_refuse_is_located() -> None:
    with pytest.raises(SpecError) as info:
        render_spec(_spec(podTemplatePatch={"spec": {"containers": [{"image": "no-name"}]}}))
    assert info.value.path == "spec.podTemplatePatch.spec.containers[0]" and "merge key 'name'" in str(info.value)


def test_schema_types_come_from_the_crd_pod_spec() -> None:
    with pytest.raises(SpecError, match="spec.volumes"):
        load_spec(str(EXAMPLE), sets=['spec.volumes=[{"name": "x", "hostPth": {"path": "/"}}]'])
    with pytest.raises(SpecError, match="spec.affinity"):
        load_spec(str(EXAMPLE), sets=['spec.affinity={"nodeAffinty": {}}'])


def test_submit_local_of_a_gpu_spec_on_a_cpu_machine_says_how_to_run_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has GPUs")
    proc = subprocess.run([sys.executable, "-m", "k8sddp", "submit", "--local", "--local-dir", str(tmp_path), str(GPU_EXAMPLE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "--set spec.gpusPerNode=0" in proc.stderr and "0 GPU(s)" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing started


@pytest.mark.parametrize(
    ("patch", "where", "words"),
    [
        # a plain second container that keeps running: the pod never fails, ExitCode never acts
        ({"spec": {"containers": [{"name": "exporter", "image": "busybox", "command": ["sleep", "inf"]}]}},
         "spec.podTemplatePatch.spec.containers", "spec.sidecars"),
        # the node's network without the resolver that knows the master's Service
        ({"spec": {"hostNetwork": True}}, "spec.podTemplatePatch.spec.hostNetwork", "ClusterFirstWithHostNet"),
    ],
)
def test_a_patch_cannot_undo_what_render_guarantees(patch: dict[str, Any], where: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        render_spec(_spec(podTemplatePatch=patch))
    assert info.value.path == where and words in str(info.value)


def test_hostnetwork_from_the_spec_survives_a_patch_and_may_pick_its_own_dns() -> None:
    with pytest.raises(SpecError, match="dnsPolicy 'ClusterFirst'"):
        render_spec(_spec(hostNetwork=True, podTemplatePatch={"spec": {"dnsPolicy": None}}))
    job = _job(podTemplatePatch={"spec": {"hostNetwork": True, "dnsPolicy": "None",
                                          "dnsConfig": {"nameservers": ["10.96.0.10"], "searches": ["svc.cluster.local"]}}})
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["dnsPolicy"] == "None"


@pytest.mark.parametrize("path", ["dev/shm", "//dev/shm", "dev/shm/x", "checkpoints/x" ])
def test_a_mount_path_written_relative_or_with_two_slashes_still_collides(path: str) -> None:
    # the kubelet makes a relative mountPath absolute, and '//dev/shm' is /dev/shm: both passed the
    # collision check and mounted a second volume over render's /dev/shm or checkpoints
    spec = _spec(volumes=[{"name": "data", "emptyDir": {}}], volumeMounts=[{"name": "data", "mountPath": path}])
    spec["spec"]["checkpoint"]["mountPath"] = "/checkpoints"
    with pytest.raises(SpecError) as info:
        render_spec(spec)
    assert info.value.path == "spec.volumeMounts[0].mountPath"
