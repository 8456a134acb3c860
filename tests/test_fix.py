"""``k8sddp fix``: real manifests in, minimal in-place edits out; idempotent, atomic, never on broken input."""

from __future__ import annotations

import difflib
import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from k8sddp.cli import main
from k8sddp.fix import fix_text

KUBEFLOW = Path(__file__).resolve().parents[2] / "shared" / "reference" / "kubeflow" / "examples"

# Kubeflow's own style, mixed in one file: env items at the key's column, command items indented.
MIXED = """\
apiVersion: "kubeflow.org/v1"
kind: PyTorchJob
metadata:
  name: elastic-example-echo   # the name
spec:
  elasticPolicy:
    rdzvBackend: c10d
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: 'ghcr.io/example/echo:latest'
              env:
              - name: LOGLEVEL
                value: DEBUG
              command:
                - python
                - -m
                - torch.distributed.run
"""


def _pytorch_envs(text: str) -> list[dict[str, str]]:
    """Env of every replica's pytorch container, as name -> value dicts."""
    out = []
    for doc in yaml.safe_load_all(text):
        if not doc or doc.get("kind") != "PyTorchJob":
            continue
        for rspec in doc["spec"]["pytorchReplicaSpecs"].values():
            for c in rspec["template"]["spec"]["containers"]:
                if c["name"] == "pytorch":
                    out.append({e["name"]: e.get("value") for e in c.get("env", [])})
    return out


def _only_insertions(old: str, new: str) -> bool:
    ops = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False).get_opcodes()
    return all(tag in ("equal", "insert") for tag, *_ in ops)


