"""How ``k8sddp validate`` does on real PyTorchJob manifests from other repositories.

The corpus is ``bench/validate_corpus.tsv``: repository, commit, path, part (``verdict``: plain
and wrapped manifests; ``template``: Helm and envsubst templates), set (``tune`` or ``heldout``:
never looked at while writing the rules) and the expected verdict, labelled by reading each file
before any run. Files are read from the mirrors ``fetch`` leaves under ``/work/.mirror``
(``K8SDDP_MIRROR`` to change), with ``git show COMMIT:PATH``; nothing of them is vendored. A
repository that is absent is skipped and counted.

Expectation tokens (all must hold):

- ``checked>=N``: at least N objects were checked (a wrapped job counts);
- ``err:RULE`` / ``warn:RULE``: a finding of that rule (at that severity);
- ``no:RULE``: no finding of that rule;
- ``one:RULE``: exactly one finding of that rule in the file;
- ``only:RULE``: the file's only finding is one of that rule;
- ``clean``: no message is a parser dump or a regex (``while scanning``, ``does not match "^``).

Usage::

    python bench/validate_corpus.py            # the installed k8sddp
    PYTHONPATH=/path/to/old/checkout python bench/validate_corpus.py   # another version

Prints one line per file that misses its label and the counts per part and set.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from k8sddp.validate import validate_text

TABLE = Path(__file__).resolve().parent / "validate_corpus.tsv"
MIRROR = Path(os.environ.get("K8SDDP_MIRROR", "/work/.mirror"))
DUMPS = ("while scanning", "while parsing", "could not find expected", 'does not match "^', "found unhashable key")


def read(repo: str, commit: str, path: str) -> str | None:
    """The file at ``commit`` in the mirror of ``repo``, or ``None`` when the mirror lacks it."""
    git = MIRROR / repo.replace("/", "+", 1) / "repo"
    if not git.is_dir():
        return None
    done = subprocess.run(["git", "-C", str(git), "show", f"{commit}:{path}"], capture_output=True, timeout=60, check=False)
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def misses(text: str, name: str, expect: str) -> list[str]:
    """The expectation tokens of ``expect`` that validate's report on ``text`` does not meet."""
    report = validate_text(text, file=name)
    rules = Counter(f.rule_id for f in report.findings)
    sev = {(f.rule_id, f.severity.value) for f in report.findings}
    out = []
    for token in expect.split():
        if token == "clean":
            if any(d in f.message for f in report.findings for d in DUMPS):
                out.append(token)
        elif token.startswith("checked>="):
            if report.checked < int(token.split(">=")[1]):
                out.append(f"{token} (checked {report.checked})")
        else:
            kind, rule = token.split(":")
            ok = {
                "err": (rule, "error") in sev,
                "warn": (rule, "warning") in sev,
                "no": rules[rule] == 0,
                "one": rules[rule] == 1,
                "only": len(report.findings) == 1 and rules[rule] == 1,
            }[kind]
            if not ok:
                out.append(f"{token} (got {dict(rules) or 'nothing'})")
    return out


def main() -> int:
    """Run the corpus; print misses and counts."""
    right: Counter[tuple[str, str]] = Counter()
    total: Counter[tuple[str, str]] = Counter()
    skipped = 0
    for line in TABLE.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        repo, commit, path, part, subset, expect = line.split("\t")
        text = read(repo, commit, path)
        if text is None:
            skipped += 1
            continue
        total[(part, subset)] += 1
        missed = misses(text, f"{repo}/{path}", expect)
        if missed:
            print(f"MISS {part:8} {subset:7} {repo}/{path}: {'; '.join(missed)}")
        else:
            right[(part, subset)] += 1
    for part in ("verdict", "template"):
        for subset in ("tune", "heldout"):
            if total[(part, subset)]:
                print(f"{part:8} {subset:7} {right[(part, subset)]:3}/{total[(part, subset)]:<3} right")
    print(f"all              {sum(right.values()):3}/{sum(total.values()):<3} right; {skipped} skipped (mirror absent)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
