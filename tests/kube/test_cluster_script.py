"""`tests/kube/cluster.sh` itself: usage, `env` without a cluster, and the running cluster's
files (modes 0600) and second `up`."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from .conftest import CACHE, SCRIPT, Kube


def _script(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "K8SDDP_KUBE_STATE": str(state)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_usage_and_env_without_a_cluster(tmp_path: Path) -> None:
    res = _script("frobnicate", state=tmp_path)
    assert res.returncode == 2 and "usage:" in res.stderr
    res = _script("env", state=tmp_path)
    assert res.returncode == 3 and "no cluster running" in res.stderr
    res = _script("down", state=tmp_path)
    assert res.returncode == 0 and "stopped 0 component(s)" in res.stderr


def test_up_refuses_a_folder_that_is_not_a_cluster_state(tmp_path: Path) -> None:
    # `up` wipes its state folder: K8SDDP_KUBE_STATE pointing at a user's folder must not lose it
    (tmp_path / "precious.txt").write_text("keep me")
    res = _script("up", state=tmp_path)
    assert res.returncode == 2 and "not a cluster state folder" in res.stderr, res.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_down_leaves_a_process_that_reuses_a_recorded_pid(tmp_path: Path) -> None:
    # a stale state (crash, reboot): its pid file names a pid now running something else
    other = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "pids").mkdir()
        (tmp_path / "pids" / "kube-apiserver").write_text(f"{other.pid}\n")
        res = _script("status", state=tmp_path)
        assert "kube-apiserver stopped" in res.stdout, res.stdout
        res = _script("down", state=tmp_path)
        assert res.returncode == 0 and "stopped 0 component(s)" in res.stderr, res.stderr
        assert other.poll() is None, "down killed a process it did not start"
    finally:
        other.kill()
        other.wait()


def test_up_with_an_unwritable_state_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = _script("up", state=blocker / "state")
    assert res.returncode == 2 and "cannot create the state folder" in res.stderr, res.stderr


def test_running_cluster_files_and_second_up(kube: Kube) -> None:
    for path in (Path(kube.kubeconfig), kube.state / "pki" / "admin.key", kube.state / "pki" / "sa.key",
                 kube.state / "controller-manager.kubeconfig", kube.state / "pki" / "batch.key",
                 kube.state / "batch-certs" / "tls.key"):
        assert (path.stat().st_mode & 0o777) == 0o600, path
    res = _script("up", state=kube.state)
    assert res.returncode == 0
    assert "already running" in res.stderr
    assert f"export KUBECONFIG={kube.kubeconfig}" in res.stdout
    res = _script("status", state=kube.state)
    components = re.search(r"^COMPONENTS=\(([^)]*)\)", SCRIPT.read_text(), re.M)
    assert components is not None
    names = components.group(1).split()
    assert {"jobset-controller", "trainer-controller-manager", "kuberay-operator"} <= set(names)
    assert [line.split()[0] for line in res.stdout.splitlines() if "running (pid" in line] == names, res.stdout
    version = kube.kubectl("version", "-o", "json").stdout
    # the running components do not hold the cache's build lock (an inherited fd 9 did, and
    # blocked every other `build`/`up` on the cache while this cluster ran)
    lock = CACHE / ".build.lock"
    if lock.exists():
        res = subprocess.run(["flock", "-n", str(lock), "true"], capture_output=True, text=True, timeout=10)
        assert res.returncode == 0, "a running component holds the build lock"
    assert '"gitVersion": "v1.36.3"' in version
