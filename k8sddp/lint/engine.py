"""The lint run: files in, :class:`~k8sddp.findings.Report` out.

Steps: collect the Python files under the given paths; parse each (a ``SyntaxError`` is a
located KDP500 finding, not a traceback); index them as one project (imports of project code are
followed, :mod:`k8sddp.lint.project`); run the rank analysis to a fixed point
(:mod:`k8sddp.lint.analyzer`); apply the rules; drop what the configuration deselects; mark what
``# noqa`` silences as exempted; optionally apply the safe fixes and lint again.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import gc
import io
import os
import stat
import sys
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..catalogue import get_rule
from ..errors import UsageError
from ..findings import Finding, Report, Severity
from .analyzer import Analyzer
from .config import LintConfig, clear_config_cache, find_config, load_config
from .events import Raw
from .fix import fix_timeouts, write_atomic
from .project import Module, Project, build_module, read_source
from .rules_forward import check_forward
from .rules_io import check_io
from .rules_misc import check_misc
from .rules_sync import check_sync
from .solo import DIST_MARKERS, only_alone
from .suppress import noqa_lines

__all__ = ["LintResult", "SKIP_DIRS", "collect_files", "lint_paths", "lint_sources"]

#: Folders never descended into when a folder is linted.
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "build", "dist"})


@dataclasses.dataclass
class LintResult:
    """The outcome of :func:`lint_paths`.

    Attributes:
        report: findings (exempted ones included, as ``info``) and counts.
        fixed: number of fixes written (``--fix``).
        fixed_files: files rewritten by ``--fix``.
    """

    report: Report
    fixed: int = 0
    fixed_files: list[str] = dataclasses.field(default_factory=list)


def collect_files(paths: Sequence[str], config: LintConfig | None = None,
                  skipped: Counter[str] | None = None) -> list[str]:
    """Expand ``paths`` (files, folders, ``-``) into the files to lint, in a stable order.

    A folder yields its ``*.py`` regular files, skipping hidden folders, :data:`SKIP_DIRS` and
    the configuration's ``exclude`` globs; a file named explicitly is always linted. FIFOs,
    sockets and devices (named or found) are never opened (reading a FIFO blocks forever); each
    is counted in ``skipped`` under ``not a regular file``, and each symlinked folder met while
    walking (not followed, so no loop) under ``folder symlink (not followed)``.

    Args:
        paths: files, folders, or ``-``.
        config: a configuration to use instead of each folder's nearest one.
        skipped: a counter to add the skipped non-regular files to.

    Raises:
        UsageError: every path that does not exist or cannot be read, file or folder, named or
            met while walking a folder, listed in one message (exit 2); nothing is skipped
            silently.
    """
    out: list[str] = []
    problems: list[str] = []
    for raw in paths:
        if raw == "-":
            out.append("-")
            continue
        p = Path(raw)
        try:
            st = p.stat()
        except FileNotFoundError:
            problems.append(f"{raw}: no such file or directory")
            continue
        except OSError as exc:
            problems.append(f"{raw}: {_why(exc)}")
            continue
        if stat.S_ISDIR(st.st_mode):
            if not _can(p, os.R_OK | os.X_OK):
                problems.append(f"{raw}: permission denied (cannot list the folder)")
                continue
            try:
                cfg = config or _config_for(p)
            except UsageError as exc:
                problems.append(str(exc))
                continue
            out.extend(_walk(p, cfg, problems, skipped))
        elif not stat.S_ISREG(st.st_mode):
            if skipped is not None:
                skipped["not a regular file"] += 1
        elif not _can(p, os.R_OK):
            problems.append(f"{raw}: permission denied")
        else:
            out.append(raw)
    if problems:
        raise UsageError("; ".join(dict.fromkeys(problems)))
    return list(dict.fromkeys(out))


def _can(path: str | Path, mode: int) -> bool:
    """``os.access`` with the effective ids (what opening the file will be checked against)."""
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def _why(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    return f"cannot read: {exc.strerror or exc}"


def _walk(top: Path, cfg: LintConfig, problems: list[str], skipped: Counter[str] | None) -> list[str]:
    """The lintable files under ``top``; unreadable folders and files go to ``problems``."""
    out: list[str] = []

    def onerror(exc: OSError) -> None:
        problems.append(f"{exc.filename or top}: {_why(exc)} (cannot list the folder)")

    for dirpath, dirnames, filenames in os.walk(top, onerror=onerror):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS
                             and not cfg.excluded(os.path.join(dirpath, d) + "/"))
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        if links and skipped is not None:  # os.walk does not follow them (no loops): say so
            skipped["folder symlink (not followed)"] += len(links)
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            f = os.path.join(dirpath, name)
            if cfg.excluded(f):
                continue
            try:
                st = os.stat(f)
            except OSError as exc:
                problems.append(f"{f}: {_why(exc)}")
                continue
            if not stat.S_ISREG(st.st_mode):
                if skipped is not None:
                    skipped["not a regular file"] += 1
            elif not _can(f, os.R_OK):
                problems.append(f"{f}: permission denied")
            else:
                out.append(f)
    return out


_CONFIGS: dict[str, LintConfig] = {}


def _config_for(path: Path) -> LintConfig:
    found = find_config(path)
    if found is None:
        return LintConfig()
    key = str(found)
    if key not in _CONFIGS:
        _CONFIGS[key] = load_config(found)
    return _CONFIGS[key]


def _undecodable(data: bytes, exc: UnicodeDecodeError) -> Raw:
    """KDP500 at the line and column of the first byte that does not decode (``exc.start`` is an
    offset into ``data``)."""
    before = data[: exc.start]
    line = before.count(b"\n") + 1
    col = exc.start - (before.rfind(b"\n") + 1) + 1
    return Raw("KDP500", line, col,
               f"cannot decode the file as Python source: byte {data[exc.start]:#04x} is not valid "
               f"{exc.encoding} ({exc.reason}); declare the encoding (# -*- coding: ... -*-) or re-save it")


def _parse(name: str, data: bytes) -> tuple[Module | None, str, Raw | None]:
    try:
        text = read_source(data)
    except UnicodeDecodeError as exc:
        return None, "", _undecodable(data, exc)
    except (SyntaxError, LookupError) as exc:
        try:  # tokenize refuses bad UTF-8 in the first two lines as a bad "encoding declaration"
            data.decode("utf-8")
        except UnicodeDecodeError as utf8_exc:
            return None, "", _undecodable(data, utf8_exc)
        line = getattr(exc, "lineno", None) or 1
        return None, "", Raw("KDP500", line, 0, f"cannot decode the file as Python source: {exc}")
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError as exc:
        msg = exc.msg or "invalid syntax"
        return None, text, Raw("KDP500", exc.lineno or 1, exc.offset or 0, f"SyntaxError: {msg}")
    except (ValueError, RecursionError) as exc:
        return None, text, Raw("KDP500", 1, 0, f"cannot parse: {exc}")
    except MemoryError:  # CPython's parser on an expression nested ~10,000 deep
        return None, text, Raw("KDP500", 1, 0, "cannot parse: the parser ran out of memory (an expression nested too deeply)")
    return build_module(name, text, tree), text, None


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Automatic garbage collection off for the block, back to its former state after.

    A lint run allocates millions of small objects (syntax trees, values, events) that live
    until it ends and form almost no reference cycles; the collector's passes over them cost
    about a fifth of the run's CPU time and free nothing (peak memory on the 2,000-file tree
    of ``bench/lint_speed.py``: 228 MiB without them, 227 MiB with them). Reference counting
    still frees everything else at once; whatever cycles there are go at the next collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def lint_sources(
    sources: Iterable[tuple[str, bytes]], *, root: Path, configs: dict[str, LintConfig],
) -> tuple[Report, dict[str, tuple[Module, list[Raw]]]]:
    """Lint already-read files as one project (with automatic garbage collection paused).

    Args:
        sources: (file name, raw bytes) pairs.
        root: project root for resolving imports of project code.
        configs: file name -> its configuration.

    Returns:
        The report, and per parsed file its module and the kept findings (for fixes).
    """
    with _no_cycle_collection():
        return _lint_sources(sources, root=root, configs=configs)


def _lint_sources(
    sources: Iterable[tuple[str, bytes]], *, root: Path, configs: dict[str, LintConfig],
) -> tuple[Report, dict[str, tuple[Module, list[Raw]]]]:
    project = Project(root)
    report = Report()
    raws: dict[str, list[Raw]] = {}
    texts: dict[str, str] = {}
    order: list[str] = []
    for name, data in sources:
        order.append(name)
        report.files += 1
        report.documents += 1
        mod, text, err = _parse(name, data)
        texts[name] = text
        if err is not None:
            raws[name] = [err]
            continue
        assert mod is not None
        project.add(mod)
        report.checked += 1
    analyzer = Analyzer(project)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 6000))
    try:
        analyzer.run()
    finally:
        sys.setrecursionlimit(limit)
    if analyzer.too_deep:
        report.skipped["function nested too deeply to analyse"] += len(analyzer.too_deep)
    kept: dict[str, tuple[Module, list[Raw]]] = {}
    dist_modules = {m.path for m in analyzer.all_modules() if DIST_MARKERS.search(m.source)}
    alone: dict[str, bool] = {}
    touches: dict[str, bool] = {}
    for name, mod in project.modules.items():
        found: list[Raw] = []
        for f in mod.all_functions():
            w = analyzer.walkers.get(f.key)
            if w is None or f.key in analyzer.too_deep:
                continue
            try:
                found.extend(check_sync(w))
                distributed = analyzer.reached_from(f, dist_modules) and not only_alone(analyzer, f.key, touches, alone)
                found.extend(check_io(w, analyzer.context(f), distributed,
                                      analyzer.unguarded_context(f), analyzer.entry_point(f),
                                      analyzer.framework_hook(f)))
            except RecursionError:  # an expression hundreds deep in a message or a path: skip it, counted
                report.skipped["function nested too deeply to analyse"] += 1
        try:
            found.extend(check_misc(mod, project))
            found.extend(check_forward(mod))
        except RecursionError:
            report.skipped["function nested too deeply to analyse"] += 1
        raws[name] = found
    for name in order:
        cfg = configs.get(name, LintConfig())
        uniq: dict[tuple[str, int, int], Raw] = {}
        for r in raws.get(name, []):
            if cfg.enabled(r.rule_id, name):
                uniq.setdefault((r.rule_id, r.line, r.col), r)
        silenced = noqa_lines(texts.get(name, ""))
        ordered = sorted(uniq.values(), key=lambda r: (r.line, r.col, r.rule_id))
        shown = "<stdin>" if name == "-" else name
        active: list[Raw] = []
        for r in ordered:
            rule = get_rule(r.rule_id)
            codes = silenced.get(r.line, frozenset())
            if r.line in silenced and (codes is None or r.rule_id in codes):
                report.findings.append(Finding(r.rule_id, Severity.INFO, r.message, shown, r.line, r.col,
                                               exempted_by="# noqa"))
                continue
            active.append(r)
            report.findings.append(Finding(r.rule_id, rule.severity, r.message, shown, r.line, r.col))
        if name in project.modules:
            kept[name] = (project.modules[name], active)
    return report, kept


def _read_all(files: list[str]) -> list[tuple[str, bytes]]:
    """Read every file (``-``: standard input).

    Raises:
        UsageError: each file that cannot be read, in one message (exit 2).
    """
    out = []
    problems: list[str] = []
    for f in files:
        if f == "-":
            data = sys.stdin.buffer.read() if sys.stdin is not None else b""
            if not data:  # closed or empty: the contract's "nothing on stdin for -" (exit 2)
                problems.append("-: no input on standard input (did the command before the pipe fail?)")
            out.append(("-", data))
            continue
        try:
            out.append((f, Path(f).read_bytes()))
        except OSError as exc:
            problems.append(f"{f}: {'is a directory' if isinstance(exc, IsADirectoryError) else _why(exc)}")
    if problems:
        raise UsageError("; ".join(problems))
    return out


def _root(paths: Sequence[str], config: LintConfig | None) -> Path:
    if config is not None and config.root is not None:
        return config.root
    real = [Path(p).resolve() for p in paths if p != "-"]
    if not real:
        return Path.cwd()
    dirs = [p if p.is_dir() else p.parent for p in real]
    return Path(os.path.commonpath([str(d) for d in dirs]))


def lint_paths(
    paths: Sequence[str], *, config_file: str | None = None, select: list[str] | None = None,
    ignore: list[str] | None = None, fix: bool = False,
) -> LintResult:
    """Lint files and folders (``-`` reads standard input).

    Args:
        paths: files, folders, or ``-``.
        config_file: a ``pyproject.toml`` to use instead of discovery.
        select: rule id prefixes overriding the configuration's ``select``.
        ignore: rule id prefixes added to the configuration's ``ignore``.
        fix: apply the safe fixes in place, then lint again.

    Raises:
        UsageError: missing or unreadable path, bad configuration, ``--fix`` on standard input.
    """
    if not paths:
        raise UsageError("no paths given")
    _CONFIGS.clear()  # files may have changed since an earlier call in this process
    clear_config_cache()
    explicit = load_config(Path(config_file)) if config_file else None
    if explicit is not None and explicit.root is None:  # pragma: no cover
        explicit = dataclasses.replace(explicit, root=Path(config_file or ".").resolve().parent)
    skipped: Counter[str] = Counter()
    files = collect_files(paths, explicit, skipped)
    if fix and "-" in files:
        raise UsageError("--fix cannot rewrite standard input")
    configs: dict[str, LintConfig] = {}
    problems: list[str] = []
    for f in files:
        try:
            base = explicit or (_config_for(Path(f)) if f != "-" else _config_for(Path.cwd()))
        except UsageError as exc:
            problems.append(str(exc))
            continue
        configs[f] = base.with_overrides(select, ignore)
    if problems:
        raise UsageError("; ".join(dict.fromkeys(problems)))
    first_cfg = explicit or (configs[files[0]] if files else None)
    root = _root(paths, first_cfg)
    report, kept = lint_sources(_read_all(files), root=root, configs=configs)
    report.skipped.update(skipped)
    if not fix:
        return LintResult(report)
    fixed = 0
    fixed_files: list[str] = []
    for name, (mod, active) in kept.items():
        calls = [r.fix[1] for r in active if r.fix and r.fix[0] == "timeout" and isinstance(r.fix[1], ast.Call)]
        if not calls:
            continue
        new = fix_timeouts(mod.source, calls, mod.tree)
        try:
            ast.parse(new)
        except SyntaxError:  # pragma: no cover - defensive: never write a broken file
            continue
        path = Path(name)
        encoding = tokenize.detect_encoding(io.BytesIO(path.read_bytes()).readline)[0]
        try:
            write_atomic(path, new, encoding)
        except OSError as exc:
            raise UsageError(f"{name}: cannot write the fix: {exc.strerror or exc}") from exc
        fixed += len(calls)
        fixed_files.append(name)
    if fixed:
        report, _ = lint_sources(_read_all(files), root=root, configs=configs)
        report.skipped.update(skipped)
    return LintResult(report, fixed, fixed_files)
