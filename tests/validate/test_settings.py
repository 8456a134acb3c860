"""The settings that void the guards (KDP213-KDP217): torch's boolean parsing, credential names,
near-misses, and that a credential's value never reaches any output (every reporter, fix's diff)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from k8sddp.reporters import REPORTERS
from k8sddp.validate import validate_paths
from k8sddp.validate.envchecks import is_credential_name, near_miss, torch_bool

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SECRET = "hf_not_a_real_value_123"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", True), ("TRUE", True), ("Yes", True), ("t", True), ("y", True), ("0", False), ("no", False), ("F", False), ("2", None), ("on", None), ("", None)],
)
def test_torch_bool_is_getcvarbool(text: str, expected: bool | None) -> None:
    assert torch_bool(text) is expected


@pytest.mark.parametrize("name", ["HF_TOKEN", "GITHUB_TOKEN", "db_password", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "OPENAI_API_KEY", "SSH_PRIVATE_KEY", "MY_SECRET"])
def test_credential_names(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "SSH_PRIVATE_KEY_PATH", "GCP_ACCESS_KEY_FILE", "NCCL_DEBUG", "SECRETARY", "MAX_TOKENS_X"])
def test_not_credential_names(name: str) -> None:
    assert not is_credential_name(name)


@pytest.mark.parametrize(
    ("name", "guess"),
    [
        ("PYTHONFAULTHANDLR", "PYTHONFAULTHANDLER"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLNG", "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
        ("pythonfaulthandler", "PYTHONFAULTHANDLER"),
        ("TORCH_NCCL_ASYNC_ERROR_HANLDING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
        ("PYTHONFAULTHANDLER", None),
        ("NCCL_ASYNC_ERROR_HANDLING", None),
        ("NCCL_DEBUG", None),
        ("PYTHONUNBUFFERED", None),
    ],
)
def test_near_miss(name: str, guess: str | None) -> None:
    assert near_miss(name) == guess


@pytest.mark.parametrize("fmt", sorted(REPORTERS))
def test_no_reporter_prints_a_credential(fmt: str) -> None:
    path = FIXTURES / "KDP217" / "fail" / "hf-token.yaml"
    assert SECRET in path.read_text()
    report = validate_paths([str(path)], jobs=1)
    assert any(f.rule_id == "KDP217" for f in report.findings)
    assert SECRET not in REPORTERS[fmt](report, tool="validate")


def test_fix_diff_hides_a_credential(tmp_path: Path) -> None:
    # The token sits right above where fix adds the guards: the diff's context would show it.
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: x\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n"
        "      replicas: 1\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n"
        f"          - name: pytorch\n            image: img\n            env:\n            - name: HF_TOKEN\n              value: {SECRET}\n"
    )
    for profile in ("baseline", "strict"):
        done = subprocess.run([sys.executable, "-m", "k8sddp", "fix", "--check", "--profile", profile, str(job)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stderr
        assert "+            - name: PYTHONFAULTHANDLER" in done.stdout
        assert SECRET not in done.stdout + done.stderr
        assert "<hidden: KDP217>" in done.stdout
    assert SECRET in job.read_text()  # --check changed nothing


_JOB_HEAD = (
    "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: x\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n"
    "      replicas: 1\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n"
    "          - name: pytorch\n            image: img\n            env:\n"
)


@pytest.mark.parametrize("fmt", sorted(REPORTERS))
def test_structure_finding_never_prints_a_credential(tmp_path: Path, fmt: str) -> None:
    # An unquoted numeric password is a KDP101 type error; its message used to quote the value.
    job = tmp_path / "job.yaml"
    job.write_text(_JOB_HEAD + "            - name: DB_PASSWORD\n              value: 987654321\n"
                   "            - name: API_TOKEN\n              value: [tok_in_a_list_77]\n")
    report = validate_paths([str(job)], jobs=1)
    assert any(f.rule_id == "KDP101" for f in report.findings)
    out = REPORTERS[fmt](report, tool="validate")
    assert "987654321" not in out and "tok_in_a_list_77" not in out
    assert "hidden: KDP217" in out


def test_fix_diff_hides_a_credential_written_over_lines(tmp_path: Path) -> None:
    # A folded plain scalar, an escaped string and a block scalar: their source text is not their
    # value, so hiding by value let them through in the diff's context lines.
    job = tmp_path / "job.yaml"
    job.write_text(
        _JOB_HEAD
        + '            - name: HF_TOKEN\n              value: "hf_\\x41escaped_part"\n'
        + "            - name: SSH_PRIVATE_KEY\n              value: |\n                -----BEGIN KEY-----\n"
        + "                keymaterialline\n                -----END KEY-----\n"
        + "            - name: X_PASSWORD\n              value: first_half\n                second_half\n"
    )
    done = subprocess.run([sys.executable, "-m", "k8sddp", "fix", "--check", str(job)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "+            - name: PYTHONFAULTHANDLER" in done.stdout
    for part in ("escaped_part", "keymaterialline", "first_half", "second_half"):
        assert part not in done.stdout + done.stderr, done.stdout
    assert "<hidden: KDP217>" in done.stdout


def test_ddpjob_spec_errors_never_print_a_credential(tmp_path: Path) -> None:
    # KDP012 (validate) and render's refusal quote the schema error, which quoted the value.
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "apiVersion: k8sddp.dev/v1alpha1\nkind: DDPJob\nmetadata: {name: d}\nspec:\n  image: x\n  command: {task: a:b}\n"
        "  nodes: 2\n  checkpoint: {claimName: c, mountPath: /ck}\n  env:\n  - {name: DB_PASSWORD, value: 987654321}\n"
    )
    report = validate_paths([str(spec)], jobs=1)
    assert [f.rule_id for f in report.findings] == ["KDP012"]
    assert "987654321" not in REPORTERS["json"](report, tool="validate")
    done = subprocess.run([sys.executable, "-m", "k8sddp", "render", str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "spec.env[0].value" in done.stderr, done.stderr
    assert "987654321" not in done.stdout + done.stderr
