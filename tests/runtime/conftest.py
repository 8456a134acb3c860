"""Fixtures of the runtime tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """An empty ``K8SDDP_ARTIFACT_DIR``."""
    path = tmp_path / "artifacts"
    path.mkdir()
    return path
