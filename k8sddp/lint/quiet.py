"""Arguments that switch a helper's collectives off: ``create_dataloader(..., rank=-1)``.

A project function whose every collective sits under a test of one of its parameters against
literals (YOLOv5's ``torch_distributed_zero_first(local_rank)``: ``if local_rank not in [-1, 0]:
barrier()`` ... ``if local_rank == 0: barrier()``) runs none of them when that parameter is a
value for which all those tests fail (``-1``, the "not distributed" rank). Its summary lists such
``(parameter, value)`` pairs (:func:`quiet_pairs`); a call that passes that literal (or leaves a
default equal to it) is not a collective (:func:`quiet_call`). A collective that is itself a call
of such a helper is off when the caller's parameter is forwarded to the helper's quiet parameter,
so the facts carry up a call chain (``create_dataloader(rank=-1)`` -> ``torch_distributed_zero_first(rank)``).

Only tests decided by the parameter alone count (``p == 0``, ``p in (-1, 0)``, ``not p``, ``p is
None``, and ``and``/``or`` of those); anything else leaves the collective on.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["CANDIDATES", "NOT_LITERAL", "Pair", "call_args", "default_of", "enclosing_tests", "forwards", "literal", "quiet_call",
           "quiet_pairs"]

_MISSING = object()


class _NotNone:
    """The candidate "any literal but ``None``" (DensePhrases-style ``if group is None: group =
    make_tag()``, where the call passes ``group="runs"``): only ``is None``/``is not None`` tests
    of the parameter are decided by it."""

    def __repr__(self) -> str:
        return "<a literal, not None>"


#: The candidate that stands for every literal but ``None`` (:class:`_NotNone`).
NOT_NONE = _NotNone()
#: The literal values tried: the "no rank" sentinels scripts pass for a non-distributed run,
#: ``True`` (``if dist.is_initialized() and not evaluate:`` at ``evaluate=True``) and
#: :data:`NOT_NONE`.
CANDIDATES: tuple[object, ...] = (-1, 0, None, False, True, NOT_NONE)
Pair = tuple[str, object]
#: What :func:`literal` returns for an expression that is not a literal.
NOT_LITERAL = _MISSING

_CMP: dict[type[ast.cmpop], Callable[[Any, Any], object]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


def literal(node: ast.AST | None) -> object:
    """The value of a literal expression (``-1``, ``None``, ``[-1, 0]``), else
    :data:`NOT_LITERAL`."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
        return -node.operand.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [literal(e) for e in node.elts]
        return _MISSING if any(i is _MISSING for i in items) else tuple(items)
    return _MISSING


def _same(a: object, b: object) -> bool:
    if b is NOT_NONE:
        return a is not _MISSING and a is not None
    return a is not _MISSING and type(a) is type(b) and a == b


