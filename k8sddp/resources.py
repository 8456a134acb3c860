"""Locate the data files that ship with k8sddp: Jinja templates and JSON Schemas.

In a wheel they live in ``k8sddp/_data/{templates,schemas}`` (hatch ``force-include``); in a source
checkout or an editable install they are the repository's top-level ``templates/`` and
``schemas/`` folders. Both layouts are searched, the packaged one first.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .errors import K8sddpError

_PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise K8sddpError(
        f"k8sddp's {name}/ folder is missing from this installation "
        f"(looked in {_PACKAGE_DIR / '_data' / name} and {_PACKAGE_DIR.parent / name}); reinstall k8sddp"
    )


def templates_dir() -> Path:
    """Return the folder holding the Jinja templates (``*.j2``).

    Raises:
        K8sddpError: the installation lacks the folder.
    """
    return _data_dir("templates")


def schemas_dir() -> Path:
    """Return the folder holding the JSON Schemas (``*.json``).

    Raises:
        K8sddpError: the installation lacks the folder.
    """
    return _data_dir("schemas")


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """Load and cache the JSON Schema ``schemas/<name>``.

    Args:
        name: file name inside ``schemas/``, e.g. ``"pytorchjob.structure.json"``.

    Returns:
        The parsed schema (do not mutate: it is shared).

    Raises:
        K8sddpError: the file is missing or not JSON.
    """
    path = schemas_dir() / name
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = json.load(fh)
    except (OSError, ValueError) as exc:
        raise K8sddpError(f"cannot load schema {path}: {exc}") from exc
    return data
