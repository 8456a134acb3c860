"""Helpers of the walker's ``if`` handling (:meth:`k8sddp.lint.flow.Walker._s_If`).

- :func:`return_case`: a function that returns ``a if flag else b`` on a parameter (open_clip's
  ``is_master(args, local=False)``) returns ``b`` at a call that leaves ``flag`` at a false literal.
- :func:`pair_arms`: both arms of a rank-dependent ``if`` that run the same collectives in the
  same order pair up.
- Facts that hold in every distributed run: an ``assert`` inside a branch only distributed runs
  take (YOLOv5: ``if LOCAL_RANK != -1: assert not opt.evolve, "--evolve is not compatible with
  DDP"``) makes the asserted flag known there, so a later ``if not opt.evolve:`` takes its body
  in every distributed run and its ``else`` runs as a single process (:func:`fact_key`,
  :func:`assert_facts`). So does the arm of a uniform ``if`` that initialises the process group
  (llama-recipes: ``if train_config.enable_fsdp: setup()``; :func:`note_init`).
- :func:`walk_try`: ``try``/``except``, where an ``except StopIteration`` body runs when this
  rank's data ran out (the others may still hold batches).
- :func:`walk_assert`: an ``assert`` on a test of per-rank numbers in a loop is the ``if not
  test: raise`` it means.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import TYPE_CHECKING, Protocol, TypeVar

from . import knowledge as K
from .events import Event
from .exprs import env_key
from .scopes import fact_key, runs_dry
from .treewalk import wrapper_test
from .values import ALL, MANY, UNIFORM, condition_classes, join, merge_envs

if TYPE_CHECKING:
    from .host import Host
    from .project import FuncInfo, Module
    from .values import Val

__all__ = [
    "AssertRaise", "BranchWalker", "assert_facts", "bind_arms", "fact_flag", "fact_key", "known_flag", "launcher_fallback", "note_init", "pair_arms", "return_case", "single_process_arm", "unwrap_arm", "walk_assert",
    "walk_match", "walk_try",
]


class _Snapshot(Protocol):
    """What a walker's :meth:`BranchWalker.save` keeps (``k8sddp.lint.flow._State``)."""

    mask: int
    many: ast.AST | None
    cause: ast.AST | None
    cause_is_exit: bool
    env: dict[str, Val]


_S = TypeVar("_S", bound=_Snapshot)


class BranchWalker(Protocol[_S]):
    """The part of :class:`k8sddp.lint.flow.Walker` that :func:`return_case` and :func:`walk_try`
    use. Typing them against this protocol instead of the walker keeps the import graph acyclic:
    the walker imports these helpers, never the other way round (as :mod:`k8sddp.lint.host` does
    for the analyzer)."""

    func: FuncInfo
    mod: Module
    silent: int
    mask: int
    many: ast.AST | None
    cause: ast.AST | None
    cause_is_exit: bool
    env: dict[str, Val]
    loops: list[ast.AST]
    dist_depth: int
    dry_exit: ast.AST | None
    solo: int
    dist_facts: dict[str, bool]
    fact_reads: set[str]
    an: Host
    is_module: bool

    def expr(self, node: ast.expr | None) -> Val:
        """The value of ``node``."""
        ...

    def block(self, stmts: list[ast.stmt]) -> None:
        """Walk statements in order."""
        ...

    def save(self) -> _S:
        """A snapshot of the classes, conditions and environment."""
        ...

    def restore(self, st: _S) -> None:
        """Go back to a snapshot."""
        ...


