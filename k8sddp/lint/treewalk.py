"""Fast syntax-tree traversal for the linter's hot paths.

:func:`walk` yields the same nodes in the same (breadth-first) order as :func:`ast.walk`, about
twice as fast: it reads each node's ``_fields`` directly instead of going through
:func:`ast.iter_child_nodes` and :func:`ast.iter_fields`. :func:`walk_statements` visits only
statements (and the ``except``/``case`` clauses that hold them), in the order :func:`ast.walk`
meets them: a statement's ancestors are all statements or such clauses, so leaving expressions out
keeps every statement's depth and the order within each depth.
"""

from __future__ import annotations

import ast

from . import knowledge as K

__all__ = ["dotted", "node_offset", "parents", "plain_function", "walk", "walk_lean", "walk_statements", "wrapper_test"]

_AST = ast.AST
#: fields that only ever hold identifiers, numbers, strings or constants, never nodes
_SCALAR = frozenset({"id", "attr", "arg", "name", "module", "level", "asname", "kind",
                     "type_comment", "conversion", "is_async", "simple", "lineno", "tag", "n", "s"})
#: fields that hold the shared context and operator leaves
_LEAVES = frozenset({"ctx", "op", "ops"})
_FULL: dict[type, tuple[str, ...]] = {}
_LEAN: dict[type, tuple[str, ...]] = {}
#: fields that hold lists of statements or of statement-holding clauses
_STMT_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


def _fields(cls: type, lean: bool) -> tuple[str, ...]:
    """The fields of node class ``cls`` that can hold nodes (``lean``: but for the context and
    operator leaves), computed once per class."""
    table = _LEAN if lean else _FULL
    found = table.get(cls)
    if found is None:
        skip = _SCALAR | _LEAVES if lean else _SCALAR
        found = table[cls] = tuple(f for f in cls._fields if f not in skip)  # type: ignore[attr-defined]
    return found


def _walk(node: ast.AST, lean: bool) -> list[ast.AST]:
    table = _LEAN if lean else _FULL
    out: list[ast.AST] = [node]
    append, extend = out.append, out.extend
    i = 0
    while i < len(out):
        n = out[i]
        i += 1
        fields = table.get(n.__class__) or _fields(n.__class__, lean)
        for name in fields:
            v = getattr(n, name, None)
            if v.__class__ is list:
                extend([x for x in v if isinstance(x, _AST)])
            elif isinstance(v, _AST):
                append(v)
    return out


def walk(node: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(node))``, computed faster: ``node`` and every node below it,
    breadth-first, each node's children in field order."""
    return _walk(node, False)


def walk_lean(node: ast.AST) -> list[ast.AST]:
    """:func:`walk` without the expression-context and operator leaves (``Load``, ``Add``,
    ``Eq``...): the other nodes, in the same order (leaving out leaves keeps breadth-first order).
    For searches that look at names, calls and statements only."""
    return _walk(node, True)


def parents(tree: ast.AST, nodes: list[ast.AST] | None = None) -> dict[ast.AST, ast.AST]:
    """Each node below ``tree`` -> its parent, filled in :func:`ast.walk` order (a leaf shared by
    several parents, such as ``Load()``, maps to the last one); ``nodes``: ``walk(tree)`` when
    the caller has it already."""
    out: dict[ast.AST, ast.AST] = {}
    for node in nodes if nodes is not None else walk(tree):
        for name in _FULL.get(node.__class__) or _fields(node.__class__, False):
            v = getattr(node, name, None)
            if v.__class__ is list:
                for x in v:
                    if isinstance(x, _AST):
                        out[x] = node
            elif isinstance(v, _AST):
                out[v] = node
    return out


def walk_statements(tree: ast.AST) -> list[ast.AST]:
    """The statements of ``tree`` (and ``tree`` itself, and the ``except``/``case`` clauses),
    in the order :func:`ast.walk` yields them."""
    out: list[ast.AST] = [tree]
    i = 0
    while i < len(out):
        n = out[i]
        i += 1
        for name in n._fields:
            if name in _STMT_FIELDS:
                v = getattr(n, name, None)
                if v.__class__ is list:
                    out.extend(v)
    return out


def dotted(node: ast.expr, aliases: dict[str, str] | None = None) -> str | None:
    """The dotted name of ``a.b.c`` with the first part resolved through ``aliases``; ``None``
    for anything that is not a plain attribute chain."""
    if node.__class__ is ast.Name:
        head = node.id  # type: ignore[attr-defined]
        return aliases.get(head, head) if aliases is not None else head
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = node.id
    if aliases is not None:
        head = aliases.get(head, head)
    parts.append(head)
    return ".".join(reversed(parts))


def wrapper_test(test: ast.expr) -> tuple[ast.expr, bool] | None:
    """For ``hasattr(m, "module")`` or ``isinstance(m, DistributedDataParallel)`` (or ``DDP``),
    possibly negated: ``m`` and whether the test is true where ``m`` is the wrapper; else ``None``."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if isinstance(test, ast.UnaryOp) and negated else test
    if not isinstance(inner, ast.Call) or not isinstance(inner.func, ast.Name) or len(inner.args) != 2:
        return None
    probe = inner.args[1]
    if (inner.func.id == "hasattr" and isinstance(probe, ast.Constant) and probe.value == "module") or (
            inner.func.id == "isinstance" and ast.unparse(probe).split(".")[-1] in ("DistributedDataParallel", "DDP")):
        return inner.args[0], not negated
    return None


def node_offset(node: ast.expr) -> bool:
    """``args.node_index * args.gpu_per_node``: a product naming the node's index
    (:data:`~k8sddp.lint.knowledge.NODE_INDEX_NAMES`, also read from the environment:
    ``int(os.environ["GROUP_RANK"]) * torch.cuda.device_count()``); added to a local rank it makes
    the global rank (CodeXGLUE; the widely copied ``args.nr * args.gpus + gpu``)."""
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and any(
        (dotted(n) or "").rsplit(".", 1)[-1] in K.NODE_INDEX_NAMES
        or any(isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value in K.NODE_INDEX_NAMES for c in ast.walk(n))
        for n in (node.left, node.right))


def plain_function(node: ast.AST | None) -> bool:
    """``node`` is a ``def`` that is no property: named without a call, it is a function object,
    always true in a test (PET's ``if utils.is_main_process:`` forgets the call)."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
        and not any("property" in ast.unparse(d) for d in node.decorator_list)
