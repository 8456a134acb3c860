"""validate's flag checks and its SARIF output when nothing could be checked (exit 2)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("jobs", ["0", "-3", "two"])
def test_bad_jobs_is_a_usage_error(cli, jobs: str, tmp_path):
    res = cli("validate", "--jobs", jobs, str(tmp_path))
    assert res.code == 2 and "--jobs" in res.err


def test_sarif_on_exit_2_is_a_failed_run_not_an_empty_file(cli, tmp_path):
    res = cli("validate", "--format", "sarif", str(tmp_path / "missing.yaml"))
    assert res.code == 2
    log = json.loads(res.out)
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert "missing.yaml" in json.dumps(invocation)


def test_folder_scan_skips_fifos_and_takes_upper_case_suffixes(cli, tmp_path):
    import os
    import shutil

    from .conftest import REPO

    os.mkfifo(tmp_path / "pipe.yaml")
    shutil.copy(REPO / "examples" / "unguarded-pytorchjob.yaml", tmp_path / "JOB.YAML")
    res = cli("validate", str(tmp_path))
    assert res.code == 1
    assert "1 file(s)" in res.out and "KDP201" in res.out


def test_every_missing_path_is_named(cli, tmp_path):
    res = cli("validate", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"))
    assert res.code == 2 and "a.yaml" in res.err and "b.yaml" in res.err


def test_typed_and_nested_lists_are_flattened(cli, tmp_path):
    import yaml

    from .conftest import REPO

    job = yaml.safe_load((REPO / "examples" / "unguarded-pytorchjob.yaml").read_text())
    doc = {"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList", "items": [job]}]}
    (tmp_path / "list.yaml").write_text(yaml.safe_dump(doc))
    res = cli("validate", str(tmp_path / "list.yaml"))
    assert res.code == 1 and "1 objects checked" in res.out
    assert "items[0].items[0].spec.pytorchReplicaSpecs.Master" in res.out


def test_config_file_and_excluded_files_are_not_read(cli, tmp_path):
    from .conftest import REPO

    (tmp_path / "k8sddp.yaml").write_text('exclude: ["values*.yaml"]\n')
    (tmp_path / "values.yaml").write_text("replicas: 3\n")
    (tmp_path / "job.yaml").write_text((REPO / "tests" / "golden" / "demo.pytorchjob.yaml").read_text())
    res = cli("validate", "--config", str(tmp_path / "k8sddp.yaml"), str(tmp_path))
    assert res.code == 0, res.out
    assert "1 file(s)" in res.out


def test_empty_input_warns(cli, tmp_path):
    res = cli("validate", str(tmp_path))
    assert res.code == 0 and "no Kubernetes documents" in res.err


def test_a_device_file_is_read_only_up_to_the_limit(cli):
    res = cli("validate", "/dev/zero")
    assert res.code == 1 and "KDP001" in res.out
