"""Autofix: the one change that is always safe, adding ``timeout=`` to ``init_process_group``.

The fix inserts ``timeout=datetime.timedelta(seconds=1800)`` (1800 s is the contract's default
``K8SDDP_PG_TIMEOUT_SECONDS``, ``../shared/CONTRACT.md``) after the call's last argument, and the
import it needs: ``datetime`` is reused when imported as a module, ``timedelta`` when imported
from it, else ``import datetime`` is added (or ``from datetime import timedelta`` when the name
``datetime`` is already the class). Files are rewritten atomically (a temporary file in the same
folder, then ``os.replace``), keeping their mode. Running the fix twice changes nothing the
second time: a call with ``timeout=`` is no longer a finding.
"""

from __future__ import annotations

import ast
import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["TIMEOUT_SECONDS", "fix_timeouts", "write_atomic"]

#: ``K8SDDP_PG_TIMEOUT_SECONDS`` default (../shared/CONTRACT.md).
TIMEOUT_SECONDS = 1800


def _offsets(source: str) -> list[int]:
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _pos(source_lines: list[str], starts: list[int], line: int, col_bytes: int) -> int:
    text = source_lines[line - 1] if line - 1 < len(source_lines) else ""
    col = len(text.encode("utf-8")[:col_bytes].decode("utf-8", errors="ignore"))
    return starts[line - 1] + col


def _timedelta_expr(tree: ast.Module) -> tuple[str, str | None]:
    """The expression to call and the import line to add (None when present)."""
    module_alias = class_alias = None
    datetime_is_class = False
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "datetime":
                    module_alias = a.asname or "datetime"
        elif isinstance(node, ast.ImportFrom) and node.module == "datetime" and not node.level:
            for a in node.names:
                if a.name == "timedelta":
                    class_alias = a.asname or "timedelta"
                if (a.asname or a.name) == "datetime":
                    datetime_is_class = True
    if module_alias and not (module_alias == "datetime" and datetime_is_class):
        return f"{module_alias}.timedelta", None
    if class_alias:
        return class_alias, None
    if not datetime_is_class:
        return "datetime.timedelta", "import datetime"
    return "timedelta", "from datetime import timedelta"


def _import_line(tree: ast.Module, source: str) -> int:
    """0-based line before which to insert an import: the first top-level import that is not
    ``from __future__``, else after the docstring and __future__ imports."""
    after = 0
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            after = node.end_lineno or 0
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            after = node.end_lineno or after
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return node.lineno - 1
        break
    return after


def fix_timeouts(source: str, calls: list[ast.Call], tree: ast.Module) -> str:
    """Return ``source`` with ``timeout=`` added to each call in ``calls`` (nodes of ``tree``)."""
    if not calls:
        return source
    lines = source.splitlines(keepends=True)
    starts = _offsets(source)
    expr, import_line = _timedelta_expr(tree)
    arg = f"timeout={expr}(seconds={TIMEOUT_SECONDS})"
    edits: list[tuple[int, str]] = []
    for call in calls:
        parts: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
        if parts:
            last = max(parts, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
            at = _pos(lines, starts, last.end_lineno or 0, last.end_col_offset or 0)
            edits.append((at, ", " + arg))
        else:
            end = _pos(lines, starts, call.end_lineno or 0, call.end_col_offset or 0)
            close = source.rindex(")", 0, end)
            edits.append((close, arg))
    out = source
    for at, text in sorted(edits, reverse=True):
        out = out[:at] + text + out[at:]
    if import_line:
        line = _import_line(tree, source)
        out_lines = out.splitlines(keepends=True)
        out_lines.insert(line, import_line + "\n")
        out = "".join(out_lines)
    return out


def write_atomic(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Replace ``path`` with ``text`` (in ``encoding``) atomically, keeping its permission bits.

    Raises:
        OSError: the folder is not writable.
    """
    mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
