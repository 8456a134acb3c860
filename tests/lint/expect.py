"""Expected findings declared in fixture and corpus files: ``# expect: KDP501`` on the line the
finding is reported at (several ids separated by spaces or commas)."""

from __future__ import annotations

import re
from pathlib import Path

EXPECT = re.compile(r"#.*?\bexpect:\s*(?P<ids>KDP\d{3}(?:[\s,]+KDP\d{3})*)")


def expected_in_file(path: Path, shown: str) -> set[tuple[str, int, str]]:
    """(file, line, rule) triples declared in ``path``; ``shown`` is the name findings use."""
    out: set[tuple[str, int, str]] = set()
    text = path.read_bytes().decode("utf-8", errors="replace")
    for i, line in enumerate(text.splitlines(), 1):
        m = EXPECT.search(line)
        if m:
            for rid in re.split(r"[\s,]+", m.group("ids").strip()):
                out.add((shown, i, rid))
    return out


def expected_in(target: Path) -> set[tuple[str, int, str]]:
    """Expectations of a fixture file, or of every ``.py`` file under a fixture folder."""
    if target.is_dir():
        out: set[tuple[str, int, str]] = set()
        for f in sorted(target.rglob("*.py")):
            out |= expected_in_file(f, str(f))
        return out
    return expected_in_file(target, str(target))
