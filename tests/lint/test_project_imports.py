"""Imports of project code when one file of a project is linted alone (what the pre-commit hook
does): the folders up to the lint root are tried, then the installable project root above it (a
folder with ``setup.py``/``setup.cfg``/``pyproject.toml``, what ``pip install -e .`` makes
importable)."""

from __future__ import annotations

import shutil
from pathlib import Path

from k8sddp.lint import lint_paths

from .expect import expected_in_file

CASE = Path(__file__).parent / "fixtures" / "KDP512" / "fail" / "zero3_gather_after_rank0_save"
SCRIPT = Path("training") / "finetune" / "main.py"


def _found(path: Path) -> set[tuple[str, int, str]]:
    report = lint_paths([str(path)]).report
    return {(f.file, f.line, f.rule_id) for f in report.findings if not f.exempted_by}


def test_helper_found_in_the_installed_package_above() -> None:
    script = CASE / SCRIPT
    expected = expected_in_file(script, str(script))
    assert expected and _found(script) == expected


def test_without_a_project_marker_the_package_is_not_guessed(tmp_path: Path) -> None:
    copy = tmp_path / "proj"
    shutil.copytree(CASE, copy)
    (copy / "setup.py").unlink()
    got = _found(copy / SCRIPT)
    assert not any(rule == "KDP512" for _, _, rule in got), got
