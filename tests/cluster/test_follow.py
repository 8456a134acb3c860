"""--wait, status, logs and delete against the fake API server (real client, real watch streams)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.fakeapi import FakeApiServer, Fault

LABELS = "training.kubeflow.org"


def cond(ctype: str, reason: str, message: str, status: str = "True") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "lastUpdateTime": "2026-01-01T00:00:00Z"}


CREATED = cond("Created", "PyTorchJobCreated", "PyTorchJob demo is created.")
RUNNING = cond("Running", "PyTorchJobRunning", "PyTorchJob demo is running.")
RESTARTING = cond("Restarting", "PyTorchJobRestarting", "job demo is restarting because Worker replica(s) failed.")
SUCCEEDED = cond("Succeeded", "PyTorchJobSucceeded", "PyTorchJob demo is successfully completed.")
FAILED = cond("Failed", "PyTorchJobFailed", 'job "demo" is failing because "Worker" replica(s) failed.')


def operator(api: FakeApiServer, steps: list[tuple[float, list[dict[str, Any]] | str]], ns: str = "ml") -> threading.Thread:
    """Play the operator: after each delay, set the job's conditions (or run an action)."""

    def play() -> None:
        deadline = time.monotonic() + 20
        # start once the client watches, so that no state is skipped however slow the machine
        while time.monotonic() < deadline and not any(r["query"].get("watch") == "true" for r in api.requests):
            time.sleep(0.05)
        for delay, what in steps:
            time.sleep(delay)
            if what == "compact":
                api.compact()
            elif what == "delete":
                api._jobs.pop((ns, "demo"), None)
                with api._lock:
                    obj = {"metadata": {"name": "demo", "namespace": ns, "resourceVersion": str(api._next_rv())}}
                    api._emit("DELETED", obj)
            else:
                active = {"Master": {"active": 1}, "Worker": {"active": 1}}
                api.set_job_status(ns, "demo", {"conditions": what, "replicaStatuses": active})

    t = threading.Thread(target=play, daemon=True)
    t.start()
    return t


def submit_wait(cli, kubeconfig: Path, manifest: Path, *extra: str):
    return cli("submit", "--kubeconfig", str(kubeconfig), "--wait", *extra, str(manifest))