def pair_arms(events: list[Event], spans: list[tuple[int, int]], many: ast.AST | None,
              cause: ast.AST | None, cause_is_exit: bool) -> None:
    """Both arms (``spans``: their ``[start, end)`` ranges in ``events``) of a rank-dependent
    ``if`` run the same collectives in the same order and neither leaves early: every rank runs
    that sequence, so they pair up; their collectives get the state before the ``if``
    (``many``, ``cause``, ``cause_is_exit``)."""
    arms = [events[a:b] for a, b in spans]
    if any(e.kind == "exit" for arm in arms for e in arm):
        return
    ops = [[e.op for e in arm if e.kind == "coll"] for arm in arms]
    if ops[0] != ops[1] or not ops[0]:
        return
    for arm in arms:
        for e in arm:
            if e.kind == "coll":
                e.many, e.cause, e.cause_is_exit = many, cause, cause_is_exit


def bind_arms(env: dict[str, Val], raws: list[dict[str, Val]], before: dict[str, Val], same: frozenset[str],
              cm: int, both: bool, s: ast.If, func: ast.AST) -> None:
    """After the arms of an ``if`` (``cm``: the classes its test is true on, ``ALL`` when uniform;
    ``both``: each arm is reached), rebind in ``env`` what the arms bound alike. ``raws``: each
    arm's unshaped values of the names it bound (:attr:`k8sddp.lint.flow.Walker.raw`).

    - ``same``: names both arms assign with one expression (``x = f()``): every rank assigns them alike.
    - After a rank split, a name only one arm binds, unbound before, is unbound on the ranks of
      the other arm: wherever it is read, the ranks that bound it read it, so it keeps the value
      they computed, not a "differs between ranks" shape (evodiff's ``if rank == 0: dl_valid =
      DataLoader(...)``, iterated in a validation epoch those ranks run). Not when the function
      (``func``) binds the name anywhere outside this ``if`` (``s``): ``if rank == 0: steps = n``
      ... ``if rank > 0: steps = n // 2`` gives the other ranks their own value.
    """
    for k in same:
        if k in raws[0] and k in raws[1] and both:
            env[k] = join(raws[0][k], raws[1][k])
    if cm == ALL:
        return
    alone = (raws[0].keys() ^ raws[1].keys()) - before.keys()
    if alone:
        alone -= _stored_outside(func, s)
    for k in alone:
        if k in env:
            env[k] = raws[0][k] if k in raws[0] else raws[1][k]


def _stored_outside(func: ast.AST, skip: ast.AST) -> set[str]:
    """The names ``func`` assigns anywhere but inside ``skip`` (and nested functions)."""
    out: set[str] = set()
    todo = list(ast.iter_child_nodes(func))
    while todo:
        n = todo.pop()
        if n is skip or isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        todo.extend(ast.iter_child_nodes(n))
    return out


