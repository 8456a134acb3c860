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
