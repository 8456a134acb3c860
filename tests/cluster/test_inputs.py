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
    assert res.code == 2 and "no PyTorchJob or TrainJob in the input" in res.err
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


@pytest.mark.parametrize("flags", [
    ("--restart-backoff", "-5"), ("--restart-backoff", "nan"), ("--restart-backoff", "inf"),
    ("--restart-backoff", "x"), ("--timeout", "nan"), ("--timeout", "inf"), ("--timeout", "-1"),
    ("--timeout", "0"), ("--max-restarts", "-1"), ("--max-restarts", "1.5"),
])
def test_bad_numeric_flags_are_usage_errors(cli, tmp_path: Path, manifest: Path, flags: tuple[str, str]) -> None:
    res = cli("submit", "--local", "--local-dir", str(tmp_path / "run"), *flags, str(manifest))
    assert res.code == 2 and flags[0] in res.err, res.err
    assert not (tmp_path / "run").exists()  # refused before anything ran


def test_local_options_are_checked_by_the_runner_too(tmp_path: Path) -> None:
    from k8sddp.errors import UsageError
    from k8sddp.local.runner import LocalJob, LocalOptions

    for opts in ({"restart_backoff": float("nan")}, {"restart_backoff": -1.0}, {"timeout": float("inf")}):
        with pytest.raises(UsageError):
            LocalJob({"metadata": {"name": "x"}, "spec": {}}, configmaps=[],
                     options=LocalOptions(local_dir=str(tmp_path / "run"), **opts))  # type: ignore[arg-type]


def _two_jobs(tmp_path: Path, first: str, second: str) -> Path:
    import yaml

    from tests.cluster.conftest import rendered_demo

    docs = []
    for name in (first, second):
        job = rendered_demo()
        job["metadata"]["name"] = name
        docs.append(job)
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_same_job_twice_is_refused_before_anything_is_created(cli, api: FakeApiServer, tmp_path: Path,
                                                              kubeconfig: Path) -> None:
    path = _two_jobs(tmp_path, "dupx", "dupx")
    for extra in ((), ("--dry-run=client",), ("--local", "--local-dir", str(tmp_path / "run"))):
        res = cli("submit", "--kubeconfig", str(kubeconfig), *extra, str(path))
        assert res.code == 2 and 'job "dupx" appears twice in the input' in res.err, (extra, res.err)
    assert api.jobs() == [] and not (tmp_path / "run").exists()


def test_failure_part_way_names_the_jobs_already_created(cli, api: FakeApiServer, tmp_path: Path,
                                                         kubeconfig: Path) -> None:
    from tests.cluster.conftest import rendered_demo

    api.put_job({**rendered_demo(), "metadata": {"name": "second", "namespace": "ml"}})
    res = cli("submit", "--kubeconfig", str(kubeconfig), str(_two_jobs(tmp_path, "first", "second")))
    assert res.code == 3 and "already exists" in res.err
    assert "pytorchjob.kubeflow.org/first created" in res.out
    assert "1 job(s) before the failure were created and stay: first" in res.err
    assert sorted(j["metadata"]["name"] for j in api.jobs("ml")) == ["first", "second"]


def test_local_refuses_cluster_flags_and_checks_the_namespace(cli, tmp_path: Path, kubeconfig: Path) -> None:
    spec = str(REPO / "examples" / "ddpjob.yaml")  # says namespace default
    run_dir = str(tmp_path / "run")
    for flags in (("--kubeconfig", str(kubeconfig)), ("--context", "nope")):
        res = cli("submit", "--local", "--local-dir", run_dir, *flags, spec)
        assert res.code == 2 and "do not apply" in res.err and flags[0] in res.err
    res = cli("submit", "--local", "--local-dir", run_dir, "-n", "other", spec)
    assert res.code == 2 and "--set metadata.namespace=other" in res.err
    assert not (tmp_path / "run").exists()


def test_submit_says_where_a_job_went_outside_the_context_namespace(cli, api: FakeApiServer, kubeconfig: Path) -> None:
    res = cli("submit", "--kubeconfig", str(kubeconfig), str(REPO / "examples" / "ddpjob.yaml"))
    assert res.code == 0, res.err
    assert api.jobs("default") and not api.jobs("ml")
    assert 'note: created in namespace default (named in the input), not in "ml": pass -n default' in res.err
    res = cli("submit", "--kubeconfig", str(kubeconfig), "-n", "team", str(REPO / "examples" / "ddpjob.yaml"))
    assert res.code == 2 and "--set metadata.namespace=team" in res.err


def test_nits_skipped_objects_note_help_text_and_wording(cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from k8sddp.local.policy import Messages
    from tests.cluster.conftest import rendered_demo

    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "b"}},
        rendered_demo(),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}, "spec": {"ports": [{"port": 1}]}},
    ]))
    for flags in (("--dry-run=client",), ("--local", "--dry-run=client")):
        res = cli("submit", *flags, str(mixed))
        assert res.code == 0, res.err
        assert "note: submit creates PyTorchJobs and TrainJobs" in res.err and "ConfigMap/cm" in res.err and "svc" in res.err
    res = cli("submit", "--help")
    assert "``" not in res.out and ":mod:" not in res.out
    assert "after 1 pod restart (" in Messages("x").local_cap(1)[1]
    assert "after 3 pod restarts (" in Messages("x").local_cap(3)[1]


def test_plain_timestamp_is_a_string_as_the_api_server_reads_it(cli, tmp_path: Path, manifest: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A date label used to crash submit's validation (ValueError: Unsupported type: 'date').
    monkeypatch.setenv("HOME", str(tmp_path))
    job = tmp_path / "job.yaml"
    import yaml

    doc = yaml.safe_load(manifest.read_text())
    doc["metadata"].setdefault("labels", {})["created"] = "DATE_HERE"
    job.write_text(yaml.safe_dump(doc).replace("DATE_HERE", "2024-01-01"))
    assert "created: 2024-01-01\n" in job.read_text()
    res = cli("submit", "--dry-run=client", str(job))
    assert res.code == 0, res.err
