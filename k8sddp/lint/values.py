"""The abstract values of the rank-dependence analysis, and what a condition says about ranks.

A :class:`Val` is what the linter knows about one Python value: whether it differs between
ranks (and how: *the* rank number, a local rank, "am I rank 0"), whether it is a DDP/FSDP-wrapped
model or the output of its forward, which framework object it is, and which function parameters
it was computed from (for call summaries).

Ranks are split into three classes, enough to decide pairing across rank branches:
``Z`` global rank 0, ``LZ`` local rank 0 of another node, ``N`` every other rank. A condition
maps to the set of classes on which it is true (:func:`classes_of`), or to ``MANY`` when it is
rank-dependent in a way these classes cannot express (``rank % 2 == 0``, a per-rank loss).
"""

from __future__ import annotations

import ast
import dataclasses

__all__ = [
    "ALL", "LZ", "MANY", "N", "UNIFORM", "Val", "Z", "classes_of", "condition_classes", "falsy_under", "join",
    "join_items", "join_kind", "merge_envs", "negate_kind", "structural_test", "substitute",
    "truth_kind",
]

Z, LZ, N = 1, 2, 4
ALL = Z | LZ | N
#: Marker: rank-dependent, but not a union of the three classes.
MANY = -1

#: Rank kinds: ``rank`` (global rank number), ``local`` (local rank number), ``zero`` (true on
#: global rank 0 only), ``nzero`` (false on global rank 0 only), ``lzero`` (true on each node's
#: local rank 0), ``nlzero`` (its negation), ``one`` (true on exactly one rank, not known which:
#: ``rank == src``), ``other`` (rank-dependent, shape unknown).
KINDS = ("rank", "local", "zero", "nzero", "lzero", "nlzero", "one", "other")
_KIND_CLASSES = {"zero": Z, "nzero": LZ | N, "lzero": Z | LZ, "nlzero": N}
_NEGATE = {"zero": "nzero", "nzero": "zero", "lzero": "nlzero", "nlzero": "lzero"}


def negate_kind(kind: str | None) -> str | None:
    """The kind of ``not x`` for a value of kind ``kind`` (``rank`` -> ``zero``: ``not rank``)."""
    if kind is None:
        return None
    if kind == "rank":
        return "zero"
    if kind == "local":
        return "lzero"
    return _NEGATE.get(kind, "other")


def truth_kind(kind: str | None) -> str | None:
    """The kind of ``bool(x)`` (``rank`` -> ``nzero``: ``if rank:``)."""
    if kind == "rank":
        return "nzero"
    if kind == "local":
        return "nlzero"
    return kind


def condition_classes(val: Val, test: ast.expr | None = None) -> int:
    """Classes on which a condition with value ``val`` is true. A condition on per-rank data
    (the output of a wrapped model's forward: each rank has its own batch) is ``MANY``, unless
    ``test`` (the condition's expression) only asks after the value's shape: see
    :func:`structural_test`."""
    if val.kind is None and val.ddp_out:
        return ALL if test is not None and structural_test(test, val.inspected) else MANY
    return classes_of(val.kind)


def structural_test(test: ast.expr, inspected: bool = False) -> bool:
    """Whether the condition ``test`` asks after what a value *is* rather than what numbers it
    holds: a bare name or attribute (``if perform_backward:``, a flag a training step returns
    next to its loss), its negation, ``x is None`` / ``x is not None``, an attribute ``is
    True``/``is False`` (icefall's ``assert loss.requires_grad is False``), a string key ``in`` a
    dict (fastcomposer's ``"localization_loss" in return_dict``), ``isinstance(x, T)``, and
    ``and``/``or`` of these. On per-rank data these are decided by the code path and the
    configuration, which every rank shares (SlowFast's ``loss, loss_extra = loss`` ... ``if
    loss_extra:``); a comparison, ``.item()``, ``torch.isfinite(...)`` or any other call
    inspects the values and stays rank-dependent (``if loss > 10:``, ``if not
    torch.isfinite(loss):``), and so does a name holding the outcome of such a test
    (:attr:`Val.inspected`: ``bad = torch.isnan(loss).any()`` ... ``if bad:``; ``inspected``
    is that flag of the condition's value). ``is None`` and ``isinstance`` stay structural.
    """
    if isinstance(test, (ast.Name, ast.Attribute)):
        return not inspected
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return structural_test(test.operand, inspected)
    if isinstance(test, ast.BoolOp):
        return all(structural_test(v, inspected) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, (ast.In, ast.NotIn)):  # `"localization_loss" in return_dict`: which keys it has
            return isinstance(test.left, ast.Constant) and isinstance(test.left.value, str)
        # `x is None`, `loss.requires_grad is False`: what it is, not the numbers it holds
        return isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value in (None, True, False) \
            and (right.value is None or isinstance(test.left, ast.Attribute))
    return isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"


