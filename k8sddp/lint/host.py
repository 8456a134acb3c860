"""What the per-function walker asks of the whole-project analysis.

:class:`Host` is the interface :class:`k8sddp.lint.flow.Walker` and its call classification
(:mod:`k8sddp.lint.calls`) use; :class:`k8sddp.lint.analyzer.Analyzer` provides it. Typing the
walker against this protocol instead of the analyzer keeps the import graph acyclic: the analyzer
imports the walker, never the other way round.
"""

from __future__ import annotations

import ast
from typing import Any, Protocol

from .events import Summary
from .project import FuncInfo, Module, Project
from .scopes import NodeFacts
from .values import Val

__all__ = ["Host"]


class Host(Protocol):
    """The analysis state a walker reads (summaries, parameter values, module environments) and
    the calls it reports back (:meth:`record_call`)."""

    project: Project
    summaries: dict[str, Summary]
    spawn_targets: set[str]
    class_attrs: dict[tuple[str, str], dict[str, Val]]
    module_env: dict[str, dict[str, Val]]
    init_facts: dict[str, bool]
    launched: set[str]
    #: per function key, what its callers pass to each parameter (joined over its call sites)
    param_vals: dict[str, dict[str, Val]]
    #: per module path, its module-level names bound once to a project class instance
    global_instances: dict[str, dict[str, tuple[Module, str]]]
    #: per-node syntactic facts, computed once per lint run
    facts: NodeFacts

    def loop_carried(self, loop: ast.AST) -> bool:
        """True when values flow from one iteration of ``loop`` to the next."""
        ...

    def local_names(self, f: FuncInfo) -> set[str]:
        """The names ``f`` binds locally (assigned, parameters, loop targets)."""
        ...

    def unique_method(self, name: str) -> FuncInfo | None:
        """The method ``name`` when exactly one project class defines it."""
        ...

    def overridden(self, f: FuncInfo) -> bool:
        """True when a project subclass of ``f``'s class defines a method of ``f``'s name."""
        ...

    def decorators(self, f: FuncInfo) -> list[str]:
        """Terminal names of ``f``'s decorators (``property``, ``rank_zero_only``)."""
        ...

    def global_names(self, f: FuncInfo) -> frozenset[str]:
        """The names ``f`` declares ``global``."""
        ...

    def is_rank_zero_only(self, f: FuncInfo) -> bool:
        """True when ``f`` is decorated to run on rank 0 only (``@rank_zero_only``)."""
        ...

    def is_lightning(self, f: FuncInfo) -> bool:
        """True when ``f`` is a method of a LightningModule."""
        ...

    def param_vals_for(self, f: FuncInfo) -> dict[str, Val]:
        """The values ``f``'s parameters take, joined over its call sites."""
        ...

    def record_call(self, f: FuncInfo, mapping: dict[str, Val], walker: Any) -> None:
        """Remember one call of ``f`` (its argument values) made in ``walker``."""
        ...


def caller_ranked(an: Host, key: str) -> frozenset[str]:
    """The parameters of function ``key`` to which its callers pass a rank (joined over its call
    sites); none for an ``mp.spawn`` target or a launched worker, whose process index is no
    caller's argument (:func:`k8sddp.lint.scopes.param_guard`)."""
    if key in an.spawn_targets or key in an.launched:
        return frozenset()
    return frozenset(p for p, v in an.param_vals.get(key, {}).items() if v.kind)
