"""KDP509 for a ``DistributedSampler`` built in a helper that returns it (or a loader holding it).

Such a sampler is used by the helper's callers, so it is judged there (docs/lint.md, KDP509):

- no call of the helper in the project (the caller is a file that was not linted, such as the
  ``main.py`` that imports a ``data/build.py`` linted alone): nothing is reported;
- ``shuffle=`` bound to a parameter of the helper (``DistributedSampler(ds, shuffle=shuffle)``):
  only the calls that pass ``True`` (or leave a ``True`` default) build a shuffling sampler;
- otherwise a call whose result (the names it is assigned to, the loader whose ``sampler=`` it is)
  never meets ``set_epoch`` in the caller's module, directly, through ``.sampler`` or through a
  project function it is passed to, makes the sampler a finding, at its construction.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from .project import Module, Project
from .treewalk import parents as parent_map

__all__ = ["Escape", "escape_of", "escaped_without_set_epoch"]

FuncNode = ast.FunctionDef | ast.AsyncFunctionDef


class Escape:
    """A sampler that leaves its function by ``return``.

    Attributes:
        func: the enclosing function's node.
        shuffle_param: the parameter ``shuffle=`` is bound to, or ``""`` (a literal ``True``).
    """

    __slots__ = ("func", "shuffle_param")

    def __init__(self, func: FuncNode, shuffle_param: str) -> None:
        self.func = func
        self.shuffle_param = shuffle_param


def _enclosing(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> FuncNode | None:
    p = parents.get(node)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        p = parents.get(p)
    return p if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _returned_names(func: FuncNode) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(func):
        if isinstance(n, ast.Return) and n.value is not None:
            elts = n.value.elts if isinstance(n.value, (ast.Tuple, ast.List)) else [n.value]
            out |= {ast.unparse(e) for e in elts if isinstance(e, (ast.Name, ast.Attribute))}
    return out


def _returned_loader_of(func: FuncNode, holders: set[str]) -> bool:
    """``return DataLoader(ds, sampler=sampler)`` with ``sampler`` one of ``holders``."""
    for n in ast.walk(func):
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Call):
            for k in n.value.keywords:
                if k.arg == "sampler" and isinstance(k.value, (ast.Name, ast.Attribute)) and ast.unparse(k.value) in holders:
                    return True
    return False


def escape_of(node: ast.Call, shuffle: ast.expr | None, holders: set[str],
              parents: dict[ast.AST, ast.AST]) -> Escape | None:
    """How the sampler built by ``node`` leaves its function, or ``None`` when it does not.

    Args:
        node: the ``DistributedSampler(...)`` call.
        shuffle: its ``shuffle=`` argument (``None``: not given, which means ``True``).
        holders: the names the sampler is bound to, and of the loaders whose ``sampler=`` it is.
        parents: child -> parent for the module.
    """
    func = _enclosing(node, parents)
    if func is None:
        return None
    p = parents.get(node)
    returned = isinstance(p, ast.Return) or (isinstance(p, ast.keyword) and isinstance(parents.get(p), ast.Call)
                                            and isinstance(parents.get(parents[p]), ast.Return))
    if not returned and not holders & _returned_names(func) and not _returned_loader_of(func, holders):
        return None
    params = {a.arg for a in func.args.args + func.args.kwonlyargs}
    if isinstance(shuffle, ast.Name):
        return Escape(func, shuffle.id) if shuffle.id in params else None
    return Escape(func, "")


def _calls_of(project: Project, mod: Module, func: FuncNode) -> Iterator[tuple[Module, ast.Call]]:
    """Every call of the module-level function ``func`` (of ``mod``) in the modules the project read."""
    mods = list(project.modules.values()) + [m for m in project._by_file.values() if m is not None]
    seen: set[int] = set()
    for m in mods:
        if id(m) in seen:
            continue
        seen.add(id(m))
        for n in m.nodes():
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                f = project.resolve_function(m, n.func.id)
                if f is not None and f.node is func:
                    yield m, n
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                    and n.func.attr == func.name:
                target = project.resolve_module_alias(m, n.func.value.id)
                if target is mod:
                    yield m, n


def _method_calls(mod: Module, func: FuncNode) -> Iterator[tuple[Module, ast.Call]]:
    """Every ``self.<name>(...)`` call of method ``func`` in the methods of its class (a top-level
    class of ``mod``): timesfm's ``self._create_dataloader(train_dataset, is_train=True)``."""
    for cls in mod.tree.body:
        if isinstance(cls, ast.ClassDef) and any(s is func for s in cls.body):
            for n in ast.walk(cls):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == func.name \
                        and isinstance(n.func.value, ast.Name) and n.func.value.id == "self":
                    yield mod, n


def _shuffles(call: ast.Call, func: FuncNode, param: str) -> bool:
    """True when ``call`` passes ``True`` for ``param`` (or leaves its default ``True``)."""
    if not param:
        return True
    names = [a.arg for a in func.args.args]
    if names[:1] == ["self"] and isinstance(call.func, ast.Attribute):
        names = names[1:]  # `self.method(...)`: the first argument is the second parameter
    for k in call.keywords:
        if k.arg == param:
            return isinstance(k.value, ast.Constant) and k.value.value is True
    if param in names and names.index(param) < len(call.args):
        a = call.args[names.index(param)]
        return isinstance(a, ast.Constant) and a.value is True
    defaults = dict(zip(names[len(names) - len(func.args.defaults):], func.args.defaults, strict=True))
    d = defaults.get(param)
    return isinstance(d, ast.Constant) and d.value is True


def _site_names(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> set[str]:
    """The names the result of ``call`` reaches at its call site: assignment targets (every
    name of a tuple target), and the loader it is passed to as ``sampler=``."""
    p = parents.get(call)
    node: ast.AST = call
    if isinstance(p, ast.keyword) and p.arg == "sampler":
        node, p = parents.get(p, p), parents.get(parents.get(p, p))
    if isinstance(p, ast.Assign) and p.value is node:
        out: set[str] = set()
        for t in p.targets:
            elts = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
            out |= {ast.unparse(e) for e in elts if isinstance(e, (ast.Name, ast.Attribute))}
        return out
    return set()


def escaped_without_set_epoch(
    project: Project, mod: Module, esc: Escape,
    sets_epoch: Callable[[Module, set[str]], bool],
) -> bool:
    """True when some call of ``esc.func`` builds a shuffling sampler, and no call that does
    reaches ``set_epoch`` with it (``sets_epoch(caller module, names at the call site)``)."""
    if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s is esc.func for s in mod.tree.body):
        calls = list(_calls_of(project, mod, esc.func))
    else:  # a method: its `self.` calls in its class; a nested function's callers are not found by name
        calls = list(_method_calls(mod, esc.func))
        if not calls:
            return False
    shuffling = [(m, c) for m, c in calls if _shuffles(c, esc.func, esc.shuffle_param)]
    if not shuffling:
        return False
    for m, c in shuffling:
        parents = parent_map(m.tree, m.nodes())
        names = _site_names(c, parents)
        if not names or sets_epoch(m, names):
            return False
        encl = _enclosing(c, parents)
        if encl is not None and (names & _returned_names(encl) or _returned_loader_of(encl, names)):
            return False  # handed on again (LOMO's get_train_dataloader): set_epoch is further out
    return True
