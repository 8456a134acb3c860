"""``k8sddp validate`` driven in-process: exit codes (../shared/CONTRACT.md), formats, stdin,
folders, exemptions, ConfigMaps across files, and the multi-process path."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from ..conftest import CliResult

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOOD = FIXTURES / "KDP201" / "pass" / "value-one.yaml"  # fully guarded, strict-clean
UNGUARDED = FIXTURES / "KDP201" / "fail" / "missing-plain.yaml"  # KDP201 at lines 21 and 34 (baseline)
BROKEN = FIXTURES / "KDP001" / "fail" / "unclosed-flow-sequence.yaml"
ENVFROM_JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: envfrom
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/acme/train:1
            envFrom:
            - configMapRef:
                name: nccl-defaults
"""
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: nccl-defaults
data:
  TORCH_NCCL_ASYNC_ERROR_HANDLING: "3"
  PYTHONFAULTHANDLER: "1"
"""


def _json(res: CliResult) -> dict:
    return json.loads(res.out)


# -- exit codes ------------------------------------------------------------------------------------


def test_clean_manifest_exits_0(cli) -> None:
    res = cli("validate", "--profile", "strict", str(GOOD))
    assert res.code == 0, res.out
    assert "0 error(s)" in res.out and res.err == ""


def test_findings_exit_1_with_located_text(cli) -> None:
    res = cli("validate", str(UNGUARDED))
    assert res.code == 1
    lines = [line for line in res.out.splitlines() if " KDP201 " in line]
    assert len(lines) == 2
    assert lines[0].startswith(f"{UNGUARDED}:21:15: error KDP201 [spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env]")
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING is not set" in lines[0]


def test_missing_file_exits_2(cli, tmp_path: Path) -> None:
    res = cli("validate", str(GOOD), str(tmp_path / "nope.yaml"))
    assert res.code == 2
    assert "nope.yaml" in res.err and "no such file" in res.err


def test_unreadable_file_exits_2(cli, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    path = tmp_path / "secret.yaml"
    path.write_text("a: 1\n")
    path.chmod(0)
    assert cli("validate", str(path)).code == 2


def test_unparseable_manifest_is_a_located_finding_not_a_usage_error(cli) -> None:
    res = cli("validate", str(BROKEN))
    assert res.code == 1
    assert f"{BROKEN}:95:16: error KDP001" in res.out


@pytest.mark.parametrize(
    "args",
    [["--bogus"], ["--profile", "paranoid"], ["--format", "xml"], ["--jobs"], []],
    ids=["unknown-flag", "unknown-profile", "unknown-format", "missing-value", "no-path"],
)
def test_usage_errors_exit_2(cli, args: list[str]) -> None:
    res = cli("validate", *args, *([str(GOOD)] if args and args != ["--jobs"] else []))
    assert res.code == 2
    assert res.err


# -- formats ---------------------------------------------------------------------------------------


def test_json_format(cli) -> None:
    res = cli("validate", "--format", "json", str(UNGUARDED), str(GOOD))
    assert res.code == 1
    doc = _json(res)
    assert doc["summary"]["files"] == 2 and doc["summary"]["checked"] == 2 and doc["summary"]["errors"] == 2
    first = doc["findings"][0]
    assert first["rule_id"] == "KDP201" and first["severity"] == "error"
    assert first["file"] == str(UNGUARDED) and first["line"] == 21 and first["column"] == 15
    assert first["path"] == "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env"
    assert first["object_ref"] == "PyTorchJob/mnist-gloo"


def test_github_format(cli) -> None:
    res = cli("validate", "--format", "github", str(UNGUARDED))
    assert res.code == 1
    lines = res.out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"::error file={UNGUARDED},line=21,col=15,title=KDP201::")
    assert "[spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env]" in lines[0]


# -- stdin, folders, kinds ---------------------------------------------------------------------------


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_stdin(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _stdin(monkeypatch, UNGUARDED.read_bytes())
    res = cli("validate", "--format", "json", "-")
    assert res.code == 1
    assert {(f["file"], f["line"]) for f in _json(res)["findings"]} == {("<stdin>", 21), ("<stdin>", 34)}


def test_stdin_with_configmap_in_a_file(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "cm.yaml").write_text(CONFIGMAP)
    _stdin(monkeypatch, ENVFROM_JOB.encode())
    assert cli("validate", "-", str(tmp_path / "cm.yaml")).code == 0


def test_stdin_not_utf8_is_a_finding(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _stdin(monkeypatch, b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: caf\xe9}\n")
    res = cli("validate", "-")
    assert res.code == 1 and "<stdin>:3:" in res.out and "KDP001" in res.out


def test_folder_is_recursive_and_counts_skipped_kinds(cli, tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    shutil.copy(UNGUARDED, tmp_path / "a" / "b" / "job.yml")
    shutil.copy(GOOD, tmp_path / "a" / "good.yaml")
    (tmp_path / "svc.json").write_text(json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}))
    (tmp_path / "a" / "deploy.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: t}\n"
    )
    (tmp_path / ".git" / "hidden.yaml").write_text("not: [valid\n")  # hidden folders are skipped
    (tmp_path / "notes.txt").write_text("not: [valid\n")  # other suffixes are skipped
    res = cli("validate", "--format", "json", str(tmp_path))
    summary = _json(res)["summary"]
    assert res.code == 1
    assert summary["files"] == 4 and summary["checked"] == 2
    assert summary["skipped"] == {"Deployment": 1, "Service": 2}
    assert {Path(f["file"]).name for f in _json(res)["findings"]} == {"job.yml"}
    text = cli("validate", str(tmp_path)).out
    assert "skipped 3 (Deployment 1, Service 2)" in text


def test_configmap_in_another_file_resolves_envfrom(cli, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(ENVFROM_JOB)
    assert cli("validate", str(tmp_path / "job.yaml")).code == 1  # alone: cannot be verified
    (tmp_path / "zz-configmap.yaml").write_text(CONFIGMAP)
    assert cli("validate", str(tmp_path)).code == 0
    (tmp_path / "zz-configmap.yaml").write_text(CONFIGMAP.replace("  name: nccl-defaults\n", "  name: nccl-defaults\n  namespace: other\n"))
    assert cli("validate", str(tmp_path)).code == 1  # another namespace does not count


# -- exemptions ------------------------------------------------------------------------------------


def test_annotation_exemption_is_reported_not_silent(cli) -> None:
    path = FIXTURES / "KDP005" / "pass" / "reason-given.yaml"
    res = cli("validate", str(path))
    assert res.code == 0
    exempted = [line for line in res.out.splitlines() if "KDP201" in line]
    assert len(exempted) == 2
    assert all("exempted (annotation: image pins torch 2.1" in line for line in exempted)
    assert "2 exempted" in res.out
    doc = _json(cli("validate", "--format", "json", str(path)))
    assert doc["summary"]["exempted"] == 2 and doc["summary"]["errors"] == 0
    assert all(f["exempted_by"].startswith("annotation:") for f in doc["findings"])
    github = cli("validate", "--format", "github", str(path)).out
    assert github.count("::notice ") == 2


def test_exemption_without_reason_is_kdp005_and_not_applied(cli) -> None:
    res = cli("validate", "--format", "json", str(FIXTURES / "KDP005" / "fail" / "no-reason.yaml"))
    assert res.code == 1
    rules = sorted(f["rule_id"] for f in _json(res)["findings"] if not f["exempted_by"])
    assert rules == ["KDP005", "KDP201", "KDP201"]


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "k8sddp.yaml"
    path.write_text(text)
    return str(path)


def test_config_exempts_paths_and_is_reported(cli, tmp_path: Path) -> None:
    (tmp_path / "legacy").mkdir()
    shutil.copy(UNGUARDED, tmp_path / "legacy" / "old.yaml")
    shutil.copy(UNGUARDED, tmp_path / "new.yaml")
    config = _config(tmp_path, "exemptions:\n- paths: ['legacy/*']\n  rules: [KDP201]\n  reason: migrating in Q3\n")
    res = cli("validate", "--config", config, "--format", "json", str(tmp_path / "legacy"), str(tmp_path / "new.yaml"))
    assert res.code == 1  # new.yaml is not exempted
    by_file = {(Path(f["file"]).name, f["exempted_by"]) for f in _json(res)["findings"]}
    assert by_file == {("old.yaml", "config: migrating in Q3"), ("new.yaml", "")}
    res = cli("validate", "--config", config, str(tmp_path / "legacy"))
    assert res.code == 0 and "exempted (config: migrating in Q3)" in res.out


def test_config_sets_the_default_profile(cli, tmp_path: Path) -> None:
    plain = FIXTURES / "KDP202" / "pass" / "plain-example.yaml"
    assert cli("validate", str(plain)).code == 0
    config = _config(tmp_path, "profile: strict\n")
    assert cli("validate", "--config", config, str(plain)).code == 1
    assert cli("validate", "--config", config, "--profile", "baseline", str(plain)).code == 0


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("exemptions:\n- paths: ['*']\n  rules: [KDP201]\n", "exemptions.0"),  # no reason
        ("exemptions:\n- paths: ['*']\n  rules: [KDP101]\n  reason: x\n", "exemptions[0].rules"),  # structure rule
        ("profile: paranoid\n", "profile"),
        ("exemptions: [\n", "line 1, column 14"),
        ("bogus: 1\n", "bogus"),
        ("profile: strict\nprofile: baseline\n", "line 2, column 1: while constructing a mapping; found duplicate key 'profile'"),
        ("a: &a [*a]\n", "recursive alias"),
        ("profile: strict\n---\nprofile: baseline\n", "one YAML document"),
    ],
    ids=["no-reason", "structure-rule", "bad-profile", "not-yaml", "unknown-key", "duplicate-key", "recursive", "two-documents"],
)
def test_bad_config_exits_2_with_location(cli, tmp_path: Path, text: str, where: str) -> None:
    res = cli("validate", "--config", _config(tmp_path, text), str(GOOD))
    assert res.code == 2
    assert "k8sddp.yaml" in res.err and where in res.err, res.err


def test_missing_config_exits_2(cli, tmp_path: Path) -> None:
    res = cli("validate", "--config", str(tmp_path / "none.yaml"), str(GOOD))
    assert res.code == 2 and "none.yaml" in res.err


# -- many files, many processes --------------------------------------------------------------------


def test_multiprocess_gives_the_same_findings(cli, tmp_path: Path) -> None:
    fixtures = sorted(FIXTURES.glob("KDP*/*/*.yaml"))
    assert len(fixtures) >= 64
    for i, path in enumerate(fixtures):
        shutil.copy(path, tmp_path / f"{i:03d}-{path.parent.parent.name}-{path.name}")
    (tmp_path / "zz-configmap.yaml").write_text(CONFIGMAP)  # resolves a job of another file
    (tmp_path / "envfrom.yaml").write_text(ENVFROM_JOB)
    one = cli("validate", "--jobs", "1", "--format", "json", str(tmp_path))
    two = cli("validate", "--jobs", "2", "--format", "json", str(tmp_path))
    assert one.code == two.code == 1
    assert _json(one) == _json(two)
    assert _json(one)["summary"]["files"] == len(fixtures) + 2
    assert not [f for f in _json(two)["findings"] if Path(f["file"]).name == "envfrom.yaml"]
