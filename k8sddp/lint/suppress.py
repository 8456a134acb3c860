"""``# noqa`` comments: ``# noqa: KDP501`` (or ``KDP501,KDP504``) silences those rules on its
line; a bare ``# noqa`` silences every rule there. Comments are found with :mod:`tokenize`, so
``"# noqa"`` inside a string does not count. Suppressed findings are still reported, as
exempted (``info``), never silently dropped (``../shared/CONTRACT.md``, Exemptions)."""

from __future__ import annotations

import io
import re
import tokenize

__all__ = ["noqa_lines"]

_NOQA = re.compile(r"#\s*noqa(?P<sep>\s*:\s*(?P<codes>[A-Za-z]+\d+(?:\s*[,\s]\s*[A-Za-z]+\d+)*))?", re.I)


def noqa_lines(source: str) -> dict[int, frozenset[str] | None]:
    """Map line -> silenced rule ids (None: every rule) for each ``# noqa`` comment."""
    if "noqa" not in source.lower():
        return {}
    out: dict[int, frozenset[str] | None] = {}
    try:
        tokens = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        tokens = [(i, line[line.index("#"):]) for i, line in enumerate(source.splitlines(), 1) if "#" in line]
    for line, text in tokens:
        m = _NOQA.search(text)
        if not m:
            continue
        codes = m.group("codes")
        if codes:
            ids = frozenset(c.upper() for c in re.split(r"[\s,]+", codes.strip()) if c)
            prev = out.get(line, frozenset())
            out[line] = None if prev is None and line in out else (prev or frozenset()) | ids
        else:
            out[line] = None
    return out
