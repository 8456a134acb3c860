"""The wheel carries templates/ and schemas/: build it, install it into a fresh virtual
environment, and render and validate from there, outside the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
    )
    (whl,) = dist.glob("k8sddp-*.whl")
    return whl


def test_wheel_contains_templates_and_schemas(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    for template in (REPO / "templates").glob("*.j2"):
        assert f"k8sddp/_data/templates/{template.name}" in names
    for schema in (REPO / "schemas").glob("*.json"):
        assert f"k8sddp/_data/schemas/{schema.name}" in names
    assert "k8sddp/py.typed" in names


def test_installed_wheel_renders_and_validates(wheel: Path, tmp_path: Path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True, text=True)
    exe = env_dir / "bin" / "k8sddp"
    work = tmp_path / "elsewhere"
    work.mkdir()
    spec = work / "spec.yaml"
    spec.write_text((REPO / "examples" / "ddpjob.yaml").read_text())
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    render = subprocess.run([str(exe), "render", str(spec), "--out", str(work / "job.yaml")], cwd=work, env=clean_env, capture_output=True, text=True)
    assert render.returncode == 0, render.stderr
    ok = subprocess.run([str(exe), "validate", "--profile", "strict", str(work / "job.yaml")], cwd=work, env=clean_env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run(
        [str(exe), "validate", str(REPO / "examples" / "unguarded-pytorchjob.yaml")], cwd=work, env=clean_env, capture_output=True, text=True
    )
    assert bad.returncode == 1
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in bad.stdout and "PYTHONFAULTHANDLER" in bad.stdout
    # The installed package must not read the source checkout.
    where = subprocess.run([str(py), "-c", "import k8sddp.resources as r; print(r.schemas_dir())"], cwd=work, capture_output=True, text=True)
    assert str(env_dir) in where.stdout
