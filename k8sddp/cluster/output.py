"""kubectl-like output of created objects: ``-o name|yaml|json`` or the default sentence.

Formats as kubectl prints them (kubectl create -o ...): ``name`` is ``pytorchjob.kubeflow.org/NAME``;
``yaml`` and ``json`` are the object the server returned (for several objects, JSON and YAML wrap
them in a ``v1 List``); the default is ``pytorchjob.kubeflow.org/NAME created`` with
`` (server dry run)`` or `` (dry run)`` appended for dry runs.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

__all__ = ["FORMATS", "format_objects"]

FORMATS = ("name", "yaml", "json")


def _ref(obj: dict[str, Any]) -> str:
    kind = str(obj.get("kind", "")).lower()
    group = str(obj.get("apiVersion", "")).partition("/")[0] if "/" in str(obj.get("apiVersion", "")) else ""
    name = (obj.get("metadata") or {}).get("name", "")
    return f"{kind}.{group}/{name}" if group else f"{kind}/{name}"


def format_objects(
    objs: list[dict[str, Any]], fmt: str | None, *, verb: str = "created", dry_run: str | None = None
) -> str:
    """Text for ``objs`` in ``fmt`` (``None``: the default sentence), ending in a newline.

    Args:
        objs: the objects as the server (or the dry run) returned them.
        fmt: ``name``, ``yaml``, ``json`` or ``None``.
        verb: the default sentence's verb (``created``, ``replaced``, ``deleted``).
        dry_run: ``"server"``, ``"client"`` or ``None``.

    Raises:
        ValueError: an unknown format.
    """
    if fmt == "name":
        return "".join(_ref(o) + "\n" for o in objs)
    if fmt in ("json", "yaml"):
        data: Any = objs[0] if len(objs) == 1 else {"apiVersion": "v1", "kind": "List", "items": objs, "metadata": {}}
        if fmt == "json":
            return json.dumps(data, indent=4) + "\n"
        return str(yaml.safe_dump(data, sort_keys=True, default_flow_style=False))
    if fmt is None:
        suffix = {"server": " (server dry run)", "client": " (dry run)"}.get(dry_run or "", "")
        return "".join(f"{_ref(o)} {verb}{suffix}\n" for o in objs)
    raise ValueError(f"unknown output format {fmt!r} (expected one of {', '.join(FORMATS)})")
