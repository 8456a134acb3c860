"""Expression evaluation of the rank-dependence analysis: what each expression's value is.

:class:`ExprEval` is the expression half of the per-function walker (:mod:`k8sddp.lint.flow`):
names and attributes are looked up in the flow-sensitive environment, rank sources
(``get_rank()``, ``os.environ["RANK"]``, ``accelerator.is_main_process``) start rank dependence,
comparisons turn a rank into "am I rank 0", and calls are classified by :mod:`k8sddp.lint.calls`.
"""

from __future__ import annotations

import abc
import ast
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from . import knowledge as K
from .project import dotted
from .treewalk import node_offset, plain_function, wrapper_test
from .values import ALL, LZ, MANY, UNIFORM, N, Val, Z, classes_of, join, negate_kind, truth_kind

if TYPE_CHECKING:
    from .project import FuncInfo, Module

__all__ = ["ExprEval", "env_key", "item_key", "kind_of_mask"]


def env_key(node: ast.expr) -> str | None:
    """The environment key of an assignable expression: ``x``, ``args.rank``, ``self.model``."""
    if node.__class__ is ast.Name:
        return node.id  # type: ignore[attr-defined]
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def item_key(node: ast.Subscript) -> str | None:
    """The environment key of an item with a literal key: ``config['output_path']``, ``opt['rank']``
    (tracked apart from its container, so an item only rank 0 set leaves the other items alone)."""
    base = env_key(node.value)
    if base is None or not isinstance(node.slice, ast.Constant) or not isinstance(node.slice.value, (str, int)):
        return None
    return f"{base}[{node.slice.value!r}]"


def kind_of_mask(mask: int) -> str | None:
    """The rank kind of "true exactly on these classes" (ALL -> uniform)."""
    return {ALL: None, Z: "zero", LZ | N: "nzero", Z | LZ: "lzero", N: "nlzero"}.get(mask, "other")


def progress_wrapper(name: str) -> bool:
    """``tqdm``, ``enumerate`` and friends, or a project's own progress bar (YOLOv5's ``TQDM``)."""
    return name in K.ITER_PASSTHROUGH or "tqdm" in name.lower() or "progress" in name.lower()


def bar_around(wrapped: ast.expr, plain: ast.expr) -> bool:
    """``wrapped`` is a progress bar around ``plain`` (``tqdm(batches, desc=...)`` and ``batches``)."""
    if not isinstance(wrapped, ast.Call) or not wrapped.args:
        return False
    f = wrapped.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return progress_wrapper(name) and ast.dump(wrapped.args[0]) == ast.dump(plain)


def _const_ints(node: ast.expr) -> list[int] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return [node.value]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _const_ints(node.operand)
        return [-v for v in inner] if inner else None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        out: list[int] = []
        for e in node.elts:
            v = _const_ints(e)
            if v is None or len(v) != 1:
                return None
            out.extend(v)
        return out
    return None


#: Calls whose result tests the numbers of a tensor (per-rank data stays rank-dependent under
#: ``if flag:`` when the flag came from one of these; see values.structural_test).
_VALUE_TESTS = frozenset({"isfinite", "isnan", "isinf", "isposinf", "isneginf", "any", "all", "item", "allclose",
                          "equal", "isclose", "eq", "ne", "gt", "lt", "ge", "le", "tolist"})
_WORLD_SIZE_NAMES = frozenset({"get_world_size", "world_size", "num_processes", "WORLD_SIZE"})
_FLAGS = (ast.Name, ast.Attribute, ast.Subscript)  # what a distributed-run flag is spelled as (use_ddp)


