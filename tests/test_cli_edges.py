"""The CLI's edges, in real processes: empty or closed stdin, closed stdout, a full disk, unwritable
output paths, a closed pipe, and fix on an alias bomb. One line, the contract's exit code, never a
traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "validate" / "fixtures" / "KDP201" / "fail" / "missing-plain.yaml"
SPEC = ROOT / "examples" / "ddpjob.yaml"
CLI = [sys.executable, "-m", "k8sddp"]


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=kw.pop("capture", True), text=True, timeout=60, cwd=ROOT, **kw)  # type: ignore[call-overload, no-any-return]


def _one_line(err: str) -> None:
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("cmd", [["validate", "-"], ["render", "-"]])
def test_empty_stdin_is_no_input(cmd: list[str]) -> None:
    done = _run(cmd, input="")
    assert done.returncode == 2
    assert "no input" in done.stderr
    _one_line(done.stderr)


def test_closed_stdin_is_no_input() -> None:
    done = subprocess.run(" ".join([sys.executable, "-m", "k8sddp", "validate", "-", "<&-"]), shell=True, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "no input" in done.stderr
    _one_line(done.stderr)


@pytest.mark.parametrize("cmd", [["validate", str(JOB)], ["render", str(SPEC)], ["policy", "export", "--format", "kyverno"], ["fix", "--check", str(JOB)]])
def test_closed_stdout(cmd: list[str]) -> None:
    done = subprocess.run(" ".join([sys.executable, "-m", "k8sddp", *cmd, ">&-"]), shell=True, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "standard output is closed" in done.stderr
    _one_line(done.stderr)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("cmd", [["validate", str(JOB)], ["render", str(SPEC)], ["policy", "export", "--format", "kyverno"], ["fix", "--check", str(JOB)]])
def test_full_disk(cmd: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run([*CLI, *cmd], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "No space left on device" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


@pytest.mark.parametrize("out", ["/nonexistent-dir/x.yaml", "/dev/null/x.yaml", "examples"])
def test_unwritable_output_path(out: str) -> None:
    done = _run(["render", str(SPEC), "--out", out])
    assert done.returncode == 2
    _one_line(done.stderr)


def test_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    many = tmp_path / "many"
    many.mkdir()
    for i in range(40):
        (many / f"j{i}.yaml").write_text(JOB.read_text())
    done = subprocess.run(f"{sys.executable} -m k8sddp validate --jobs 1 --format json {many} | head -c 10", shell=True, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stderr == ""


@pytest.mark.parametrize("reader", ["head -c 1", "head -n 1", "true"])
def test_closed_pipe_keeps_the_exit_code(reader: str) -> None:
    """A reader that leaves early must not turn findings into success: under ``set -o pipefail``
    (CI) ``lint DIR | head`` exits 1 like ``lint DIR`` alone, however much of the output the pipe
    took (it used to be 0 or 1 from run to run)."""
    fixtures = ROOT / "tests" / "lint" / "fixtures" / "KDP504" / "fail"
    alone = _run(["lint", str(fixtures)])
    assert alone.returncode == 1 and alone.stdout.count("KDP504") > 5
    for _ in range(3):
        done = subprocess.run(["bash", "-o", "pipefail", "-c", f'"$0" -m k8sddp lint {fixtures} | {reader}', sys.executable],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def test_fix_ends_on_an_alias_bomb(tmp_path: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
        prev = name
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: x\n" + "\n".join(lines) + "\n")
    assert bomb.stat().st_size < 500
    for args in (["fix", "--check", str(bomb)], ["fix", str(bomb)]):
        done = _run(args)
        assert done.returncode == 1
        assert "KDP003" in done.stderr and "Traceback" not in done.stderr


def test_fix_strict_container_without_env(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: x\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n"
        "      replicas: 1\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n"
        "          - name: pytorch\n            image: img\n"
    )
    done = _run(["fix", "--profile", "strict", str(job)])
    assert done.returncode in (0, 1), done.stderr
    assert "PYTHONFAULTHANDLER" in job.read_text()