def test_mixed_styles_kept_and_only_lines_added() -> None:
    r = fix_text(MIXED, file="echo.yaml")
    assert r.changed and r.error is None and r.jobs == 1
    assert _only_insertions(MIXED, r.fixed)
    assert "              - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n                value: \"3\"\n" in r.fixed
    assert "# the name" in r.fixed and "'ghcr.io/example/echo:latest'" in r.fixed
    assert _pytorch_envs(r.fixed) == [
        {"LOGLEVEL": "DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "1"}]
    again = fix_text(r.fixed, file="echo.yaml")
    assert not again.changed and not [n for n in again.notes if n.changed]


@pytest.mark.skipif(not KUBEFLOW.is_dir(), reason="../shared/reference/kubeflow absent")
@pytest.mark.parametrize("profile", ["baseline", "strict"])
def test_kubeflow_examples(profile: str) -> None:
    seen = 0
    for path in sorted(KUBEFLOW.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        r = fix_text(text, file=path.name, profile=profile)
        assert r.error is None, path
        if not r.jobs:
            assert not r.changed, path  # etcd.yaml: Pods and Services are not touched
            continue
        seen += 1
        assert r.changed and _only_insertions(text, r.fixed), path
        for env in _pytorch_envs(r.fixed):
            assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3" and env["PYTHONFAULTHANDLER"] == "1"
            if profile == "strict":
                assert env["K8SDDP_PG_TIMEOUT_SECONDS"] == "1800"
                assert env["K8SDDP_WATCHDOG_TIMEOUT_SECONDS"] == "300"
                assert env["K8SDDP_MAX_HANG_RESTARTS"] == "3"
        assert not fix_text(r.fixed, file=path.name, profile=profile).changed, path
    assert seen >= 8


JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: j, namespace: ml}}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: pytorch
            image: img
            env:
{env}
"""


@pytest.mark.parametrize(
    ("env", "expected", "changed"),
    [
        # unsafe literal values are corrected to the contract's value
        ("            - {name: TORCH_NCCL_ASYNC_ERROR_HANDLING, value: '0'}",
         {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, True),
        ("            - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n              value: '2'",
         {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, True),
        # accepted values are kept; a YAML number (rejected by the API server) becomes a string
        ("            - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n              value: \"1\"",
         {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, False),
        ("            - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n              value: 3",
         {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, True),
        # a legacy-only setup (torch < 2.2 images) is respected, and corrected to 1 when unsafe
        ("            - name: NCCL_ASYNC_ERROR_HANDLING\n              value: \"1\"",
         {"NCCL_ASYNC_ERROR_HANDLING": "1"}, False),
        ("            - name: NCCL_ASYNC_ERROR_HANDLING\n              value: \"0\"",
         {"NCCL_ASYNC_ERROR_HANDLING": "1"}, True),
        # empty faulthandler becomes 1; no value at all too
        ("            - name: PYTHONFAULTHANDLER\n              value: ''",
         {"PYTHONFAULTHANDLER": "1"}, True),
        ("            - name: PYTHONFAULTHANDLER", {"PYTHONFAULTHANDLER": "1"}, True),
        ("            - name: PYTHONFAULTHANDLER\n              value: \"yes please\"",
         {"PYTHONFAULTHANDLER": "yes please"}, False),
        # a plain string is left as written; a YAML 1.1 boolean is made a string
        ("            - name: PYTHONFAULTHANDLER\n              value: enabled",
         {"PYTHONFAULTHANDLER": "enabled"}, False),
        ("            - name: PYTHONFAULTHANDLER\n              value: yes",
         {"PYTHONFAULTHANDLER": "yes"}, True),
    ],
)
def test_existing_values(env: str, expected: dict[str, str], changed: bool) -> None:
    text = JOB.format(env=env)
    r = fix_text(text)
    got = _pytorch_envs(r.fixed)[0]
    for k, v in expected.items():
        assert got[k] == v
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in got or "NCCL_ASYNC_ERROR_HANDLING" not in got
    assert got.get("PYTHONFAULTHANDLER")
    value_notes = [n for n in r.notes if n.changed and n.text.startswith("set ")]
    assert bool(value_notes) is changed
    assert not fix_text(r.fixed).changed


def test_value_from_is_left_alone() -> None:
    env = ("            - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n              valueFrom:\n"
           "                configMapKeyRef: {name: c, key: k}")
    r = fix_text(JOB.format(env=env))
    doc = yaml.safe_load(r.fixed)
    entries = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    assert entries[0] == {"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                          "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
    assert any(not n.changed and "valueFrom" in n.text for n in r.notes)


def test_multi_document_aliases_and_other_kinds() -> None:
    text = """\
# leading comment
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {A: "1"}
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: shared
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: &t
        spec:
          containers:
            - name: helper
              image: busybox
            - name: pytorch
              image: img   # trailing comment
    Worker:
      replicas: 4
      template: *t
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
        - name: pytorch
          image: img
"""
    r = fix_text(text, profile="baseline")
    assert r.jobs == 1 and _only_insertions(text, r.fixed)
    docs = list(yaml.safe_load_all(r.fixed))
    assert docs[0] == yaml.safe_load(text.split("---")[0])
    assert docs[2] == list(yaml.safe_load_all(text))[2]  # a Deployment is not a PyTorchJob
    envs = _pytorch_envs(r.fixed)
    assert len(envs) == 2 and envs[0] == envs[1] == {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "1"}
    assert r.fixed.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 1  # the anchored template, once
    helper = docs[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert "env" not in helper


def test_json_manifest_stays_json() -> None:
    text = json.dumps({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "x", "env": []}]}}}}}}, indent=2) + "\n"
    r = fix_text(text, file="j.json", profile="strict")
    data = json.loads(r.fixed)
    c = data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert {e["name"] for e in c["containers"][0]["env"]} >= {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER", "K8SDDP_PG_TIMEOUT_SECONDS"}
    assert c["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert c["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert not fix_text(r.fixed, profile="strict").changed


def test_crlf_bom_and_missing_final_newline_kept() -> None:
    text = "\ufeff" + MIXED.replace("\n", "\r\n").rstrip("\r\n")
    r = fix_text(text)
    assert r.fixed.startswith("\ufeff")
    assert "\n" not in r.fixed.replace("\r\n", "")  # every line ending is still CRLF
    assert _pytorch_envs(r.fixed.lstrip("\ufeff"))[0]["PYTHONFAULTHANDLER"] == "1"
    assert not fix_text(r.fixed).changed


STRICT = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: big
spec:
  runPolicy:
    cleanPodPolicy: None
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env:
                - name: TORCH_NCCL_ENABLE_MONITORING
                  value: "0"
              volumeMounts:
                - name: data
                  mountPath: /data
                  readOnly: true
                - name: ckpt
                  mountPath: /ckpt/
          volumes:
            - name: data
              persistentVolumeClaim: {claimName: data}
            - name: ckpt
              persistentVolumeClaim:
                claimName: ckpt
            - name: dshm
              configMap: {name: taken-name}
"""


def test_strict_profile_adds_storage_backed_paths_and_shm() -> None:
    r = fix_text(STRICT, profile="strict")
    assert _only_insertions(STRICT.replace('value: "0"', 'value: "1"'), r.fixed)
    doc = yaml.safe_load(r.fixed)
    pod = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["TORCH_NCCL_ENABLE_MONITORING"] == "1"
    assert env["K8SDDP_ARTIFACT_DIR"] == "/ckpt/k8sddp"  # the writable PVC, not the read-only one
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == "/ckpt/k8sddp/fr/rank-"
    assert pod["volumes"][-1] == {"name": "dshm-1", "emptyDir": {"medium": "Memory"}}
    assert pod["containers"][0]["volumeMounts"][-1] == {"name": "dshm-1", "mountPath": "/dev/shm"}
    assert "activeDeadlineSeconds" not in doc["spec"]["runPolicy"]
    assert any(n.rule_id == "KDP308" and not n.changed for n in r.notes)

    r2 = fix_text(STRICT, profile="strict", active_deadline_seconds=86400)
    assert yaml.safe_load(r2.fixed)["spec"]["runPolicy"] == {
        "cleanPodPolicy": "None", "activeDeadlineSeconds": 86400}
    assert not fix_text(r2.fixed, profile="strict", active_deadline_seconds=86400).changed

    no_policy = STRICT.replace("  runPolicy:\n    cleanPodPolicy: None\n", "")
    r3 = fix_text(no_policy, profile="strict", active_deadline_seconds=3600)
    assert yaml.safe_load(r3.fixed)["spec"]["runPolicy"] == {"activeDeadlineSeconds": 3600}


def test_strict_without_pvc_or_with_env_from_leaves_notes() -> None:
    text = JOB.format(env="            - {name: A, value: b}").replace(
        "            env:\n", "            envFrom:\n            - configMapRef: {name: guards}\n            env:\n")
    r = fix_text(text, profile="strict")
    env = _pytorch_envs(r.fixed)[0]
    assert "K8SDDP_PG_TIMEOUT_SECONDS" not in env  # a ConfigMap may set it; env would override it
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    left = {n.rule_id for n in r.notes if not n.changed}
    assert {"KDP301", "KDP302", "KDP303", "KDP304", "KDP305", "KDP308"} <= left


@pytest.mark.parametrize(
    ("text", "rule", "line"),
    [
        ("apiVersion: v1\nkind: PyTorchJob\nspec: [unclosed\n", "KDP001", 4),
        ("kind: PyTorchJob\nkind: Pod\n", "KDP002", 2),
        ("a: {{ .Values.x }}\n", "KDP010", 1),
    ],
)
def test_unparseable_is_a_finding(text: str, rule: str, line: int) -> None:
    r = fix_text(text, file="bad.yaml")
    assert r.error is not None and r.error.rule_id == rule and r.error.line == line
    assert r.fixed == text


# -- the command --------------------------------------------------------------------------------


def test_cli_check_fix_idempotent_and_mode_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "job.yaml"
    f.write_text(MIXED, encoding="utf-8")
    f.chmod(0o640)
    other = tmp_path / "sub" / "svc.yml"
    other.parent.mkdir()
    other.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", encoding="utf-8")

    assert main(["fix", "--check", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"--- a/{f.as_posix().lstrip('/')}\n+++ b/")
    assert "+              - name: TORCH_NCCL_ASYNC_ERROR_HANDLING" in out
    assert "would fix KDP201" in err and "1 file(s) would change" in err
    assert f.read_text(encoding="utf-8") == MIXED  # --check writes nothing

    assert main(["fix", str(f), str(other)]) == 0
    out, _ = capsys.readouterr()
    assert "fixed KDP202" in out and "1 file(s) changed" in out
    fixed = f.read_text(encoding="utf-8")
    assert fixed == fix_text(MIXED).fixed
    assert stat.S_IMODE(f.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left

    before = f.stat().st_mtime_ns
    assert main(["fix", "--check", str(f)]) == 0
    assert main(["fix", str(f)]) == 0
    assert f.stat().st_mtime_ns == before  # nothing to do: not even rewritten


def test_cli_follows_symlinks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real.yaml"
    real.write_text(MIXED, encoding="utf-8")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    assert main(["fix", str(link)]) == 0
    assert link.is_symlink() and "PYTHONFAULTHANDLER" in real.read_text(encoding="utf-8")


def test_cli_never_touches_unparseable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(MIXED, encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad_text = MIXED + "  broken: [\n"
    bad.write_text(bad_text, encoding="utf-8")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"kind: PyTorchJob\nname: caf\xe9\n")
    assert main(["fix", str(tmp_path)]) == 1
    _, err = capsys.readouterr()
    assert f"{bad}:24:" in err and "KDP001" in err and "left unchanged" in err
    assert "latin.yaml:2:10: error KDP001 not UTF-8 text (byte 0xe9 at offset 26)" in err  # first bad byte
    assert bad.read_text(encoding="utf-8") == bad_text
    assert latin.read_bytes() == b"kind: PyTorchJob\nname: caf\xe9\n"
    assert "PYTHONFAULTHANDLER" in good.read_text(encoding="utf-8")  # the others are still fixed


def test_cli_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fix", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    f = tmp_path / "j.yaml"
    f.write_text(MIXED, encoding="utf-8")
    assert main(["fix", "--active-deadline-seconds", "60", str(f)]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["fix", "--profile", "strict", "--active-deadline-seconds", "0", str(f)])
    assert exc.value.code == 2
    assert f.read_text(encoding="utf-8") == MIXED


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_cli_unwritable_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "j.yaml"
    f.write_text(MIXED, encoding="utf-8")
    tmp_path.chmod(0o555)
    try:
        assert main(["fix", str(f)]) == 2
    finally:
        tmp_path.chmod(0o755)
    assert f.read_text(encoding="utf-8") == MIXED


def test_fixed_manifests_pass_validate() -> None:
    validate = pytest.importorskip("k8sddp.validate", reason="k8sddp.validate not merged yet")
    r = fix_text(MIXED)
    before = {f.rule_id for f in validate.validate_text(MIXED, file="echo.yaml").findings}
    after = {f.rule_id for f in validate.validate_text(r.fixed, file="echo.yaml").findings}
    assert {"KDP201", "KDP202"} <= before
    assert not {"KDP201", "KDP202"} & after


def test_self_check_refuses_a_wrong_splice(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """If the splicer ever produced other data than planned, nothing would be written."""
    import k8sddp.fix as fixmod

    real = fixmod.apply_edits
    monkeypatch.setattr(fixmod, "apply_edits",
                        lambda text, edits, style, **kw: real(text, edits, style, **kw).replace('value: "3"', 'value: "0"'))
    f = tmp_path / "j.yaml"
    f.write_text(MIXED, encoding="utf-8")
    assert main(["fix", str(f)]) == 1
    assert "unexpected data; file left unchanged" in capsys.readouterr().err
    assert f.read_text(encoding="utf-8") == MIXED
