"""The local runner on real processes: the operator's restart policy, conditions, limits, logs."""

from __future__ import annotations

import io
import json
import os
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.errors import JobFailedError, WaitTimeoutError
from k8sddp.jobstatus import Progress
from k8sddp.local.runner import LocalJob, LocalOptions

GUARDS = [{"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "3"}, {"name": "PYTHONFAULTHANDLER", "value": "1"}]


def replica(code: str, policy: str = "ExitCode", replicas: int = 1) -> dict[str, Any]:
    return {"replicas": replicas, "restartPolicy": policy, "template": {"spec": {
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "pytorch", "image": "x", "command": ["python", "-c", textwrap.dedent(code)],
                        "env": GUARDS + [{"name": "STATE", "value": "/state"}],
                        "volumeMounts": [{"name": "state", "mountPath": "/state"}]}],
        "volumes": [{"name": "state", "persistentVolumeClaim": {"claimName": "state"}}]}}}


def pytorchjob(master: str | None, worker: str | None, *, policy: str = "ExitCode", run_policy: dict | None = None,
               workers: int = 1) -> dict[str, Any]:
    specs = {}
    if master is not None:
        specs["Master"] = replica(master, policy)
    if worker is not None:
        specs["Worker"] = replica(worker, policy, workers)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "lj"},
            "spec": {"runPolicy": run_policy or {}, "pytorchReplicaSpecs": specs}}