def classes_of(kind: str | None) -> int:
    """Classes on which a condition of this kind is true: a mask of Z|LZ|N, ALL when uniform,
    MANY when rank-dependent in another way."""
    if kind is None:
        return ALL
    t = truth_kind(kind)
    return _KIND_CLASSES.get(t or "", MANY)


def join_kind(a: str | None, b: str | None) -> str | None:
    """Least upper bound of two kinds (``None`` is uniform)."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    return "other"


@dataclasses.dataclass(frozen=True)
class Val:
    """What is known about one value.

    Attributes:
        rank: rank kind computed inside the function (a source read here, or a callee's result).
        prank: rank kind that comes from a parameter (the callers' arguments, joined).
        params: names of the enclosing function's parameters the value was computed from.
        wrapped: ``ddp``, ``fsdp`` or ``engine`` when the value is a wrapped model.
        ddp_out: per-rank data: the value comes from a wrapped model's forward (``.backward()`` on
            it syncs), or from a clock read (:data:`k8sddp.lint.knowledge.CLOCK_READS`).
        fw: framework kind of an object (``accelerator``, ``fabric``, ``trainer``, ...).
        group: membership keys of a process group made by ``new_group`` (its unparsed rank
            list and the names in it).
        partial: a condition true on *some* of the ranks its kind names, some of the time
            (``rank == 0 and step > n``): those ranks may take either branch.
        synced: the value came out of a broadcast/all-reduce/all-gather: every rank holds the
            source's value (``if rank != 0: stop = received[0]`` makes ``stop`` uniform).
        distflag: 1 for a condition true exactly when the job is distributed (``RANK != -1``,
            ``dist.is_initialized()``), -1 for its negation, 0 otherwise. Under a distributed
            run only one arm of such an ``if`` runs, so only its values flow on.
        inspected: the value is the outcome of a test of numbers (a comparison, ``isfinite``,
            ``isnan``, ``.any()``, ``.item()``), not merely carried along: on per-rank data such
            a value stays rank-dependent even under a bare ``if flag:`` (see
            :func:`structural_test`).
        nkind: the kind of ``not x`` when it is narrower than the negation of ``kind``: ``U or
            rank != 0`` with a uniform ``U`` of unknown value is ``other`` (true on every rank
            where ``U`` holds), but its negation ``not U and rank == 0`` is true on (some of)
            rank 0 only, so ``nkind`` is ``zero`` (nanochat's ``use_dummy_wandb = args.run ==
            "dummy" or not master_process`` ... ``None if use_dummy_wandb else wandb.init()``).
    """

    rank: str | None = None
    prank: str | None = None
    params: frozenset[str] = frozenset()
    wrapped: str | None = None
    ddp_out: bool = False
    fw: str | None = None
    group: frozenset[str] = frozenset()
    partial: bool = False
    synced: bool = False
    distflag: int = 0
    inspected: bool = False
    nkind: str | None = None

    @property
    def kind(self) -> str | None:
        """Effective rank kind (local and parameter-borne joined)."""
        return join_kind(self.rank, self.prank)

    def with_kind(self, kind: str | None) -> Val:
        """A copy whose rank dependence has the shape ``kind``, kept on the side it came from."""
        if kind is None:
            return dataclasses.replace(self, rank=None, prank=None, nkind=None)
        if self.rank is not None:
            return dataclasses.replace(self, rank=kind, prank=None, nkind=None)
        return dataclasses.replace(self, prank=kind, nkind=None)

    def data_only(self) -> Val:
        """The value without object identity (wrapped, framework, group), as after arithmetic."""
        if self.rank is None and self.prank is None and not self.params and not self.ddp_out and not self.synced:
            return UNIFORM
        return Val(self.rank, self.prank, self.params, None, self.ddp_out, None, frozenset(), synced=self.synced,
                   inspected=self.inspected)


UNIFORM = Val()


def falsy_under(val: Val, shape: str | None, value: ast.expr | None, prior: Val | None) -> Val | None:
    """The value of a name bound to ``False`` or ``None`` under a rank guard of kind ``shape``
    when it held a uniform value before (``if rank != 0: use_wandb = False``; se3_diffusion's
    ``ckpt_dir = None``): as a condition (``if use_wandb:``, ``if ckpt_dir is not None:``) it is
    true on some of the ranks the guard excludes, so its kind is the guard's negation, partial.
    ``None`` for anything else (the guard's shape is then put on the value)."""
    if not (isinstance(value, ast.Constant) and (value.value is False or value.value is None)):
        return None
    if val.kind is not None or (prior is not None and prior.kind is not None) or shape is None or shape not in _NEGATE:
        return None
    return dataclasses.replace(val.with_kind(_NEGATE[shape]), partial=True)


def join(*vals: Val) -> Val:
    """Combine values that flow into one (operands of an expression, branches of an ``if``)."""
    interesting = [v for v in vals if v is not UNIFORM]
    if not interesting:
        return UNIFORM
    if len(interesting) == 1:
        return interesting[0]
    vals = tuple(interesting)
    rank = prank = None
    params: frozenset[str] = frozenset()
    wrapped = fw = None
    ddp_out = False
    group: frozenset[str] = frozenset()
    synced = inspected = False
    for v in vals:
        rank = join_kind(rank, v.rank)
        prank = join_kind(prank, v.prank)
        params |= v.params
        wrapped = wrapped or v.wrapped
        fw = fw or v.fw
        ddp_out = ddp_out or v.ddp_out
        group |= v.group
        synced = synced or v.synced
        inspected = inspected or v.inspected
    return Val(rank, prank, params, wrapped, ddp_out, fw, group, synced=synced, inspected=inspected)


def merge_envs(a: dict[str, Val], b: dict[str, Val], prefer_synced: bool = False) -> dict[str, Val]:
    """Join two environments (after the arms of an ``if``). With ``prefer_synced`` (the arms
    of a rank split), a value one arm received from a broadcast wins: the other arm's ranks
    hold the value that was broadcast (``if rank != 0: stop = received[0]``)."""
    out = dict(a)
    for k, v in b.items():
        if k in out and out[k] != v:
            if prefer_synced and v.synced and v.kind is None:
                out[k] = v
            elif prefer_synced and out[k].synced and out[k].kind is None:
                pass
            else:
                out[k] = join(out[k], v)
        else:
            out[k] = v
    return out



def substitute(ret: Val, mapping: dict[str, Val]) -> Val:
    """A function's summarised return value ``ret`` at one call: the rank dependence, wrapping
    and framework of the arguments (``mapping``: parameter -> the call's value) put in for the
    parameters it was computed from."""
    rank, prank = ret.rank, None
    wrapped, ddp_out, fw = ret.wrapped, ret.ddp_out, ret.fw
    params_out: frozenset[str] = frozenset()
    for p in ret.params:
        a = mapping.get(p)
        if a is None:
            continue
        if a.rank:
            rank = join_kind(rank, ret.prank or a.rank)
        if a.prank:
            prank = join_kind(prank, ret.prank or a.prank)
        wrapped = wrapped or a.wrapped
        ddp_out = ddp_out or a.ddp_out
        fw = fw or a.fw
        params_out |= a.params
    synced = ret.synced and rank is None and prank is None and not ddp_out
    return Val(rank, prank, params_out, wrapped, ddp_out, fw, ret.group, synced=synced, inspected=ret.inspected,
               distflag=ret.distflag if rank is None and prank is None else 0)  # `use_ddp, ... = setup_ddp()`


def join_items(returns: list[tuple[Val, ...] | None]) -> tuple[Val, ...] | None:
    """Position by position, the values of a function whose every ``return`` gives a tuple of
    one length (``return ddp, rank, local_rank, world_size, device``: nanochat's
    ``compute_init``), so that ``ddp, rank, ... = f()`` keeps ``ddp`` uniform; ``None`` when a
    return gives anything else."""
    if not returns or any(r is None for r in returns):
        return None
    first = returns[0]
    assert first is not None
    if any(r is not None and len(r) != len(first) for r in returns):
        return None
    return tuple(join(*(r[i] for r in returns if r is not None)) for i in range(len(first)))
