"""What ``k8sddp lint`` does with inputs it cannot lint (review of issue 7, items 8-10 and 14):
unreadable folders and files are exit 2 with a message naming each (never a traceback, never
skipped silently), FIFOs and other non-regular files are never opened (counted as skipped), and
every missing path is named.

Permission cases run as ``nobody`` (effective ids, in this process) when the suite runs as root,
since root passes every permission check.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8sddp.cli import build_parser, main

NOBODY = 65534
CLEAN = "import torch\n\nx = torch.zeros(1)\n"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder under /tmp that ``nobody`` can enter (pytest's tmp_path is root's, mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix="k8sddp-lint-"))
    d.chmod(0o777)
    try:
        yield d
    finally:
        for p in [d, *d.rglob("*")]:
            with contextlib.suppress(OSError):
                p.chmod(0o777 if p.is_dir() else 0o666)
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Run the body as ``nobody`` when root (effective ids only, restored after)."""
    if os.geteuid() != 0:
        yield
        return
    build_parser()  # import every command module first: the interpreter's files are root's
    import k8sddp.lint.engine  # noqa: F401
    import k8sddp.reporters  # noqa: F401

    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def _lint(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["lint", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_unreadable_folder_named(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = shared_dir / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "a.py").write_text(CLEAN)
    locked.chmod(0)
    with unprivileged():
        code, out, err = _lint(capsys, str(locked))
    assert code == 2, out + err
    assert f"{locked}: permission denied" in err and "Traceback" not in out + err


def test_unreadable_subfolder_is_not_skipped(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = shared_dir / "d2"
    (top / "inner").mkdir(parents=True)
    (top / "ok.py").write_text(CLEAN)
    (top / "inner" / "hidden.py").write_text(CLEAN)
    (top / "inner").chmod(0)
    with unprivileged():
        code, out, err = _lint(capsys, str(top))
    assert code == 2, out + err
    assert f"{top / 'inner'}: permission denied" in err


def test_unreadable_file_in_folder_and_pyproject(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = shared_dir / "d"
    top.mkdir()
    (top / "a.py").write_text(CLEAN)
    (top / "b.py").write_text(CLEAN)
    (top / "b.py").chmod(0)
    with unprivileged():
        code, _, err = _lint(capsys, str(top))
    assert code == 2 and f"{top / 'b.py'}: permission denied" in err
    (top / "b.py").chmod(0o644)
    (top / "pyproject.toml").write_text("[tool.k8sddp.lint]\nignore = ['KDP507']\n")
    (top / "pyproject.toml").chmod(0)
    with unprivileged():
        code, _, err = _lint(capsys, str(top / "a.py"))
    assert code == 2 and f"{top / 'pyproject.toml'}: permission denied" in err


def test_fifo_is_skipped_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "d3"
    d.mkdir()
    (d / "ok.py").write_text(CLEAN)
    os.mkfifo(d / "fifo.py")  # opening it for reading would block forever
    code, out, err = _lint(capsys, str(d))
    assert code == 0, out + err
    assert "1 file(s) checked" in out and "skipped 1 (not a regular file 1)" in out
    code, out, _ = _lint(capsys, str(d / "fifo.py"), str(d / "ok.py"))
    assert code == 0 and "not a regular file 1" in out


def test_every_missing_path_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = tmp_path / "ok.py"
    ok.write_text(CLEAN)
    code, _, err = _lint(capsys, str(tmp_path / "missing.py"), str(ok), str(tmp_path / "not_there"))
    assert code == 2
    assert "missing.py: no such file or directory" in err and "not_there: no such file or directory" in err


def test_config_that_is_no_regular_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Newcomer review of issue 17: ``--config FIFO`` blocked for ever reading it."""
    ok = tmp_path / "ok.py"
    ok.write_text(CLEAN)
    os.mkfifo(tmp_path / "pyproject.toml")
    for cfg in (tmp_path / "pyproject.toml", tmp_path):
        code, _, err = _lint(capsys, "--config", str(cfg), str(ok))
        assert code == 2 and f"{cfg}: cannot read configuration: not a regular file" in err, err


def test_deeply_nested_code_is_located_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Newcomer review of issue 17: a rank test 400 terms deep crashed a message (RecursionError in
    ast.unparse); a conditional expression 10,000 deep made the parser raise MemoryError."""
    terms = " + ".join(["rank"] + ["1"] * 400)
    deep = tmp_path / "deep.py"
    deep.write_text(
        "import datetime\nimport torch\nimport torch.distributed as dist\n"
        'dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60))\n'
        f"rank = dist.get_rank()\nif {terms} == 3:\n    dist.barrier()\n")
    code, out, err = _lint(capsys, str(deep))
    assert code == 1 and "Traceback" not in err, err
    assert "deep.py:7:5: error KDP503" in out, out  # (its condition named in full, or by line where
    # the recursion limit in force stops ast.unparse: the suite may run under a raised one)
    tern = tmp_path / "tern.py"
    tern.write_text("x = " + "1 if c else " * 10_000 + "1\n")
    code, out, err = _lint(capsys, str(tern))
    assert code == 1 and "Traceback" not in err, err
    assert "tern.py:1: error KDP500 cannot parse" in out, out
