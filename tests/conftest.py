"""Shared test helpers: repository paths, the reference folder, an in-process CLI runner."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO.parent / "shared" / "reference"


@dataclasses.dataclass
class CliResult:
    """Exit code and captured output of one in-process CLI run."""

    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Run ``k8sddp ARGS...`` in-process: ``cli("validate", "x.yaml").code``."""
    from k8sddp.cli import main

    def run(*args: str) -> CliResult:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def reference() -> Path:
    """``../shared/reference`` beside the checkout; the test is skipped where it is absent."""
    if not REFERENCE.is_dir():
        pytest.skip("../shared/reference is not present")
    return REFERENCE
