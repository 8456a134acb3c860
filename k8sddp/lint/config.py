"""Linter configuration: ``[tool.k8sddp.lint]`` in ``pyproject.toml``.

The configuration of a linted file is the nearest ``pyproject.toml`` with a
``[tool.k8sddp.lint]`` table, found by walking up from the file's folder (as ruff does)::

    [tool.k8sddp.lint]
    select = ["KDP5"]                 # id prefixes to check (default: every lint rule)
    ignore = ["KDP507"]               # id prefixes to skip (wins over select)
    exclude = ["third_party/*"]       # globs (relative to this file's folder) not to lint
    [tool.k8sddp.lint.per-file-ignores]
    "scripts/*.py" = ["KDP504"]

Unknown keys and ids that match no rule are usage errors (exit 2), with the file named.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import stat
import sys
from pathlib import Path, PurePath
from typing import Any

from ..catalogue import rules_for
from ..errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["LintConfig", "clear_config_cache", "find_config", "load_config"]

_KEYS = {"select", "ignore", "exclude", "per-file-ignores"}
_CODE = re.compile(r"^KDP\d{0,3}$")
LINT_IDS = tuple(r.id for r in rules_for(["lint"]))


@dataclasses.dataclass(frozen=True)
class LintConfig:
    """One resolved configuration.

    Attributes:
        select: id prefixes to report.
        ignore: id prefixes never to report (wins over ``select``).
        exclude: path globs, relative to ``root``, not to lint when walking folders.
        per_file_ignores: glob (relative to ``root``) -> id prefixes ignored in matching files.
        root: the folder of the configuration file (None for the built-in default).
        source: the configuration file (empty for the default).
    """

    select: tuple[str, ...] = ("KDP5",)
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    root: Path | None = None
    source: str = ""

    def _rel(self, file: str) -> str:
        p = Path(file)
        if self.root is not None:
            try:
                return p.resolve().relative_to(self.root).as_posix()
            except (ValueError, OSError):
                pass
        return PurePath(file).as_posix()

    def enabled(self, rule_id: str, file: str) -> bool:
        """True when ``rule_id`` is reported for ``file``."""
        if not any(rule_id.startswith(s) for s in self.select):
            return False
        if any(rule_id.startswith(s) for s in self.ignore):
            return False
        if self.per_file_ignores:
            rel = self._rel(file)
            for pattern, codes in self.per_file_ignores:
                if _match(rel, pattern) and any(rule_id.startswith(c) for c in codes):
                    return False
        return True

    def excluded(self, file: str) -> bool:
        """True when ``file`` matches an ``exclude`` glob."""
        rel = self._rel(file)
        return any(_match(rel, pattern) for pattern in self.exclude)

    def with_overrides(self, select: list[str] | None, ignore: list[str] | None) -> LintConfig:
        """This configuration with command-line ``--select``/``--ignore`` applied."""
        out = self
        if select:
            out = dataclasses.replace(out, select=tuple(_codes(select, "--select")))
        if ignore:
            out = dataclasses.replace(out, ignore=out.ignore + tuple(_codes(ignore, "--ignore")))
        return out


def _match(rel: str, pattern: str) -> bool:
    if fnmatch.fnmatch(rel, pattern):
        return True
    if "/" not in pattern and fnmatch.fnmatch(PurePath(rel).name, pattern):
        return True
    return pattern.endswith("/") and rel.startswith(pattern) or fnmatch.fnmatch(rel, pattern.rstrip("/") + "/*")


def _codes(values: Any, where: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise UsageError(f"{where}: expected a list of rule ids such as [\"KDP501\"], got {values!r}")
    for v in values:
        if not _CODE.match(v) or not any(i.startswith(v) for i in LINT_IDS):
            raise UsageError(f"{where}: {v!r} matches no lint rule (known: {', '.join(LINT_IDS)})")
    return list(values)


def load_config(path: Path) -> LintConfig:
    """Read ``[tool.k8sddp.lint]`` from ``path``; the default when the table is absent.

    Raises:
        UsageError: unreadable file, invalid TOML, unknown keys, bad rule ids (exit 2).
    """
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the read for ever
            raise UsageError(f"{path}: cannot read configuration: not a regular file")
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read configuration: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from exc
    table = data.get("tool", {}).get("k8sddp", {}).get("lint")
    root = path.resolve().parent
    if table is None:
        return LintConfig(root=root, source=str(path))
    where = f"{path}: [tool.k8sddp.lint]"
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table")
    unknown = set(table) - _KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_KEYS))})")
    select = tuple(_codes(table["select"], where + ".select")) if "select" in table else ("KDP5",)
    ignore = tuple(_codes(table.get("ignore", []), where + ".ignore"))
    exclude = table.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(e, str) for e in exclude):
        raise UsageError(f"{where}.exclude: expected a list of globs")
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise UsageError(f"{where}.per-file-ignores: expected a table of glob = [ids]")
    per_file = tuple((g, tuple(_codes(c, f"{where}.per-file-ignores.{g}"))) for g, c in pfi.items())
    return LintConfig(select, ignore, tuple(exclude), per_file, root, str(path))


_FOUND: dict[Path, Path | None] = {}


def clear_config_cache() -> None:
    """Forget the configuration files found so far (each lint run starts afresh)."""
    _FOUND.clear()


def find_config(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` holding ``[tool.k8sddp.lint]``, from ``start`` (a file or a
    folder) upwards, or None.

    Raises:
        UsageError: a ``pyproject.toml`` on the way (or its folder) cannot be read: its
            configuration cannot be ignored silently (exit 2).
    """
    d = start.resolve()
    if not d.is_dir():
        d = d.parent
    visited: list[Path] = []
    found: Path | None = None
    while True:
        if d in _FOUND:
            found = _FOUND[d]
            break
        visited.append(d)
        candidate = d / "pyproject.toml"
        try:
            is_file = candidate.is_file()
            text = candidate.read_text(encoding="utf-8", errors="replace") if is_file else ""
        except PermissionError as exc:
            raise UsageError(f"{candidate}: permission denied (cannot look for [tool.k8sddp.lint])") from exc
        except OSError as exc:
            raise UsageError(f"{candidate}: cannot read: {exc.strerror or exc}") from exc
        if is_file and (re.search(r"^\s*\[\s*tool\.k8sddp\.lint\b|^\s*tool\.k8sddp\.lint\b", text, re.M) or re.search(
                r"^\s*\[\s*tool\.k8sddp\s*\][^\[]*\blint\s*[=.]", text, re.M | re.S)):  # also dotted keys
            found = candidate
            break
        if d.parent == d:
            break
        d = d.parent
    for v in visited:
        _FOUND[v] = found
    return found