def assert_facts(test: ast.expr) -> list[tuple[str, bool]]:
    """What ``assert test`` makes known (:func:`fact_key` pairs): each operand of an ``and``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [f for v in test.values for f in assert_facts(v)]
    if isinstance(test, (ast.Name, ast.Attribute, ast.UnaryOp)):
        return [fact_key(test)]
    return []


def return_case(w: BranchWalker[_S], value: ast.expr) -> tuple[str, Val, Val] | None:
    """For ``return <a> if <param> else <b>`` (or ``if not <param>``), the parameter and the
    values of the two results, evaluated without recording events; ``None`` for any other
    return value."""
    if not isinstance(value, ast.IfExp):
        return None
    test, positive = value.test, True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, positive = test.operand, False
    if not isinstance(test, ast.Name) or test.id not in w.func.params:
        return None
    w.silent += 1
    try:
        a, b = w.expr(value.body), w.expr(value.orelse)
    finally:
        w.silent -= 1
    return (test.id, a, b) if positive else (test.id, b, a)


def fact_flag(facts: dict[str, bool], node: ast.expr, names: bool = True,
              key: tuple[str, bool] | None = None) -> int:
    """1 when ``facts`` (:func:`fact_key` text -> truth in distributed runs) say ``node`` is true
    in every distributed run, -1 when false, else 0; with no fact on it (and ``names``), a flag named
    :data:`~k8sddp.lint.knowledge.DIST_FLAG_NAMES` (``cfg.MODEL.DIST_TRAIN``) is true there."""
    text, polarity = key or fact_key(node)  # `key`: fact_key(node), when the caller has it
    if text in facts:
        return 1 if facts[text] == polarity else -1
    if not names:
        return 0
    inner = node
    while isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.Not):
        inner = inner.operand
    name = inner.attr if isinstance(inner, ast.Attribute) else inner.id if isinstance(inner, ast.Name) else ""
    if isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Constant) and isinstance(inner.slice.value, str):
        name = inner.slice.value  # CLTR's `args['distributed']`
    if name.lower().lstrip("_") in K.DIST_FLAG_NAMES:  # habitat-lab's `self._is_distributed`
        return 1 if polarity else -1
    return 0


def known_flag(w: BranchWalker[_S], node: ast.expr) -> int:
    """1 when ``node`` is known true in every distributed run, -1 when known false, else 0: by
    the facts of the function ``w`` walks, else by a flag another function initialises the
    process group under (``Analyzer.init_facts``: llama-recipes' ``if
    train_config.enable_fsdp: setup()`` in ``main``, read in ``train``), else by its name."""
    key = w.an.facts.fact_key(node)
    if own := fact_flag(w.dist_facts, node, names=False, key=key):
        return own
    inner = node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) else node
    if not w.is_module and isinstance(inner, (ast.Name, ast.Attribute)):  # a plain flag
        w.fact_reads.add(key[0])
        if found := fact_flag(w.an.init_facts, node, names=False, key=key):
            return found
    return fact_flag({}, node, key=key)


def note_init(facts: dict[str, bool], test: ast.expr, in_body: bool) -> None:
    """Record that the arm of ``if test`` (its body when ``in_body``) initialised the process
    group: every distributed run took that arm, so ``test`` has that truth there."""
    key, polarity = fact_key(test)
    facts.setdefault(key, polarity if in_body else not polarity)


def unwrap_arm(env: dict[str, Val], test: ast.expr, in_body: bool) -> None:
    """In the arm of ``if hasattr(m, "module"):`` (or ``isinstance(m, DistributedDataParallel)``)
    where the test fails, ``m`` is no wrapped model (BigVGAN's ``if hasattr(generator, "module"):
    generator.module(x) else: generator(x)``): its forward there is no collective."""
    found = wrapper_test(test)
    key = env_key(found[0]) if found is not None else None
    if found is not None and key is not None and in_body != found[1] and (v := env.get(key)) is not None and v.wrapped:
        env[key] = dataclasses.replace(v, wrapped=None)


def walk_try(w: BranchWalker[_S], s: ast.Try) -> None:
    """Walk ``try``: the body and ``else``, then each handler from the state before the body;
    the states join, then ``finally`` runs."""
    before = w.save()
    w.block(s.body)
    w.block(s.orelse)
    after_body = w.save()
    states = [after_body]
    fallback = [launcher_fallback(s, h) for h in s.handlers]
    for h, solo in zip(s.handlers, fallback, strict=True):
        w.restore(before)
        w.solo += solo  # no distributed run takes it (its module-level stores are not the globals)
        if h.name:
            w.env[h.name] = UNIFORM
        dry = h.type is not None and runs_dry(h.type, w.mod.source)
        outer_dry = w.dry_exit
        if dry:  # this rank's data ran out: other ranks may still hold batches
            w.many, w.cause, w.cause_is_exit = h.type, h.type, False
            if h.body and isinstance(h.body[-1], (ast.Break, ast.Return)):
                w.dry_exit = h.type  # values set on the way out follow from the exit (flow.Walker.assign)
        w.block(h.body)
        w.dry_exit = outer_dry
        if dry:
            w.many, w.cause, w.cause_is_exit = before.many, before.cause, before.cause_is_exit
        w.solo -= solo
        states.append(w.save())
    w.restore(after_body)
    for st, solo in zip(states[1:], fallback, strict=True):
        if not solo:  # a launcher's fallback: a distributed run keeps the body's values
            w.env = merge_envs(w.env, st.env)
        w.mask |= st.mask
    if w.mask == 0 and s.finalbody:
        w.mask = before.mask
    w.block(s.finalbody)


def walk_match(w: BranchWalker[_S], s: ast.Match) -> None:
    """Walk ``match``: each case from the state before it; the ranks that reach any case's end
    go on (the subject is the same expression on every rank, so no case is rank-dependent)."""
    w.expr(s.subject)
    before = w.save()
    masks = 0
    for case in s.cases:
        w.restore(before)
        w.block(case.body)
        masks |= w.mask
    w.mask = masks or before.mask


_FALLBACK_ERRORS = frozenset({"KeyError", "ValueError", "TypeError", "Exception", "BaseException"})


def launcher_fallback(s: ast.Try, h: ast.ExceptHandler) -> bool:
    """Whether handler ``h`` of ``s`` is the fallback for a run without a launcher: the ``try``
    body reads a launcher's rank variable with ``os.environ[...]`` (:data:`knowledge.RANK_ENV`)
    and ``h`` catches the ``KeyError`` that raises where it is unset (bare, ``Exception``, or a
    tuple naming one). insightface's arcface_torch: ``try: rank = int(os.environ["RANK"]) ...
    except KeyError: rank = 0 ...``: in a distributed run the body's values hold after the ``try``."""
    types = [] if h.type is None else (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])
    if types and not any(isinstance(t, ast.Name) and t.id in _FALLBACK_ERRORS for t in types):
        return False
    for st in s.body:
        for n in ast.walk(st):
            if (isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
                    and n.slice.value in K.RANK_ENV and isinstance(n.value, ast.Attribute)
                    and n.value.attr == "environ"):
                return True
    return False


