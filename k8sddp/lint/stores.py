"""Stores that outlive one walk: attributes of project classes and module globals.

A function's bindings end with it, but three kinds of store are read by other functions: ``self.x``
(and ``self.cfg.x``) in a method, read by the class's other methods; ``learner.is_master =
(replica_id == 0)`` on an instance of a project class, made outside it (diffwave's
``_train_impl``), read by its methods as ``self.is_master``; and a module global, bound by the
module body or by a function that declares it ``global`` (SparK's ``dist.initialize()``). The
walker records them here; :meth:`k8sddp.lint.analyzer.Analyzer.run` joins them over the project
and walks again the functions that read a value that changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .values import Val, join

if TYPE_CHECKING:
    from .project import FuncInfo, Module

__all__ = ["record_store"]


class Walker(Protocol):
    """What :func:`record_store` uses of the statement walker (:class:`k8sddp.lint.flow.Walker`)."""

    func: FuncInfo
    is_module: bool
    globals_: frozenset[str]
    instances: dict[str, tuple[Module, str]]
    attr_stores: dict[str, Val]
    inst_stores: dict[tuple[str, str], dict[str, Val]]
    menv_stores: dict[str, Val]
    solo: int


def _put(table: dict[str, Val], name: str, val: Val) -> None:
    table[name] = join(table[name], val) if name in table else val


def record_store(w: Walker, key: str, val: Val) -> None:
    """Record the binding ``key = val`` (``key``: an environment key, ``self.x`` or ``name``)
    where other functions read it: the class attributes of ``w``'s class, those of the project
    class an instance ``name`` holds (``name.x``), the module's globals."""
    head, _, rest = key.partition(".")
    if head == "self" and rest and rest.count(".") <= 1 and w.func.cls:  # self.x, self.cfg.x
        _put(w.attr_stores, rest, val)
    elif rest and "." not in rest and "[" not in key and head in w.instances:  # learner.is_master = ...
        mod, cls = w.instances[head]
        _put(w.inst_stores.setdefault((mod.path, cls), {}), rest, val)
    if w.solo:  # an arm no distributed run takes (a launcher's fallback): not what others read
        return
    if (w.is_module and not rest and "[" not in key) or key in w.globals_:  # `global __rank` (scopes.global_names)
        w.menv_stores[key] = val
