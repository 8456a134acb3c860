"""The linted project: its modules, their imports, and an index of every function.

Each linted file becomes a :class:`Module` (parsed tree, import aliases, top-level functions and
classes). Imports of project code (``from utils import is_main_process``, ``from .dist import
barrier``) are resolved to files next to the importing file or under the project root, parsed on
demand and cached, so that calls can be followed into them (:mod:`k8sddp.lint.flow`).
"""

from __future__ import annotations

import ast
import dataclasses
import errno
import functools
import io
import os
import stat
import tokenize
from pathlib import Path

from .syspath import own_package_anchors
from .treewalk import dotted, walk, walk_lean, walk_statements

__all__ = ["FuncInfo", "Module", "Project", "dotted"]

FuncNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclasses.dataclass(eq=False)
class FuncInfo:
    """One function or method (or a module body, ``node`` being the Module).

    Attributes:
        key: unique id ``file::Class.name``.
        name: the plain name.
        node: its ``def`` node (or the ``ast.Module`` for a module body).
        module: the module it lives in.
        cls: name of the enclosing class, or ``""``.
        params: positional-or-keyword parameter names, in order (``self`` included).
        parent: for a function defined inside another one (a closure), the enclosing function.
        nested: the functions defined directly in its body, by name (in source order).
    """

    key: str
    name: str
    node: FuncNode | ast.Module
    module: Module
    cls: str = ""
    params: tuple[str, ...] = ()
    parent: FuncInfo | None = None
    nested: dict[str, list[FuncInfo]] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def free(self) -> tuple[str, ...]:
        """For a nested function, the names it reads from the enclosing functions' scopes (its
        closure: parameters and locals of an enclosing function that it does not bind itself,
        and those it declares ``nonlocal``), sorted; ``()`` for any other function."""
        if self.parent is None or isinstance(self.node, ast.Module):
            return ()
        outer: set[str] = set()
        scope: FuncInfo | None = self.parent
        while scope is not None and not isinstance(scope.node, ast.Module):
            outer |= set(scope.params) | _stored(scope.node)
            scope = scope.parent
        own = set(self.params) | _stored(self.node)
        nonlocal_: set[str] = set()
        loads: set[str] = set()
        for n in walk_lean(self.node):
            if n.__class__ is ast.Name:
                loads.add(n.id)  # type: ignore[attr-defined]
            elif isinstance(n, ast.Nonlocal):
                nonlocal_.update(n.names)
        return tuple(sorted(((loads - own) | nonlocal_) & outer))

    @functools.cached_property
    def launches(self) -> bool:
        """The function starts the worker processes itself (``torch.multiprocessing.spawn``, ``start_processes``,
        ``xmp.spawn``): its code runs once, in the parent (StyleGAN2-ADA's ``main`` writes ``training_options.json``)."""
        if isinstance(self.node, ast.Module) or ("spawn" not in self.module.source and "start_processes" not in self.module.source):
            return False  # the names must be in the text: most modules need no walk
        return any(isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name))
                   and (n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id) in ("spawn", "start_processes")
                   for n in ast.walk(self.node))


@dataclasses.dataclass(eq=False)
class Module:
    """One parsed Python file.

    Attributes:
        path: file path as given on the command line (or found on import).
        source: the decoded text.
        tree: the parsed module.
        aliases: local name -> dotted name it was imported as (``dist`` -> ``torch.distributed``).
        functions: top-level function name -> info.
        classes: class name -> {method name -> info}.
        class_bases: class name -> dotted names of its bases.
        stars: the (module, level) of each ``from module import *``.
        body: the module body as a pseudo-function.
        linted: True when the file was named (directly or by folder) on the command line.
    """

    path: str
    source: str
    tree: ast.Module
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)
    imported_from: dict[str, tuple[str, int, str]] = dataclasses.field(default_factory=dict)
    functions: dict[str, FuncInfo] = dataclasses.field(default_factory=dict)
    classes: dict[str, dict[str, FuncInfo]] = dataclasses.field(default_factory=dict)
    class_bases: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    stars: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    body: FuncInfo | None = None
    linted: bool = True
    _nodes: list[ast.AST] | None = dataclasses.field(default=None, repr=False)

    def nodes(self) -> list[ast.AST]:
        """Every node of the tree, in :func:`ast.walk` order (walked once, on first use)."""
        if self._nodes is None:
            self._nodes = walk(self.tree)
        return self._nodes

    def all_functions(self) -> list[FuncInfo]:
        """Every function and method of the module, module body first, each followed by the
        functions nested in it (depth first)."""
        out: list[FuncInfo] = [self.body] if self.body else []
        tops = list(self.functions.values())
        for methods in self.classes.values():
            tops.extend(methods.values())
        for f in tops:
            out.append(f)
            if f.nested:
                _add_nested(f, out)
        return out


