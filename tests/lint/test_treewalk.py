"""The linter's fast traversals visit exactly what :func:`ast.walk` visits, in the same order.

The rules depend on that order (the first match wins in several searches), so each traversal is
compared node for node with the standard library on real files: the lint corpus, the fixtures and
the linter's own package, plus syntax the corpus lacks (``match``, ``try*``, ``async``, walrus,
f-strings, type comments).
"""

from __future__ import annotations

import ast
from pathlib import Path

from k8sddp.lint.treewalk import parents, walk, walk_lean, walk_statements

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*(ROOT / "tests" / "lint").rglob("*.py"), *(ROOT / "k8sddp" / "lint").glob("*.py")])

EXTRA = '''
import os, sys as system
from . import x as y
async def f(a, /, b: int = 1, *c, d, **e) -> None:  # type: ignore
    async with g() as h, i:
        async for j in k:
            await j
    try:
        pass
    except* ValueError as exc:
        raise
    match a:
        case [1, *rest] if rest:
            pass
        case {"k": v, **kw}:
            pass
        case Point(x=0) | None:
            pass
        case _:
            pass
    global q
    z = [m for m in range(3) if (n := m) > 1]
    w = f"{a!r:>{b}} {c=}"
    del z[0], w
    lambda p, *q: p if q else -p
    return (yield from c)
'''


def _trees() -> list[tuple[str, ast.Module]]:
    out = [("<extra>", ast.parse(EXTRA, type_comments=True))]
    for f in FILES:
        try:
            out.append((str(f.relative_to(ROOT)), ast.parse(f.read_bytes())))
        except (SyntaxError, ValueError):
            continue  # KDP500 fixtures: undecodable or invalid on purpose
    return out


def test_walks_match_ast_walk() -> None:
    trees = _trees()
    assert len(trees) > 200
    for name, tree in trees:
        try:
            _check(tree)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc


def _check(tree: ast.Module) -> None:
    ref = list(ast.walk(tree))
    got = walk(tree)
    assert len(got) == len(ref) and all(a is b for a, b in zip(got, ref, strict=True))
    leaves = (ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)
    lean = [n for n in ref if not isinstance(n, leaves)]
    got_lean = walk_lean(tree)
    assert len(got_lean) == len(lean) and all(a is b for a, b in zip(got_lean, lean, strict=True))
    stmts = [n for n in ref if isinstance(n, (ast.Module, ast.stmt, ast.excepthandler, ast.match_case))]
    got_stmts = walk_statements(tree)
    assert len(got_stmts) == len(stmts) and all(a is b for a, b in zip(got_stmts, stmts, strict=True))
    for sub in ref[1:40]:  # subtrees too
        assert [id(n) for n in walk(sub)] == [id(n) for n in ast.walk(sub)]
    expected: dict[ast.AST, ast.AST] = {}
    for node in ref:
        for child in ast.iter_child_nodes(node):
            expected[child] = node
    assert list(parents(tree).items()) == list(expected.items())
