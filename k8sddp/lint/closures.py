"""Nested functions (closures) and functions passed as arguments, for the walker.

A ``def`` inside a function is a project function of its own (:attr:`FuncInfo.parent
<k8sddp.lint.project.FuncInfo.parent>`): a call of its name in the enclosing function (or in
another function nested there) resolves to it (:func:`nested_target`), and the names it reads
from the enclosing scopes (:attr:`FuncInfo.free <k8sddp.lint.project.FuncInfo.free>`: the
DDP-wrapped model, the rank, a state only rank 0 set) take the values they hold in the caller
at each call (:func:`closure_mapping`), or, where no call in sight binds them (a function only
handed to a library), the values they hold where it is defined (:meth:`ClosureMixin.note_def`).
These are its parameters' values for the analysis (:meth:`k8sddp.lint.analyzer.Analyzer.param_vals_for`),
so its summary (collectives, rank-0 writes, return value) applies at its calls as for any
top-level helper (PAWS/MSN/I-JEPA: ``def train_step(): ...`` inside the epoch loop, ``def
save_checkpoint(epoch): if rank != 0: return`` inside ``main``).

A project function that calls one of its parameters (``def gpu_timer(closure): return
closure()``) records it (:attr:`Summary.runs <k8sddp.lint.events.Summary.runs>`); a call of it
that passes a project function for that parameter (``gpu_timer(train_step)``) runs that function
there, under the classes the helper calls it under (:func:`run_passed`), and a helper that hands
its parameter on to such a helper runs that parameter itself.
"""

from __future__ import annotations

import abc
import ast
import dataclasses
from typing import TYPE_CHECKING

from .calls_io import arg_of

if TYPE_CHECKING:
    from .events import Summary
    from .host import Host
    from .project import FuncInfo
    from .values import Val

__all__ = ["ClosureMixin", "RAN", "closure_mapping", "closure_val", "nested_target"]

#: A parameter a function calls: (its name, the classes that call it, under a condition of
#: unknown shape).
Run = tuple[str, int, bool]


def nested_target(f: FuncInfo, name: str, line: int) -> FuncInfo | None:
    """The nested function the bare name ``name`` called at ``line`` in ``f`` refers to: one
    defined in ``f``'s body or in an enclosing function's (the nearest scope first; of two
    definitions of one name in a scope, the last one above the call), unless a parameter of a
    scope in between binds the name; ``None`` for any other name."""
    scope: FuncInfo | None = f
    while scope is not None:
        defs = scope.nested.get(name)
        if defs:
            above = [d for d in defs if d.node.lineno <= line]  # type: ignore[union-attr]
            return above[-1] if above else defs[0]
        if name in scope.params:
            return None
        scope = scope.parent
    return None


def closure_mapping(env: dict[str, Val], g: FuncInfo) -> dict[str, Val]:
    """What a caller's environment ``env`` binds of ``g``'s closure: each free name (and each
    attribute chain on one, ``args.rank``) it holds a value for."""
    free = g.free
    if not free:
        return {}
    out: dict[str, Val] = {}
    for key, val in env.items():
        head = key.partition(".")[0] if "." in key else key
        if head in free:
            out[key] = val
    return out


def closure_val(v: Val) -> Val:
    """A closure value as the nested function sees it: a fact of its own scope (rank kind,
    wrapping, per-rank data), not computed from its parameters (the enclosing function's
    parameter names mean nothing there)."""
    if v.prank is None and not v.params:
        return v
    return dataclasses.replace(v, rank=v.kind, prank=None, params=frozenset())


#: The pseudo-parameter standing for what a call of parameter ``{}`` returns (``closure()``):
#: a helper's return value computed from it takes, at each call of the helper, the value the
#: function passed for it returns there (:meth:`ClosureMixin.run_passed`).
RAN = "{}()"


class ClosureMixin:
    """The walker's side of closures: ``def`` statements and calls of a parameter."""

    an: Host
    func: FuncInfo
    env: dict[str, Val]
    mask: int
    many: ast.AST | None
    silent: int
    #: nested function key -> what this walk bound of its closure where it is defined
    closure_defs: dict[str, dict[str, Val]]
    #: the parameters this function calls (:data:`Run`), in order
    param_runs: list[Run]

    def note_def(self, s: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A nested ``def``: remember the values of its closure here (used where no call
        of it binds them)."""
        if self.silent:
            return
        for g in self.func.nested.get(s.name, ()):
            if g.node is s:
                if g.free:
                    self.closure_defs[g.key] = closure_mapping(self.env, g)
                return

    _s_FunctionDef = note_def
    _s_AsyncFunctionDef = note_def

    def note_run(self, name: str, mask: int, many: bool) -> None:
        """A call of parameter ``name`` (``closure()``), by the classes ``mask``."""
        if not self.silent and name in self.func.params:
            run = (name, mask, many)
            if run not in self.param_runs:
                self.param_runs.append(run)

    def run_passed(self, node: ast.Call, f: FuncInfo, params: list[str], summ: Summary) -> dict[str, Val]:
        """The functions ``node`` (a call of ``f``, whose parameters after a bound ``self`` are
        ``params``) passes for the parameters ``f`` calls: each runs here, under the classes
        ``f`` calls it under. Returns ``{"name()": the value that call returns}`` (:data:`RAN`),
        for what ``f`` returns of it (``result, elapsed = gpu_timer(train_step)``)."""
        out: dict[str, Val] = {}
        for name, mask, many in summ.runs:
            arg = arg_of(node, params.index(name), name) if name in params else None
            if not isinstance(arg, (ast.Name, ast.Attribute)):
                continue
            if isinstance(arg, ast.Name) and arg.id in self.func.params:  # handed on
                self.note_run(arg.id, self.mask & mask, many or self.many is not None)
                continue
            target, bound = self.resolve_target(arg)
            if target is None or target is f:
                continue
            if f.launches:  # fairseq's call_main(cfg, main) spawns the workers that run main
                self.an.launched.add(target.key)
            saved = self.mask, self.many
            self.mask &= mask
            if many and self.many is None:
                self.many = node
            try:
                out[RAN.format(name)] = self.project_call(self.an.facts.call_of(arg, node), target, bound)
            finally:
                self.mask, self.many = saved
        return out

    @abc.abstractmethod
    def resolve_target(self, func: ast.expr) -> tuple[FuncInfo | None, bool]:
        """See :meth:`k8sddp.lint.calls.CallMixin.resolve_target`."""
        ...

    @abc.abstractmethod
    def project_call(self, node: ast.Call, f: FuncInfo, bound: bool) -> Val:
        """See :meth:`k8sddp.lint.calls.CallMixin.project_call`."""
        ...
