"""Every package that takes part in validation imports on its own, whichever comes first.

The import graph has no cycle (tests/test_architecture.py), but Python also runs a package's
``__init__`` before any of its modules: ``k8sddp/validate/__init__.py`` loads the engine and the
render package (which registers the DDPJob wrapper), and the kinds import modules under
``validate/``. A fresh interpreter per first import shows that no order leaves a module half
loaded (``ImportError: cannot import name ... partially initialized module``), and that the
DDPJob wrapper is registered whichever package was imported first.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

FIRST = [
    "k8sddp.kinds",
    "k8sddp.kinds.base",
    "k8sddp.kinds.ddpjob",
    "k8sddp.kinds.registry",
    "k8sddp.validate",
    "k8sddp.validate.engine",
    "k8sddp.validate.checks",
    "k8sddp.render",
    "k8sddp.render.engine",
    "k8sddp.render.trainer",
    "k8sddp.admission.review",
]

CHECK = (
    "import sys, {first}\n"
    "from k8sddp import kinds\n"
    "w = kinds.lookup_wrapper('k8sddp.dev/v1alpha1', 'DDPJob')\n"
    "sys.exit(0 if w is not None and type(w).__name__ == 'DDPJobSpec' else 3)\n"
)


@pytest.mark.parametrize("first", FIRST)
def test_imports_first_in_a_fresh_interpreter(first: str) -> None:
    proc = subprocess.run([sys.executable, "-c", CHECK.format(first=first)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"import {first} first: exit {proc.returncode}\n{proc.stderr}"
