"""Put this folder first on PYTHONPATH to run Python as on a fresh ``pip install 'k8sddp[train]'``
without NumPy (torch's wheel does not depend on it): every ``import numpy`` raises
ModuleNotFoundError, as a missing module does. ``importlib.util.find_spec("numpy")`` gets a spec
without an origin (torch._dynamo probes with it and must not crash). Used by the runtime tests
(review of issue 3, item 1: ``broadcast_object_list`` and ``all_gather_object`` need NumPy, which
broke every multi-rank run on such an install)."""

import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec


class _Missing(Loader):
    def create_module(self, spec):  # noqa: D102
        raise ModuleNotFoundError(f"No module named {spec.name!r} (blocked by tests/runtime/nonumpy)",
                                  name=spec.name)

    def exec_module(self, module):  # noqa: D102 - never reached
        raise ModuleNotFoundError(module.__name__)


class _NoNumpy(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: D102
        if name == "numpy" or name.startswith("numpy."):
            return ModuleSpec(name, _Missing(), origin=None)
        return None


sys.meta_path.insert(0, _NoNumpy())
