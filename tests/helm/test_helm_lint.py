"""`helm lint --strict` passes for both charts with their default and CI values files, and fails
(with helm's message) for values its schema refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = [(chart.name, None) for chart in sorted((REPO / "charts").iterdir()) if (chart / "Chart.yaml").is_file()]
CASES += [(f.parents[1].name, f.name) for f in sorted((REPO / "charts").glob("*/ci/*.yaml"))]


@pytest.mark.parametrize(("chart", "values"), CASES, ids=[f"{c}:{v or 'defaults'}" for c, v in CASES])
def test_helm_lint_strict(helm: str, chart: str, values: str | None) -> None:
    args = [helm, "lint", "--strict", str(REPO / "charts" / chart)]
    if values:
        args += ["--values", str(REPO / "charts" / chart / "ci" / values)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_helm_lint_reports_a_schema_violation(helm: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: many\n")
    proc = subprocess.run([helm, "lint", "--strict", str(REPO / "charts" / "ddpjob"), "--values", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "nodes" in proc.stdout + proc.stderr