# Counts its own attempts on the "PVC" and exits with CODES[attempt] (the last one repeats).
COUNTER = """
import os, pathlib, sys
name = os.environ["POD"]
p = pathlib.Path(os.environ["STATE"]) / name
n = int(p.read_text()) if p.exists() else 0
p.parent.mkdir(parents=True, exist_ok=True); p.write_text(str(n + 1))
codes = {codes}
print(name, "attempt", n, "rank", os.environ.get("RANK"), flush=True)
code = codes[min(n, len(codes) - 1)]
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""
SLEEPER = "import time\nprint('peer up', flush=True)\ntime.sleep(120)"


def counter(*codes: int) -> str:
    return COUNTER.format(codes=list(codes))


def with_pod_env(job: dict[str, Any]) -> dict[str, Any]:
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["env"].append(
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    return job


def run(job: dict[str, Any], tmp_path: Path, **opts: Any) -> tuple[LocalJob, str, str]:
    out, err = io.StringIO(), io.StringIO()
    lj = LocalJob(with_pod_env(job), configmaps=[], options=LocalOptions(
        local_dir=str(tmp_path / "run"), out=out, progress=Progress(err, tty=False), **opts))
    try:
        lj.run()
    finally:
        lj.err_text = err.getvalue()  # type: ignore[attr-defined]
        lj.out_text = out.getvalue()  # type: ignore[attr-defined]
    return lj, out.getvalue(), err.getvalue()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_exit_code_retryable_recreates_the_pod_until_success(tmp_path: Path) -> None:
    lj, out, err = run(pytorchjob(counter(143, -9, 0), SLEEPER), tmp_path)
    assert "[lj-master-0] lj-master-0 attempt 2 rank 0" in out
    assert "[lj-worker-0] peer up" in out
    assert err.count("Restarting (PyTorchJobRestarting): job lj is restarting because Master replica(s) failed.") == 2
    assert "lj-master-0: exited with code 137" in err  # SIGKILL = 128 + 9, retried
    assert "lj: Succeeded (PyTorchJobSucceeded): PyTorchJob lj is successfully completed." in err
    status = json.loads((tmp_path / "run" / "status.json").read_text())["status"]
    assert [c["type"] for c in status["conditions"] if c["status"] == "True"][-1] == "Succeeded"
    assert status["replicaStatuses"]["Master"]["succeeded"] == 1
    log = (tmp_path / "run" / "logs" / "lj-master-0.log").read_text()
    assert log.count("--- lj-master-0 attempt") == 3
    assert "--- exited with code 143 at" in log and "--- exited with code 137 at" in log
    # only the failed pod is recreated; its peer keeps its one process
    assert (tmp_path / "run" / "logs" / "lj-worker-0.log").read_text().count("--- lj-worker-0 attempt") == 1
    assert all(p.proc is not None and not alive(p.proc.pid) for p in lj.pods)


def test_exit_code_final_fails_the_job_and_stops_the_peers(tmp_path: Path) -> None:
    with pytest.raises(JobFailedError) as err:
        run(pytorchjob(SLEEPER, counter(3)), tmp_path)
    assert 'job "lj" is failing because "Worker" replica(s) failed.' in str(err.value)
    assert err.value.exit_code == 4
    status = json.loads((tmp_path / "run" / "status.json").read_text())["status"]
    assert status["conditions"][-1]["type"] == "Failed"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Running"] == "False"


def test_on_failure_restarts_in_place_until_the_backoff_limit(tmp_path: Path) -> None:
    job = pytorchjob(SLEEPER, counter(1), policy="OnFailure", run_policy={"backoffLimit": 2})
    with pytest.raises(JobFailedError, match="reached the specified backoff limit"):
        run(job, tmp_path, restart_backoff=0.05)
    assert (tmp_path / "run" / "pvc" / "state" / "lj-worker-0").read_text() == "2"


def test_never_fails_at_the_first_failure(tmp_path: Path) -> None:
    with pytest.raises(JobFailedError, match="is failed because 1 Worker replica"):
        run(pytorchjob(SLEEPER, counter(137), policy="Never"), tmp_path)


def test_worker_only_job_succeeds_when_all_workers_do(tmp_path: Path) -> None:
    lj, out, err = run(pytorchjob(None, counter(0), workers=2), tmp_path)
    assert "lj-worker-1 attempt 0 rank None" in out  # no Master: the operator sets no RANK
    assert "Succeeded" in err


def test_active_deadline(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(JobFailedError, match="active longer than specified deadline"):
        run(pytorchjob(SLEEPER, SLEEPER, run_policy={"activeDeadlineSeconds": 1}), tmp_path)
    assert time.monotonic() - start < 30


def test_own_restart_cap(tmp_path: Path) -> None:
    with pytest.raises(JobFailedError, match="LocalRestartCapReached"):
        run(pytorchjob(counter(142), SLEEPER), tmp_path, max_restarts=2)
    assert (tmp_path / "run" / "pvc" / "state" / "lj-master-0").read_text() == "3"


def test_timeout_stops_everything(tmp_path: Path) -> None:
    box: dict[str, Any] = {}
    start = time.monotonic()
    with pytest.raises(WaitTimeoutError):
        try:
            run(pytorchjob(SLEEPER, SLEEPER), tmp_path, timeout=1.5)
        except WaitTimeoutError as exc:
            box["exc"] = exc
            raise
    assert time.monotonic() - start < 30
    assert box["exc"].exit_code == 5


def test_submit_local_cli(cli, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(with_pod_env(pytorchjob(counter(143, 0), counter(0)))))
    res = cli("submit", "--local", "--local-dir", str(tmp_path / "run"), str(path))
    assert res.code == 0, res.err
    assert "[lj-master-0] lj-master-0 attempt 1 rank 0" in res.out
    path.write_text(yaml.safe_dump(with_pod_env(pytorchjob(counter(1), SLEEPER))))
    res = cli("submit", "--local", "--local-dir", str(tmp_path / "run2"), str(path))
    assert res.code == 4 and "Failed (PyTorchJobFailed)" in res.err
    # the guardrails apply to local runs too
    job = pytorchjob(counter(0), counter(0))
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"] = []
    path.write_text(yaml.safe_dump(job))
    res = cli("submit", "--local", "--local-dir", str(tmp_path / "run3"), str(path))
    assert res.code == 1 and "KDP201" in res.err


# Each pod writes its pid and its child's pid on the "PVC", then sleeps (the child too).
SLEEP_WITH_CHILD = (
    "import os, pathlib, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "pathlib.Path(os.environ['STATE'], os.environ['POD'] + '.pid').write_text(f'{os.getpid()} {child.pid}')\n"
    "time.sleep(120)")


def start_runner(tmp_path: Path) -> tuple[Any, list[int]]:
    """``k8sddp submit --local`` of a 2-pod job in a subprocess; its process and the 4 pod pids."""
    import subprocess
    import sys

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(with_pod_env(pytorchjob(SLEEP_WITH_CHILD, SLEEP_WITH_CHILD))))
    state = tmp_path / "run" / "pvc" / "state"
    proc = subprocess.Popen([sys.executable, "-m", "k8sddp", "submit", "--local", "--local-dir",
                             str(tmp_path / "run"), str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60

    def written() -> list[str]:
        return [t for t in (p.read_text() for p in state.glob("*.pid")) if t]

    while len(written()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(x) for t in written() for x in t.split()]
    assert len(pids) == 4
    return proc, pids


def gone(pids: list[int], within: float = 20.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_sigterm_to_k8sddp_stops_every_pod(tmp_path: Path) -> None:
    import signal

    proc, pids = start_runner(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143  # 128 + SIGTERM
    err = proc.stderr.read()
    assert not gone(pids)
    assert "SIGTERM: stopping 2 pod(s): lj-master-0, lj-worker-0; grace 5 s" in err
    assert 'job "lj" stopped by SIGTERM' in err
    status = json.loads((tmp_path / "run" / "status.json").read_text())["status"]
    failed = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "Stopped" and "completionTime" in status
    assert not [c for c in status["conditions"] if c["type"] == "Running" and c["status"] == "True"]


def test_sigkill_to_k8sddp_still_kills_every_pod(tmp_path: Path) -> None:
    import signal

    proc, pids = start_runner(tmp_path)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    left = gone(pids)
    for pid in left:  # do not leave them behind if the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left


def test_a_previous_runs_volume_is_reported_as_resumed(tmp_path: Path) -> None:
    def build() -> str:
        err = io.StringIO()
        LocalJob(with_pod_env(pytorchjob(counter(0), counter(0))), configmaps=[], options=LocalOptions(
            local_dir=str(tmp_path / "run"), progress=Progress(err, tty=False)))
        return err.getvalue()

    assert "previous run" not in build()
    ckpt = tmp_path / "run" / "pvc" / "state" / "ckpt-000000048.pt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_bytes(b"x")
    text = build()
    assert "keeps 1 file(s) of a previous run" in text and "resumes from its checkpoints" in text
    assert f"delete {tmp_path / 'run'}" in text


def test_running_returns_after_restarting_only_when_every_pod_runs(tmp_path: Path) -> None:
    err = io.StringIO()
    lj = LocalJob(with_pod_env(pytorchjob(counter(0), counter(0))), configmaps=[], options=LocalOptions(
        local_dir=str(tmp_path / "run"), progress=Progress(err, tty=False)))
    master, worker = lj.pods
    master.phase = worker.phase = "Running"
    lj._check_running()
    assert lj.state().condition == "Running"
    worker.phase = "Pending"  # the worker was recreated
    lj._set_condition("Restarting", *lj.msg.restarting("Worker"))
    lj._check_running()
    assert lj.state().condition == "Restarting"
    worker.phase = "Running"
    lj._check_running()
    assert lj.state().condition == "Running"


class _FullOut(io.StringIO):
    """Standard output on a full disk (``>/dev/full``), or a closed pipe (``| head -c1``)."""

    def __init__(self, exc: OSError) -> None:
        super().__init__()
        self.exc = exc

    def write(self, s: str) -> int:
        raise self.exc


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), BrokenPipeError(32, "Broken pipe")])
def test_unwritable_stdout_keeps_draining_the_pods(tmp_path: Path, exc: OSError) -> None:
    """The pods' echoed output cannot be written: their pipes are still drained (a chatty pod
    filled its 64 KiB pipe and hung the job for ever), the log file has every line, and the
    write error comes out of run() after the job ends, for the CLI's exit 2 (or quiet 0 on EPIPE)."""
    chatty = "import sys\nfor i in range(20000):\n    print('x' * 100, i)\nprint('done', flush=True)"
    job = with_pod_env(pytorchjob(chatty, None))
    err = io.StringIO()
    lj = LocalJob(job, configmaps=[], options=LocalOptions(
        local_dir=str(tmp_path / "run"), out=_FullOut(exc), progress=Progress(err, tty=False), timeout=60))
    with pytest.raises(type(exc)):
        lj.run()
    assert "lj: Succeeded" in err.getvalue()
    assert "standard output cannot be written" in err.getvalue() and str(tmp_path / "run" / "logs") in err.getvalue()
    log = (tmp_path / "run" / "logs" / "lj-master-0.log").read_text()
    assert "x" * 100 + " 19999\ndone\n" in log
