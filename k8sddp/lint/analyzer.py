"""The project-wide analysis: walks every function until the call graph's facts settle.

The first round walks every function of the project (:class:`~k8sddp.lint.flow.Walker`); later
rounds re-walk the functions whose inputs changed, with what the previous round learned: the values callers pass to each parameter (joined over call sites),
the attributes methods store on ``self``, the module globals, and each function's summary (its
return value and the collectives it runs). Rounds stop when nothing changes (at most
:data:`MAX_ROUNDS`). Afterwards :meth:`Analyzer.context` says which rank classes can run a
function, from the guards around its call sites.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Callable
from typing import TypeVar

from . import knowledge as K
from .calls_io import is_display_item, keep_display_items
from .closures import closure_val
from .events import (
    Event,
    Summary,
    WriteSum,
    delegated,
    forward_params,
    is_checkpoint,
    rank0_checkpoint,
    rebound,
    some_checkpoint,
)
from .flow import Walker
from .host import caller_ranked
from .keyed import join_keys
from .lookups import LookupMixin
from .project import FuncInfo, Module, Project, dotted
from .quiet import Pair, enclosing_tests, forwards, quiet_pairs
from .scopes import NodeFacts, local_names, loop_carried, wraps_param
from .values import ALL, LZ, UNIFORM, Val, Z, join, join_items

__all__ = ["Analyzer", "CallSite", "Context", "MAX_ROUNDS"]

#: Rounds of the fixed point; call chains deeper than this lose precision, never soundness of
#: termination.
MAX_ROUNDS = 8
_K = TypeVar("_K")


@dataclasses.dataclass(frozen=True)
class CallSite:
    """One call of a project function: the caller, and the classes/guards it runs under."""

    caller: str
    mask: int
    many: ast.AST | None
    cause: ast.AST | None
    node: ast.AST
    caller_path: str
    cause_is_exit: bool = False


@dataclasses.dataclass(frozen=True)
class Context:
    """Who can run a function: classes, an unknown-shape rank condition, the guard that
    restricts it (for messages), and whether any caller is known at all."""

    mask: int
    many: ast.AST | None
    cause: ast.AST | None
    cause_path: str
    called: bool
    cause_is_exit: bool = False


def _changed_names(old: dict[_K, dict[str, Val]], new: dict[_K, dict[str, Val]]) -> dict[_K, set[str]]:
    """Per table key, the names whose value differs between ``old`` and ``new``."""
    out: dict[_K, set[str]] = {}
    for key in set(old) | set(new):
        a, b = old.get(key, {}), new.get(key, {})
        names = {n for n in set(a) | set(b) if a.get(n) != b.get(n)}
        if names:
            out[key] = names
    return out


def _calls_in_rank_zero_def(wrapper: ast.FunctionDef | ast.AsyncFunctionDef, fn: str) -> bool:
    """Whether ``wrapper`` calls ``fn`` only inside functions it defines with a rank-zero
    decorator (:data:`knowledge.RANK_ZERO_DECORATORS`), and calls ``fn`` nowhere else."""
    inside = outside = False
    todo: list[tuple[ast.AST, bool]] = [(s, False) for s in wrapper.body]
    while todo:
        node, gated = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = {dotted(d.func if isinstance(d, ast.Call) else d) or "" for d in node.decorator_list}
            gated = gated or any(n.split(".")[-1] in K.RANK_ZERO_DECORATORS for n in names)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == fn:
            inside, outside = inside or gated, outside or not gated
        todo.extend((c, gated) for c in ast.iter_child_nodes(node))
    return inside and not outside


def _write_summary(w: Walker) -> tuple[WriteSum, ...]:
    """The writes of a walked function that its call sites judge (see :func:`delegated`)."""
    out: list[WriteSum] = []
    params = tuple(p for p in w.func.params if p not in ("self", "cls"))
    again = rebound(w.func.node, params, w.events)
    ranked = caller_ranked(w.an, w.func.key)
    for e in w.events:
        how = delegated(e, params, w.entry_mask, again=again, func=w.func.node, ranked=ranked)
        if how in ("derived", "param") and w.an.facts.tests_files(w.func.node):
            how = delegated(e, params, w.entry_mask, inside=True, again=again)
        if how is None:
            continue
        param = e.path.id if how == "param" and isinstance(e.path, ast.Name) else None
        what = e.detail if e.kind == "cwrite" and e.detail else e.op
        loop = e.loops[-1] if e.loops else None  # or the next iteration's collective comes first
        fenced = e.fenced or any(c.kind == "coll" and (c.seq > e.seq or (loop is not None and loop in c.loops))
                                 for c in w.events)
        val = e.path_val if how == "derived" else None
        # under `dist.get_rank() == rank` with a uniform `rank` (save_rank(..., rank=0)): one rank, as rank 0
        mask, many = (e.mask & Z, False) if e.one else (e.mask, e.many is not None)
        out.append(WriteSum(param, mask, many, what, e.line, e.path, w.mod.path, fenced, val, is_checkpoint(e)))
    return tuple(out[:16])


class Analyzer(LookupMixin):
    """Runs the rounds over a :class:`~k8sddp.lint.project.Project`."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.summaries: dict[str, Summary] = {}
        #: per module path, its module-level names bound once to a project class instance (targets.py)
        self.global_instances: dict[str, dict[str, tuple[Module, str]]] = {}
        self.param_vals: dict[str, dict[str, Val]] = {}
        self.callsites: dict[str, list[CallSite]] = {}
        self.class_attrs: dict[tuple[str, str], dict[str, Val]] = {}
        self.module_env: dict[str, dict[str, Val]] = {}
        #: nested function key -> its closure's values where it is defined (lint/closures.py)
        self.closure_env: dict[str, dict[str, Val]] = {}
        self.spawn_targets: set[str] = set()
        #: functions a launching project helper runs for its worker processes (run_passed)
        self.launched: set[str] = set()
        self.walkers: dict[str, Walker] = {}
        self.facts = NodeFacts()
        self._ctx: dict[str, Context] = {}
        self._locals: dict[str, set[str]] = {}
        #: :func:`~k8sddp.lint.branches.fact_key` text -> truth, for the flags some function
        #: initialises the process group under (``if train_config.enable_fsdp: setup()``)
        self.init_facts: dict[str, bool] = {}
        LookupMixin.__init__(self)
        self._carried: dict[int, bool] = {}
        self._tests: dict[str, dict[int, list[tuple[ast.expr, bool]]]] = {}
        #: functions skipped because their expressions nest too deeply to walk
        self.too_deep: set[str] = set()
        self._gates: dict[str, int] = {}  # decorator key -> gate_mask, for one round

    def loop_carried(self, loop: ast.AST) -> bool:
        """Whether ``loop`` carries values between iterations (cached per loop node)."""
        key = id(loop)
        if key not in self._carried:
            self._carried[key] = loop_carried(loop)
        return self._carried[key]

    def local_names(self, f: FuncInfo) -> set[str]:
        """The local names of ``f`` (cached)."""
        if f.key not in self._locals:
            self._locals[f.key] = local_names(f.node)
        return self._locals[f.key]

    # -- facts the walker asks for ---------------------------------------------------------
    def decorators(self, f: FuncInfo) -> list[str]:
        """Terminal names of ``f``'s decorators."""
        if isinstance(f.node, ast.Module):
            return []
        out = []
        for d in f.node.decorator_list:
            node = d.func if isinstance(d, ast.Call) else d
            name = dotted(node, f.module.aliases) or ""
            out.append(name.split(".")[-1])
        return out

    def entry_mask(self, f: FuncInfo) -> int:
        """Classes that run ``f``'s body when it is called (decorators such as
        ``@rank_zero_only`` restrict it, and so does a project decorator whose wrapper calls
        the function under a rank test: :meth:`gate_mask`)."""
        decs = set(self.decorators(f))
        if decs & K.RANK_ZERO_DECORATORS:
            return Z
        if decs & K.RANK_LOCAL_ZERO_DECORATORS:
            return Z | LZ
        if isinstance(f.node, ast.Module):
            return ALL
        mask = ALL
        for d in f.node.decorator_list:
            deco = self._decorator_function(f.module, d)
            if deco is not None:
                mask &= self.gate_mask(deco)
        return mask if mask in (Z, Z | LZ) else ALL

    def _decorator_function(self, mod: Module, node: ast.expr) -> FuncInfo | None:
        """The project function a bare ``@name`` or ``@module.name`` decorator refers to."""
        if isinstance(node, ast.Name):
            return self.project.resolve_function(mod, node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = self.project.resolve_module_alias(mod, node.value.id)
            return target.functions.get(node.attr) if target is not None else None
        return None

    def gate_mask(self, deco: FuncInfo) -> int:
        """The classes on which the decorator ``deco`` runs the function it wraps: ``deco(func)``
        defines an inner wrapper and returns it; the wrapper is walked (silently, with the
        summaries known so far) and the classes at each call of ``func`` are joined. ``ALL``
        when the wrapper calls it unconditionally, under a condition of unknown shape, or when
        ``deco`` is not of this form (LAVIS' ``@main_process``: ``if rank == 0: return
        func(*args, **kwargs)`` gives ``Z``). Cached per round of :meth:`run`."""
        if deco.key in self._gates:
            return self._gates[deco.key]
        self._gates[deco.key] = ALL  # a decorator decorated by itself: no recursion
        node = deco.node
        if isinstance(node, ast.Module) or not deco.params:
            return ALL
        returned = {r.value.id for r in node.body if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)}
        inner = [s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in returned]
        if len(inner) != 1:
            return ALL
        wrapper = FuncInfo(f"{deco.key}.<{inner[0].name}>", inner[0].name, inner[0], deco.module)
        w = Walker(self, wrapper, ALL)
        w.probe, w.probe_hits, w.silent = deco.params[0], [], 1
        try:
            w.run()
        except RecursionError:
            return ALL
        mask = 0
        for m, many in w.probe_hits:
            mask |= ALL if many else m
        if not w.probe_hits and _calls_in_rank_zero_def(inner[0], deco.params[0]):
            mask = Z  # safari's `@rank_zero_only def get_experiment(): return fn(self)` inside the wrapper
        self._gates[deco.key] = mask if mask else ALL
        return self._gates[deco.key]

    def is_rank_zero_only(self, f: FuncInfo) -> bool:
        """True when ``f`` runs on a subset of ranks by decoration (its body is checked alone)."""
        return self.entry_mask(f) != ALL

    def is_lightning(self, f: FuncInfo) -> bool:
        """True for methods of a LightningModule subclass."""
        if not f.cls:
            return False
        return any(b.split(".")[-1] == "LightningModule" for b in f.module.class_bases.get(f.cls, []))

    def framework_hook(self, f: FuncInfo) -> bool:
        """True for an ``on_*`` method of a framework callback class (:data:`knowledge.CALLBACK_BASES`):
        the framework, not the project, calls it, on every rank with the same arguments."""
        if not f.cls or not f.name.startswith("on_"):
            return False
        return any(b.split(".")[-1] in K.CALLBACK_BASES for b in f.module.class_bases.get(f.cls, []))

    def param_vals_for(self, f: FuncInfo) -> dict[str, Val]:
        """Initial values of ``f``'s parameters: what callers pass (joined), else a seed from the
        parameter's name for entry points (``rank``, ``local_rank``; ``model`` is taken to be the
        wrapped model its callers elsewhere pass), or the rank for the first
        parameter of an ``mp.spawn`` target."""
        joined = self.param_vals.get(f.key)
        out: dict[str, Val] = {}
        for i, p in enumerate(f.params):
            if i == 0 and f.cls and p in ("self", "cls"):
                continue
            v = joined.get(p) if joined is not None else None
            if f.key in self.spawn_targets and i == 0:  # the process index; `local_rank` says per node (OccWorld)
                v = Val(prank="local" if K.RANK_PARAMS.get(p) == "local" else "rank")
            elif v is None and p in K.RANK_PARAMS:  # no call in sight passes it (stylegan2-pytorch's
                v = Val(prank=K.RANK_PARAMS[p])       # `Trainer(name=...)` beside cli.py's `Trainer(**args)`)
            elif v is None and p in self.pg_rank_params(f):  # `init_process_group(..., rank=replica_id)`
                v = Val(prank="rank")
            elif v is None and joined is None and p in K.MODEL_PARAMS and not wraps_param(f.node, p):
                v = Val(wrapped="ddp")
            v = v or UNIFORM
            out[p] = Val(None, v.kind, frozenset({p}), v.wrapped, v.ddp_out, v.fw, v.group)
        if joined:  # attributes the callers set on an argument (calls_io.ranked_attrs)
            for key, v in joined.items():
                base = key.partition(".")[0].partition("[")[0]
                if ("." in key or key.endswith("]")) and base in out:
                    if is_display_item(key):  # an element of a list the callers pass (calls_io.display_items)
                        out[key] = Val(None, v.kind, frozenset({base}), v.wrapped, v.ddp_out, v.fw, v.group)
                    else:
                        out[key] = Val(rank=v.kind)  # the callers' kind itself (not substituted per call)
        if f.free:  # a nested function's closure: as its callers bind it, else where it is defined
            closure = dict(self.closure_env.get(f.key, {}))
            closure.update((k, v) for k, v in (joined or {}).items() if k.partition(".")[0] in f.free)
            out.update((k, closure_val(v)) for k, v in closure.items())
        return out

    def record_call(self, f: FuncInfo, mapping: dict[str, Val], walker: Walker) -> None:
        """Remember one call of ``f`` in ``walker`` (its argument values and the guards around it;
        in an arm no distributed run takes, or in a function that spawns the workers itself
        (AttentiveNAS's ``main`` calls ``build_args_and_env`` before ``mp.spawn``) and passes no
        rank (RoseTTAFold2's launcher also runs ``self.train_model(rank, ...)`` under SLURM), one
        process makes it: as rank 0 alone)."""
        if walker.silent:
            return
        one = walker.solo or (walker.func.launches and not any(v.kind for v in mapping.values()))
        mask = walker.mask & Z if one else walker.mask
        walker.calls.append((f.key, mapping, (mask, walker.many, walker.cause, walker.cause_is_exit)))

    # -- the rounds --------------------------------------------------------------------------
    def all_modules(self) -> list[Module]:
        """Every module known so far (linted and imported)."""
        mods = list(self.project.modules.values())
        seen = {id(m) for m in mods}
        mods += [m for m in self.project._by_file.values() if m is not None and id(m) not in seen]
        return mods

    def functions(self) -> list[FuncInfo]:
        """Every function of every module known so far (linted and imported)."""
        seen: list[FuncInfo] = []
        for m in self.all_modules():
            seen.extend(m.all_functions())
        return seen

    def reached_from(self, f: FuncInfo, modules: set[str]) -> bool:
        """True when ``f`` lives in one of ``modules`` or is called (transitively) from one."""
        todo, seen = [f.key], set()
        while todo:
            key = todo.pop()
            if key in seen:
                continue
            seen.add(key)
            if key.rsplit("::", 1)[0] in modules:
                return True
            todo.extend(s.caller for s in self.callsites.get(key, []))
        return False

    def run(self) -> None:
        """Iterate to a fixed point (or :data:`MAX_ROUNDS`), re-walking only the functions whose
        inputs changed: their parameters' values, a callee's summary, their module's globals, or
        their class's attributes."""
        dirty = self.functions()
        for _ in range(MAX_ROUNDS):
            changed_summaries: set[str] = set()
            for f in dirty:
                w = Walker(self, f, self.entry_mask(f))
                try:
                    w.run()
                except RecursionError:  # expressions nested thousands deep: skip the function
                    self.too_deep.add(f.key)
                    w = Walker(self, f, self.entry_mask(f))
                self.walkers[f.key] = w
                colls = [e for e in w.events if e.kind == "coll"]
                summ = Summary(
                    ret=w.return_val(), ret_items=join_items(w.return_items),
                    ret_keys=join_keys(w.return_keys),
                    sig=tuple(e.op for e in colls)[:8],
                    first=(colls[0].detail, colls[0].line) if colls else ("", 0),
                    reads=tuple(sorted(p for k, p in w.param_io if k == "read")),
                    writes=_write_summary(w),
                    write0=rank0_checkpoint(w.events, w.entry_mask, w.mod.path),
                    write_some=some_checkpoint(w.events, w.entry_mask, w.mod.path),
                    quiet=self._quiet(f, colls, w.test_names),
                    ret_by=w.ret_case if len(w.returns) == 1 else None,
                    init_pg=w.inits_pg,
                    runs=tuple(w.param_runs[:8]),
                    fwd_via=forward_params(colls),
                )
                if self.summaries.get(f.key) != summ:
                    changed_summaries.add(f.key)
                self.summaries[f.key] = summ
            params, sites, attrs, menv = self._aggregate()
            facts: dict[str, bool] = {}
            for w in self.walkers.values():  # `if train_config.enable_fsdp: setup()` in main: train() knows it too
                for k, v in w.init_facts.items():
                    facts.setdefault(k, v)
            changed_facts = {k for k in facts.keys() | self.init_facts.keys() if facts.get(k) != self.init_facts.get(k)}
            self.init_facts = facts
            changed_attrs = _changed_names(self.class_attrs, attrs)
            changed_env = _changed_names(self.module_env, menv)
            self.param_vals, self.callsites, self.class_attrs, self.module_env = params, sites, attrs, menv
            self.closure_env = {k: v for w in self.walkers.values() for k, v in w.closure_defs.items()}
            self._gates = {}  # decorators are judged again with this round's summaries
            dirty = []
            for f in self.functions():
                prev = self.walkers.get(f.key)
                if (
                    prev is None
                    or (not isinstance(f.node, ast.Module) and self.param_vals_for(f) != prev.bindings)
                    or bool(prev.global_reads & changed_env.get(f.module.path, set()))
                    or bool(prev.attr_reads & changed_attrs.get((f.module.path, f.cls), set()))
                    or any(callee in changed_summaries for callee, _, _ in prev.calls)
                    or bool(prev.fact_reads & changed_facts)
                    or prev.entry_mask != self.entry_mask(f)
                ):
                    dirty.append(f)
            if not dirty:
                break
        self._ctx = {}

    def _quiet(self, f: FuncInfo, colls: list[Event], test_names: set[str]) -> tuple[Pair, ...]:
        """The arguments that switch every collective of ``f`` off (:mod:`k8sddp.lint.quiet`);
        ``test_names``: the names its ``if``/``while`` tests read."""
        if isinstance(f.node, ast.Module) or not colls:
            return ()
        params = [p for p in f.params if p not in ("self", "cls")]
        entries: list[tuple[ast.AST, Callable[[str, object], bool]]] = []
        forwarded = False
        for e in colls:
            callee = self.summaries.get(e.callee) if e.callee else None
            pairs = callee.quiet if callee is not None else ()
            forwarded = forwarded or bool(pairs)
            entries.append((e.node, functools.partial(forwards, pairs, dict(e.callee_args))))
        if not forwarded and not test_names & set(params):
            return ()  # no test of a parameter, no helper switched off by one: nothing to find
        if f.key not in self._tests:
            self._tests[f.key] = enclosing_tests(f.node)
        return quiet_pairs(self._tests[f.key], params, entries)

    def _aggregate(self) -> tuple[
        dict[str, dict[str, Val]], dict[str, list[CallSite]],
        dict[tuple[str, str], dict[str, Val]], dict[str, dict[str, Val]],
    ]:
        params: dict[str, dict[str, Val]] = {}
        sites: dict[str, list[CallSite]] = {}
        attrs: dict[tuple[str, str], dict[str, Val]] = {}
        menv: dict[str, dict[str, Val]] = {}
        ncalls: dict[str, int] = {}
        nkeys: dict[str, dict[str, int]] = {}
        fenv: list[tuple[str, dict[str, Val]]] = []
        for w in self.walkers.values():
            for callee, mapping, (mask, many, cause, by_exit) in w.calls:
                table = params.setdefault(callee, {})
                ncalls[callee] = ncalls.get(callee, 0) + 1
                counts = nkeys.setdefault(callee, {})
                for p, v in mapping.items():
                    table[p] = join(table[p], v) if p in table else v
                    counts[p] = counts.get(p, 0) + 1
                sites.setdefault(callee, []).append(
                    CallSite(w.func.key, mask, many, cause, w.func.node, w.mod.path, by_exit))
            if w.attr_stores:
                table = attrs.setdefault((w.mod.path, w.func.cls), {})
                for a, v in w.attr_stores.items():
                    table[a] = join(table[a], v) if a in table else v
            for owner, stores in w.inst_stores.items():  # `learner.is_master = ...` (stores.py)
                table = attrs.setdefault(owner, {})
                for a, v in stores.items():
                    table[a] = join(table[a], v) if a in table else v
            if w.menv_stores and w.is_module:
                menv.setdefault(w.mod.path, {}).update(w.menv_stores)
            elif w.menv_stores:
                fenv.append((w.mod.path, w.menv_stores))
            if w.func.cls and w.returns and "property" in self.decorators(w.func):  # `self.model` reads it
                table = attrs.setdefault((w.mod.path, w.func.cls), {})
                table[w.func.name] = join(table.get(w.func.name, UNIFORM), w.return_val())
        for path, stores in fenv:  # `global __rank` in a function: the module's value or that one
            table = menv.setdefault(path, {})
            for name, v in stores.items():
                table[name] = join(table.get(name, UNIFORM), v)
        for callee, table in params.items():
            keep_display_items(table, nkeys[callee], ncalls[callee])
        return params, sites, attrs, menv

    def context(self, f: FuncInfo) -> Context:
        """Which rank classes can run ``f`` (the union over its call sites of the classes at the
        call site that can run the caller)."""
        return self._context(f.key, set())

    def entry_point(self, f: FuncInfo) -> bool:
        """True when no function calls ``f``: it is called from module code only
        (``if __name__ == "__main__": main(args)``), or not at all; and for the target of an
        ``mp.spawn`` (each worker's entry: StyleGAN2-ADA's ``subprocess_fn(rank, args, temp_dir)``,
        also called directly for one GPU) or of a project launcher (fairseq's ``call_main(cfg, main)``)."""
        return f.key in self.spawn_targets or f.key in self.launched or all(s.caller.endswith("::<module>") for s in self.callsites.get(f.key, []))

    def unguarded_context(self, f: FuncInfo) -> Context:
        """Like :meth:`context`, over only the call sites with no rank guard of their own (the
        guarded ones judge ``f``'s unguarded writes themselves, at the call)."""
        sites = [s for s in self.callsites.get(f.key, []) if s.mask == ALL and s.many is None and s.cause is None]
        if f.key in self.spawn_targets:  # each spawned worker runs it, unguarded
            return Context(ALL, None, None, "", True)
        if not sites:
            return Context(0, None, None, "", bool(self.callsites.get(f.key)))
        mask = 0
        many: ast.AST | None = None
        cause: ast.AST | None = None
        cause_path = ""
        by_exit = False
        for s in sites:
            c = self._context(s.caller, {f.key})
            mask |= c.mask
            many = many or c.many
            if cause is None and c.cause is not None:
                cause, cause_path, by_exit = c.cause, c.cause_path, c.cause_is_exit
        return Context(mask, many, cause, cause_path, True, by_exit)

    def _context(self, key: str, stack: set[str]) -> Context:
        if key in self._ctx:
            return self._ctx[key]
        sites = self.callsites.get(key)
        if not sites or key in stack or key in self.spawn_targets:  # (each spawned worker runs it)
            return Context(ALL, None, None, "", bool(sites))
        stack = stack | {key}
        mask = 0
        many: ast.AST | None = None
        cause: ast.AST | None = None
        cause_path = ""
        by_exit = False
        for s in sites:
            c = self._context(s.caller, stack)
            mask |= s.mask & c.mask
            many = many or s.many or c.many
            if cause is None and (s.cause is not None or c.cause is not None):
                cause = s.cause if s.cause is not None else c.cause
                cause_path = s.caller_path if s.cause is not None else c.cause_path
                by_exit = s.cause_is_exit if s.cause is not None else c.cause_is_exit
        out = Context(mask, many, cause, cause_path, True, by_exit)
        self._ctx[key] = out
        return out
