"""Precision and recall of ``k8sddp lint`` on the labelled corpus of training scripts.

The corpus (``tests/lint/corpus/<family>/``) holds realistic scripts in the idioms of real
projects (the PyTorch DDP tutorial, nanoGPT, Accelerate examples, Lightning, the torchrun
multinode tutorial, torchvision references); each bug-seeded variant labels the findings it
should produce with ``# expect: KDP5nn`` on the line. Each entry of a family (a file, or a
folder linted as one project) is linted on its own. A finding is a true positive when its
(file, line, rule) is labelled, a false positive otherwise; a label without a finding is a
false negative.

Usage: ``python bench/lint_precision.py [CORPUS_DIR] [--json]``; prints a per-rule table and the
totals. Exit status 0 always (the threshold lives in tests/lint/test_corpus.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k8sddp.lint import lint_paths  # noqa: E402

EXPECT = re.compile(r"#.*?\bexpect:\s*(?P<ids>KDP\d{3}(?:[\s,]+KDP\d{3})*)")
DEFAULT_CORPUS = ROOT / "tests" / "lint" / "corpus"
#: The rules this corpus was labelled for. KDP511-KDP513 came later (issue 17) and are measured on
#: the real scripts of bench/lint_real.py instead; their findings here are not counted.
LABELLED_RULES = frozenset(f"KDP5{n:02d}" for n in range(11))


def _expected(case: Path) -> set[tuple[str, int, str]]:
    files = sorted(case.rglob("*.py")) if case.is_dir() else [case]
    out: set[tuple[str, int, str]] = set()
    for f in files:
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            m = EXPECT.search(line)
            if m:
                out |= {(str(f), i, rid) for rid in re.split(r"[\s,]+", m.group("ids").strip()) if rid in LABELLED_RULES}
    return out


def measure(corpus: Path = DEFAULT_CORPUS) -> dict[str, object]:
    """Lint every corpus case; return counts per rule, totals, and the mismatches.

    Returns:
        ``{"cases": n, "tp": n, "fp": n, "fn": n, "precision": p, "recall": r,
        "per_rule": {rule: {"tp", "fp", "fn"}}, "false_positives": [...], "false_negatives": [...]}``
        (precision/recall as fractions in [0, 1]; 1.0 when the denominator is 0).
    """
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    fps: list[str] = []
    fns: list[str] = []
    cases = sorted(p for p in corpus.glob("*/*") if p.suffix == ".py" or p.is_dir())
    for case in cases:
        expected = _expected(case)
        report = lint_paths([str(case)]).report
        got = {(f.file, f.line, f.rule_id): f.message for f in report.findings
               if not f.exempted_by and f.rule_id in LABELLED_RULES}
        for key, msg in got.items():
            if key in expected:
                tp[key[2]] += 1
            else:
                fp[key[2]] += 1
                fps.append(f"{key[0]}:{key[1]} {key[2]} {msg}")
        for key in expected - set(got):
            fn[key[2]] += 1
            fns.append(f"{key[0]}:{key[1]} {key[2]}")
    t, p_, n = sum(tp.values()), sum(fp.values()), sum(fn.values())
    rules = sorted(set(tp) | set(fp) | set(fn))
    return {
        "cases": len(cases),
        "tp": t, "fp": p_, "fn": n,
        "precision": t / (t + p_) if t + p_ else 1.0,
        "recall": t / (t + n) if t + n else 1.0,
        "per_rule": {r: {"tp": tp[r], "fp": fp[r], "fn": fn[r]} for r in rules},
        "false_positives": sorted(fps), "false_negatives": sorted(fns),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", nargs="?", default=str(DEFAULT_CORPUS))
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    res = measure(Path(args.corpus))
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{'rule':8} {'tp':>4} {'fp':>4} {'fn':>4}")
    for rule, c in res["per_rule"].items():  # type: ignore[union-attr]
        print(f"{rule:8} {c['tp']:>4} {c['fp']:>4} {c['fn']:>4}")
    print(f"cases {res['cases']}: tp {res['tp']}, fp {res['fp']}, fn {res['fn']}; "
          f"precision {res['precision']:.3f}, recall {res['recall']:.3f}")
    for line in res["false_positives"]:  # type: ignore[union-attr]
        print("FP", line)
    for line in res["false_negatives"]:  # type: ignore[union-attr]
        print("FN", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
