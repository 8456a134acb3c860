"""bench/validate_corpus.py: the table's shape, its expectation tokens, and a clean skip without mirrors."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "validate_corpus.py"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("validate_corpus", BENCH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_table_has_30_rows_10_held_out_from_several_repositories() -> None:
    rows = [line.split("\t") for line in (ROOT / "bench" / "validate_corpus.tsv").read_text().splitlines() if line and not line.startswith("#")]
    assert len(rows) >= 30
    assert sum(1 for r in rows if r[4] == "heldout") >= 10
    assert len({r[0] for r in rows}) >= 5
    assert all(len(r[1]) == 40 and r[3] in ("verdict", "template") for r in rows)


def test_expectation_tokens_judge_real_reports() -> None:
    mod = _module()
    helm = (FIXTURES / "KDP010" / "fail" / "helm-chart-template.yaml").read_text()
    assert mod.misses(helm, "t.yaml", "only:KDP010 clean") == []
    assert mod.misses(helm, "t.yaml", "checked>=1")  # a template that does not parse checks nothing
    plain = (FIXTURES / "KDP201" / "fail" / "missing-plain.yaml").read_text()
    assert mod.misses(plain, "t.yaml", "checked>=1 err:KDP201 no:KDP011 clean") == []
    assert mod.misses(plain, "t.yaml", "no:KDP201")


def test_skips_cleanly_without_mirrors(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=120, env={"K8SDDP_MIRROR": str(tmp_path), "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert "0/0" in done.stdout and "skipped (mirror absent)" in done.stdout
