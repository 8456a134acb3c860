"""Folders a script puts on ``sys.path`` itself, so that its imports of them are followed.

Research repositories often run a script from a ``tools/`` folder that first makes a sibling
``lib/`` importable, directly or through a helper module imported for that effect alone (the
HRNet idiom ``import _init_paths``, whose body is ``add_path(osp.join(osp.dirname(__file__),
'..', 'lib'))``), or ``sys.path.insert(0, 'third_party/CenterNet2/')`` (Detic). The folders are
read statically from module-level statements; an expression this module cannot evaluate
(an environment variable, a command-line option) adds nothing.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from typing import Protocol

from .treewalk import dotted


class Module(Protocol):
    """What this module reads of a :class:`k8sddp.lint.project.Module`."""

    path: str
    source: str
    tree: ast.Module
    aliases: dict[str, str]

__all__ = ["added_paths", "own_package_anchors"]

_PATH_FUNCS = ("os.path.dirname", "os.path.abspath", "os.path.realpath", "os.path.normpath",
               "os.path.join", "os.path.expanduser", "str", "pathlib.Path", "Path", "os.fspath")


def _module_statements(tree: ast.Module) -> list[ast.stmt]:
    """Module-level statements, with those inside top-level ``if``/``try`` blocks."""
    out: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        s = todo.pop(0)
        out.append(s)
        if isinstance(s, ast.If):
            todo[:0] = s.body + s.orelse
        elif isinstance(s, ast.Try):
            todo[:0] = s.body
    return out


class _Eval:
    """Evaluates the path expressions of one module (``None``: not a known constant path)."""

    def __init__(self, mod: Module, cwd: str) -> None:
        self.mod, self.cwd = mod, cwd
        self.names: dict[str, str] = {}

    def __call__(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return os.path.abspath(self.mod.path) if node.id == "__file__" else self.names.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # Path(...) / "lib"
            a, b = self(node.left), self(node.right)
            return os.path.join(a, b) if a is not None and b is not None else None
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            inner = self(node.value)
            return os.path.dirname(os.path.abspath(inner)) if inner is not None else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents" \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
            inner = self(node.value.value)
            if inner is None:
                return None
            out = os.path.abspath(inner)
            for _ in range(node.slice.value + 1):
                out = os.path.dirname(out)
            return out
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("resolve", "absolute") and not node.args:
            inner = self(func.value)
            return os.path.abspath(inner) if inner is not None else None
        q = dotted(func, self.mod.aliases) or ""
        if q == "os.getcwd":
            return self.cwd
        if q not in _PATH_FUNCS or not node.args or node.keywords:
            return None
        args = [self(a) for a in node.args]
        if any(a is None for a in args):
            return None
        parts: list[str] = [a for a in args if a is not None]
        if q == "os.path.join":
            return os.path.join(*parts)
        if q == "os.path.dirname":
            return os.path.dirname(parts[0])
        if q == "os.path.expanduser":
            return None  # a home folder: not the repository
        return parts[0] if len(parts) == 1 else None

    def absolute(self, path: str) -> str:
        """``path`` made absolute against the folder the script is run from."""
        return os.path.normpath(path if os.path.isabs(path) else os.path.join(self.cwd, path))


def _adder_params(stmts: list[ast.stmt], aliases: dict[str, str]) -> dict[str, int]:
    """Module-level helpers that put their parameter on ``sys.path`` (``def add_path(path):
    sys.path.insert(0, path)``): name -> index of that parameter."""
    out: dict[str, int] = {}
    for s in stmts:
        if not isinstance(s, ast.FunctionDef):
            continue
        params = [a.arg for a in s.args.args]
        for n in ast.walk(s):
            if isinstance(n, ast.Call) and (arg := _path_arg(n, aliases)) is not None \
                    and isinstance(arg, ast.Name) and arg.id in params:
                out[s.name] = params.index(arg.id)
    return out


def _path_arg(call: ast.Call, aliases: dict[str, str]) -> ast.expr | None:
    """The folder argument of ``sys.path.insert(i, X)``, ``sys.path.append(X)`` or
    ``site.addsitedir(X)``."""
    q = dotted(call.func, aliases) or ""
    if q == "sys.path.insert" and len(call.args) == 2:
        return call.args[1]
    if q in ("sys.path.append", "site.addsitedir") and len(call.args) == 1:
        return call.args[0]
    return None


def added_paths(mod: Module, cwd: str, imported: Callable[[str, int], Module | None] | None = None) -> list[str]:
    """The folders ``mod`` puts on ``sys.path`` at import time, absolute.

    Args:
        mod: a parsed module.
        cwd: the folder the script is taken to run from (relative folders, ``os.getcwd()``).
        imported: resolves a module-level ``import NAME`` of ``mod`` (name, level) to the project
            module it names, whose own additions count too (``import _init_paths``); ``None``
            looks no further.
    """
    own = "sys.path" in mod.source or "addsitedir" in mod.source
    if not own and imported is None:
        return []
    stmts: list[ast.stmt] = _module_statements(mod.tree) if own else [s for s in mod.tree.body if isinstance(s, ast.Import)]
    ev = _Eval(mod, cwd)
    adders = _adder_params(stmts, mod.aliases)
    out: list[str] = []
    for s in stmts:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            val = ev(s.value)
            if val is not None:
                ev.names[s.targets[0].id] = val
            else:
                ev.names.pop(s.targets[0].id, None)
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            call = s.value
            arg = _path_arg(call, mod.aliases)
            if arg is None and isinstance(call.func, ast.Name) and call.func.id in adders:
                i = adders[call.func.id]
                arg = call.args[i] if i < len(call.args) else None
            path = ev(arg) if arg is not None else None
            if path is not None:
                out.append(ev.absolute(path))
        elif imported is not None and isinstance(s, ast.Import):
            for a in s.names:
                dep = imported(a.name, 0)
                if dep is not None and dep is not mod:
                    out.extend(added_paths(dep, cwd))
    return out


def own_package_anchors(here: str, rel: str, depth: int = 4) -> list[str]:
    """Import roots for ``rel`` (``training/data``, an absolute import as a path) seen from the
    folder ``here``: the folder above each of ``here``'s first ``depth`` folders named like the
    import's package (``from training.data import ...`` in ``.../laion_clap/training/main.py``
    is found from ``.../laion_clap``, CLAP's layout)."""
    head, up, out = rel.split("/")[0], here, []
    for _ in range(depth):
        if os.path.basename(up) == head:
            out.append(os.path.dirname(up))
        up = os.path.dirname(up)
    return out
