"""Syntactic facts about function bodies the walker and the analyzer use: which names a
function binds, whether a loop carries values between iterations, which names both arms of an
``if`` assign alike, which names a test or a guard reads. Pure functions of the syntax tree (no
analysis state).

The analysis walks functions again and again until its facts settle (:mod:`k8sddp.lint.analyzer`),
so :class:`NodeFacts` keeps the facts that are asked for on every walk, computed once per node and
lint run; being functions of the syntax alone, caching them changes no finding.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TypeVar

from .exprs import bar_around, env_key, progress_wrapper
from .treewalk import walk_lean, walk_statements

__all__ = [
    "NodeFacts", "exclusive_arms", "fact_key", "guard_names", "local_names", "loop_carried", "names_read", "needs_value", "param_guard",
    "progress_wrapper", "runs_dry", "same_assignments", "same_expr", "spread", "tests_files", "wraps_param",
]

_T = TypeVar("_T")


_MODEL_WRAPPERS = frozenset({"DataParallel", "DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP"})


def wraps_param(func: ast.AST, param: str) -> bool:
    """Whether function ``func`` wraps its parameter ``param`` itself (``model =
    nn.DataParallel(model)``, ``model = DDP(model, ...)``): its callers pass a plain module
    (CLIP-ReID's ``do_train_stage2(cfg, model, ...)``)."""
    for n in walk_statements(func):
        if (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and n.value.args
                and isinstance(n.value.args[0], ast.Name) and n.value.args[0].id == param
                and any(isinstance(t, ast.Name) and t.id == param for t in n.targets)):
            f = n.value.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) in _MODEL_WRAPPERS:
                return True
    return False


def loop_carried(loop: ast.AST) -> bool:
    """True when a name in the loop's body is read before it is assigned there (in source
    order), so that one walk of the body sees values from the previous iteration."""
    seen_store: set[str] = set()
    names = [n for n in walk_lean(loop) if isinstance(n, ast.Name)]
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
    return set(_same_assignments(s))


def _same_assignments(s: ast.If) -> frozenset[str]:
    def table(stmts: list[ast.stmt]) -> dict[str, ast.expr]:
        out: dict[str, ast.expr] = {}
        for st in stmts:
            if isinstance(st, ast.Assign) and len(st.targets) == 1:
                key = env_key(st.targets[0])
                if key is not None:
                    out[key] = st.value
        return out

    def alike(x: ast.expr, y: ast.expr | None) -> bool:
        # one arm may wrap the other's iterable in a progress bar (tabicl's `tqdm(range(a, b))` on
        # the master, `range(a, b)` elsewhere): both iterate alike
        return y is not None and (ast.dump(x) == ast.dump(y) or bar_around(x, y) or bar_around(y, x))
    if not s.orelse:
        return frozenset()
    a, b = table(s.body), table(s.orelse)
    return frozenset(k for k, v in a.items() if alike(v, b.get(k)))


def names_read(node: ast.AST) -> frozenset[str]:
    """The identifiers of every ``Name`` in ``node``'s subtree (what an ``if`` test reads)."""
    return frozenset(n.id for n in walk_lean(node) if isinstance(n, ast.Name))


def guard_names(guard: ast.expr) -> frozenset[str]:
    """What an event records of one rank guard around it (:class:`~k8sddp.lint.events.Event`'s
    ``guard_names``): the guard's text, the names in it, and the text of every attribute,
    subscript, list, tuple and call in it."""
    names = {ast.unparse(guard)}
    for sub in walk_lean(guard):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, (ast.Attribute, ast.Subscript, ast.List, ast.Tuple, ast.Call)):
            names.add(ast.unparse(sub))
    return frozenset(names)


def global_names(node: ast.AST) -> frozenset[str]:
    """The names a function declares ``global`` (outside nested functions and classes):
    SparK's ``dist.initialize()`` sets ``__local_rank`` that way, and ``is_local_master()``
    reads it."""
    out: set[str] = set()
    todo = list(getattr(node, "body", []))
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Global):
            out.update(n.names)
        elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.expr)):
            todo.extend(c for c in ast.iter_child_nodes(n) if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case)))
    return frozenset(out)


def pg_rank_params(node: ast.AST) -> frozenset[str]:
    """The parameters of function ``node`` that it passes as ``rank=`` to an
    ``init_process_group`` call in its own body (``dist.init_process_group("nccl",
    rank=replica_id, world_size=n)``): that parameter is this process's global rank."""
    if isinstance(node, ast.Module):
        return frozenset()
    params = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}  # type: ignore[attr-defined]
    out: set[str] = set()
    for n in walk_lean(node):
        if (isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
                == "init_process_group"):
            out.update(k.value.id for k in n.keywords
                       if k.arg == "rank" and isinstance(k.value, ast.Name) and k.value.id in params)
    return frozenset(out)


