"""The kube tier: one real control plane (``tests/kube/cluster.sh up``) for the whole session.

Every test here is marked ``kube``. Without ``K8SDDP_REQUIRE_KUBE=1`` the tier uses binaries that
are already in the cache (``tests/kube/cluster.sh build`` puts them there) and is skipped with
the reason when they are absent, so a plain ``pytest`` never starts a cold Go build. With
``K8SDDP_REQUIRE_KUBE=1`` (``.ci/run``) the fixture builds what is missing, and a missing Go, an
unreachable module proxy, a build failure or a component that does not start FAIL the tier.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "cluster.sh"
CACHE = Path(os.environ.get("K8SDDP_KUBE_CACHE") or Path.home() / ".cache" / "k8sddp-kube")
REQUIRE = os.environ.get("K8SDDP_REQUIRE_KUBE") == "1"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "training-operator", "jobset-controller",
            "trainer-controller-manager", "kuberay-operator")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this folder ``kube`` (``pytest -m kube`` / ``-m "not kube"``)."""
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kube)


def _unavailable(why: str) -> None:
    if REQUIRE:
        pytest.fail(f"kube tier required (K8SDDP_REQUIRE_KUBE=1) but {why}", pytrace=False)
    pytest.skip(f"kube tier: {why}")


@dataclasses.dataclass
class Kube:
    """The running control plane.

    Attributes:
        kubeconfig: admin kubeconfig (client certificate in ``system:masters``), mode 0600.
        bin: folder with ``kubectl`` and the other binaries.
        state: the cluster's state folder (pki/, logs/, audit.log).
        env: the exports ``cluster.sh up`` printed.
    """

    kubeconfig: str
    bin: Path
    state: Path
    env: dict[str, str]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the cluster; ``check`` raises with its stderr on a non-zero exit."""
        proc = subprocess.run([str(self.bin / "kubectl"), "--kubeconfig", kubeconfig or self.kubeconfig, *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def apply(self, *objs: dict[str, Any], namespace: str | None = None) -> None:
        """``kubectl apply`` (server-side) of plain dicts."""
        args = ["apply", "--server-side", "--force-conflicts", "-f", "-"]
        if namespace:
            args[1:1] = ["-n", namespace]
        self.kubectl(*args, input=yaml.safe_dump_all(objs))

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as JSON, or ``None`` when it does not exist."""
        args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
        proc = self.kubectl(*args, check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise AssertionError(proc.stderr)
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    def wait_until(self, what: str, check: Any, timeout: float = 60.0, interval: float = 0.3) -> Any:
        """Poll ``check()`` until it returns a truthy value; fail naming ``what`` after ``timeout``."""
        end = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    def token_kubeconfig(self, folder: Path, namespace: str, serviceaccount: str) -> str:
        """A kubeconfig (mode 0600) that authenticates as ``serviceaccount`` with a bound token
        from the TokenRequest API (``kubectl create token``)."""
        token = self.kubectl("create", "token", serviceaccount, "-n", namespace, "--duration", "1h").stdout.strip()
        cfg = yaml.safe_load(Path(self.kubeconfig).read_text())
        cfg["users"] = [{"name": serviceaccount, "user": {"token": token}}]
        cfg["contexts"][0]["context"] = {"cluster": cfg["clusters"][0]["name"], "user": serviceaccount,
                                         "namespace": namespace}
        path = folder / f"{serviceaccount}.kubeconfig"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(cfg, fh)
        return str(path)


def _parse_exports(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = value
    return env


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """``cluster.sh up`` once per session (``down`` at the end, only if this session started it).

    The state folder is ``$K8SDDP_KUBE_STATE`` when set (a cluster already running there, from
    ``eval "$(tests/kube/cluster.sh up)"``, is used and left running), else a fresh temporary one.
    """
    if shutil.which("bash") is None:
        _unavailable("bash not found")
    missing = [b for b in BINARIES if not (CACHE / "bin" / b).is_file()]
    if missing and not REQUIRE:
        _unavailable(f"{', '.join(missing)} not built in {CACHE}/bin (run `bash tests/kube/cluster.sh build`, "
                     "a cold build takes long, or set K8SDDP_REQUIRE_KUBE=1)")
    if missing and shutil.which("go") is None:
        _unavailable("Go is not installed (Go >= 1.26 builds the control plane from the module proxy)")
    state = Path(os.environ.get("K8SDDP_KUBE_STATE") or tmp_path_factory.mktemp("kube-state"))
    env = {**os.environ, "K8SDDP_KUBE_STATE": str(state)}
    running = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, env=env,
                             timeout=60).returncode == 0
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        _unavailable(f"`cluster.sh up` failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    exports = _parse_exports(proc.stdout)
    started = not running
    print(f"\nkube tier: cluster.sh up took {time.monotonic() - t0:.1f}s" + ("" if started else " (already running)"))
    try:
        yield Kube(kubeconfig=exports["KUBECONFIG"], bin=Path(exports["K8SDDP_KUBE_BIN"]),
                   state=Path(exports["K8SDDP_KUBE_STATE"]), env=exports)
    finally:
        if started:
            subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace for one test (deleted afterwards, without waiting)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", name)
    kube.wait_until(f"serviceaccount default in {name}",
                    lambda: kube.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def k(cli: Any, kube: Kube, *args: str, kubeconfig: str | None = None) -> Any:
    """``k8sddp SUBCOMMAND --kubeconfig ... ARGS...`` in-process."""
    return cli(args[0], "--kubeconfig", kubeconfig or kube.kubeconfig, *args[1:])