def test_wait_follows_conditions_to_success(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    api.add_pod("ml", "demo-master-0", {f"{LABELS}/job-name": "demo", f"{LABELS}/replica-type": "master",
                                        f"{LABELS}/replica-index": "0"})
    operator(api, [(0.3, [CREATED]), (0.3, [CREATED, RUNNING]), (0.3, [CREATED, RESTARTING]),
                   (0.3, [CREATED, RUNNING]), (0.3, [CREATED, {**RUNNING, "status": "False"}, SUCCEEDED])])
    res = submit_wait(cli, kubeconfig, manifest, "--timeout", "30")
    assert res.code == 0, res.err
    for text in ("Created (PyTorchJobCreated)", "Running (PyTorchJobRunning)", "Restarting (PyTorchJobRestarting)",
                 "demo: Succeeded (PyTorchJobSucceeded): PyTorchJob demo is successfully completed."):
        assert text in res.err
    assert "demo-master-0  Running" in res.err  # the replicas' pods
    assert "\r" not in res.err  # not a terminal: plain lines only
    assert api.count("GET", "/pytorchjobs") >= 2  # a GET, then watch requests


def test_wait_failed_exits_4_with_reason_and_message(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    operator(api, [(0.3, [CREATED, RUNNING]), (0.3, [CREATED, {**RUNNING, "status": "False"}, FAILED])])
    res = submit_wait(cli, kubeconfig, manifest, "--timeout", "30")
    assert res.code == 4
    assert 'Failed (PyTorchJobFailed): job "demo" is failing because "Worker" replica(s) failed.' in res.err


def test_wait_times_out_with_5(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    operator(api, [(0.2, [CREATED, RUNNING])])
    start = time.monotonic()
    res = submit_wait(cli, kubeconfig, manifest, "--timeout", "2")
    assert res.code == 5
    assert 1.5 <= time.monotonic() - start < 15
    assert "gave up waiting" in res.err and "Running" in res.err


def test_wait_survives_history_compaction_and_broken_streams(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    api.watch_timeout_cap = 1.0  # the server ends watch streams every second
    operator(api, [(0.3, [CREATED, RUNNING]), (0.1, "compact"), (1.5, [CREATED, RESTARTING]),
                   (0.1, "compact"), (1.5, [CREATED, SUCCEEDED])])
    api.faults.append(Fault("GET", "/pytorchjobs$", "reset_before", times=1))
    res = submit_wait(cli, kubeconfig, manifest, "--timeout", "30")
    assert res.code == 0, res.err
    assert "Succeeded (PyTorchJobSucceeded)" in res.err


def test_job_deleted_while_waiting_is_a_cluster_error(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path) -> None:
    operator(api, [(0.3, [CREATED, RUNNING]), (0.3, "delete")])
    res = submit_wait(cli, kubeconfig, manifest, "--timeout", "30")
    assert res.code == 3 and "was deleted while waiting" in res.err


def _job(api: FakeApiServer) -> None:
    from tests.cluster.conftest import rendered_demo

    api.put_job({**rendered_demo(), "metadata": {"name": "demo", "namespace": "ml"}})
    api.set_job_status("ml", "demo", {"conditions": [CREATED, RUNNING],
                                      "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 1, "failed": 1}}})
    for rtype, index in (("master", 0), ("worker", 0), ("worker", 1)):
        api.add_pod("ml", f"demo-{rtype}-{index}", {f"{LABELS}/job-name": "demo", f"{LABELS}/replica-type": rtype,
                                                    f"{LABELS}/replica-index": str(index)},
                    logs=[f"{rtype} {index} line {i}" for i in range(3)], restarts=index)


def test_status_prints_conditions_replicas_pods(cli, api: FakeApiServer, kubeconfig: Path) -> None:
    _job(api)
    res = cli("status", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 0, res.err
    assert res.out.startswith("demo: Running (PyTorchJobRunning) | Master 1 active; Worker 1 active, 1 failed\n")
    assert "Created" in res.out and "demo-worker-1  Running  restarts=1" in res.out
    res = cli("status", "demo", "--kubeconfig", str(kubeconfig), "-o", "json")
    assert res.code == 0 and '"PyTorchJobRunning"' in res.out
    res = cli("status", "nope", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and 'PyTorchJob or TrainJob "nope" not found in namespace "ml"' in res.err


def test_logs_by_operator_labels(cli, api: FakeApiServer, kubeconfig: Path) -> None:
    _job(api)
    res = cli("logs", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 0, res.err
    assert res.out == "master 0 line 0\nmaster 0 line 1\nmaster 0 line 2\n"
    res = cli("logs", "demo", "--replica", "worker", "--index", "1", "--kubeconfig", str(kubeconfig))
    assert res.out == "worker 1 line 0\nworker 1 line 1\nworker 1 line 2\n"
    res = cli("logs", "demo", "--replica", "worker", "--kubeconfig", str(kubeconfig))
    assert "[demo-worker-0] worker 0 line 2\n" in res.out and "[demo-worker-1] worker 1 line 0\n" in res.out
    res = cli("logs", "demo", "--replica", "worker", "--index", "7", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and "no pods of job" in res.err
    sel = [r["query"].get("labelSelector", "") for r in api.requests if r["path"].endswith("/pods")]
    assert f"{LABELS}/job-name=demo,{LABELS}/replica-type=worker,{LABELS}/replica-index=1" in sel


def test_logs_follow_streams_until_the_container_ends(cli, api: FakeApiServer, kubeconfig: Path) -> None:
    _job(api)
    api.add_pod("ml", "demo-master-0", {f"{LABELS}/job-name": "demo", f"{LABELS}/replica-type": "master",
                                        f"{LABELS}/replica-index": "0"}, logs=["first"], done=False)

    def feed() -> None:
        for i in range(3):
            time.sleep(0.3)
            api.append_log("ml", "demo-master-0", f"step {i}", done=(i == 2))

    threading.Thread(target=feed, daemon=True).start()
    start = time.monotonic()
    res = cli("logs", "demo", "-f", "--kubeconfig", str(kubeconfig))
    assert res.code == 0, res.err
    assert res.out == "first\nstep 0\nstep 1\nstep 2\n"
    assert time.monotonic() - start >= 0.8


def test_delete(cli, api: FakeApiServer, kubeconfig: Path) -> None:
    _job(api)
    res = cli("delete", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out == 'pytorchjob.kubeflow.org "demo" deleted\n'
    assert api.jobs() == []
    res = cli("delete", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and "not found" in res.err
    api.forbidden.add(("delete", "pytorchjobs", "ml"))
    _job(api)
    res = cli("delete", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and 'may not delete pytorchjobs.kubeflow.org in namespace "ml"' in res.err


@pytest.mark.parametrize("fmt", ["name", "yaml", "json"])
def test_output_formats(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path, fmt: str) -> None:
    import json

    import yaml

    res = cli("submit", "--kubeconfig", str(kubeconfig), "--dry-run=server", "-o", fmt, str(manifest))
    assert res.code == 0, res.err
    if fmt == "name":
        assert res.out == "pytorchjob.kubeflow.org/demo\n"
    else:
        obj = json.loads(res.out) if fmt == "json" else yaml.safe_load(res.out)
        assert obj["kind"] == "PyTorchJob" and obj["metadata"]["namespace"] == "ml"
