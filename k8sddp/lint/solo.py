"""Single-process modes of a distributed script (KDP504).

A training script often has a mode that runs as one plain process: BRIO's ``if args.evaluate:
evaluation(args) else: main(args)``, where ``main`` ``mp.spawn``s the trainers and
``evaluation`` uses no process group, rank or launcher. What such a mode writes is one process's
write. A function runs alone (:func:`runs_alone`) when module code alone calls it, each such call
sits in an ``if`` arm (or ``else``) of the module code that runs nothing distributed, and neither
it nor any project function it calls (transitively) shows distributed training
(:func:`touches_distribution`). Code after the training call in the same arm (``model =
train(); export(model)``) runs in every process of the job: it is not alone.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .analyzer import Analyzer
    from .project import Module

__all__ = ["DIST_MARKERS", "only_alone", "runs_alone", "touches_distribution"]

#: Source text that shows distributed training (a module with none is not checked for KDP504).
DIST_MARKERS = re.compile(
    r"torch\.distributed|torch import distributed|init_process_group|DistributedDataParallel|"
    r"FullyShardedDataParallel|\baccelerate\b|\blightning\b|pytorch_lightning|deepspeed|"
    r"LOCAL_RANK|[\"']RANK[\"']|torch_xla|horovod|get_rank\b|is_main_process|is_global_zero|"
    r"torch\.multiprocessing|world_size|WORLD_SIZE|TrainerCallback|TrainingArguments|DistributedSampler"
)
#: Module-level statements that run no training code.
_NOT_RUN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)


def _text(mod: Module, nodes: list[ast.stmt]) -> str:
    lines = mod.source.splitlines()
    return "\n".join("\n".join(lines[n.lineno - 1:n.end_lineno]) for n in nodes)


def touches_distribution(an: Analyzer, key: str, memo: dict[str, bool]) -> bool:
    """Whether function ``key``, or a project function it calls (transitively), shows distributed
    training: a rank test, a process-group set-up, a collective, or :data:`DIST_MARKERS` in its
    source; ``memo`` caches the answers of one lint run."""
    if key in memo:
        return memo[key]
    memo[key] = True  # (a cycle back here decides nothing)
    w = an.walkers.get(key)
    out = w is None or isinstance(w.func.node, ast.Module) or w.uses_rank or w.inits_pg \
        or any(e.kind == "coll" for e in w.events) or bool(DIST_MARKERS.search(_text(w.func.module, [w.func.node])))
    if not out and w is not None:
        out = any(touches_distribution(an, c, memo) for c, _, _ in w.calls)
    memo[key] = out
    return out


def _calls(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name for n in ast.walk(node))


def _arms(body: list[ast.stmt], name: str, arm: list[ast.stmt] | None, out: list[list[ast.stmt] | None]) -> None:
    """Append to ``out`` the innermost ``if`` arm of module code around each call of ``name``
    (``None`` for a call in no arm); ``with``/``for``/``try`` bodies stay in the arm around them."""
    for st in body:
        if isinstance(st, _NOT_RUN):
            continue
        if isinstance(st, ast.If):
            if _calls(st.test, name):
                out.append(arm)
            _arms(st.body, name, st.body, out)
            _arms(st.orelse, name, st.orelse, out)
            continue
        for child in ast.iter_child_nodes(st):
            if isinstance(child, ast.ExceptHandler):
                _arms(child.body, name, arm, out)
            elif not isinstance(child, ast.stmt) and _calls(child, name):
                out.append(arm)
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(st, field, None)
            if isinstance(nested, list):
                _arms(nested, name, arm, out)


def runs_alone(an: Analyzer, key: str, memo: dict[str, bool]) -> bool:
    """Whether function ``key`` is a single-process mode of its script (see the module docstring);
    ``memo``: :func:`touches_distribution`'s cache."""
    sites = an.callsites.get(key, [])
    w = an.walkers.get(key)
    if w is None or w.func.cls or not sites or key in an.spawn_targets or key in an.launched \
            or not all(s.caller.endswith("::<module>") for s in sites) or touches_distribution(an, key, memo):
        return False
    mod = w.func.module
    arms: list[list[ast.stmt] | None] = []
    _arms(mod.tree.body, w.func.name, None, arms)
    if not arms or any(a is None for a in arms):
        return False
    for arm in arms:
        assert arm is not None
        if DIST_MARKERS.search(_text(mod, arm)):
            return False
        for n in (n for st in arm for n in ast.walk(st)):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id != w.func.name:
                f = an.project.resolve_function(mod, n.func.id)
                if f is not None and touches_distribution(an, f.key, memo):
                    return False
    return True


def only_alone(an: Analyzer, key: str, memo: dict[str, bool], alone: dict[str, bool]) -> bool:
    """Whether every chain of calls that reaches function ``key`` starts at a function that runs
    alone (:func:`runs_alone`); ``memo`` and ``alone`` cache the answers of one lint run."""
    todo, seen, roots = [key], set(), []
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        callers = [s.caller for s in an.callsites.get(k, [])]
        if not callers or all(c.endswith("::<module>") for c in callers):
            roots.append(k)
        else:
            todo.extend(c for c in callers if not c.endswith("::<module>"))
        if len(seen) > 64:
            return False
    for k in roots:
        if k not in alone:
            alone[k] = runs_alone(an, k, memo)
    return bool(roots) and all(alone[k] for k in roots)
