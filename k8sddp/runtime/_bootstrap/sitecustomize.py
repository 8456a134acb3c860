"""Injected by ``k8sddp launch`` (first on ``PYTHONPATH``): arms zero-code guarding in torchrun's
worker processes only (:mod:`k8sddp.runtime.autoguard`), then runs the ``sitecustomize`` this one
shadows, if there is one. Costs one environment lookup in every other Python process."""

import os
import sys


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _pkg_root() -> None:
    """Import ``k8sddp`` from the tree this folder belongs to (``<root>/k8sddp/runtime/_bootstrap``),
    the launcher's own code: torchrun may run the workers under another interpreter (a pyenv shim,
    the system ``torchrun`` next to a venv's ``k8sddp``) that has no k8sddp, an older one, or a
    stray ``k8sddp`` namespace folder. The root stays on ``sys.path`` only for that import."""
    if "k8sddp" in sys.modules:
        return
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if not os.path.isfile(os.path.join(root, "k8sddp", "__init__.py")):
        return
    sys.path.insert(0, root)
    try:
        import k8sddp  # noqa: F401
    finally:
        with __import__("contextlib").suppress(ValueError):
            sys.path.remove(root)


if os.environ.get("K8SDDP_AUTOGUARD_ARM") and os.environ.get("LOCAL_RANK") and os.environ.get("TORCHELASTIC_RUN_ID"):
    try:
        _pkg_root()
        from k8sddp.runtime.autoguard import bootstrap

        bootstrap()
    except Exception as _exc:  # never break the interpreter's start
        sys.stderr.write(f"k8sddp autoguard: bootstrap failed: {_exc!r}\n")
_chain()
