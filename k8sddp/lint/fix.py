"""Autofix: the one change that is always safe, adding ``timeout=`` to ``init_process_group``.

The fix inserts, after the call's last argument::

    timeout=datetime.timedelta(seconds=int(os.environ.get("K8SDDP_PG_TIMEOUT_SECONDS", "1800")))

so the process-group timeout follows ``K8SDDP_PG_TIMEOUT_SECONDS``, the variable k8sddp's
manifests set (default 1800 s, ``../shared/CONTRACT.md``), read when the script runs. The names
it uses must mean the modules there: an existing ``import datetime`` (``import datetime as dt``,
``from datetime import timedelta``) or ``import os`` is reused only when nothing else in the file
binds that name (a parameter, a local, a module-level assignment, another import); otherwise the
fix imports under a name that nothing binds (``import datetime``, ``from datetime import
timedelta``, else ``from datetime import timedelta as _k8sddp_timedelta``; ``import os``, else
``import os as _k8sddp_os``). Inserted lines end like the file's own lines (CRLF files stay CRLF).
Files are rewritten atomically (a temporary file in the same folder, then ``os.replace``),
keeping their mode. Running the fix twice changes nothing the second time: a call with
``timeout=`` is no longer a finding.
"""

from __future__ import annotations

import ast
import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["TIMEOUT_ENV", "TIMEOUT_SECONDS", "bound_names", "fix_timeouts", "write_atomic"]

#: ``K8SDDP_PG_TIMEOUT_SECONDS`` and its default (../shared/CONTRACT.md).
TIMEOUT_ENV = "K8SDDP_PG_TIMEOUT_SECONDS"
TIMEOUT_SECONDS = 1800


def bound_names(tree: ast.AST) -> dict[str, list[ast.AST]]:
    """Every name bound anywhere in ``tree`` (any scope) -> the nodes that bind it: assignment
    and loop targets, parameters, ``def``/``class`` names, imports, ``except ... as``, ``match``
    captures, ``global``/``nonlocal`` declarations."""
    out: dict[str, list[ast.AST]] = {}

    def add(name: str | None, node: ast.AST) -> None:
        if name:
            out.setdefault(name, []).append(node)

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            add(node.id, node)
        elif isinstance(node, ast.arg):
            add(node.arg, node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            add(node.name, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                add(a.asname or a.name.split(".")[0], node)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            add(node.name, node)
        elif isinstance(node, ast.MatchMapping):
            add(node.rest, node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for n in node.names:
                add(n, node)
    return out


def _only_binds(name: str, binders: dict[str, list[ast.AST]], ok: set[int]) -> bool:
    """True when every binding of ``name`` is one of the import nodes in ``ok`` (ids)."""
    nodes = binders.get(name, [])
    return bool(nodes) and all(id(n) in ok for n in nodes)


def _free(preferred: str, binders: dict[str, list[ast.AST]]) -> str:
    name = preferred
    i = 2
    while name in binders:
        name = f"{preferred}{i}"
        i += 1
    return name


def _module_ref(tree: ast.Module, module: str, first_use: int, binders: dict[str, list[ast.AST]]) -> tuple[str, str | None]:
    """A name for ``module`` at the fix's call sites, and the import line to add (None: reuse).

    Reuses a top-level ``import module [as alias]`` above ``first_use`` whose name nothing else
    binds; else ``import module`` when ``module`` is bound nowhere; else a private alias."""
    imports = [n for n in tree.body if isinstance(n, ast.Import)]
    for node in imports:
        for a in node.names:
            local = a.asname or a.name.split(".")[0]
            if (a.name == module or (not a.asname and a.name.split(".")[0] == module)) and node.lineno < first_use:
                ok = {id(n) for n in imports if any(
                    (b.asname or b.name.split(".")[0]) == local and (b.name == module or (not b.asname and b.name.split(".")[0] == module))
                    for b in n.names)}
                if _only_binds(local, binders, ok):
                    return local, None
    if module not in binders:
        return module, f"import {module}"
    alias = _free(f"_k8sddp_{module}", binders)
    return alias, f"import {module} as {alias}"


def _timedelta_ref(tree: ast.Module, first_use: int, binders: dict[str, list[ast.AST]]) -> tuple[str, str | None]:
    """The expression that names ``datetime.timedelta`` at the call sites, and the import to add."""
    mod, line = _module_ref(tree, "datetime", first_use, binders)
    if line is None:
        return f"{mod}.timedelta", None
    froms = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "datetime" and not n.level]
    for node in froms:
        for a in node.names:
            local = a.asname or a.name
            if a.name == "timedelta" and node.lineno < first_use:
                ok = {id(n) for n in froms if any(b.name == "timedelta" and (b.asname or b.name) == local for b in n.names)}
                if _only_binds(local, binders, ok):
                    return local, None
    if "datetime" not in binders:
        return "datetime.timedelta", "import datetime"
    if "timedelta" not in binders:
        return "timedelta", "from datetime import timedelta"
    alias = _free("_k8sddp_timedelta", binders)
    return alias, f"from datetime import timedelta as {alias}"


def _offsets(source: str) -> list[int]:
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _pos(source_lines: list[str], starts: list[int], line: int, col_bytes: int) -> int:
    text = source_lines[line - 1] if line - 1 < len(source_lines) else ""
    col = len(text.encode("utf-8")[:col_bytes].decode("utf-8", errors="ignore"))
    return starts[line - 1] + col


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


def _newline(source: str) -> str:
    """The file's line ending (that of its first line; ``\\n`` when it has none)."""
    first = source.splitlines(keepends=True)[:1]
    if first and first[0].endswith("\r\n"):
        return "\r\n"
    if first and first[0].endswith("\r"):
        return "\r"
    return "\n"


def timeout_argument(tree: ast.Module, calls: list[ast.Call]) -> tuple[str, list[str]]:
    """The ``timeout=...`` text for ``calls`` (nodes of ``tree``) and the import lines it needs."""
    binders = bound_names(tree)
    first_use = min((c.lineno for c in calls), default=1)
    td, td_import = _timedelta_ref(tree, first_use, binders)
    os_name, os_import = _module_ref(tree, "os", first_use, binders)
    arg = f'timeout={td}(seconds=int({os_name}.environ.get("{TIMEOUT_ENV}", "{TIMEOUT_SECONDS}")))'
    return arg, [line for line in (td_import, os_import) if line]


def fix_timeouts(source: str, calls: list[ast.Call], tree: ast.Module) -> str:
    """Return ``source`` with ``timeout=`` added to each call in ``calls`` (nodes of ``tree``),
    and the imports that needs inserted (see the module docstring)."""
    if not calls:
        return source
    lines = source.splitlines(keepends=True)
    starts = _offsets(source)
    arg, imports = timeout_argument(tree, calls)
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
    if imports:
        nl = _newline(source)
        line = _import_line(tree, source)
        out_lines = out.splitlines(keepends=True)
        if line > 0 and line <= len(out_lines) and not out_lines[line - 1].endswith(("\n", "\r")):
            out_lines[line - 1] += nl  # the docstring or import before ends the file without a newline
        out_lines[line:line] = [imp + nl for imp in imports]
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
