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

__all__ = ["walk", "walk_statements"]

_AST = ast.AST
#: fields that hold lists of statements or of statement-holding clauses
_STMT_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


def walk(node: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(node))``, computed faster: ``node`` and every node below it,
    breadth-first, each node's children in field order."""
    out: list[ast.AST] = [node]
    append, extend = out.append, out.extend
    i = 0
    while i < len(out):
        n = out[i]
        i += 1
        for name in n._fields:
            v = getattr(n, name, None)
            if v.__class__ is list:
                extend([x for x in v if isinstance(x, _AST)])
            elif isinstance(v, _AST):
                append(v)
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
