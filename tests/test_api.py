"""The public API is deliberate: sorted ``__all__`` lists that resolve, and a docstring on every
public module, class and function (argument shapes, units, errors, sources live there)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import k8sddp


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(k8sddp.__path__, "k8sddp.") if not m.name.endswith("__main__"))


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # an optional extra (torch, kubernetes) that is not installed
        pytest.skip(f"{name}: {exc}")


@pytest.mark.parametrize("name", ["k8sddp", *_modules()])
def test_all_is_sorted_and_resolves(name: str):
    module = _import(name)
    exported = getattr(module, "__all__", None)
    if exported is None:
        return
    assert list(exported) == sorted(exported), f"{name}.__all__ is not sorted"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names missing {attr}"


@pytest.mark.parametrize("name", _modules())
def test_public_objects_have_docstrings(name: str):
    module = _import(name)
    assert module.__doc__, f"module {name} has no docstring"
    missing = []
    for attr, obj in vars(module).items():
        if attr.startswith("_") or getattr(obj, "__module__", None) != name:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not inspect.getdoc(obj):
                missing.append(attr)
            if inspect.isclass(obj):
                for meth_name, meth in vars(obj).items():
                    if not meth_name.startswith("_") and inspect.isfunction(meth) and not inspect.getdoc(meth):
                        missing.append(f"{attr}.{meth_name}")
    assert not missing, f"{name}: no docstring on {', '.join(missing)}"
