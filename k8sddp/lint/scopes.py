"""Syntactic facts about function bodies the walker and the analyzer use: which names a
function binds, whether a loop carries values between iterations, which names both arms of an
``if`` assign alike. Pure functions of the syntax tree (no analysis state).
"""

from __future__ import annotations

import ast

from .exprs import env_key

__all__ = ["exclusive_arms", "local_names", "loop_carried", "runs_dry", "same_assignments"]


def loop_carried(loop: ast.AST) -> bool:
    """True when a name in the loop's body is read before it is assigned there (in source
    order), so that one walk of the body sees values from the previous iteration."""
    seen_store: set[str] = set()
    names = [n for n in ast.walk(loop) if isinstance(n, ast.Name)]
    names.sort(key=lambda n: (n.lineno, n.col_offset))
    stored = {n.id for n in names if isinstance(n.ctx, ast.Store)}
    for n in names:
        if isinstance(n.ctx, ast.Store):
            seen_store.add(n.id)
        elif n.id in stored and n.id not in seen_store:
            return True
    return False


def same_assignments(s: ast.If) -> set[str]:
    """Names both arms of ``s`` assign with the same expression at their top level."""
    def table(stmts: list[ast.stmt]) -> dict[str, str]:
        out: dict[str, str] = {}
        for st in stmts:
            if isinstance(st, ast.Assign) and len(st.targets) == 1:
                key = env_key(st.targets[0])
                if key is not None:
                    out[key] = ast.dump(st.value)
        return out
    if not s.orelse:
        return set()
    a, b = table(s.body), table(s.orelse)
    return {k for k, v in a.items() if b.get(k) == v}


def local_names(node: ast.AST) -> set[str]:
    """Names a function assigns (its locals), minus those it declares ``global``."""
    out: set[str] = set()
    declared_global: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            out.add(sub.id)
        elif isinstance(sub, ast.Global):
            declared_global.update(sub.names)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sub is not node:
            out.add(sub.name)
    return out - declared_global


def runs_dry(exc: ast.expr, source: str) -> bool:
    """``except StopIteration`` / ``except DataloaderExhaustedError``: this rank's data ran out,
    in a module (``source``) that shards it without a DistributedSampler (which pads every rank
    to one length, so that all ranks run dry on the same step). Fabric's ``setup_dataloaders``
    (a DistributedSampler unless ``use_distributed_sampler=False``) and Accelerate's
    ``accelerator.prepare`` (``even_batches=True`` by default) pad alike."""
    names = [ast.unparse(e).split(".")[-1] for e in (exc.elts if isinstance(exc, ast.Tuple) else [exc])]
    if not any(n == "StopIteration" or "Exhausted" in n for n in names):
        return False
    if "DistributedSampler" in source:
        return False
    if "setup_dataloaders(" in source and "use_distributed_sampler=False" not in source:
        return False
    return not ("accelerate" in source and ".prepare(" in source and "even_batches=False" not in source)


def exclusive_arms(loop: ast.AST, a: ast.AST, b: ast.AST, ranked: frozenset[str]) -> bool:
    """Whether ``a`` and ``b`` lie in opposite arms of one ``if`` inside ``loop`` whose test is
    not a rank condition (its text is not in ``ranked``) and reads no name the loop assigns: the
    test is the same on every rank and in every iteration, so no run reaches both (open_clip's
    evaluation: a broadcast where ``use_fsdp_eval`` holds, a ``break`` on the local loader where
    it does not)."""
    assigned = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in ast.walk(loop):
        if not isinstance(node, ast.If) or node is loop:
            continue
        if ast.unparse(node.test) in ranked:
            continue
        if any(isinstance(n, ast.Name) and n.id in assigned for n in ast.walk(node.test)):
            continue
        in_body = [any(x is sub for st in node.body for sub in ast.walk(st)) for x in (a, b)]
        in_else = [any(x is sub for st in node.orelse for sub in ast.walk(st)) for x in (a, b)]
        if (in_body[0] and in_else[1]) or (in_else[0] and in_body[1]):
            return True
    return False
