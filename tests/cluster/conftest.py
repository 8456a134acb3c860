"""Fixtures for cluster tests: a fake API server on loopback, a kubeconfig for it, manifests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.fakeapi import FakeApiServer

REPO = Path(__file__).resolve().parents[2]

try:  # the cluster extra (k8sddp[cluster]); without it these tests cannot run at all
    import kubernetes  # noqa: F401
except ImportError:  # pragma: no cover - depends on the install
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture
def api():
    """A running :class:`FakeApiServer` (stopped after the test)."""
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig for ``api`` whose current context's namespace is ``ml``."""
    return api.write_kubeconfig(tmp_path / "kubeconfig", namespace="ml")


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep retry budgets short so that tests of give-up paths stay quick."""
    monkeypatch.setenv("K8SDDP_API_MAX_ATTEMPTS", "3")
    monkeypatch.setenv("K8SDDP_API_RETRY_BUDGET_SECONDS", "10")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def rendered_demo() -> dict[str, Any]:
    """The bundled example spec rendered by k8sddp.render: a guarded PyTorchJob named demo."""
    from k8sddp.render import load_spec, render_spec

    objs = render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml"))).objects
    job = next(dict(o) for o in objs if o.get("kind") == "PyTorchJob")
    job = copy.deepcopy(job)
    job["metadata"].pop("namespace", None)
    return job


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    """The rendered demo job as a manifest file without a namespace."""
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(rendered_demo()))
    return path