class AssertRaise(ast.Raise):
    """The ``raise`` an ``assert`` means when its test fails (findings name it ``word``)."""

    word = "assert"


def walk_assert(w: BranchWalker[_S], s: ast.Assert) -> None:
    """Walk ``assert test``. Inside the distributed set-up it states facts (:func:`assert_facts`).
    In a loop, an assert on a test of per-rank numbers (the local loss: ``assert
    torch.isfinite(losses).all()``, ``assert not np.isnan(loss)``; docs/lint.md, "How rank
    dependence is decided") is walked as ``if not test: raise``: it fails on some ranks only, and
    the others wait in the loop's next collective (KDP502, reported at the assert). Asserts on a
    rank or on the configuration (``assert rank < world_size``) stay sanity checks."""
    if w.dist_depth:
        w.expr(s.test)
        w.dist_facts.update(assert_facts(s.test))
        return
    if w.loops:
        w.silent += 1
        try:
            test = w.expr(s.test)
        finally:
            w.silent -= 1
        if test.kind is None and test.ddp_out and condition_classes(test, s.test) == MANY and not test.synced:
            fail = ast.copy_location(AssertRaise(exc=None, cause=None), s)
            t = s.test
            failed = (t.operand if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)
                      else ast.copy_location(ast.UnaryOp(op=ast.Not(), operand=t), t))
            branch = ast.copy_location(ast.If(test=failed, body=[fail], orelse=[]), s)
            w.block([branch])
            return
    w.expr(s.test)


def single_process_arm(w: BranchWalker[_S], arm: list[ast.stmt], cm: int) -> bool:
    """True when an arm of a uniform ``if`` asserts, among its first statements, that the run is
    not distributed (YOLOv7's hyperparameter evolution: ``else: assert opt.local_rank == -1,
    'DDP mode not implemented for --evolve'``): one process runs it, so its writes are no
    multi-rank writes."""
    if cm != ALL:
        return False
    for st in arm[:3]:
        if isinstance(st, ast.Assert):
            w.silent += 1
            try:
                if w.expr(st.test).distflag == -1:
                    return True
            finally:
                w.silent -= 1
    return False
