"""The statement walker: follows one function's control flow, per class of ranks.

The walker keeps the set of rank classes (``Z`` global rank 0, ``LZ`` other local-rank-0s, ``N``
the rest; :mod:`k8sddp.lint.values`) that reach the current statement. A rank-dependent ``if``
splits it between its arms; an arm that ends in ``return``/``break``/``continue``/``raise``/
``sys.exit`` removes its classes from what follows. A condition of a shape the classes cannot
express (``rank % 2``, a value only rank 0 computed) marks what it guards as ``many``. Every
collective, exit and file write or read is recorded as an :class:`~k8sddp.lint.events.Event`
with the classes that execute it; the rules compare what each class executes.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import knowledge as K
from .branches import (
    bind_arms,
    known_flag,
    note_init,
    pair_arms,
    return_case,
    single_process_arm,
    unwrap_arm,
    walk_assert,
    walk_match,
    walk_try,
)
from .calls import CallMixin
from .calls_io import drop_items, held_items, terminal
from .events import Event
from .exprs import env_key, item_key, kind_of_mask
from .keyed import bind_keys, returned
from .scopes import progress_wrapper, same_expr, spread
from .stores import record_store
from .treewalk import node_offset
from .values import (
    ALL,
    MANY,
    UNIFORM,
    Val,
    Z,
    classes_of,
    condition_classes,
    falsy_under,
    join,
    join_kind,
    merge_envs,
)

if TYPE_CHECKING:
    from .host import Host
    from .project import FuncInfo, Module

__all__ = ["Walker"]

_EXIT_FUNCS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})
_S_METHODS: dict[type, Callable[..., None] | None] = {}  # statement class -> Walker._s_ method


@dataclasses.dataclass
class _State:
    mask: int
    many: ast.AST | None
    cause: ast.AST | None
    cause_is_exit: bool
    env: dict[str, Val]


class Walker(CallMixin):
    """Walks one function (or module body) once; see the module docstring.

    Args:
        analyzer: the project-wide analysis (summaries, parameter values, class attributes).
        func: the function to walk.
        entry_mask: the classes that run the function's body (Z for ``@rank_zero_only``).
    """

    def __init__(self, analyzer: Host, func: FuncInfo, entry_mask: int = ALL) -> None:
        self.an = analyzer
        self.func = func
        self.mod = func.module
        self.env: dict[str, Val] = {}
        self.raw: dict[str, Val] = {}  # each name's last assigned value, before the guard's shape
        self.guarded_at: dict[str, tuple[int, ast.AST | None, Val, Val]] = {}  # IOMixin.note_guarded
        self.dry_exit: ast.AST | None = None  # the `except StopIteration` that exits, being walked
        self.optional_ifs: set[ast.If] = set()  # uniform ifs not decided by distribution itself
        self.instances: dict[str, tuple[Module, str]] = {}  # names bound to a project class's instance
        self.fn_alias: dict[str, str] = {}  # names bound to a model-running library function (CallMixin.note_instance)
        self.sources: dict[str, ast.expr | None] = {}  # each name's last assigned expression
        self.is_module = isinstance(func.node, ast.Module)
        self.locals_ = analyzer.local_names(func) if not self.is_module else set()
        self.globals_ = analyzer.global_names(func)
        self.entry_mask = entry_mask
        self.mask = entry_mask
        self.many: ast.AST | None = None
        self.cause: ast.AST | None = None
        self.cause_is_exit = False
        self.loops: list[ast.AST] = []
        self.ordered: ast.AST | None = None
        self.guards: list[ast.expr] = []
        self.class_guards: list[ast.expr] = []  # the rank-class conditions (`rank == 0`) around this point
        self.silent = 0
        self.events: list[Event] = []
        self.returns: list[Val] = []
        self.return_items: list[tuple[Val, ...] | None] = []  # per return: its tuple's values
        self.return_keys: list[dict[str, Val] | None] = []  # per return: its dict's items (keyed.py)
        self.last_keys: tuple[ast.Call, tuple[tuple[str, Val], ...]] | None = None
        self.keyed: set[str] = set()  # the item keys bind_keys made
        self.last_items: tuple[ast.Call, list[Val]] | None = None  # calls.tuple_parts
        self.rank_exits: list[tuple[int, ast.AST]] = []  # (mask, stmt) of rank-dependent function exits
        self.uses_rank = False
        self.last_exit: ast.AST | None = None
        self.partial_guard = False
        self.one_guard = 1 if func.launches else 0  # a launcher runs once, in the parent process
        self.solo = 0  # depth of the arms no distributed run takes (`if args.local_rank == -1 and ...:`)
        #: flags asserted inside branches only distributed runs take (:mod:`k8sddp.lint.branches`)
        self.dist_facts: dict[str, bool] = {}
        self.init_facts: dict[str, bool] = {}  # those an init_process_group arm gave
        self.fact_reads: set[str] = set()  # keys asked of Analyzer.init_facts
        self.dist_depth = 0
        self.inits_pg = False  # an init_process_group (or a helper running one) was walked
        self.test_names: set[str] = set()  # names the if/while tests read (lint/quiet.py)
        self.ret_case: tuple[str, Val, Val] | None = None  # `return a if flag else b` (branches.py)
        self.file_objects: set[str] = set()
        self.bindings: dict[str, Val] = {}
        self.global_reads: set[str] = set()
        self.attr_reads: set[str] = set()
        self.param_io: set[tuple[str, str]] = set()
        self.calls: list[tuple[str, dict[str, Val], tuple[int, ast.AST | None, ast.AST | None, bool]]] = []
        self.attr_stores: dict[str, Val] = {}
        self.menv_stores: dict[str, Val] = {}
        self.inst_stores: dict[tuple[str, str], dict[str, Val]] = {}
        self.packed: dict[str, list[Val]] = {}  # names bound to a tuple of names: its items (scopes.spread)
        self.env_loops: dict[str, list[str]] = {}  # `for v in ("LOCAL_RANK", ...)`: v -> those names
        self.closure_defs: dict[str, dict[str, Val]] = {}  # lint/closures.py
        self.param_runs: list[tuple[str, int, bool]] = []

    # -- environment -------------------------------------------------------------------------
    def global_val(self, name: str) -> Val:
        """The value of module global ``name`` as the module body left it."""
        if self.is_module:
            return UNIFORM
        self.global_reads.add(name)
        return self.an.module_env.get(self.mod.path, {}).get(name, UNIFORM)

    def class_attr(self, attr: str) -> Val | None:
        """The value methods of the enclosing class store in ``self.<attr>``, if any."""
        if not self.func.cls:
            return None
        self.attr_reads.add(attr)
        return self.an.class_attrs.get((self.mod.path, self.func.cls), {}).get(attr)

    def assign(self, target: ast.expr, val: Val, value_node: ast.expr | None = None) -> None:
        """Bind ``target`` to ``val`` (tuple targets element-wise where the value is a tuple)."""
        if isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            items = spread(value_node.elts, self.packed) if isinstance(value_node, (ast.Tuple, ast.List)) else None
            if items is not None and len(items) == len(elts):
                for t, v in zip(elts, items, strict=True):
                    self.assign(t, *((v, None) if isinstance(v, Val) else (self.expr(v), v)))
                return
            parts = self.tuple_parts(value_node, len(elts)) if value_node is not None else None
            if parts is None and value_node is not None:
                parts = held_items(self.env, env_key(value_node), len(elts))  # `net_g, net_d = nets`
            for i, t in enumerate(elts):
                self.assign(t, parts[i] if parts else val, None)
            return
        if isinstance(target, ast.Starred):
            self.assign(target.value, val, None)
            return
        key = item_key(target) if isinstance(target, ast.Subscript) else env_key(target)
        if isinstance(target, ast.Subscript) and key is None:  # an item of unknown key: the container
            if (base := env_key(target.value)) is not None:
                self.env[base] = join(self.env.get(base, UNIFORM), val.data_only())
            return
        if key is None:
            return
        if isinstance(value_node, ast.Call) and terminal(value_node.func) in K.FILE_OBJECT_CALLS:
            self.file_objects.add(key)
        self.note_instance(key, value_node)
        rewrap = (isinstance(value_node, ast.Call) and value_node.args
                  and progress_wrapper(terminal(value_node.func))
                  and env_key(value_node.args[0]) == key)  # pbar = tqdm(pbar) on rank 0 only
        self.raw[key] = val
        prev, self.sources[key] = self.sources.get(key), value_node
        # after an exit only some ranks took, those still here compute alike (`if time.time() > end: break`)
        many = self.many is not None and not (self.cause_is_exit and self.many is self.cause) and self.many is not self.dry_exit
        if (self.mask != self.entry_mask or many) and not (val.synced and val.kind is None) and not rewrap \
                and not (val.kind is None and same_expr(prev, value_node, self.an.facts)):  # `epochs = opt.epochs` once more
            shape = "other" if many else kind_of_mask(self.mask)
            val = falsy_under(val, shape, value_node, self.env.get(key)) or (
                val.with_kind(join_kind(val.kind, shape)) if val.kind != shape else val)
        self.env[key] = val = self.note_guarded(key, self.raw[key], val)
        drop_items(self.env, key)  # a list the callers passed, bound anew
        bind_keys(self, key, value_node)  # `info = get_ddp_info()`: info['rank'] (keyed.py)
        if self.silent:
            return
        record_store(self, key, val)  # class attributes, instance attributes, globals (stores.py)

    # -- events ------------------------------------------------------------------------------
    def emit(self, kind: str, op: str, node: ast.AST, **kw: object) -> None:
        """Record an event at the current position (nothing while pre-walking a loop)."""
        if self.silent or (self.mask == 0 and self.many is None) or self.solo:
            return  # (one process runs a single-process arm: nothing there can fall out of step)
        names: set[str] = set()
        for g in self.guards:
            names |= self.an.facts.guard_names(g)
        ev = Event(
            kind=kind, op=op, node=node, mask=self.mask, many=self.many, cause=self.cause,
            cause_is_exit=self.cause_is_exit, loops=tuple(self.loops), ordered=self.ordered,
            guard_names=frozenset(names), seq=len(self.events), one=self.one_guard > 0,
            class_cause=self.class_guards[-1] if self.class_guards else None,
            **kw,  # type: ignore[arg-type]
        )
        self.events.append(ev)

    def eval_under(self, test: ast.expr, test_val: Val, node: ast.expr, positive: bool) -> Val:
        cm = condition_classes(test_val, test)
        if cm == MANY and self.mask == Z:
            cm = ALL
        if cm != MANY and test_val.partial and not positive:
            cm = ALL
        if cm == MANY and test_val.nkind is not None and not positive:
            cm = ~classes_of(test_val.nkind) & ALL  # the arm of `not (U or rank != 0)`: rank 0 at most
        if cm == ALL:
            return self.expr(node)
        saved = (self.mask, self.many, self.cause, self.cause_is_exit)
        if cm == MANY:
            self.many = self.many or test
        else:
            self.mask &= cm if positive else (~cm & ALL)
        self.cause, self.cause_is_exit = test, False
        self.guards.append(test)
        one = test_val.kind == "one" and positive
        self.one_guard += one
        try:
            return self.expr(node)
        finally:
            self.one_guard -= one
            self.guards.pop()
            self.mask, self.many, self.cause, self.cause_is_exit = saved

    # -- statements --------------------------------------------------------------------------
    def run(self) -> None:
        """Walk the whole body."""
        node = self.func.node
        if not self.is_module:
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            self.bindings = self.an.param_vals_for(self.func)
            self.env.update(self.bindings)
            for dec in (d for d in node.decorator_list if not isinstance(d, ast.Name)):
                self.expr(dec)
        self.block(node.body)

    def block(self, stmts: list[ast.stmt]) -> None:
        """Walk statements in order until no rank class reaches the next one."""
        for s in stmts:
            if self.mask == 0:
                return
            self.stmt(s)

    def save(self) -> _State:
        """A snapshot of the classes, conditions and environment."""
        return _State(self.mask, self.many, self.cause, self.cause_is_exit, dict(self.env))

    def restore(self, st: _State) -> None:
        """Go back to a snapshot."""
        self.mask, self.many, self.cause, self.cause_is_exit = st.mask, st.many, st.cause, st.cause_is_exit
        self.env = dict(st.env)

    def stmt(self, s: ast.stmt) -> None:
        """Walk one statement."""
        cls = s.__class__
        if cls in _S_METHODS:
            method = _S_METHODS[cls]
        else:  # the unbound method, looked up once per statement class
            method = _S_METHODS[cls] = getattr(type(self), "_s_" + cls.__name__, None)
        if method is not None:
            method(self, s)
            return
        for child in ast.iter_child_nodes(s):
            if isinstance(child, ast.expr):
                self.expr(child)

    def _s_Pass(self, s: ast.stmt) -> None:
        return None

    _s_ClassDef = _s_Import = _s_ImportFrom = _s_Global = _s_Nonlocal = _s_Delete = _s_Pass  # defs: closures.py

    def _s_Expr(self, s: ast.Expr) -> None:
        v = s.value
        if isinstance(v, ast.Call) and self._dotted(v.func) in _EXIT_FUNCS:
            [self.expr(a) for a in v.args]
            self.exit(s, "sys.exit")
            return
        self.expr(v)

    def _s_Assign(self, s: ast.Assign) -> None:
        elts = s.value.elts if isinstance(s.value, ast.Tuple) else []
        if elts and all(isinstance(e, (ast.Name, ast.Attribute)) for e in elts) and (key := env_key(s.targets[0])):
            self.packed[key] = [self.expr(e) for e in elts]  # scopes.spread
        val = self.expr(s.value)
        for t in s.targets:
            self.assign(t, val, s.value)

    def _s_AnnAssign(self, s: ast.AnnAssign) -> None:
        if s.value is not None:
            self.assign(s.target, self.expr(s.value), s.value)

    def _s_AugAssign(self, s: ast.AugAssign) -> None:
        val = self.expr(s.value)
        cur = self.expr(s.target) if isinstance(s.target, (ast.Name, ast.Attribute)) else UNIFORM
        out = join(cur, val).data_only()  # `args.local_rank += args.node_index * args.gpu_per_node`: the rank
        self.assign(s.target, out.with_kind("rank") if cur.kind == "local" and node_offset(s.value) else out, None)

    def _s_Return(self, s: ast.Return) -> None:
        returned(self, s.value)  # lint/keyed.py
        if s.value is not None:
            self.ret_case = return_case(self, s.value) if len(self.returns) == 1 else None
        self.exit(s, "return")

    def _s_Raise(self, s: ast.Raise) -> None:
        self.expr(s.exc)
        self.exit(s, "raise")

    _s_AssertRaise = _s_Raise  # the failing arm of an assert (branches.walk_assert)

    def _s_Break(self, s: ast.Break) -> None:
        self.exit(s, "break")

    def _s_Continue(self, s: ast.Continue) -> None:
        self.exit(s, "continue")

    def exit(self, s: ast.stmt, kind: str) -> None:
        """A statement that leaves the block: record it when only some ranks take it."""
        self.last_exit = s
        if self.mask != self.entry_mask or self.many is not None:
            self.emit("exit", kind, s)
            if kind in ("return", "raise", "sys.exit") and not self.silent:
                self.rank_exits.append((self.mask if self.many is None and not self.partial_guard else 0, s))
        self.mask = 0

    def _s_If(self, s: ast.If) -> None:
        test = self.expr(s.test)
        self.test_names |= self.an.facts.names_read(s.test)
        if isinstance(s.test, ast.Constant) and not test.distflag:  # `if True:` runs one arm only
            test = dataclasses.replace(test, distflag=1 if s.test.value else -1)
        elif not test.distflag and test.kind is None and (flag := self.dist_fact(s.test)):
            test = dataclasses.replace(test, distflag=flag)  # `if not opt.evolve:` (branches.py)
        cm = condition_classes(test, s.test)
        if test.kind:
            self.uses_rank = True
        elif cm == ALL and not test.distflag and not isinstance(s.test, ast.Constant):
            self.optional_ifs.add(s)  # a uniform `if` some runs skip (rules_io: a barrier in it fences only them)
        before = self.save()
        partial = test.partial and cm not in (ALL, MANY)
        if cm == MANY and before.mask == Z:
            cm = ALL  # a condition only global rank 0 evaluates: at most one rank either way
        else_narrow = False
        if cm == ALL:
            arms_mask = (before.mask, before.mask)
            many: ast.AST | None = before.many
        elif cm == MANY and test.nkind is not None:
            # `if U or rank != 0: ... else:`: the else arm runs on some of the ranks where every
            # rank test is false (rank 0), the body on ranks of unknown shape
            arms_mask = (before.mask, before.mask & classes_of(test.nkind))
            many = before.many or s.test
            else_narrow = True
        elif cm == MANY:
            arms_mask = (before.mask, before.mask)
            many = before.many or s.test
        elif partial:  # `rank == 0 and x`: the classes of rank == 0 may take either arm
            arms_mask = (before.mask & cm, before.mask)
            many = before.many
        else:
            arms_mask = (before.mask & cm, before.mask & ~cm & ALL)
            many = before.many
        results: list[_State] = []
        spans: list[tuple[int, int]] = []
        same = self.an.facts.same_assignments(s) if cm != ALL else frozenset()
        raws: list[dict[str, Val]] = []
        # a value test inside a rank guard (`if rank == 0:` ... `if hooks.stop: return`): the
        # guarded ranks may take either arm, so an exit in it leaves an unknown subset of them
        maybe = cm == ALL and not test.distflag and before.mask not in (0, self.entry_mask)
        for arm, m in ((s.body, arms_mask[0]), (s.orelse, arms_mask[1])):
            start = len(self.events)
            one = test.kind == "one" and arm is s.body
            # the arm only a run without distribution takes: one process runs it
            in_dist = bool(test.distflag) and cm == ALL and (arm is s.body) == (test.distflag > 0)
            solo = (bool(test.distflag) and cm == ALL and not in_dist) or single_process_arm(self, arm, cm)
            one, self.dist_depth, self.solo = one or solo, self.dist_depth + in_dist, self.solo + solo
            self.restore(before)
            unwrap_arm(self.env, s.test, arm is s.body)  # `if hasattr(g, "module"): g.module(x) else: g(x)`
            negated = else_narrow and arm is s.orelse
            self.mask, self.many = m, (before.many if negated else many)
            ranked = cm != ALL
            outer_partial = self.partial_guard
            self.partial_guard = outer_partial or maybe
            if ranked:
                self.cause, self.cause_is_exit = s.test, False
                self.guards.append(s.test)
                self.partial_guard = outer_partial or (partial and arm is s.body) or negated
            narrowing = ranked and (cm != MANY or negated)
            if narrowing:
                self.class_guards.append(s.test)
            self.one_guard += one
            inits = self.inits_pg
            if m or self.many is not None:
                self.block(arm)
            if not inits and self.inits_pg and cm == ALL and not test.distflag and test.kind is None:
                note_init(self.dist_facts, s.test, arm is s.body)  # `if cfg.enable_fsdp: setup()`
                note_init(self.init_facts, s.test, arm is s.body)  # for the project (Analyzer.init_facts)
            self.one_guard -= one
            self.dist_depth, self.solo = self.dist_depth - in_dist, self.solo - solo
            if narrowing:
                self.class_guards.pop()
            if ranked:
                self.guards.pop()
            self.partial_guard = outer_partial
            raws.append({k: self.raw[k] for k in same | (self.env.keys() - before.env.keys()) if k in self.raw})
            results.append(self.save())
            spans.append((start, len(self.events)))
        a, b = results
        if cm == MANY and a.mask and b.mask:
            pair_arms(self.events, spans, before.many, before.cause, before.cause_is_exit)
        dist_arm = (a if test.distflag > 0 else b) if test.distflag and cm == ALL else None
        if dist_arm is not None and dist_arm.mask:  # distributed runs take one arm only: its env and ranks
            self.env = dict(dist_arm.env)
        else:
            # an arm that all-reduced wins under a uniform test too (`if sharded: all_reduce(x)`)
            self.env = merge_envs(a.env, b.env, prefer_synced=cm != MANY)
        bind_arms(self.env, raws, before.env, same, cm, bool(a.mask and b.mask), s, self.func.node)
        self.mask = dist_arm.mask if dist_arm is not None and dist_arm.mask else a.mask | b.mask
        self.many = before.many
        self.cause, self.cause_is_exit = before.cause, before.cause_is_exit
        if cm == MANY or (partial and a.mask == 0) or maybe:  # `if rank == 0:` ... `if not ok: exit(0)` (NCL)
            if (a.mask == 0) != (b.mask == 0) and self.last_exit is not None:
                self.many, self.cause, self.cause_is_exit = self.last_exit, self.last_exit, True
        elif self.mask != before.mask and self.last_exit is not None:
            self.cause, self.cause_is_exit = self.last_exit, True
        if self.many is None and (left := next((r for r in (a, b) if r.mask and r.cause_is_exit and r.many is not None
                                                 and r.many is not before.many), None)):  # some left by an arm's exit
            self.many, self.cause, self.cause_is_exit = left.many, left.many, True

    def loop(self, s: ast.For | ast.AsyncFor | ast.While, head: Val, body: list[ast.stmt]) -> None:
        """Walk a loop body: pre-walk it once silently when values flow between iterations,
        then for real; rank-dependent exits inside it restrict what follows."""
        before = self.save()
        exits_before = len(self.rank_exits)
        varies = head.kind is not None or (isinstance(s, ast.While) and head.ddp_out)
        if varies and before.mask != Z:
            self.uses_rank = True
            self.many = self.many or (s.iter if isinstance(s, (ast.For, ast.AsyncFor)) else s.test)
        if not self.silent and self.an.loop_carried(s):  # widen the environment first
            self.silent += 1
            self.block(body)
            self.silent -= 1
            self.env = merge_envs(before.env, self.env)
            self.mask, self.many = before.mask, self.many if varies and before.mask != Z else before.many
        self.loops.append(s)
        self.block(body)
        self.loops.pop()
        self.env = merge_envs(before.env, self.env)
        self.mask, self.many = before.mask, before.many
        self.cause, self.cause_is_exit = before.cause, before.cause_is_exit
        for m, stmt in self.rank_exits[exits_before:]:
            if isinstance(stmt, ast.Raise):
                continue
            if m:
                self.mask &= ~m
            else:  # taken by an unknown subset of ranks
                self.many = self.many or stmt
            self.cause, self.cause_is_exit = stmt, True
        self.block(s.orelse)
        if self.mask == 0:
            self.mask = before.mask

    def _s_For(self, s: ast.For) -> None:
        if isinstance(s.target, ast.Name) and isinstance(s.iter, (ast.Tuple, ast.List)):
            self.env_loops[s.target.id] = [e.value for e in s.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        it = self.expr(s.iter)
        self.assign(s.target, it.data_only(), None)
        self.loop(s, it, s.body)

    _s_AsyncFor = _s_For  # type: ignore[assignment]

    def _s_While(self, s: ast.While) -> None:
        self.test_names |= self.an.facts.names_read(s.test)
        self.loop(s, self.expr(s.test), s.body)

    def _s_With(self, s: ast.With) -> None:
        outer = self.ordered
        for item in s.items:
            v = self.expr(item.context_expr)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, v, item.context_expr)
            ce = item.context_expr
            name = ce.func if isinstance(ce, ast.Call) else ce
            d = self._dotted(name) or ""
            if d.split(".")[-1] in K.ORDERED_CONTEXTS:
                self.ordered = ce
        self.block(s.body)
        self.ordered = outer

    _s_AsyncWith = _s_With  # type: ignore[assignment]
    _s_Try = _s_TryStar = walk_try  # branches.py: try/except, match, assert
    _s_Match, _s_Assert = walk_match, walk_assert

    def dist_fact(self, node: ast.expr) -> int:
        """1 when ``node`` is known true in every distributed run, -1 when known false, else 0."""
        return known_flag(self, node)  # branches.py

    # -- results -----------------------------------------------------------------------------
    def return_val(self) -> Val:
        """The joined value of every ``return``."""
        return join(*self.returns) if self.returns else UNIFORM
