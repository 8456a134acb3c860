"""Shared test helpers: repository paths, the reference folder, an in-process CLI runner."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO.parent / "shared" / "reference"


#: The pytest-xdist group of every ``slow`` test (README, .ci/run: ``-n 2 --dist loadgroup``).
REAL_PROCESSES = "real-processes"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the groups off the items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, keep the tests that start real processes on one worker, in order.

    Every ``slow`` test (real torchrun and gloo ranks, Ray, pip and pre-commit installs) joins the
    group :data:`REAL_PROCESSES`, and every test of ``tests/kube`` the group ``kube`` (one control
    plane per session), so that with ``--dist loadgroup`` one worker runs them one after another, as a plain
    ``pytest`` does: no two real runs compete for the two cores their timing bounds were set for,
    for ports picked in advance (``free_port``, the local runner's master ports) or for a Ray
    cluster, and module fixtures that start a real run (``tests/ray``'s cluster, the uninterrupted
    reference run of ``tests/runtime/test_runtime_e2e.py``) start once. The other worker runs the
    in-process tests meanwhile. Without ``-n`` the marks change nothing.
    """
    kube = REPO / "tests" / "kube"  # tests/kube/conftest.py marks these ``kube``, after this hook
    for item in items:
        if kube in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("kube"))
        elif item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group(REAL_PROCESSES))


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
