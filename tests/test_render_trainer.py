"""render --target trainjob and `k8sddp runtime render`: both pass their own strict validation and
the real v2.3.0 CRD schemas (plain jsonschema on the generated structure schemas)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from k8sddp.errors import SpecError, UsageError
from k8sddp.kinds.trainermerge import resolve
from k8sddp.kinds.trainerpolicy import failure_policy_problems
from k8sddp.render import TARGETS, Target, load_spec, register_target, render_runtime, render_spec
from k8sddp.validate import validate_objects
from k8sddp.validate.engine import new_index

from .conftest import REPO

SPEC = REPO / "examples" / "ddpjob.yaml"


def _schema(name: str) -> Any:
    return jsonschema.Draft202012Validator(json.loads((REPO / "schemas" / name).read_text()))


def _pair() -> tuple[dict[str, Any], dict[str, Any]]:
    (runtime,) = render_runtime().objects
    (job,) = render_spec(load_spec(str(SPEC)), "trainjob").objects
    return runtime, job


def test_rendered_pair_passes_strict_and_the_crds() -> None:
    runtime, job = _pair()
    assert validate_objects([runtime, job], profile="strict").failing() == []
    assert [e.message for e in _schema("trainingruntime.structure.json").iter_errors(runtime)] == []
    assert [e.message for e in _schema("trainjob.structure.json").iter_errors(job)] == []
    # Alone, the TrainJob is unverifiable; the runtime passes strict by itself.
    assert {f.rule_id for f in validate_objects([job]).failing()} == {"KDP230"}
    assert validate_objects([runtime], profile="strict").failing() == []
    assert failure_policy_problems(runtime["spec"]["template"]["spec"]) == []


def test_effective_trainer_container_of_the_render() -> None:
    runtime, job = _pair()
    index = new_index()
    index.add(runtime)
    resolved = resolve(job, index, "default")
    c = resolved.container
    assert c is not None
    env = {e["name"]: e.get("value") for e in c["env"]}
    # The job's own artifact dir (on its checkpoint volume) wins over the runtime's.
    assert env["K8SDDP_ARTIFACT_DIR"] == "/checkpoints/k8sddp" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "2" and env["PET_MASTER_ADDR"] == "demo-node-0-0.demo"
    assert c["command"][:5] == ["k8sddp", "launch", "--", "torchrun", "--nproc-per-node=2"]
    assert not any("MASTER_ADDR" in a for a in c["command"])  # torchrun reads PET_MASTER_ADDR
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/dev/shm": "dshm", "/artifacts": "artifacts", "/checkpoints": "checkpoints"}
    shm = next(v for v in resolved.pod_spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}  # the job's size over the runtime's 8Gi


def test_what_a_trainjob_cannot_express() -> None:
    spec = load_spec(str(SPEC))
    elastic = json.loads(json.dumps(spec))
    elastic["spec"].pop("nodes")
    elastic["spec"]["elastic"] = {"minNodes": 1, "maxNodes": 2}
    with pytest.raises(SpecError, match="elastic"):
        render_spec(elastic, "trainjob")
    reserved = json.loads(json.dumps(spec))
    reserved["spec"]["env"] = [{"name": "PET_NNODES", "value": "3"}]
    with pytest.raises(SpecError, match="KDP133"):
        render_spec(reserved, "trainjob")


def test_settings_without_a_trainjob_equivalent_are_refused() -> None:
    spec = load_spec(str(SPEC))
    for key, value in (("backoffLimit", 2), ("restartPolicy", "OnFailure"), ("priorityClassName", "high")):
        other = json.loads(json.dumps(spec))
        other["spec"][key] = value
        with pytest.raises(SpecError, match=f"spec.{key}"):
            render_spec(other, "trainjob")
        render_spec(other, "pytorchjob")  # (the PyTorchJob carries it)


def test_target_registry() -> None:
    assert set(TARGETS) >= {"pytorchjob", "trainjob"}
    with pytest.raises(UsageError):
        render_spec(load_spec(str(SPEC)), "nope")
    with pytest.raises(ValueError):
        register_target(Target("trainjob", "trainjob.yaml.j2", lambda d, m: m))


def test_runtime_options_are_checked() -> None:
    with pytest.raises(SpecError):
        render_runtime(artifact_mount="artifacts")
    with pytest.raises(SpecError):
        render_runtime(max_restarts=0)
    (old,) = render_runtime(torch_version="2.1", max_restarts=5, name="legacy").objects
    env = old["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "NCCL_ASYNC_ERROR_HANDLING", "value": "1"} in env
    assert old["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 5


def test_cli(tmp_path: Path) -> None:
    out = tmp_path / "rt.json"
    run = subprocess.run([sys.executable, "-m", "k8sddp", "runtime", "render", "-o", "json", "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text())["kind"] == "ClusterTrainingRuntime"
    job = subprocess.run([sys.executable, "-m", "k8sddp", "render", "--target", "trainjob", str(SPEC)], capture_output=True, text=True)
    assert job.returncode == 0 and yaml.safe_load(job.stdout)["kind"] == "TrainJob"
    bad = subprocess.run([sys.executable, "-m", "k8sddp", "runtime", "render", "--artifact-mount", "rel"], capture_output=True, text=True)
    assert bad.returncode == 1 and "absolute" in bad.stderr
