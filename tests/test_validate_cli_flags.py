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
