"""Cached questions about the project's functions and classes that the walker asks the analyzer.

Each answer is computed once per lint run: the names a function declares ``global``, the
parameters it passes as ``rank=`` to ``init_process_group``, whether a subclass overrides a
method, and which project class alone defines a method name.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from . import knowledge as K
from .scopes import global_names, pg_rank_params

if TYPE_CHECKING:
    from .project import FuncInfo, Module, Project

__all__ = ["LookupMixin"]


class LookupMixin:
    """The analyzer's cached lookups (:class:`k8sddp.lint.analyzer.Analyzer` inherits them)."""

    project: Project

    def __init__(self) -> None:
        self._globals: dict[str, frozenset[str]] = {}
        self._pg_rank: dict[str, frozenset[str]] = {}
        self._overridden: dict[str, bool] = {}
        self._methods: dict[str, FuncInfo] | None = None
        self._methods_n = 0

    def all_modules(self) -> list[Module]:
        """Every module known so far (the analyzer's)."""
        raise NotImplementedError

    def unique_method(self, name: str) -> FuncInfo | None:
        """The method ``name`` when exactly one project class defines it (and it is not a
        dunder or a name as common as :data:`~k8sddp.lint.knowledge.COMMON_METHODS`), else
        ``None`` (cached per run)."""
        if self._methods is None:  # the classes the linted modules import by name: load their modules
            for mod in list(self.project.modules.values()):
                for local in mod.imported_from:
                    self.project.resolve_class(mod, local)
        if self._methods is None or self._methods_n != self.project.generation:  # imports load modules as they go
            self._methods_n = self.project.generation
            found: dict[str, list[FuncInfo]] = {}
            for mod in self.all_modules():
                for methods in mod.classes.values():
                    for mname, fi in methods.items():
                        found.setdefault(mname, []).append(fi)
            self._methods = {k: v[0] for k, v in found.items() if len(v) == 1}
        if name.startswith("__") or name in K.COMMON_METHODS:
            return None
        return self._methods.get(name)

    def overridden(self, f: FuncInfo) -> bool:
        """True when a project class derived from ``f``'s class defines a method of ``f``'s name
        (cached): ``self.save()`` in DPO's ``BasicTrainer.train`` runs ``FSDPTrainer.save``, which
        writes on rank 0 only, on the multi-GPU runs. The call's writes are then left to the
        methods themselves."""
        if f.key not in self._overridden:
            self._overridden[f.key] = bool(f.cls) and any(
                f.cls in {b.split(".")[-1] for b in bases} and f.name in mod.classes.get(cname, {})
                and not (mod is f.module and cname == f.cls)  # `class Logger(logging.Logger)` is not its own subclass
                for mod in self.all_modules() for cname, bases in mod.class_bases.items())
        return self._overridden[f.key]

    def pg_rank_params(self, f: FuncInfo) -> frozenset[str]:
        """The parameters of ``f`` it passes as ``rank=`` to ``init_process_group`` (cached):
        diffwave's ``train_distributed(replica_id, ...)``, spawned from a ``__main__.py`` that
        linting ``learner.py`` does not read, is given its rank that way."""
        if f.key not in self._pg_rank:  # (a module that never names init_process_group: no walk)
            self._pg_rank[f.key] = pg_rank_params(f.node) if "init_process_group" in f.module.source else frozenset()
        return self._pg_rank[f.key]

    def global_names(self, f: FuncInfo) -> frozenset[str]:
        """The names ``f`` declares ``global`` (cached): its stores to them are module globals."""
        if f.key not in self._globals:
            self._globals[f.key] = global_names(f.node) if not isinstance(f.node, ast.Module) else frozenset()
        return self._globals[f.key]

