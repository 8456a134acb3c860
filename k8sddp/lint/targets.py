"""What a call's callee names in the linted project: a function, a method (on ``self``, on a
local bound to a project class, on ``Cls(...)``), a class's ``__init__`` (also through a
submodule of an imported package: ``dnnlib.util.Logger(...)``), or a nested function; and which
locals hold instances of project classes or model-running library functions.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from . import knowledge as K
from .closures import nested_target
from .exprs import ExprEval

if TYPE_CHECKING:
    from .host import Host
    from .project import FuncInfo, Module, Project

__all__ = ["TargetMixin"]


class TargetMixin(ExprEval):
    """Callee resolution for :class:`k8sddp.lint.calls.CallMixin`."""

    an: Host
    instances: dict[str, tuple[Module, str]]
    fn_alias: dict[str, str]

    def resolve_target(self, func: ast.expr) -> tuple[FuncInfo | None, bool]:
        """The project function a call's callee names, and whether ``self`` is bound."""
        proj = self.an.project
        if isinstance(func, ast.Name):
            if (self.func.nested or self.func.parent) and (inner := nested_target(self.func, func.id, func.lineno)):
                return inner, False  # a function defined in this one, or in an enclosing one
            if func.id in self.instances:  # `early_stopping(loss, model, path)`: its class's __call__
                call = self.method_of(self.instances[func.id], "__call__")
                if call is not None:
                    return call, True
            if func.id in self.env or func.id in self.locals_:
                return None, False
            f = proj.resolve_function(self.mod, func.id)
            if f is not None:
                return f, False
            cls = proj.resolve_class(self.mod, func.id)
            if cls is not None:
                init = cls[0].classes[cls[1]].get("__init__")
                return init, True
            return None, False
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            if owner == "self" and self.func.cls:
                methods = self.mod.classes.get(self.func.cls, {})
                if func.attr in methods:  # `self.model(x)` with a @property `model`: calls what it returns
                    return (None, False) if "property" in self.an.decorators(methods[func.attr]) else (methods[func.attr], True)
                for base in self.mod.class_bases.get(self.func.cls, []):
                    found = proj.resolve_class(self.mod, base.split(".")[-1])
                    if found and func.attr in found[0].classes[found[1]]:
                        return found[0].classes[found[1]][func.attr], True
                return None, False
            if owner in self.instances:  # `ev = Evaluator(...)` ... `ev.evaluate()`
                return self.method_of(self.instances[owner], func.attr), True
            if owner in self.env or owner in self.locals_:
                return None, False
            if (cls := self.global_instance(owner)) is not None:  # MiniMA's module-level `logger = Logger()`
                return self.method_of(cls, func.attr), True
            target = proj.resolve_module_alias(self.mod, owner)
            if target is not None and func.attr in target.functions:
                return target.functions[func.attr], False
            if target is not None and func.attr in target.classes:  # `dnnlib.util.Logger(...)`: its __init__
                return self.method_of((target, func.attr), "__init__"), True
            if target is None and owner[:1].isupper() and (cls := proj.resolve_class(self.mod, owner)) is not None \
                    and (m := self.method_of(cls, func.attr)) is not None:  # ABINet's `Logger.init(workdir, ...)`
                kind = {"staticmethod", "classmethod"} & set(self.an.decorators(m))
                return (m, "classmethod" in kind) if kind else (None, False)
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute)
                and isinstance(head_node := func.value.value, ast.Name) and head_node.id in self.mod.aliases
                and head_node.id not in self.env and head_node.id not in self.locals_
                and proj.resolve_module_alias(self.mod, head_node.id) is not None):
            # `dnnlib.util.Logger(...)`: a submodule of an imported project package
            head = head_node.id
            target = proj.resolve_import(self.mod, self.mod.aliases[head] + "." + func.value.attr, 0)
            if target is not None and func.attr in target.functions:
                return target.functions[func.attr], False
            if target is not None and func.attr in target.classes:
                return self.method_of((target, func.attr), "__init__"), True
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
                and func.value.func.id == "super" and self.func.cls):  # `super().__init__(..., save_to_disk, ...)`
            for base in self.mod.class_bases.get(self.func.cls, []):
                found = proj.resolve_class(self.mod, base.split(".")[-1])
                if found is not None and (m := self.method_of(found, func.attr)) is not None:
                    return m, True
            return None, False
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
                and func.value.func.id not in self.env):  # `Evaluator(loader).evaluate()`
            cls = proj.resolve_class(self.mod, func.value.func.id)
            if cls is not None:
                return self.method_of(cls, func.attr), True
        return None, False

    def note_instance(self, key: str, value_node: ast.expr | None) -> None:
        """Remember that ``key`` now holds an instance of a project class (``ev = Evaluator()``),
        or one of the library functions that run a model (``fun = flop_count``: SlowFast's
        ``get_model_stats``)."""
        name = value_node.attr if isinstance(value_node, ast.Attribute) else value_node.id if isinstance(value_node, ast.Name) else ""
        if name in K.MODEL_RUNNER_NAMES and (q := self._dotted(value_node) or "") in K.MODEL_RUNNERS:  # type: ignore[arg-type]
            self.fn_alias[key] = q
        elif self.fn_alias:
            self.fn_alias.pop(key, None)
        proj = self.an.project
        func = value_node.func if isinstance(value_node, ast.Call) else None
        cls = None
        if isinstance(func, ast.Name):
            cls = proj.resolve_class(self.mod, func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id not in self.env:
            target = proj.resolve_module_alias(self.mod, func.value.id)  # `saver = utils.CheckpointSaver(...)`
            cls = proj.resolve_class(target, func.attr) if target is not None else None
        if cls is None and func is not None:  # `train_state = utils.initialize_train_state(...)` (U-ViT)
            made, _ = self.resolve_target(func)
            cls = factory_class(self.an.project, made) if made is not None and not made.cls else None
        if cls is not None:
            self.instances[key] = cls
        else:
            self.instances.pop(key, None)

    def global_instance(self, name: str, mod: Module | None = None, hops: int = 2) -> tuple[Module, str] | None:
        """The project class (module, class name) of a module-level name that ``mod``'s (this
        module's) top level binds once, to a call of that class (``logger = Logger()``), or that
        it imports from a module that does (``from log_utils import logger``); else ``None``."""
        mod = mod or self.mod
        table = self.an.global_instances.get(mod.path)
        if table is None:
            bound: dict[str, list[ast.expr]] = {}
            for st in mod.tree.body:
                if isinstance(st, ast.Assign):
                    for t in st.targets:
                        if isinstance(t, ast.Name):
                            bound.setdefault(t.id, []).append(st.value)
            table = {}
            for key, values in bound.items():
                v = values[0]
                if len(values) == 1 and isinstance(v, ast.Call) and isinstance(v.func, ast.Name) \
                        and (cls := self.an.project.resolve_class(mod, v.func.id)) is not None:
                    table[key] = cls
            self.an.global_instances[mod.path] = table
        if name in table or hops == 0 or (origin := mod.imported_from.get(name)) is None:
            return table.get(name)
        target = self.an.project.resolve_import(mod, origin[0], origin[1])
        return self.global_instance(origin[2], target, hops - 1) if target is not None and target is not mod else None

    def method_of(self, cls: tuple[Module, str], name: str) -> FuncInfo | None:
        """Method ``name`` of project class ``cls`` (module, class name), looked up in its bases too."""
        mod, cname = cls
        methods = mod.classes.get(cname, {})
        if name in methods:
            return methods[name]
        for base in mod.class_bases.get(cname, []):
            found = self.an.project.resolve_class(mod, base.split(".")[-1])
            if found and found != cls and name in found[0].classes[found[1]]:
                return found[0].classes[found[1]][name]
        return None

    def project_instance(self, recv: ast.expr | None) -> bool:
        """Whether ``recv`` is an object of a known project class (a local bound to one, or a
        constructor call): its class lacks a method it is called with, so that call is no
        other project class's method (:meth:`k8sddp.lint.calls.CallMixin.duck_writes`)."""
        if isinstance(recv, ast.Name):
            return recv.id in self.instances
        return isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name) and \
            self.an.project.resolve_class(self.mod, recv.func.id) is not None

    def param_names(self, *nodes: ast.expr | None) -> frozenset[str]:
        """The parameters of this function that ``nodes`` are, when each is one by name (the models
        a forward runs through: :attr:`~k8sddp.lint.events.Event.via`), else the empty set."""
        if not nodes or not all(isinstance(n, ast.Name) and n.id in self.func.params for n in nodes):
            return frozenset()
        return frozenset(n.id for n in nodes if isinstance(n, ast.Name))


def factory_class(project: Project, f: FuncInfo) -> tuple[Module, str] | None:
    """The project class every ``return`` of function ``f`` gives an instance of, as (module,
    class name): ``return TrainState(...)``, or a local bound once to such a call and returned
    (U-ViT's ``utils.initialize_train_state``); ``None`` when a return gives anything else."""
    bound: dict[str, list[ast.expr]] = {}
    returns: list[ast.expr | None] = []
    for n in ast.walk(f.node):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            bound.setdefault(n.targets[0].id, []).append(n.value)
        elif isinstance(n, ast.Return):
            returns.append(n.value)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)) and n is not f.node:
            return None  # a nested scope's returns are not f's: keep it simple
    found: set[tuple[str, str]] = set()
    out: tuple[Module, str] | None = None
    for value in returns:
        if isinstance(value, ast.Name) and len(bound.get(value.id, [])) == 1:
            value = bound[value.id][0]
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)):
            return None
        cls = project.resolve_class(f.module, value.func.id)
        if cls is None:
            return None
        found.add((cls[0].path, cls[1]))
        out = cls
    return out if len(found) == 1 else None
