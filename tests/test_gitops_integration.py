"""The pre-commit hook (run through ``pre-commit try-repo``) and the GitHub Action's metadata and script."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
ACTION = REPO / "action.yml"
HOOKS = REPO / ".pre-commit-hooks.yaml"
UNGUARDED = REPO / "examples" / "unguarded-pytorchjob.yaml"

_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_INPUT_REF = re.compile(r"\binputs\.([A-Za-z0-9_-]+)")
_STEP_REF = re.compile(r"\bsteps\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)")
_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _guarded_text() -> str:
    from k8sddp.fix import fix_text

    return fix_text(UNGUARDED.read_text(encoding="utf-8"), file="job.yaml").fixed


# -- action.yml ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def action() -> dict[str, Any]:
    data = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def test_action_metadata_rules(action: dict[str, Any]) -> None:
    """The metadata rules of docs.github.com 'Metadata syntax for GitHub Actions' checkable offline."""
    assert set(action) <= {"name", "author", "description", "inputs", "outputs", "runs", "branding"}
    for key in ("name", "description", "runs"):
        assert action.get(key), f"{key} is required"
    inputs = action.get("inputs", {})
    for input_id, spec in inputs.items():
        assert _ID.match(input_id), f"input id {input_id!r}"
        assert spec.get("description"), f"input {input_id} needs a description"
        assert isinstance(spec.get("default", ""), str), f"input {input_id}: defaults are strings"
    runs = action["runs"]
    assert runs["using"] == "composite"
    steps = runs["steps"]
    assert steps
    seen_ids: set[str] = set()
    for i, step in enumerate(steps):
        assert ("uses" in step) != ("run" in step), f"step {i}: exactly one of uses / run"
        if "run" in step:
            assert step.get("shell") in {"bash", "sh", "pwsh", "python", "cmd", "powershell"}, (
                f"step {i}: composite run steps need a shell")
            # Script injection: inputs reach scripts through env, never pasted into the text.
            assert "${{" not in step["run"], f"step {i}: expression inside run"
        else:
            assert re.match(r"^[\w.-]+/[\w./-]+@[\w.-]+$", step["uses"]), f"step {i}: uses must pin a ref"
        for text in _strings(step):
            for expr in _EXPR.findall(text):
                for name in _INPUT_REF.findall(expr):
                    assert name in inputs, f"step {i} references unknown input {name!r}"
                for sid, _ in _STEP_REF.findall(expr):
                    assert sid in seen_ids, f"step {i} references step {sid!r} before it runs"
        if "id" in step:
            assert _ID.match(step["id"]) and step["id"] not in seen_ids
            seen_ids.add(step["id"])
    for out_id, spec in action.get("outputs", {}).items():
        assert _ID.match(out_id) and spec.get("description")
        assert "value" in spec, f"composite output {out_id} needs a value"
        for sid, _ in _STEP_REF.findall(spec["value"]):
            assert sid in seen_ids, f"output {out_id} references unknown step {sid!r}"
    uploads = [s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    assert len(uploads) == 1 and "sarif_file" in uploads[0]["with"]


def test_action_matches_schemastore_schema(action: dict[str, Any]) -> None:
    """SchemaStore's github-action.json, as vendored (offline) by check-jsonschema."""
    jsonschema = pytest.importorskip("jsonschema")
    cj = pytest.importorskip("check_jsonschema")
    path = Path(cj.__file__).parent / "builtin_schemas" / "vendor" / "github-actions.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(action)]
    assert not errors, errors
    broken = dict(action, runs={"using": "composite", "steps": [{"run": "x", "shell": "bash", "uses": 1}]})
    assert list(validator.iter_errors(broken))  # the schema check has teeth


def _step(action: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in action["runs"]["steps"] if s.get("id") == step_id)


