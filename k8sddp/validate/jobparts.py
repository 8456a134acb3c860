"""Read the parts of a PyTorchJob the checks need, whatever shape a broken manifest gives them.

Every reader returns ``None`` or an empty list where the manifest holds the wrong type: layer 1
(the structure schema) reports the shape; the guardrail code skips what it cannot read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: ``dict`` first: ``isinstance`` against the ``Mapping`` ABC alone costs several times more, and
#: these checks run many times for every manifest.
MAPPING = (dict, Mapping)


def get(obj: Any, *path: Any) -> Any:
    """``obj[path[0]][path[1]]...``, or ``None`` where a key, index or container is missing."""
    for part in path:
        if isinstance(obj, MAPPING):
            obj = obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and part < len(obj):
            obj = obj[part]
        else:
            return None
    return obj


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a list, else ``[]``."""
    return value if isinstance(value, list) else []


def replicas(job: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(replica type, replica spec)`` of ``spec.pytorchReplicaSpecs`` that are objects."""
    specs = get(job, "spec", "pytorchReplicaSpecs")
    if not isinstance(specs, MAPPING):
        return []
    return [(str(k), v) for k, v in specs.items() if isinstance(v, MAPPING)]


def pytorch_container(replica: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]] | None:
    """``(index, container)`` of the first container named ``pytorch`` in a replica, if any."""
    containers = get(replica, "template", "spec", "containers")
    if isinstance(containers, list):
        for i, c in enumerate(containers):
            if isinstance(c, MAPPING) and c.get("name") == "pytorch":
                return i, c
    return None