def _add_nested(f: FuncInfo, out: list[FuncInfo]) -> None:
    for same in f.nested.values():
        for sub in same:
            out.append(sub)
            if sub.nested:
                _add_nested(sub, out)


def _params(node: FuncNode) -> tuple[str, ...]:
    a = node.args
    return tuple(p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs])


def _stored(node: ast.AST) -> set[str]:
    """The names ``node`` (a function) binds: assigned, ``def``/``class`` names, ``*args`` and
    ``**kwargs`` (those of the functions nested in it too), minus its ``global`` names."""
    out: set[str] = set()
    glob: set[str] = set()
    for n in walk_lean(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            out.add(n.name)
        elif isinstance(n, ast.arg) and n is not node:
            out.add(n.arg)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            glob.update(n.names)
    return out - glob


def _index_nested(info: FuncInfo) -> None:
    """Index the functions defined in ``info``'s body (not inside a nested class), recursively:
    each is a :class:`FuncInfo` whose ``parent`` is ``info``, keyed ``<info.key>.<locals>.name``
    (``@line`` added for a second definition of one name)."""
    node = info.node
    if isinstance(node, ast.Module):
        return
    todo: list[ast.stmt] = list(node.body)
    found: list[FuncNode] = []
    while todo:
        st = todo.pop()
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(st)
            continue
        if isinstance(st, ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            v = getattr(st, field, None)
            if v.__class__ is list:
                todo.extend(v)
    for st in sorted(found, key=lambda d: d.lineno):
        same = info.nested.setdefault(st.name, [])
        key = f"{info.key}.<locals>.{st.name}" + (f"@{st.lineno}" if same else "")
        sub = FuncInfo(key, st.name, st, info.module, info.cls, _params(st), parent=info)
        same.append(sub)
        _index_nested(sub)


def read_source(data: bytes) -> str:
    """Decode Python source bytes honouring a PEP 263 coding cookie.

    Raises:
        SyntaxError: unknown encoding; UnicodeDecodeError: bytes invalid in it.
    """
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text


def build_module(path: str, source: str, tree: ast.Module, *, linted: bool = True) -> Module:
    """Index a parsed file: its imports, functions, methods and classes."""
    mod = Module(path=path, source=source, tree=tree, linted=linted)
    defs = 0  # every def of the file: when the indexed ones are all, none is nested
    for node in walk_statements(tree):  # imports are statements: the expressions need no visit
        if node.__class__ is ast.FunctionDef or node.__class__ is ast.AsyncFunctionDef:
            defs += 1
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    mod.aliases[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    mod.aliases.setdefault(top, top)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            for a in node.names:
                if a.name == "*":
                    mod.stars.append((base, node.level))
                    continue
                local = a.asname or a.name
                mod.aliases[local] = f"{base}.{a.name}" if base else a.name
                mod.imported_from[local] = (base, node.level, a.name)
    mod.body = FuncInfo(key=f"{path}::<module>", name="<module>", node=tree, module=mod)
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mod.functions[stmt.name] = FuncInfo(
                f"{path}::{stmt.name}", stmt.name, stmt, mod, "", _params(stmt)
            )
        elif isinstance(stmt, ast.ClassDef):
            methods: dict[str, FuncInfo] = {}
            for sub in stmt.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    methods[sub.name] = FuncInfo(
                        f"{path}::{stmt.name}.{sub.name}", sub.name, sub, mod, stmt.name, _params(sub)
                    )
            mod.classes[stmt.name] = methods
            mod.class_bases[stmt.name] = [d for d in (dotted(b, mod.aliases) for b in stmt.bases) if d]
        elif isinstance(stmt, (ast.If, ast.Try)):
            # functions defined under `if TYPE_CHECKING`/try-import fallbacks: index them too
            for inner in walk_statements(stmt):
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)) and inner.name not in mod.functions:
                    mod.functions[inner.name] = FuncInfo(f"{path}::{inner.name}", inner.name, inner, mod, "", _params(inner))
    tops = list(mod.functions.values()) + [m for methods in mod.classes.values() for m in methods.values()]
    if defs > len(tops):
        for f in tops:
            _index_nested(f)
    return mod


#: Files that mark the root of an installable Python project, and how far above the lint root
#: one is looked for.
_INSTALL_MARKERS = ("setup.py", "setup.cfg", "pyproject.toml")
_INSTALL_DEPTH = 4


def _is_file(path: str) -> bool:
    """``Path(path).is_file()`` without building a ``Path``: errors other than "no such file"
    (and the like) propagate as they do there."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return False
        raise
    except ValueError:
        return False


class Project:
    """All modules of one lint run, plus the project files they import (parsed lazily).

    Paths are handled as strings in the resolution of imports (the hot path of a large tree):
    each folder is resolved (symbolic links followed) once, and the files in it are joined to
    that, which is what ``Path.resolve`` returns for a file that is not itself a link.

    Args:
        root: the project root (the folder of the configuration file, or of the inputs), used to
            resolve absolute imports of project code.
    """

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._root = str(self.root)
        self.modules: dict[str, Module] = {}
        self._by_file: dict[str, Module | None] = {}
        #: how many modules have been added or loaded so far (caches over all modules key on it)
        self.generation = 0
        self._imports: dict[tuple[str, str, int], Module | None] = {}
        self._in_dir: dict[tuple[str, str, int], Module | None] = {}
        self._here: dict[str, str] = {}
        self._real_dirs: dict[str, str] = {}
        self._install_root: Path | None | bool = False  # False: not looked for yet
        self._root_marked: bool | None = None
        self._repo_parents: list[Path] | None = None
        self._syspath: list[str] | None = None

    def _resolve(self, path: str) -> str:
        """``str(Path(path).resolve())``, with each folder resolved once."""
        head, name = os.path.split(path)
        if name in ("", ".", "..") or not head:
            return str(Path(path).resolve())
        real_dir = self._real_dirs.get(head)
        if real_dir is None:
            real_dir = self._real_dirs[head] = str(Path(head).resolve())
        joined = os.path.join(real_dir, name)
        return joined if not os.path.islink(joined) else str(Path(joined).resolve())

    def add(self, mod: Module) -> None:
        """Register a parsed module (a linted file)."""
        self.modules[mod.path] = mod
        self.generation += 1
        if mod.path not in ("-", "<stdin>"):
            self._by_file[self._resolve(mod.path)] = mod

    def _load(self, file: str) -> Module | None:
        file = self._resolve(file)
        if file in self._by_file:
            return self._by_file[file]
        mod: Module | None = None
        try:
            if os.stat(file).st_size <= 2_000_000:
                with open(file, "rb") as fh:
                    text = read_source(fh.read())
                mod = build_module(file, text, ast.parse(text, file), linted=False)
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
            mod = None
        self._by_file[file] = mod
        self.generation += 1
        return mod

    def resolve_import(self, mod: Module, base: str, level: int) -> Module | None:
        """The project module that ``from <level dots><base> import ...`` in ``mod`` names, or
        ``None`` when it is not project code (third-party, stdlib, missing). Cached, per file
        and per folder (the answer depends on the importing file's folder only)."""
        key = (mod.path, base, level)
        if key not in self._imports:
            here = self._here.get(mod.path)
            if here is None:
                here = self._here[mod.path] = (os.path.dirname(self._resolve(mod.path))
                                               if mod.path not in ("-", "<stdin>") else str(Path.cwd()))
            dir_key = (here, base, level)
            if dir_key not in self._in_dir:
                self._in_dir[dir_key] = self._resolve_import(here, base, level)
            self._imports[key] = self._in_dir[dir_key]
        return self._imports[key]

    def _resolve_import(self, here: str, base: str, level: int) -> Module | None:
        if not base and not level:
            return None
        rel = "/".join(p for p in base.split(".") if p)
        anchors: list[str] = []
        if level:
            anchor = here
            for _ in range(level - 1):
                anchor = os.path.dirname(anchor)
            anchors.append(anchor)
        else:
            anchors.append(here)
            anchor, root = here, self._root
            inside = root.rstrip("/") + "/"
            while True:  # walk up to the project root, trying each folder as an import root
                if anchor == root or not (anchor.startswith(inside) and anchor != root):
                    break
                anchor = os.path.dirname(anchor)
                anchors.append(anchor)
            anchors.append(root)
            above = self.install_root() or (self.root if self.root_is_package() else None)
            if above is not None:  # the package at the top, or in the src layout (`src/<package>`: DNA-Diffusion)
                anchors.extend((str(above), os.path.join(str(above), "src")))
            elif not self.root_is_package():  # a repository run from its top as `python train.py`
                # (StyleGAN2-ADA's `training/` imports `torch_utils` and `metrics` from one folder
                # up, and nothing is packaged): the folders above the root
                anchors.extend(str(up) for up in self.repo_parents())
            anchors.extend(self.syspath_anchors())
            anchors.extend(own_package_anchors(here, rel))
        for a in anchors:
            c = os.path.join(a, rel) if rel else a
            if base and _is_file(c + ".py"):
                return self._load(c + ".py")
            if _is_file(os.path.join(c, "__init__.py")):
                return self._load(os.path.join(c, "__init__.py"))
        return None

    def syspath_anchors(self) -> list[str]:
        """The folders inside the repository that the linted modules put on ``sys.path``
        themselves (:func:`k8sddp.lint.syspath.added_paths`; ``import _init_paths`` included),
        with relative ones taken from the repository's top (the folder holding ``.git``, else the root;
        without it, folders up to the root's parent) and the module's folder: imports are looked for there."""
        if self._syspath is None:
            from .syspath import added_paths

            self._syspath = []
            top = next((p for p in [self.root, *self.repo_parents()] if (p / ".git").exists()), None)
            inside = str(top or self.root.parent).rstrip("/") + "/"  # no checkout top: `..` of the root
            top = top or self.root
            found: list[str] = []
            for mod in list(self.modules.values()):
                if mod.path in ("-", "<stdin>"):
                    continue
                here = os.path.dirname(self._resolve(mod.path))

                def sibling(name: str, level: int, here: str = here) -> Module | None:
                    f = os.path.join(here, *name.split(".")) + ".py"
                    return self._load(f) if not level and _is_file(f) else None

                for cwd in dict.fromkeys((str(top), here)):  # run from its own folder too (MagFace's run/)
                    found.extend(added_paths(mod, cwd, sibling))
            for d in found:
                real = self._resolve(d) if os.path.isdir(d) else ""
                if real and (real + "/").startswith(inside) and real not in self._syspath:
                    self._syspath.append(real)
        return self._syspath

    def repo_parents(self) -> list[Path]:
        """The folders above the root a script of this repository may import from: at most
        :data:`_INSTALL_DEPTH` of them, and none above the one holding ``.git`` (the checkout's
        top), so that a module outside the repository is never taken for project code."""
        if self._repo_parents is None:
            self._repo_parents = []
            if not (self.root / ".git").exists():
                for up in list(self.root.parents)[:_INSTALL_DEPTH]:
                    self._repo_parents.append(up)
                    if (up / ".git").exists():
                        break
        return self._repo_parents

    def root_is_package(self) -> bool:
        """Whether the root itself holds a ``setup.py``, ``setup.cfg`` or ``pyproject.toml``."""
        if self._root_marked is None:
            self._root_marked = any((self.root / m).is_file() for m in _INSTALL_MARKERS)
        return self._root_marked

    def install_root(self) -> Path | None:
        """The nearest folder above the root (at most :data:`_INSTALL_DEPTH` up) that holds a
        ``setup.py``, ``setup.cfg`` or ``pyproject.toml``, when the root itself holds none: the
        folder a ``pip install -e .`` makes importable (DeepSpeed-Chat's ``training/step1/main.py``
        imports ``dschat`` from two folders up; llama-recipes' ``src/llama_cookbook/utils`` imports
        ``llama_cookbook`` from ``src/``). ``None`` when there is none."""
        if self._install_root is False:
            found: Path | None = None
            if not any((self.root / m).is_file() for m in _INSTALL_MARKERS):
                for up in list(self.root.parents)[:_INSTALL_DEPTH]:
                    if any((up / m).is_file() for m in _INSTALL_MARKERS):
                        found = up
                        break
            self._install_root = found
        return self._install_root if isinstance(self._install_root, Path) else None

    def resolve_function(self, mod: Module, name: str, depth: int = 2) -> FuncInfo | None:
        """The project function the bare name ``name`` is in ``mod``: defined there, imported (one
        hop of re-export followed), or from a ``from pkg import *`` (``depth`` such hops)."""
        if name in mod.functions:
            return mod.functions[name]
        origin = mod.imported_from.get(name)
        if origin is None:
            for star in self._star_targets(mod) if depth > 0 else ():
                if (hit := self.resolve_function(star, name, depth - 1)) is not None:
                    return hit
            return None
        base, level, orig = origin
        target = self.resolve_import(mod, base, level)
        if target is None:
            # `from pkg import module` then module.func is handled by resolve_attr
            return None
        if orig in target.functions:
            return target.functions[orig]
        if orig in target.imported_from and orig not in mod.functions:
            b2, l2, o2 = target.imported_from[orig]
            t2 = self.resolve_import(target, b2, l2)
            if t2 is not None and o2 in t2.functions:
                return t2.functions[o2]
        src = self.star_source(target, orig)  # a package `__init__`'s `from .utils import *`
        return src.functions[orig] if src is not None and orig in src.functions else None

    def _star_targets(self, mod: Module) -> list[Module]:
        found = (self.resolve_import(mod, base, level) for base, level in mod.stars)
        return [t for t in found if t is not None and t is not mod]

    def star_source(self, mod: Module, name: str) -> Module | None:
        """The project module one of ``mod``'s ``from X import *`` brings ``name`` from (a function
        or class defined there; LibFewShot's ``core/utils/__init__.py``: ``from .utils import *``)."""
        return next((t for t in self._star_targets(mod) if name in t.functions or name in t.classes), None)

    def resolve_module_alias(self, mod: Module, name: str, depth: int = 2) -> Module | None:
        """The project module bound to the local name ``name`` (``import utils``,
        ``from . import dist_utils``, or a star import of a package that binds it), or ``None``."""
        if name in mod.imported_from:
            base, level, orig = mod.imported_from[name]
            joined = f"{base}.{orig}" if base else orig
            return self.resolve_import(mod, joined, level)
        full = mod.aliases.get(name)
        if full is None:
            for star in self._star_targets(mod) if depth > 0 else ():
                if (alias := self.resolve_module_alias(star, name, depth - 1)) is not None:
                    return alias
            return None
        return self.resolve_import(mod, full, 0)

    def resolve_class(self, mod: Module, name: str, hops: int = 2) -> tuple[Module, str] | None:
        """The project class bound to ``name`` in ``mod``, as (module, class name), through up to
        ``hops`` re-exports (a package ``__init__``'s ``from .console import RankZeroLoggingWrapper``)."""
        if name in mod.classes:
            return mod, name
        origin = mod.imported_from.get(name)
        if origin is None:  # `from ivideogpt.data import *`, whose __init__ imports the class (iVideoGPT)
            star = next((t for t in self._star_targets(mod) if name in t.classes or name in t.imported_from), None)
            return self.resolve_class(star, name, hops - 1) if star is not None and hops > 0 else None
        target = self.resolve_import(mod, origin[0], origin[1])
        if target is None or target is mod:
            return None
        if origin[2] in target.classes:
            return target, origin[2]
        if (star := self.star_source(target, origin[2])) is not None and origin[2] in star.classes:
            return star, origin[2]  # a package's `from .x import *`
        return self.resolve_class(target, origin[2], hops - 1) if hops > 0 else None
