"""k8sddp render: golden output, determinism, injection safety, guard variables that cannot be lost.

Regenerate the golden file after an intended change with:
    python tests/golden/regen.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from k8sddp.errors import SpecError, UsageError
from k8sddp.render import apply_sets, load_spec, render_spec, to_yaml
from k8sddp.render.model import DEFAULTS
from k8sddp.resources import load_schema
from k8sddp.validate import validate_objects, validate_text

from .conftest import REPO

EXAMPLE = str(REPO / "examples" / "ddpjob.yaml")


def _env(job: dict, replica: str = "Master") -> dict[str, str]:
    container = job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def _render(*sets: str) -> dict:
    return render_spec(load_spec(EXAMPLE, sets=sets)).objects[0]


def test_example_matches_golden_and_is_deterministic():
    first = to_yaml(render_spec(load_spec(EXAMPLE)).objects)
    second = to_yaml(render_spec(load_spec(EXAMPLE)).objects)
    assert first == second
    assert first == (REPO / "tests" / "golden" / "demo.pytorchjob.yaml").read_text()


def test_rendered_example_passes_strict_and_bakes_in_the_guards():
    job = _render()
    report = validate_text(to_yaml([job]), file="demo.yaml", profile="strict")
    assert report.failing() == [] and report.checked == 1
    for replica in ("Master", "Worker"):
        env = _env(job, replica)
        assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
        assert "NCCL_ASYNC_ERROR_HANDLING" not in env
        assert env["PYTHONFAULTHANDLER"] == "1"
        assert env["K8SDDP_PG_TIMEOUT_SECONDS"] == "1800"
        assert env["K8SDDP_WATCHDOG_TIMEOUT_SECONDS"] == "300"
        assert env["K8SDDP_ARTIFACT_DIR"] == "/checkpoints/k8sddp"
        assert env["TORCH_FR_DUMP_TEMP_FILE"].startswith("/checkpoints/")
        pod = job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
        assert job["spec"]["pytorchReplicaSpecs"][replica]["restartPolicy"] == "ExitCode"
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == DEFAULTS["activeDeadlineSeconds"]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1


def test_defaults_agree_with_the_spec_schema():
    spec_props = load_schema("ddpjob.schema.json")["properties"]["spec"]["properties"]
    assert spec_props["restartPolicy"]["default"] == DEFAULTS["restartPolicy"]
    assert spec_props["activeDeadlineSeconds"]["default"] == DEFAULTS["activeDeadlineSeconds"]
    assert spec_props["shmSize"]["default"] == DEFAULTS["shmSize"]
    assert spec_props["cleanPodPolicy"]["default"] == DEFAULTS["cleanPodPolicy"]
    assert spec_props["timeouts"]["properties"]["processGroupSeconds"]["default"] == DEFAULTS["processGroupSeconds"]
    assert spec_props["timeouts"]["properties"]["watchdogSeconds"]["default"] == DEFAULTS["watchdogSeconds"]
    assert spec_props["checkpoint"]["properties"]["mountPath"]["default"] == DEFAULTS["checkpointMountPath"]


def test_gpus_set_limits_equal_to_processes():
    job = _render("spec.gpusPerNode=4", "spec.procsPerNode=4")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert "--nproc-per-node=4" in container["command"]
    assert job["spec"]["nprocPerNode"] == "4"
    with pytest.raises(SpecError, match="KDP309"):
        _render("spec.gpusPerNode=4", "spec.procsPerNode=2")


def test_old_torch_gets_the_legacy_variable_only():
    env = _env(_render("spec.torchVersion=2.1.2"))
    assert env["NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in env


def test_elastic_is_worker_only():
    job = _render("spec.nodes=1")
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master"}
    spec = yaml.safe_load(Path(EXAMPLE).read_text())
    del spec["spec"]["nodes"]
    spec["spec"]["elastic"] = {"minNodes": 1, "maxNodes": 3}
    job = render_spec(spec).objects[0]
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Worker"}
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert job["spec"]["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 3, "maxRestarts": 3}
    assert not any(a.startswith("--master-addr") for a in _container(job, "Worker")["command"])


def _container(job: dict, replica: str) -> dict:
    return job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "hostile",
    [
        "a: b",
        "x # comment",
        "'single' \"double\"",
        "line1\nline2: injected\n  - item",
        "{{ 7 * 7 }} {% if true %}x{% endif %}",
        "}\nkind: Secret\n",
        "\u2028\u0085 unicode separators",
    ],
)
def test_spec_values_cannot_inject_structure(hostile: str):
    spec = yaml.safe_load(Path(EXAMPLE).read_text())
    spec["metadata"]["labels"]["team"] = "x"
    spec["metadata"]["annotations"] = {"note": hostile}
    spec["spec"]["command"]["args"] = [hostile]
    spec["spec"]["env"] = [{"name": "USER_NOTE", "value": hostile}]
    job = render_spec(spec).objects[0]
    assert job["metadata"]["annotations"] == {"note": hostile}
    assert _container(job, "Master")["command"][-1] == hostile
    assert _env(job)["USER_NOTE"] == hostile
    assert job["kind"] == "PyTorchJob"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"),
        ("PYTHONFAULTHANDLER", ""),
        ("K8SDDP_PG_TIMEOUT_SECONDS", "99999"),
        ("TORCH_FR_DUMP_TEMP_FILE", "/tmp/fr"),
        ("TORCH_NCCL_ENABLE_MONITORING", "0"),
    ],
)
def test_user_env_cannot_override_a_guard(name: str, value: str):
    spec = apply_sets(yaml.safe_load(Path(EXAMPLE).read_text()), [f'spec.env=[{{"name": "{name}", "value": "{value}"}}]'])
    with pytest.raises(SpecError) as info:
        render_spec(spec)
    assert name in str(info.value) and info.value.path == "spec.env[0]"


def test_user_env_repeating_the_same_value_is_harmless():
    spec = apply_sets(yaml.safe_load(Path(EXAMPLE).read_text()), ['spec.env=[{"name": "PYTHONFAULTHANDLER", "value": "1"}]'])
    env_names = [e["name"] for e in _container(render_spec(spec).objects[0], "Master")["env"]]
    assert env_names.count("PYTHONFAULTHANDLER") == 1


def test_invalid_spec_is_located(tmp_path):
    bad = tmp_path / "bad.yaml"
    lines = Path(EXAMPLE).read_text().splitlines()
    name_line, nodes_line = lines.index("  name: demo") + 1, lines.index("  nodes: 2") + 1
    bad.write_text(Path(EXAMPLE).read_text().replace("nodes: 2", "nodes: two").replace("name: demo", "name: Demo_Job"))
    with pytest.raises(SpecError) as info:
        load_spec(str(bad))
    text = str(info.value)
    assert f"{bad}:{name_line}: metadata.name" in text
    assert f"{bad}:{nodes_line}: spec.nodes" in text and "integer" in text


@pytest.mark.parametrize("bad", ["spec.nodes", "spec..x=1", "spec.env[9].value=1"])
def test_bad_set_is_a_usage_error(bad: str):
    with pytest.raises(UsageError):
        load_spec(EXAMPLE, sets=[bad])


def test_cli_render_json_and_out(cli, tmp_path):
    out = tmp_path / "job.yaml"
    assert cli("render", EXAMPLE, "--out", str(out)).code == 0
    assert yaml.safe_load(out.read_text())["kind"] == "PyTorchJob"
    res = cli("render", EXAMPLE, "-o", "json", "--set", "spec.nodes=3")
    assert res.code == 0
    assert json.loads(res.out)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


def test_cli_render_errors_have_exit_codes(cli, tmp_path):
    assert cli("render", str(tmp_path / "missing.yaml")).code == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: k8sddp.dev/v1alpha1\nkind: DDPJob\nmetadata: {name: x}\nspec: {image: i}\n")
    res = cli("render", str(bad))
    assert res.code == 1 and "spec" in res.err and "Traceback" not in res.err
    assert cli("render", EXAMPLE, "--out", str(tmp_path / "no" / "dir.yaml")).code == 2


def test_rendered_job_validates_from_objects_too():
    assert validate_objects([_render()], profile="strict").failing() == []


def test_set_string_keeps_the_value_a_string(cli):
    res = cli("render", EXAMPLE, "--set-string", "spec.torchVersion=2.10", "-o", "json")
    assert res.code == 0
    env = {e["name"]: e["value"] for e in json.loads(res.out)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"  # 2.10 >= 2.2 (a float would have read 2.1)


def test_user_may_choose_the_other_safe_async_mode():
    job = _render('spec.env=[{"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "1"}]')
    names = [e["name"] for e in _container(job, "Master")["env"]]
    assert names.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 1
    assert _env(job)["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_nodes_and_elastic_together_get_a_plain_message():
    with pytest.raises(SpecError, match="either spec.nodes"):
        load_spec(EXAMPLE, sets=['spec.elastic={"minNodes": 1, "maxNodes": 2}'])


def test_whole_floats_render_as_integers():
    # JSON Schema's integer accepts 2.0: these rendered replicas 1.0, nprocPerNode "2.0",
    # --nproc-per-node=2.0 (torchrun cannot parse it), K8SDDP_SEED=7.0, and a watchdog of 600.0
    # was refused as a k8sddp bug ("the rendered manifest fails its own guardrails")
    job = _render("spec.nodes=3.0", "spec.procsPerNode=2.0", "spec.seed=7.0", "spec.timeouts.watchdogSeconds=600.0",
                  "spec.cpu=4.0")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Worker"]["replicas"] == 2 and type(replicas["Worker"]["replicas"]) is int
    assert job["spec"]["nprocPerNode"] == "2"
    assert "--nproc-per-node=2" in _container(job, "Worker")["command"]
    assert _env(job, "Worker")["K8SDDP_SEED"] == "7"
    assert _env(job, "Worker")["K8SDDP_WATCHDOG_TIMEOUT_SECONDS"] == "600"
    assert _container(job, "Worker")["resources"]["limits"]["cpu"] == "4"
    with pytest.raises(SpecError, match="spec.nodes"):
        load_spec(EXAMPLE, sets=["spec.nodes=2.5"])


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_cli_render_to_a_full_device_is_one_line_exit_2():
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "k8sddp", "render", EXAMPLE], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["k8sddp render: cannot write output: standard output: No space left on device"]


def test_spec_of_the_wrong_type_gets_no_nodes_or_elastic_message():
    with pytest.raises(SpecError) as err:
        load_spec(EXAMPLE, sets=["spec=1"])
    assert "is not of type" in str(err.value) and "either spec.nodes" not in str(err.value)


def test_set_escaped_dots_address_a_key_with_dots():
    # resource names, label and annotation keys hold dots: 'spec.resources.limits.vpc.amazonaws.com/efa'
    # made nested maps {vpc: {amazonaws: ...}}, which the schema refused, with no way to say it
    spec = apply_sets({"spec": {}}, [r"spec.resources.limits.vpc\.amazonaws\.com/efa=32", r"spec.podLabels.a\.b/c=x"])
    assert spec == {"spec": {"resources": {"limits": {"vpc.amazonaws.com/efa": 32}}, "podLabels": {"a.b/c": "x"}}}
    with pytest.raises(UsageError, match="malformed path"):
        apply_sets({"spec": {}}, ["spec.x\\=1"])


@pytest.mark.parametrize("path", ["metadata.labels.a", "spec.podLabels.a", "spec.podLabels.bad key"])
def test_labels_the_api_server_refuses_are_spec_errors(path: str):
    # they rendered (pod labels) or failed as "the rendered manifest fails its own guardrails"
    # (a k8sddp bug's message) instead of naming the field
    with pytest.raises(SpecError, match=path.split(".")[0] + "."):
        load_spec(EXAMPLE, set_strings=[f"{path}=\u00fc" if path.endswith(".a") else f"{path}=x"])
    assert load_spec(EXAMPLE, set_strings=["spec.podLabels.example\\.com/pool=a-b_c.d"])["spec"]["podLabels"] == {"example.com/pool": "a-b_c.d"}