def _is_world_size(node: ast.expr) -> bool:
    """``get_world_size()``, ``(args.)world_size``, ``num_processes``, ``int(...)`` of one, ``os.environ["WORLD_SIZE"]``."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "int" and len(node.args) == 1:
            return _is_world_size(node.args[0])
        if node.args and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "getenv"):
            return isinstance(node.args[0], ast.Constant) and node.args[0].value == "WORLD_SIZE"
        node = node.func
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "WORLD_SIZE"
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in _WORLD_SIZE_NAMES


def _world_size_test(node: ast.Compare) -> int:
    """1 for ``world_size > 1`` (``>= 2``, ``!= 1``): true exactly when the job is distributed;
    -1 for its negation (``== 1``, ``<= 1``, ``< 2``); 0 for anything else."""
    if len(node.ops) != 1:
        return 0
    op, left, right = node.ops[0], node.left, node.comparators[0]
    if _is_world_size(right) and not _is_world_size(left):
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
    if not _is_world_size(left):
        return 0
    consts = _const_ints(right)
    if consts is None or len(consts) != 1:
        return 0
    c = consts[0]
    if (isinstance(op, ast.Gt) and c == 1) or (isinstance(op, ast.GtE) and c == 2) or (isinstance(op, ast.NotEq) and c == 1):
        return 1
    if (isinstance(op, ast.LtE) and c == 1) or (isinstance(op, ast.Lt) and c == 2) or (isinstance(op, ast.Eq) and c == 1):
        return -1
    return 0


def env_name(node: ast.expr) -> str | None:
    """The environment variable a ``os.environ[...]``/``os.getenv(...)`` read names, if constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class ExprEval(abc.ABC):
    """Expression evaluation; the walker subclass supplies the state used here."""

    func: FuncInfo
    mod: Module
    env: dict[str, Val]
    locals_: set[str]
    #: loop variables over literal names (``for v in ("RANK", ...)``) -> those names
    env_loops: dict[str, list[str]]
    #: the last project call returning a tuple, and its items (:mod:`k8sddp.lint.calls`)
    last_items: tuple[ast.Call, list[Val]] | None
    #: node class -> its ``_e_`` method of this class (or None), filled as classes are met
    _e_methods: ClassVar[dict[type, Callable[..., Val] | None]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._e_methods = {}

    # supplied by the walker
    @abc.abstractmethod
    def global_val(self, name: str) -> Val:
        """The value of module global ``name`` as the module body left it."""

    @abc.abstractmethod
    def class_attr(self, attr: str) -> Val | None:
        """The value methods of the enclosing class store in ``self.<attr>``, if any."""

    @abc.abstractmethod
    def call(self, node: ast.Call) -> Val:
        """The value of a call (and its effects: events, in-place results)."""

    @abc.abstractmethod
    def assign(self, target: ast.expr, val: Val, value_node: ast.expr | None = None) -> None:
        """Bind ``target`` to ``val``."""

    @abc.abstractmethod
    def resolve_target(self, func: ast.expr) -> tuple[FuncInfo | None, bool]:
        """The project function ``func`` names, and whether ``self`` is bound."""

    # -- names -----------------------------------------------------------------------------
    def lookup(self, node: ast.expr) -> Val | None:
        """The environment's value for a name or attribute chain, or None when unknown."""
        key = env_key(node)
        if key is None:
            return None
        if key in self.env:
            return self.env[key]
        head, dot, attr = key.rpartition(".")
        if dot and (item := f"{head}[{attr!r}]") in self.env:  # EasyDict/DictConfig/YParams: cfg.x is cfg['x']
            return self.env[item]
        if "." not in key:
            if key in self.locals_:
                return UNIFORM
            return self.global_val(key)
        head, _, rest = key.partition(".")
        if head == "self" and "." not in rest:
            return self.class_attr(rest)
        if head == "self" and rest.count(".") == 1:  # self.cfg.x (se3-diffusion's ckpt_dir), when it says more
            found = self.class_attr(rest)         # than the attribute's own name (`self.args.rank = -1`)
            return found if found is not None and found != UNIFORM else None
        if head not in self.locals_ and "." not in rest:
            g = self.global_val(key)
            if g is not UNIFORM:
                return g
        return None

    def expr(self, node: ast.expr | None) -> Val:
        """The value of ``node`` (UNIFORM for None)."""
        if node is None:
            return UNIFORM
        table = self._e_methods
        cls = node.__class__
        if cls in table:
            method = table[cls]
        else:
            method = table[cls] = getattr(type(self), "_e_" + cls.__name__, None)
        if method is None:
            vals = [self.expr(c) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
            return join(*vals).data_only() if vals else UNIFORM
        out: Val = method(self, node)
        return out

    def _e_Constant(self, node: ast.Constant) -> Val:
        return UNIFORM

    def _e_Name(self, node: ast.Name) -> Val:
        v = self.lookup(node)
        return v if v is not None else UNIFORM

    def _e_Attribute(self, node: ast.Attribute) -> Val:
        known = self.lookup(node)
        if known is not None:
            return known
        recv = self.expr(node.value)
        attr = node.attr
        if attr in K.RANK_ATTRIBUTES and plain_function(getattr(self.resolve_target(node)[0], "node", None)):
            return UNIFORM  # `if utils.is_main_process:` (PET): a project function, not called: always true
        if attr in K.RANK_ATTRIBUTES:
            if attr == "rank" and isinstance(node.value, ast.Name) and node.value.id == "rank_zero_only":
                return Val(rank="rank")
            return Val(rank=K.RANK_ATTRIBUTES[attr])
        if attr in ("world_size", "num_processes", "num_nodes", "distributed", "use_distributed"):
            return UNIFORM
        if recv.wrapped and attr in ("module", "_orig_mod"):  # (FSDP's inner module keeps its sharded units)
            return UNIFORM if attr == "module" and recv.wrapped != "fsdp" else recv
        if recv.ddp_out and attr in K.TENSOR_CONFIG_ATTRS:  # `logits.dtype`: the model's, on every rank
            return UNIFORM
        if attr == "strategy":
            return Val(fw="strategy")
        if attr in K.FRAMEWORK_NAMES and recv.fw is None:
            return Val(fw=K.FRAMEWORK_NAMES[attr])
        if recv.wrapped and attr in ("forward", "backward", "no_sync", "state_dict") or recv.fw:
            return recv
        return recv.data_only()

    def env_read(self, key: ast.expr) -> Val:
        """The value of reading environment variable ``key``: a rank for the launcher's rank
        variables (:data:`~k8sddp.lint.knowledge.RANK_ENV`); a loop variable over literal names
        (``for v in ("LOCAL_RANK", "SLURM_LOCALID"): ... os.environ[v]``) joins theirs."""
        name = env_name(key)
        names = [name] if name is not None else (self.env_loops.get(key.id, []) if isinstance(key, ast.Name) else [])
        kinds = [K.RANK_ENV[n] for n in names if n in K.RANK_ENV]
        return join(*(Val(rank=k) for k in kinds)) if kinds else UNIFORM

    def _e_Subscript(self, node: ast.Subscript) -> Val:
        q = self._dotted(node.value)
        if q == "os.environ":
            return self.env_read(node.slice)
        key = item_key(node)
        if key is not None and key in self.env:
            return self.env[key]
        if key is not None and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str) \
                and (attr := f"{env_key(node.value)}.{node.slice.value}") in self.env:
            return self.env[attr]  # cfg['x'] after cfg.x = ...
        if isinstance(node.slice, ast.Constant) and node.slice.value in K.RANK_ATTRIBUTES:  # env_params["rank"]
            return Val(rank=K.RANK_ATTRIBUTES[node.slice.value])
        base = self.expr(node.value)
        if isinstance(node.value, ast.Call) and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int \
                and self.last_items is not None and self.last_items[0] is node.value \
                and -len(self.last_items[1]) <= node.slice.value < len(self.last_items[1]):
            return self.last_items[1][node.slice.value]  # `get_distrib_size()[2]`: that item alone
        idx = self.expr(node.slice)
        return join(base, idx.data_only())

    def _e_BinOp(self, node: ast.BinOp) -> Val:
        a, b = self.expr(node.left), self.expr(node.right)
        out = join(a, b).data_only()
        kinds = {k for k in (a.kind, b.kind) if k}
        if not kinds:
            return out
        if (isinstance(node.op, ast.Add) and kinds in ({"other", "rank"}, {"other", "local"})
                and any(isinstance(o, ast.BinOp) and isinstance(o.op, ast.Mult) and v.kind == "other"
                        for o, v in ((node.left, a), (node.right, b)))):
            return out.with_kind("rank")  # `node_rank * ngpus_per_node + gpu`: the global rank (MedSAM)
        if isinstance(node.op, ast.Add) and "local" in kinds and (node_offset(node.left) or node_offset(node.right)):
            return out.with_kind("rank")
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)) and kinds <= {"rank", "local"}:
            return out.with_kind("rank" if ("rank" in kinds or (a.kind and b.kind)) else "local")
        if isinstance(node.op, ast.Mod) and (isinstance(node.left, ast.JoinedStr) or (
                isinstance(node.left, ast.Constant) and isinstance(node.left.value, str))):
            return out.with_kind(b.kind or a.kind)  # `"ckpt-%d.pt" % rank`: %-formatting, not a remainder
        if isinstance(node.op, ast.Mod) and kinds <= {"rank", "local"}:
            return out.with_kind("modrank")
        return out.with_kind("other")

    def _e_UnaryOp(self, node: ast.UnaryOp) -> Val:
        v = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            if v.nkind is not None:  # `not (U or rank != 0)`: true on some of rank 0 only
                return dataclasses.replace(v.data_only().with_kind(v.nkind), partial=True)
            out = v.data_only().with_kind("other" if v.partial else negate_kind(v.kind))
            return dataclasses.replace(out, distflag=-v.distflag) if v.distflag else out
        return v.data_only()

    def _e_BoolOp(self, node: ast.BoolOp) -> Val:
        vals = [self.expr(v) for v in node.values]
        out = join(*vals).data_only()
        ranked = [v for v in vals if v.kind]
        if not ranked:
            # `args.local_rank == -1 and args.evaluate_during_training`: false in every distributed run
            flags = [v.distflag for v in vals]
            stop = -1 if isinstance(node.op, ast.And) else 1
            if stop in flags:
                return dataclasses.replace(out, distflag=stop)
            if all(f == -stop for f in flags):
                return dataclasses.replace(out, distflag=-stop)
            return out
        if isinstance(node.op, ast.Or) and len(ranked) > 1 and all(v.kind == "zero" for v in ranked) and len(
                {ast.dump(c) for t in node.values if isinstance(t, ast.Compare) for c in t.comparators}) > 1:
            return out.with_kind("other")  # `rank == 0 or rank == 1` (grit): two ranks, not one
        if isinstance(node.op, ast.And) and len(ranked) == 1 and ranked[0].kind == "one":
            return dataclasses.replace(out.with_kind("one"), partial=True)
        if isinstance(node.op, ast.Or):
            flags = [v.distflag or self.dist_fact(n) for v, n in zip(vals, node.values, strict=True) if not v.kind]
            if any(f > 0 for f in flags):
                return out.with_kind(None)  # true in every distributed run
            if any(not f for f in flags):
                # `not args.multiprocessing_distributed or rank == 0`: where the flag holds (a
                # torchrun launch), true on every rank; its negation (`U` false and no rank
                # test true) is true on some of the ranks where every rank test is false
                m = 0
                for v in ranked:
                    m |= MANY if v.partial else classes_of(truth_kind(v.kind))
                neg = kind_of_mask(~m & ALL) if m not in (MANY, ALL) else None
                return dataclasses.replace(out.with_kind("other"), nkind=neg if neg != "other" else None)
            if len(ranked) == 1:  # `not dist.is_initialized() or dist.get_rank() == rank`: the rank test alone
                return dataclasses.replace(out.with_kind(ranked[0].kind), partial=ranked[0].partial)
        masks = [classes_of(truth_kind(v.kind)) for v in ranked]
        if isinstance(node.op, ast.And):
            known = [m for m in masks if m != MANY]
            if known:
                m = ALL
                for k in known:
                    m &= k
                if len(known) < len(masks) and m not in (Z,):
                    return out.with_kind("other")
                res = out.with_kind(kind_of_mask(m) if m else "zero")
                if len(known) < len(masks) or any(not v.kind and (v.distflag or (isinstance(n, _FLAGS) and self.dist_fact(n))) <= 0
                                                  for v, n in zip(vals, node.values, strict=True)):  # not DAN's `use_ddp`
                    res = dataclasses.replace(res, partial=True)
                return res
            return out.with_kind("other")
        if MANY in masks:
            return out.with_kind("other")
        m = 0
        for k in masks:
            m |= k
        return out.with_kind(kind_of_mask(m))

    def dist_fact(self, node: ast.expr) -> int:
        """1/-1 when ``node`` is known true/false in every distributed run (the walker knows), else 0."""
        return 0

    def eval_under(self, test: ast.expr, test_val: Val, node: ast.expr, positive: bool) -> Val:
        """Evaluate ``node`` where ``test`` is true (or false); the walker narrows its classes."""
        return self.expr(node)

    def _e_IfExp(self, node: ast.IfExp) -> Val:
        t = self.expr(node.test)
        a = self.eval_under(node.test, t, node.body, True)
        b = self.eval_under(node.test, t, node.orelse, False)
        if (found := wrapper_test(node.test)) is not None:  # `m.module if hasattr(m, "module") else m`
            other = node.orelse if found[1] else node.body  # the arm where m is no wrapper
            if env_key(other) is not None and env_key(other) == env_key(found[0]):
                a, b = (a, dataclasses.replace(b, wrapped=None)) if found[1] else (dataclasses.replace(a, wrapped=None), b)
        if not t.kind:
            return join(a, b)
        if bar_around(node.body, node.orelse) or bar_around(node.orelse, node.body):
            return self.expr(node.orelse if bar_around(node.body, node.orelse) else node.body)  # rank 0 shows a bar
        out = join(a, b)
        if isinstance(node.orelse, ast.Constant) and node.orelse.value is None and not a.kind:
            return out.with_kind(truth_kind(t.kind))
        if isinstance(node.body, ast.Constant) and node.body.value is None and not b.kind:
            return out.with_kind(negate_kind(t.kind))
        # `rank if distributed else 0`-like shapes keep the branch kind; anything else: other
        if isinstance(node.orelse, ast.Constant) and a.kind and t.kind in ("rank", "local"):
            return out
        return out.with_kind("other")

    def _e_Compare(self, node: ast.Compare) -> Val:
        left = self.expr(node.left)
        rights = [self.expr(c) for c in node.comparators]
        out = join(left, *rights).data_only()
        if out is not UNIFORM and not out.inspected and not all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            out = dataclasses.replace(out, inspected=True)  # a test of numbers, not of identity
        if not out.kind:
            flag = _world_size_test(node)
            return dataclasses.replace(out, distflag=flag) if flag else out
        if len(node.ops) != 1:
            return out.with_kind("other")
        op, right_node, right = node.ops[0], node.comparators[0], rights[0]
        lk, rk = left.kind, right.kind
        # x is None / x is not None: truthiness of x
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right_node, ast.Constant) and right_node.value is None:
            if lk in ("rank", "local", "modrank"):
                return out.with_kind(None)  # a rank number is None on every rank or on none
            k = truth_kind(lk)
            return out.with_kind(k if isinstance(op, ast.IsNot) else negate_kind(k))
        num, other_kind, other_node = (lk, rk, right_node) if lk else (rk, lk, node.left)
        if other_kind:
            return out.with_kind("other")
        consts = _const_ints(other_node)
        if num == "modrank":
            if isinstance(op, ast.Eq) and consts == [0]:
                return out.with_kind("lzero")
            if isinstance(op, ast.NotEq) and consts == [0]:
                return out.with_kind("nlzero")
            return out.with_kind("other")
        if num in ("zero", "nzero", "lzero", "nlzero"):
            if isinstance(op, (ast.Eq, ast.Is)) and isinstance(other_node, ast.Constant):
                return out.with_kind(num if other_node.value else negate_kind(num))
            if isinstance(op, (ast.NotEq, ast.IsNot)) and isinstance(other_node, ast.Constant):
                return out.with_kind(negate_kind(num) if other_node.value else num)
            return out.with_kind("other")
        if num not in ("rank", "local"):
            return out.with_kind("other")
        is_zero, is_nzero = ("zero", "nzero") if num == "rank" else ("lzero", "nlzero")
        swapped = not lk
        if consts is None:
            # rank == src (a uniform, non-constant value): true on exactly one rank
            if isinstance(op, ast.Eq) and num == "rank":
                return out.with_kind("one")  # exactly one rank, but which one is not known here
            return out.with_kind("other")
        if isinstance(op, (ast.In, ast.NotIn)):
            vals = sorted(set(consts) - {-1})
            if vals == [0] or (num == "rank" and len(vals) == 1):
                k = is_zero
            elif not vals:
                return out.with_kind(None)
            else:
                return out.with_kind("other")
            return out.with_kind(k if isinstance(op, ast.In) else negate_kind(k))
        c = consts[0]
        if swapped:  # 0 == rank, 1 > rank ...
            op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
        if isinstance(op, (ast.Eq, ast.NotEq)):
            if c == -1:  # "is distributed at all": the same on every rank
                return dataclasses.replace(out.with_kind(None), distflag=1 if isinstance(op, ast.NotEq) else -1)
            if c == 0 or num == "rank":
                return out.with_kind(is_zero if isinstance(op, ast.Eq) else is_nzero)
            return out.with_kind("other")
        bound = {ast.Lt: c - 1, ast.LtE: c}.get(type(op))
        if bound is not None:  # rank <= bound
            if bound < 0:
                return dataclasses.replace(out.with_kind(None), distflag=-1)
            return out.with_kind(is_zero if bound == 0 else "other")
        low = {ast.Gt: c + 1, ast.GtE: c}.get(type(op))
        if low is not None:  # rank >= low
            if low <= 0:
                return dataclasses.replace(out.with_kind(None), distflag=1)
            return out.with_kind(is_nzero if low == 1 else "other")
        return out.with_kind("other")

    def _e_Call(self, node: ast.Call) -> Val:
        v = self.call(node)
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if v is not UNIFORM and not v.inspected and name in _VALUE_TESTS:
            return dataclasses.replace(v, inspected=True)
        return v

    def _e_NamedExpr(self, node: ast.NamedExpr) -> Val:
        v = self.expr(node.value)
        self.assign(node.target, v, node.value)
        return v

    def _e_Lambda(self, node: ast.Lambda) -> Val:
        return UNIFORM

    def _e_Await(self, node: ast.Await) -> Val:
        return self.expr(node.value)

    def _e_Starred(self, node: ast.Starred) -> Val:
        return self.expr(node.value)

    def _e_List(self, node: ast.List | ast.Tuple) -> Val:
        """A list or tuple display. One whose every element is a wrapped model (``[net_g,
        net_d]``, passed on as ``nets`` and unpacked with ``net_g, net_d = nets``) stays a
        wrapped model: a forward through any of its items is a collective."""
        vals = [self.expr(e) for e in node.elts]
        out = join(*vals)
        if vals and all(v.wrapped for v in vals):
            return dataclasses.replace(out.data_only(), wrapped=out.wrapped)
        return out.data_only()

    _e_Tuple = _e_List

    def _comp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> Val:
        vals = []
        for g in node.generators:
            it = self.expr(g.iter)
            self.assign(g.target, it.data_only(), None)
            vals.append(it.data_only())
            vals.extend(self.expr(c) for c in g.ifs)
        if isinstance(node, ast.DictComp):
            vals += [self.expr(node.key), self.expr(node.value)]
        else:
            vals.append(self.expr(node.elt))
        return join(*vals).data_only()

    _e_ListComp = _e_SetComp = _e_GeneratorExp = _e_DictComp = _comp

    def _dotted(self, node: ast.expr) -> str | None:
        return dotted(node, self.mod.aliases)
