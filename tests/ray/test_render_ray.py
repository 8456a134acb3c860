"""render --target rayjob|raycluster: guarded, self-validating, accepted by the KubeRay CRDs."""

from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml

from k8sddp import guardvars as gv
from k8sddp.errors import SpecError
from k8sddp.render import load_spec, render_spec
from k8sddp.schemagen import convert_openapi
from k8sddp.validate import validate_objects

from ..conftest import REFERENCE, REPO

SPEC = REPO / "examples" / "ddpjob.yaml"


def _crd_validator(file: str) -> jsonschema.Draft202012Validator:
    path = REFERENCE / "kuberay" / file
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft202012Validator(convert_openapi(v1["schema"]["openAPIV3Schema"]))


@pytest.mark.parametrize(("target", "crd"), [("rayjob", "ray.io_rayjobs.yaml"), ("raycluster", "ray.io_rayclusters.yaml")])
def test_rendered_ray_objects_pass_strict_and_the_crd(target: str, crd: str) -> None:
    (obj,) = render_spec(load_spec(str(SPEC)), target=target).objects
    assert validate_objects([obj], profile="strict").findings == []
    assert [e.message for e in _crd_validator(crd).iter_errors(obj)] == []
    cluster = obj["spec"]["rayClusterSpec"] if target == "rayjob" else obj["spec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    assert len(groups) == 2
    for group in groups:
        env = {e["name"]: e["value"] for e in group["template"]["spec"]["containers"][0]["env"]}
        assert env[gv.ASYNC_ERROR_HANDLING] == "3" and env[gv.FAULTHANDLER] == "1"
        assert env[gv.RAY_COLLECTIVE_TIMEOUT] == str(gv.DEFAULT_RAY_COLLECTIVE_TIMEOUT_SECONDS)


def test_rayjob_mirrors_the_guards_in_the_runtime_env() -> None:
    (job,) = render_spec(load_spec(str(SPEC)), target="rayjob").objects
    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]
    pod = {e["name"]: e["value"] for e in job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"]}
    for name in (*gv.MANDATORY, gv.RAY_COLLECTIVE_TIMEOUT):
        if name in pod:
            assert runtime[name] == pod[name]
    assert job["spec"]["shutdownAfterJobFinishes"] is True and job["spec"]["backoffLimit"] >= 0 and job["spec"]["activeDeadlineSeconds"] > 0
    # The GPUs go to the workers, not the head.
    spec = load_spec(str(SPEC), sets=["spec.gpusPerNode=2", "spec.procsPerNode=2"])
    (job,) = render_spec(spec, target="rayjob").objects
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in head.get("resources", {}).get("limits", {}) and worker["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_elastic_is_refused_for_ray() -> None:
    spec = copy.deepcopy(load_spec(str(SPEC)))
    spec["spec"]["elastic"] = {"minNodes": 1, "maxNodes": 2}
    with pytest.raises(SpecError, match="elastic"):
        render_spec(spec, target="raycluster")
