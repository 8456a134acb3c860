"""What submit reads: specs from stdin, broken inputs, flags that do not fit, kubeconfig discovery."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import REPO
from tests.cluster.fakeapi import FakeApiServer


def test_spec_from_stdin(cli, api: FakeApiServer, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO((REPO / "examples" / "ddpjob.yaml").read_text()))
    res = cli("submit", "--kubeconfig", str(kubeconfig), "--set", "spec.nodes=3", "-o", "name", "-")
    assert res.code == 0, res.err
    job = api.jobs("default")[0]  # the spec names namespace default
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


def test_broken_inputs(cli, tmp_path: Path, kubeconfig: Path, manifest: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: PyTorchJob\nmetadata: {name: [unclosed\n")
    res = cli("submit", "--kubeconfig", str(kubeconfig), str(bad))
    assert res.code == 1 and "bad.yaml" in res.err and "Traceback" not in res.err
    res = cli("submit", "--kubeconfig", str(kubeconfig), str(tmp_path / "missing.yaml"))
    assert res.code == 2 and "no such file" in res.err
    cm_only = tmp_path / "cm.yaml"
    cm_only.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n")
    res = cli("submit", "--kubeconfig", str(kubeconfig), str(cm_only))
    assert res.code == 2 and "no PyTorchJob in the input" in res.err
    res = cli("submit", "--kubeconfig", str(kubeconfig), "--set", "spec.nodes=3", str(manifest))
    assert res.code == 2 and "--set applies to DDPJob specs" in res.err
    res = cli("submit", "--kubeconfig", str(kubeconfig), "-", "-")
    assert res.code == 2
    res = cli("submit", "--kubeconfig", str(kubeconfig), "--dry-run=server", "--wait", str(manifest))
    assert res.code == 2
    res = cli("submit", "--local", "--dry-run=server", str(manifest))
    assert res.code == 2


def test_kubeconfig_from_the_environment(cli, api: FakeApiServer, kubeconfig: Path, manifest: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", f"/nonexistent/config:{kubeconfig}")
    res = cli("submit", str(manifest))
    assert res.code == 0, res.err
    assert api.jobs("ml")


def test_client_dry_run_without_any_cluster(cli, tmp_path: Path, manifest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    res = cli("submit", "--dry-run=client", str(manifest))
    assert res.code == 0, res.err
    res = cli("submit", str(manifest))
    assert res.code == 2 and "no cluster configured" in res.err


def test_wrong_token_is_unauthorized(cli, api: FakeApiServer, tmp_path: Path, manifest: Path) -> None:
    config = api.write_kubeconfig(tmp_path / "kc", token="wrong")
    res = cli("submit", "--kubeconfig", str(config), str(manifest))
    assert res.code == 3 and "unauthorized" in res.err


@pytest.mark.parametrize("text, expected", [
    ("this: is: not: yaml: [\n", "is not valid YAML (line 1"),
    ("just a string\n", "is a str, not a mapping"),
    ("- a\n- b\n", "is a list, not a mapping"),
])
def test_kubeconfig_that_is_not_a_yaml_mapping(cli, tmp_path: Path, manifest: Path, text: str, expected: str) -> None:
    kc = tmp_path / "kc"
    kc.write_text(text)
    for argv in (("submit", "--kubeconfig", str(kc), str(manifest)), ("status", "--kubeconfig", str(kc), "demo"),
                 ("logs", "--kubeconfig", str(kc), "demo"), ("delete", "--kubeconfig", str(kc), "demo")):
        res = cli(*argv)
        assert res.code == 2, (argv, res.err)
        assert expected in res.err and "Traceback" not in res.err
        assert len(res.err.strip().splitlines()) == 1, res.err