def local_names(node: ast.AST) -> set[str]:
    """Names a function assigns (its locals), minus those it declares ``global``."""
    out: set[str] = set()
    declared_global: set[str] = set()
    for sub in walk_lean(node):
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


def exclusive_arms(loop: ast.AST, a: ast.AST, b: ast.AST, ranked: frozenset[str], *, varying: bool = True) -> bool:
    """Whether ``a`` and ``b`` lie in opposite arms of one ``if`` inside ``loop`` whose test is
    not a rank condition (its text is not in ``ranked``) and reads no name the loop assigns: the
    test is the same on every rank and in every iteration, so no run reaches both (open_clip's
    evaluation: a broadcast where ``use_fsdp_eval`` holds, a ``break`` on the local loader where
    it does not). ``varying=False``: ``loop`` is a function body that runs the ``if`` once, so any
    uniform test will do (LLaVA: ``if lora_enable:`` save on rank 0 ``else:`` a ZeRO-3 gather)."""
    assigned = ({n.id for n in walk_lean(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                if varying else set())
    for node in walk_lean(loop):
        if not isinstance(node, ast.If) or node is loop:
            continue
        if ast.unparse(node.test) in ranked:
            continue
        if any(isinstance(n, ast.Name) and n.id in assigned for n in walk_lean(node.test)):
            continue
        in_body = [any(x is sub for st in node.body for sub in walk_lean(st)) for x in (a, b)]
        in_else = [any(x is sub for st in node.orelse for sub in walk_lean(st)) for x in (a, b)]
        if (in_body[0] and in_else[1]) or (in_else[0] and in_body[1]):
            return True
    return False


_FILE_TESTS = frozenset({"exists", "isfile", "is_file", "lexists"})


def _callee_name(node: ast.expr) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def fact_key(test: ast.expr) -> tuple[str, bool]:
    """``test`` without its ``not``s: the source text of the rest and whether ``test`` is true
    when that rest is (``not opt.evolve`` -> ``("opt.evolve", False)``)."""
    polarity = True
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, polarity = test.operand, not polarity
    return ast.unparse(test), polarity


def tests_files(func: ast.AST) -> bool:
    """Whether the body of ``func`` asks whether a file exists (``os.path.exists``, ``isfile``,
    ``Path.exists()``, a name ``in os.listdir(d)``) or holds a file lock (``with FileLock(...)``): what it writes then depends
    on what is already on disk (download-if-missing, caches), not on its arguments alone."""
    for n in walk_lean(func):
        if isinstance(n, ast.Call) and _callee_name(n) in _FILE_TESTS:
            return True
        if isinstance(n, ast.Compare) and isinstance(n.ops[0], (ast.In, ast.NotIn)) \
                and isinstance(c := n.comparators[0], ast.Call) and _callee_name(c) == "listdir":
            return True  # EDGE's `if pickle_name in os.listdir(backup_path):` (not a listing to rotate files)
        if isinstance(n, (ast.With, ast.AsyncWith)) and any(
                _callee_name(i.context_expr).endswith("Lock") for i in n.items):
            return True
    return False


class NodeFacts:
    """The facts above that every walk of a function asks for, each computed once per node.

    Keys are node identities; each entry keeps its node alive, so an identity cannot be reused
    by another node while the cache lives (one :class:`~k8sddp.lint.analyzer.Analyzer`, one
    lint run).
    """

    def __init__(self) -> None:
        self._names: dict[int, tuple[ast.AST, frozenset[str]]] = {}
        self._guards: dict[int, tuple[ast.AST, frozenset[str]]] = {}
        self._same: dict[int, tuple[ast.AST, frozenset[str]]] = {}
        self._dumps: dict[int, tuple[ast.AST, str]] = {}
        self._files: dict[int, tuple[ast.AST, bool]] = {}
        self._keys: dict[int, tuple[ast.AST, tuple[str, bool]]] = {}
        self._calls: dict[int, tuple[ast.AST, ast.Call]] = {}

    @staticmethod
    def _get(cache: dict[int, tuple[ast.AST, _T]], node: ast.AST, compute: Callable[[ast.AST], _T]) -> _T:
        hit = cache.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        value = compute(node)
        cache[id(node)] = (node, value)
        return value

    def names_read(self, node: ast.AST) -> frozenset[str]:
        """:func:`names_read` of ``node``."""
        return self._get(self._names, node, names_read)

    def guard_names(self, guard: ast.expr) -> frozenset[str]:
        """:func:`guard_names` of ``guard``."""
        return self._get(self._guards, guard, guard_names)  # type: ignore[arg-type]

    def same_assignments(self, s: ast.If) -> frozenset[str]:
        """:func:`same_assignments` of ``s`` (read-only)."""
        return self._get(self._same, s, _same_assignments)  # type: ignore[arg-type]

    def dump(self, node: ast.AST) -> str:
        """``ast.dump(node)``."""
        return self._get(self._dumps, node, ast.dump)

    def fact_key(self, test: ast.expr) -> tuple[str, bool]:
        """:func:`fact_key` of ``test`` (cached per node)."""
        return self._get(self._keys, test, fact_key)  # type: ignore[arg-type]

    def tests_files(self, func: ast.AST) -> bool:
        """:func:`tests_files` of ``func``."""
        return self._get(self._files, func, tests_files)

    def call_of(self, arg: ast.expr, site: ast.Call) -> ast.Call:
        """A call of ``arg`` with no arguments, located at ``site`` (a helper's call of the
        function ``site`` passes it as ``arg``: :mod:`k8sddp.lint.closures`); one per ``arg``."""
        def make(a: ast.AST) -> ast.Call:
            assert isinstance(a, ast.expr)
            return ast.copy_location(ast.Call(func=a, args=[], keywords=[]), site)
        return self._get(self._calls, arg, make)


def same_expr(a: ast.expr | None, b: ast.expr | None, facts: NodeFacts) -> bool:
    """``a`` and ``b`` are the same expression (by their cached ``ast.dump``)."""
    return a is not None and b is not None and type(a) is type(b) and facts.dump(a) == facts.dump(b)


def spread(elts: list[ast.expr], packed: dict[str, list[_T]]) -> list[ast.expr | _T] | None:
    """The elements of a tuple display with each ``*name`` replaced by the values of the tuple
    ``name`` was last bound to (``packed``: name -> its elements' values), as YOLOv7 re-instates
    its ranks: ``apriori = opt.global_rank, opt.local_rank`` ... ``opt.cfg, opt.global_rank,
    opt.local_rank = "", *apriori``. ``None`` when a starred element is not such a name."""
    out: list[ast.expr | _T] = []
    for e in elts:
        if isinstance(e, ast.Starred):
            if not isinstance(e.value, ast.Name) or e.value.id not in packed:
                return None
            out.extend(packed[e.value.id])
        else:
            out.append(e)
    return out


def _set_test(test: ast.expr, p: str) -> int:
    """1 when ``test`` is true only where parameter ``p`` is set (``p``, ``p is not None``, ``p !=
    None``, an ``and`` holding one), -1 when true where it is ``None`` (``not p``, ``p is None``), else 0."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return 1 if any(_set_test(v, p) == 1 for v in test.values) else 0
    if isinstance(test, ast.Name):
        return 1 if test.id == p else 0
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        return -1 if test.operand.id == p else 0
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) and test.left.id == p \
            and isinstance(c := test.comparators[0], ast.Constant) and c.value is None:
        return 1 if isinstance(test.ops[0], (ast.IsNot, ast.NotEq)) else -1 if isinstance(test.ops[0], (ast.Is, ast.Eq)) else 0
    return 0


def needs_value(func: ast.AST, p: str, line: int) -> bool:
    """Whether the statement at ``line`` of function ``func`` runs only when parameter ``p`` is set:
    in the body of ``if p:``/``if p is not None:`` (the ``else`` of ``if p is None:``), or after
    ``if p is None: return`` (PET's ``evaluate(..., vis_dir)`` writes only with a ``vis_dir``)."""
    for n in walk_lean(func):
        if not isinstance(n, ast.If) or not (pol := _set_test(n.test, p)):
            continue
        arm = n.body if pol > 0 else n.orelse
        if arm and arm[0].lineno <= line <= max(getattr(s, "end_lineno", s.lineno) or s.lineno for s in arm):
            return True
        if pol < 0 and n.lineno < line and isinstance(n.body[-1], (ast.Return, ast.Raise)):
            return True
    return False


def param_guard(func: ast.AST, cause: ast.AST | None, is_exit: bool, params: tuple[str, ...],
                ranked: frozenset[str]) -> bool:
    """Whether the rank condition that restricted a write of function ``func`` (``cause``: an
    ``if`` test, or, ``is_exit``, the exit statement whose ``if`` left the other ranks out) reads
    only parameters, one of them among ``ranked`` (those holding a rank the callers pass): the
    maskrcnn-benchmark ``setup_logger(name, save_dir, distributed_rank)`` that returns early
    when ``distributed_rank > 0`` writes where its callers' rank says (FADA passes
    ``args.local_rank``: once per node)."""
    test: ast.AST | None = cause
    if is_exit and cause is not None:
        test = next((n.test for n in walk_lean(func) if isinstance(n, ast.If) and cause in n.body), None)
    if test is None:
        return False
    names = names_read(test)
    return bool(names) and names <= set(params) and not names.isdisjoint(ranked)
