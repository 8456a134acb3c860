"""A finding before it is placed in a file (rule, JSON path inside the object, message): now
:class:`k8sddp.findings.RawFinding` and :func:`k8sddp.findings.json_path`, re-exported here
where the validator's checks import them. The workload kinds (:mod:`k8sddp.kinds`) import them
from :mod:`k8sddp.findings`, so loading a kind does not run ``k8sddp/validate/__init__.py``."""

from __future__ import annotations

from ..findings import RawFinding, json_path

__all__ = ["RawFinding", "json_path"]
