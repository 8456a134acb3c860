"""`helm lint --strict` passes for both charts with their CI values files (and the webhook chart
with its defaults); the ddpjob chart's defaults lack the values a job must give (image, command,
checkpoint claim), which its schema requires, and lint says so."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES: list[tuple[str, str | None]] = [("k8sddp-webhook", None)]
CASES += [(f.parents[1].name, f.name) for f in sorted((REPO / "charts").glob("*/ci/*.yaml"))]


@pytest.mark.parametrize(("chart", "values"), CASES, ids=[f"{c}:{v or 'defaults'}" for c, v in CASES])
def test_helm_lint_strict(helm: str, chart: str, values: str | None) -> None:
    args = [helm, "lint", "--strict", str(REPO / "charts" / chart)]
    if values:
        args += ["--values", str(REPO / "charts" / chart / "ci" / values)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_helm_lint_reports_schema_violations(helm: str, tmp_path: Path) -> None:
    chart = str(REPO / "charts" / "ddpjob")
    proc = subprocess.run([helm, "lint", "--strict", chart], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "missing properties 'image', 'command'" in proc.stdout
    assert "at '/checkpoint': missing property 'claimName'" in proc.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: many\n")
    proc = subprocess.run([helm, "lint", "--strict", chart, "--values", str(REPO / "charts" / "ddpjob" / "ci" /
                           "demo-values.yaml"), "--values", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "at '/nodes'" in proc.stdout, proc.stdout
