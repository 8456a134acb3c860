"""The labelled real-script corpus (bench/lint_corpus.tsv) is well formed, and where the git
mirrors of its repositories are present, the linter keeps at least today's figures on it.

The scripts are not vendored: without ``$K8SDDP_MIRROR`` (default ``/work/.mirror``) the
measurement test skips.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest

from k8sddp.catalogue import RULES

ROOT = Path(__file__).resolve().parents[2]
MIRROR = Path(os.environ.get("K8SDDP_MIRROR", "/work/.mirror"))


def _bench():
    spec = importlib.util.spec_from_file_location("lint_real", ROOT / "bench" / "lint_real.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["lint_real"] = mod  # its worker processes unpickle its functions by module name
    spec.loader.exec_module(mod)
    return mod


def test_table_is_well_formed() -> None:
    scripts, labels = _bench().read_table()
    assert len(scripts) >= 30
    assert sum(1 for s in scripts if s["split"] in ("held", "fresh", "fresh3", "fresh4", "fresh5", "fresh6", "fresh7", "fresh8", "fresh9", "fresh10", "fresh11", "fresh12", "fresh13", "fresh14", "fresh15", "fresh16", "fresh17", "fresh18", "fresh19", "fresh20", "fresh21", "fresh22", "fresh23", "fresh24")) >= 10  # held back from tuning
    assert {s["split"] for s in scripts} <= {"tune", "held", "fresh", "fresh3", "fresh4", "fresh5", "fresh6", "fresh7", "fresh8", "fresh9", "fresh10", "fresh11", "fresh12", "fresh13", "fresh14", "fresh15", "fresh16", "fresh17", "fresh18", "fresh19", "fresh20", "fresh21", "fresh22", "fresh23", "fresh24"}
    known = {(s["repo"], s["path"]) for s in scripts}
    for repo, path, line, rule in labels:
        assert (repo, path) in known and line > 0 and rule in RULES, (repo, path, line, rule)
    assert all(len(s["commit"]) == 40 for s in scripts)


@pytest.mark.slow
def test_real_scripts_keep_their_figures() -> None:
    if not MIRROR.is_dir():
        pytest.skip(f"no git mirrors at {MIRROR}")
    bench = _bench()
    res = bench.measure(MIRROR, Path(tempfile.gettempdir()) / "k8sddp-lint-real")  # the bench's own cache
    if not res["scripts"]:
        pytest.skip("no labelled repository is mirrored here")
    counts = res["counts"]["all"]["severity"]
    tp = sum(c.get("tp", 0) for c in counts.values())
    fp = sum(c.get("fp", 0) for c in counts.values())
    fn = sum(c.get("fn", 0) for c in counts.values())
    table, _ = bench.read_table()
    if sum(res["scripts"].values()) == len(table):  # every mirror present: docs/lint.md's figures (446: 1245/65/224)
        assert tp / (tp + fp) >= 0.94 and tp / (tp + fn) >= 0.84, (tp, fp, fn)