def _run_validate_step(action: dict[str, Any], tmp_path: Path, work: Path,
                       **inputs: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run the Action's validate step with bash as the runner would, k8sddp on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "k8sddp"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m k8sddp "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    pyshim = bindir / "python"  # the Action's `python` is the one pip installed k8sddp into
    pyshim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
    pyshim.chmod(0o755)
    out = tmp_path / "out.txt"
    out.write_text("", encoding="utf-8")
    step = _step(action, "validate")
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO), "GITHUB_OUTPUT": str(out)}
    values = {k: v.get("default", "") for k, v in action["inputs"].items()}
    values.update({k.replace("_", "-"): v for k, v in inputs.items()})
    for name, expr in step["env"].items():
        m = re.fullmatch(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", expr)
        assert m, expr
        env[name] = values[m.group(1)]
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return proc, outputs


def _repo_with_clutter(work: Path, job_text: str) -> None:
    """A repository with one manifest and the usual non-manifest YAML/JSON around it."""
    (work / "deploy").mkdir(parents=True)
    (work / "deploy" / "job.yaml").write_text(job_text, encoding="utf-8")
    clutter = {
        "docker-compose.yml": "services: {web: {image: nginx}}\n",
        "compose.override.yaml": "services: {}\n",
        "renovate.json": '{"extends": ["config:base"]}',
        ".pre-commit-config.yaml": "repos: []\n",
        "package.json": '{"name": "x"}',
        "tsconfig.json": "{}",
        "mkdocs.yml": "site_name: x\n",
        ".github/workflows/ci.yml": "on: push\njobs: {}\n",
        "chart/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n",
        "chart/values-prod.yaml": "replicas: 2\n",
        "chart/templates/job.yaml": "a: {{ .Values.x }}\n",
        "overlays/prod/kustomization.yaml": "resources: [../../deploy]\n",
        "k8sddp.yaml": "profile: baseline\n",
    }
    for rel, text in clutter.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text, encoding="utf-8")


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize(("guarded", "code"), [(True, "0"), (False, "1")])
def test_action_validate_script_runs(action: dict[str, Any], tmp_path: Path, guarded: bool, code: str) -> None:
    """Default paths (.) and excludes: only the manifest is checked, once, and annotated from SARIF."""
    work = tmp_path / "repo"
    _repo_with_clutter(work, _guarded_text() if guarded else UNGUARDED.read_text(encoding="utf-8"))
    proc, outputs = _run_validate_step(action, tmp_path, work)
    assert proc.returncode == 0, proc.stderr
    assert outputs == {"sarif-file": "k8sddp.sarif", "exit-code": code}
    sarif = json.loads((work / "k8sddp.sarif").read_text(encoding="utf-8"))
    assert sarif["runs"][0]["properties"]["files"] == 1  # the clutter was not passed to validate
    results = sarif["runs"][0]["results"]
    assert bool(results) is (not guarded)
    assert "k8sddp: " in proc.stdout and "error(s)" in proc.stdout  # the summary line
    if not guarded:
        assert "::error file=deploy/job.yaml,line=19,col=15,title=KDP201::" in proc.stdout
        assert {r["ruleId"] for r in results} == {"KDP201", "KDP202"}


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize("case", ["missing-path", "nothing-found", "bad-exclude"])
def test_action_exit_2_writes_a_valid_failed_sarif_and_skips_the_upload(
        action: dict[str, Any], tmp_path: Path, case: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    work = tmp_path / "repo"
    _repo_with_clutter(work, UNGUARDED.read_text(encoding="utf-8"))
    inputs = {"missing-path": {"paths": "deploy nonexistent.yaml"},
              "nothing-found": {"paths": "chart"},
              "bad-exclude": {"exclude": "(unclosed"}}[case]
    proc, outputs = _run_validate_step(action, tmp_path, work, **inputs)
    assert proc.returncode == 2 and outputs["exit-code"] == "2"
    assert "::error title=k8sddp::k8sddp validate could not run (exit 2)" in proc.stdout
    sarif = json.loads((work / "k8sddp.sarif").read_text(encoding="utf-8"))
    schema = json.loads((REPO / "tests" / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    jsonschema.validate(sarif, schema)
    [inv] = sarif["runs"][0]["invocations"]
    assert inv["executionSuccessful"] is False and sarif["runs"][0]["results"] == []
    note = inv["toolExecutionNotifications"][0]["message"]["text"]
    assert {"missing-path": "nonexistent.yaml", "nothing-found": "no *.yaml",
            "bad-exclude": "regular expression"}[case] in note
    upload = next(s for s in action["runs"]["steps"] if s.get("uses", "").startswith("github/codeql-action/upload-sarif@"))
    assert "exit-code == '0' || steps.validate.outputs.exit-code == '1'" in upload["if"]


def test_action_runs_validate_once(action: dict[str, Any]) -> None:
    script = _step(action, "validate")["run"]
    assert len(re.findall(r"^\s*k8sddp validate ", script, re.M)) == 1


# -- pre-commit ----------------------------------------------------------------------------------


def test_hook_definitions(action: dict[str, Any]) -> None:
    from k8sddp.ghaction import DEFAULT_EXCLUDE

    hooks = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    by_id = {h["id"]: h for h in hooks}
    hook = by_id["k8sddp-validate"]
    assert hook["entry"] == "k8sddp validate" and hook["language"] == "python"
    assert hook["exclude"] == DEFAULT_EXCLUDE == action["inputs"]["exclude"]["default"]
    files, exclude = re.compile(hook["files"]), re.compile(hook["exclude"])
    wanted = ["deploy/job.yaml", "k8s/train.yml", "jobs/j.json", "deploy/X.YAML", "jobs/compose-train.yaml",
              "deploy/values.json", "deploy/templates.yaml", "charts-ish/job-values.yml.txt.yaml"]
    skipped = [".pre-commit-config.yaml", ".github/workflows/ci.yml", "charts/c/templates/job.yaml",
               "charts/c/values-prod.yaml", "charts/c/values.yaml", "charts/c/Chart.yaml",
               "overlays/prod/kustomization.yaml", "README.md", "docker-compose.yml",
               "svc/docker-compose.prod.yaml", "compose.yaml", "compose.override.yml", "renovate.json",
               "package.json", "web/package-lock.json", "tsconfig.json", "tsconfig.build.json",
               "mkdocs.yml", ".readthedocs.yaml", ".gitlab-ci.yml", "k8sddp.yaml", ".yamllint",
               ".devcontainer/devcontainer.json", "environment.yml"]
    assert [p for p in wanted if not (files.search(p) and not exclude.search(p))] == []
    assert [p for p in skipped if files.search(p) and not exclude.search(p)] == []


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True, timeout=120).stdout


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed snapshot of this working tree (try-repo reads commits, not the work tree)."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    snap = tmp_path_factory.mktemp("k8sddp-snapshot")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (snap / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, snap / rel)
    _git(snap, "init", "-q")
    _git(snap, "add", "-A")
    _git(snap, "commit", "-q", "-m", "snapshot")
    return snap


@pytest.mark.slow
def test_pre_commit_try_repo(hook_repo: Path, tmp_path: Path) -> None:
    """``pre-commit try-repo`` installs k8sddp into its own venv from the snapshot and runs the hook."""
    pre_commit = shutil.which("pre-commit")
    if pre_commit is None:
        pytest.skip("pre-commit not installed")
    sample = tmp_path / "sample"
    (sample / "deploy").mkdir(parents=True)
    (sample / ".github" / "workflows").mkdir(parents=True)
    (sample / "deploy" / "good.yaml").write_text(_guarded_text(), encoding="utf-8")
    (sample / "deploy" / "bad.yaml").write_text(UNGUARDED.read_text(encoding="utf-8"), encoding="utf-8")
    (sample / ".github" / "workflows" / "ci.yml").write_text("on: push\njobs: {}\n", encoding="utf-8")
    (sample / ".pre-commit-config.yaml").write_text("repos: []\n", encoding="utf-8")
    (sample / "docker-compose.yml").write_text("services: {web: {image: nginx}}\n", encoding="utf-8")
    (sample / "renovate.json").write_text('{"extends": ["config:base"]}', encoding="utf-8")
    (sample / "mkdocs.yml").write_text("site_name: x\n", encoding="utf-8")
    _git(sample, "init", "-q")
    _git(sample, "add", "-A")
    _git(sample, "commit", "-q", "-m", "sample")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([pre_commit, "try-repo", str(hook_repo), "k8sddp-validate", *args],
                              cwd=sample, env=env, capture_output=True, text=True, timeout=900)

    good = run("--files", "deploy/good.yaml")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "k8sddp validate" in good.stdout and "Passed" in good.stdout

    bad = run("--files", "deploy/good.yaml", "deploy/bad.yaml")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Failed" in bad.stdout
    assert "deploy/bad.yaml:19:15: error KDP201" in bad.stdout

    # --all-files: CI configs are excluded by the hook's default, only the manifests are checked
    every = run("--all-files")
    assert every.returncode == 1
    assert "ci.yml" not in every.stdout and ".pre-commit-config.yaml:" not in every.stdout
    for clutter in ("docker-compose.yml", "renovate.json", "mkdocs.yml"):
        assert clutter not in every.stdout
    assert "deploy/bad.yaml" in every.stdout


def test_annotations_from_sarif_escape_and_mark_exemptions() -> None:
    from k8sddp.ghaction import annotation_lines

    sarif = {"runs": [{"results": [
        {"ruleId": "KDP201", "level": "error", "message": {"text": "50% of\nranks"},
         "locations": [{"physicalLocation": {"artifactLocation": {"uri": "a%20b/j,1.yaml"},
                                             "region": {"startLine": 3, "startColumn": 7}}}]},
        {"ruleId": "KDP202", "level": "error", "message": {"text": "m"},
         "suppressions": [{"kind": "inSource", "justification": "annotation: legacy image"}],
         "locations": [{"physicalLocation": {"artifactLocation": {"uri": "j.yaml"}, "region": {"startLine": 1}}}]},
    ]}]}
    lines = annotation_lines(sarif)
    assert lines == [
        "::error file=a b/j%2C1.yaml,line=3,col=7,title=KDP201::50%25 of%0Aranks",
        "::notice file=j.yaml,line=1,title=KDP202::exempted (annotation: legacy image): m",
        "k8sddp: 1 error(s), 0 warning(s), 0 note(s), 1 exempted",
    ]