def _decide(test: ast.expr, param: str, value: object) -> bool | None:
    """The truth of ``test`` when ``param`` is ``value``, if the parameter alone decides it."""
    if value is NOT_NONE:
        return _decide_not_none(test, param)
    if isinstance(test, ast.Name) and test.id == param:
        return bool(value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _decide(test.operand, param, value)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        parts = [_decide(v, param, value) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if True in parts else (False if all(p is False for p in parts) else None)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        fn = _CMP.get(type(op))
        if fn is None:
            return None
        if isinstance(left, ast.Name) and left.id == param:
            other = literal(right)
            args = (value, other)
        elif isinstance(right, ast.Name) and right.id == param and isinstance(op, (ast.Eq, ast.NotEq)):
            other = literal(left)
            args = (other, value)
        else:
            return None
        if other is _MISSING:
            return None
        try:
            return bool(fn(*args))
        except TypeError:
            return None
    return None


def _decide_not_none(test: ast.expr, param: str) -> bool | None:
    """:func:`_decide` for :data:`NOT_NONE`: ``param is None`` is false, ``param is not None``
    true; ``not``/``and``/``or`` of those as usual; anything else undecided."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _decide_not_none(test.operand, param)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        parts = [_decide_not_none(v, param) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if True in parts else (False if all(p is False for p in parts) else None)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
        left, right = test.left, test.comparators[0]
        if isinstance(right, ast.Name) and right.id == param:
            left, right = right, left
        if isinstance(left, ast.Name) and left.id == param and isinstance(right, ast.Constant) and right.value is None:
            return isinstance(test.ops[0], ast.IsNot)
    return None


def enclosing_tests(func: ast.AST) -> dict[int, list[tuple[ast.expr, bool]]]:
    """For every node of ``func``'s body (by ``id``), the ``if``/``while`` tests around it and
    whether it is in the arm taken when the test is true (nested functions excluded)."""
    out: dict[int, list[tuple[ast.expr, bool]]] = {}

    def visit(node: ast.AST, chain: list[tuple[ast.expr, bool]]) -> None:
        out[id(node)] = chain
        if isinstance(node, (ast.If, ast.While)):
            visit(node.test, chain)
            for s in node.body:
                visit(s, [*chain, (node.test, True)])
            for s in node.orelse:
                visit(s, [*chain, (node.test, False)])
            return
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                visit(child, chain)

    for s in func.body if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) else []:
        visit(s, [])
    return out


def quiet_pairs(
    tests: dict[int, list[tuple[ast.expr, bool]]], params: Iterable[str],
    colls: Sequence[tuple[ast.AST, Callable[[str, object], bool]]],
) -> tuple[Pair, ...]:
    """The ``(parameter, value)`` pairs for which a function runs none of its collectives.

    Args:
        tests: :func:`enclosing_tests` of the function's ``def`` node.
        params: its parameter names.
        colls: each collective's node, with a predicate saying whether that collective (a call
            of another helper) is off when this function's parameter has that value.
    """
    if not colls:
        return ()
    out: list[Pair] = []
    for p in params:
        for value in CANDIDATES:
            if all(_off(tests.get(id(node), []), p, value) or forwarded(p, value) for node, forwarded in colls):
                out.append((p, value))
    return tuple(out)


def _off(chain: list[tuple[ast.expr, bool]], param: str, value: object) -> bool:
    for test, arm in chain:
        got = _decide(test, param, value)
        if got is not None and got != arm:
            return True
    return False


def quiet_call(pairs: tuple[Pair, ...], args: dict[str, ast.expr | None]) -> bool:
    """Whether a call passing ``args`` (callee parameter -> argument expression, the default
    where the call leaves it out) switches every collective of a callee with ``pairs`` off."""
    return any(_same(literal(args.get(p)), value) for p, value in pairs)


def forwards(pairs: tuple[Pair, ...], args: dict[str, ast.expr | None], param: str, value: object) -> bool:
    """Whether the call is off when the caller's ``param`` is ``value``: a quiet parameter of the
    callee receives ``param`` itself, its negation where the quiet value is a bool
    (``is_training=not evaluate``), or a literal equal to its quiet value."""
    for p, v in pairs:
        arg = args.get(p)
        if isinstance(arg, ast.Name) and arg.id == param and _same(value, v):
            return True
        if (isinstance(arg, ast.UnaryOp) and isinstance(arg.op, ast.Not) and isinstance(arg.operand, ast.Name)
                and arg.operand.id == param and isinstance(v, bool) and value is not NOT_NONE and (not value) is v):
            return True
    return quiet_call(pairs, args)


def default_of(fnode: ast.AST, param: str) -> ast.expr | None:
    """The default value of parameter ``param`` of the ``def`` ``fnode``, if it has one."""
    if not isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = fnode.args
    positional = [*a.posonlyargs, *a.args]
    for p, d in zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True):
        if p.arg == param:
            return d
    for p, kd in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        if p.arg == param:
            return kd
    return None


def call_args(node: ast.Call, fnode: ast.AST, params: list[str]) -> dict[str, ast.expr | None]:
    """The callee's parameters (``params``, without an implicit ``self``) and the argument
    expression ``node`` gives each: the parameter's default (:func:`default_of`) where it gives
    none, ``None`` when unknown (after a ``*args`` or ``**kwargs``)."""
    out: dict[str, ast.expr | None] = {}
    starred = False
    for i, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred):
            starred = True
            break
        if i < len(params):
            out[params[i]] = arg
    keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
    spread = starred or any(k.arg is None for k in node.keywords)
    for p in params:
        if p in keywords:
            out[p] = keywords[p]
        elif p not in out:
            out[p] = None if spread else default_of(fnode, p)
    return out
