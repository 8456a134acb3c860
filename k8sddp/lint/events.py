"""Records the walker leaves behind for the rules: collectives, rank-dependent exits, IO.

Each event carries the set of rank classes that execute it (:mod:`k8sddp.lint.values`), the
rank-dependent condition or exit that restricted it, and the loops around it.
"""

from __future__ import annotations

import ast
import dataclasses

from .scopes import param_guard
from .values import ALL, Val, Z

__all__ = ["Event", "Raw", "Summary", "WriteSum", "delegated", "is_checkpoint", "rank0_checkpoint", "rebound"]


@dataclasses.dataclass
class Event:
    """One thing that happens in a function body, in program order.

    Attributes:
        kind: ``coll`` (a collective, explicit or implicit, or a call of a function holding
            one), ``exit`` (return/break/continue/raise/sys.exit under a rank-dependent
            condition), ``write``/``read`` (file IO), ``cwrite`` (a call of a function that
            writes the path passed to it), ``tracker`` (experiment tracker or TensorBoard writer).
        op: for ``coll`` the pairing key (``barrier``, ``all_reduce``, ``forward``, a callee's
            collective sequence); for ``exit`` the statement kind; for IO the call's name.
        node: the call or statement.
        mask: rank classes that execute it (Z|LZ|N bits).
        many: the rank-dependent condition (or exit) of unknown shape above it, if any.
        cause: the innermost condition or exit that restricted ``mask`` (None when unrestricted).
        cause_is_exit: ``cause`` is an exit statement rather than an ``if`` test.
        loops: the loop statements around it, outermost first.
        ordered: a ``with main_process_first()``-style item around it, if any.
        detail: human description of the collective (``dist.barrier``, ``forward through the
            DDP-wrapped model``, ``evaluate(), which runs ...``).
        guard_names: names and expressions of the rank conditions above it (subgroup check).
        group_keys: membership keys of the ``group=`` it runs on (subgroup check).
        path: the path expression of an IO call, if any.
        path_val: the value of ``path`` (per-rank names are rank-dependent).
        seq: its index in the function's event list.
        one: under a condition true on exactly one rank (``rank == src``).
        class_cause: the innermost condition that restricted the rank classes (``if
            master_process:``), even when a value-dependent condition is nested inside it.
        callee: for a call of a project function, its key; ``callee_args``: that function's
            parameters and the argument expressions the call gives them (the default where
            it gives none), for :mod:`k8sddp.lint.quiet`.
        fenced: for ``cwrite``, a collective follows the write inside the callee (lit-llama's
            ``save_model_checkpoint``: rank-0 ``torch.save``, then ``fabric.barrier()``).
        ckpt: for ``cwrite``, the write inside the callee is a checkpoint write
            (:func:`is_checkpoint`), not a text file such as a saved config; for an ``open``
            write, a binary open (:func:`binary_write_open`) that does not just pickle the
            configuration (detectron2's ``LazyConfig.save`` falls back to ``cloudpickle.dump(cfg, f)``).
        via: for a collective that is only forwards through models the function's parameters
            hold (``def evaluate(model): model(x)``), those parameters: a call passing an
            unwrapped model for each (``evaluate(model.module)``) runs no collective.
    """

    kind: str
    op: str
    node: ast.AST
    mask: int
    many: ast.AST | None = None
    cause: ast.AST | None = None
    cause_is_exit: bool = False
    loops: tuple[ast.AST, ...] = ()
    ordered: ast.AST | None = None
    detail: str = ""
    guard_names: frozenset[str] = frozenset()
    group_keys: frozenset[str] = frozenset()
    path: ast.expr | None = None
    path_val: Val | None = None
    seq: int = 0
    one: bool = False
    class_cause: ast.AST | None = None
    callee: str = ""
    callee_args: tuple[tuple[str, ast.expr | None], ...] = ()
    fenced: bool = False
    ckpt: bool = False
    via: frozenset[str] = frozenset()

    @property
    def line(self) -> int:
        """1-based line of the event's node."""
        return int(getattr(self.node, "lineno", 0))


@dataclasses.dataclass(frozen=True)
class WriteSum:
    """A file write (or tracker start) a function leaves for its call sites to judge.

    Attributes:
        param: the parameter that names the path (the call site's argument is the path), or
            ``None`` for a path fixed inside the function (reported at call sites under a rank
            guard; see :mod:`k8sddp.lint.rules_io`).
        mask: rank classes that run it when the function is called on every class.
        many: it runs under a rank condition the classes cannot express.
        what: the writer (``torch.save``, ``wandb.init``).
        line: its line; ``path``: its path expression (``None`` when it has none).
        module: the file it is in.
        fenced: a collective follows the write in the function (its barrier, the next
            all-reduce, or the next iteration's forward in a loop around both), so KDP512 is
            decided there, not at the call sites.
        val: for a path built from parameters (``os.path.join(args.output_dir, "config.yaml")``),
            its value in the function, whose parameters each call replaces with its arguments
            (:func:`k8sddp.lint.values.substitute`); ``None`` for the other writes.
        ckpt: the write is a checkpoint write (:func:`is_checkpoint`), directly or in a callee.
    """

    param: str | None
    mask: int
    many: bool
    what: str
    line: int
    path: ast.expr | None
    module: str
    fenced: bool = False
    val: Val | None = None
    ckpt: bool = False


_PER_RANK_KINDS = ("rank", "local", "other", "modrank")


def rebound(func: ast.AST, params: tuple[str, ...], events: list[Event]) -> frozenset[str]:
    """The parameters ``func``'s body assigns again (icefall's ``log_filename =
    f"{log_filename}-{date_time}-{rank}"``), among those a write of ``events`` names as its path
    (the body is walked only when there is one)."""
    named = {e.path.id for e in events if e.kind in ("write", "tracker", "cwrite") and isinstance(e.path, ast.Name)}
    if not named & set(params):
        return frozenset()
    out = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return frozenset(out & named & set(params))


def delegated(e: Event, params: tuple[str, ...], entry_mask: int, inside: bool = False,
              again: frozenset[str] = frozenset(), func: ast.AST | None = None,
              ranked: frozenset[str] = frozenset()) -> str | None:
    """Whether a write event of a function is judged at its call sites: ``"param"`` when its
    path is a parameter, ``"derived"`` when it runs unguarded to a path built from parameters
    (``os.path.join(args.output_dir, "config.yaml")``), in both cases unless ``inside`` (the
    function tests whether files exist or holds a file lock: :func:`k8sddp.lint.scopes.tests_files`;
    detectron2's ``convert_to_coco_json(name, output_file)`` under ``file_lock(output_file)``; such
    a function is judged as one writing a fixed path), ``"fixed"`` when it runs unguarded in the function, else
    ``None``; ``"derived"`` too for a write to such a path whose rank guard reads only parameters
    of ``func``, one of them holding the rank its callers pass (``ranked``:
    :func:`k8sddp.lint.scopes.param_guard`). A function that runs collectives and is called from module code only (``main(args)``
    under ``if __name__ == "__main__":``) has its ``"derived"`` writes judged as ``"fixed"``
    ones (:func:`k8sddp.lint.rules_io.check_io`, :meth:`k8sddp.lint.calls.CallMixin.call_writes`).
    """
    if e.kind not in ("write", "tracker", "cwrite") or e.ordered is not None or e.one:
        return None
    pv = e.path_val
    if isinstance(e.path, ast.Name) and e.path.id in params and not inside \
            and not (pv is not None and pv.kind in _PER_RANK_KINDS
                     and (pv.params != {e.path.id} or e.path.id in again)):  # `p = f"{p}-{rank}"`
        return "param"
    unguarded = e.mask == entry_mask and e.many is None and e.cause is None
    if (unguarded and not inside and pv is not None and pv.rank is None and (e.kind != "tracker" or e.path is not None)
            and not pv.params.isdisjoint(params)):
        return "derived"  # per rank or not as the caller's arguments make it
    if pv is not None and pv.kind in _PER_RANK_KINDS:
        return None  # a per-rank name
    if (not unguarded and ranked and func is not None and not inside and e.many is None and pv is not None
            and pv.rank is None and not pv.params.isdisjoint(params)
            and param_guard(func, e.class_cause or e.cause, e.class_cause is None and e.cause_is_exit, params, ranked)):
        return "derived"  # `if distributed_rank > 0: return` ... FileHandler(os.path.join(save_dir, ...))
    return "fixed" if unguarded else None


@dataclasses.dataclass
class Summary:
    """What callers need to know about a function.

    Attributes:
        ret: the value it returns (joined over its ``return`` statements).
        sig: the collectives it runs, in order (capped), as pairing keys.
        first: description and line of its first collective, for messages.
        reads: parameters it reads a file from (their value is the path).
        writes: the writes its call sites judge (:class:`WriteSum`).
        write0: the checkpoint write it makes on global rank 0 only with no collective after
            it (``save_on_master() at misc.py:12``), empty when none: a call of it is such a
            write for KDP512 (MAE's ``misc.save_model``).
        write_some: the checkpoint write it makes, with no rank guard of its own, under a condition
            of unknown shape (``if metric >= self.best: save_ckpt(...)``, a per-rank value) with no
            collective after it, empty when none: a call of it under a rank guard (OpenOCR's
            ``if is_main_process(): self.eval_step()``) is a rank-0 checkpoint write for KDP512.
        ret_by: for a function whose one ``return`` is ``a if param else b``: the parameter and
            the values of ``a`` and ``b`` (a call with a literal for it gets one of them).
        init_pg: it initialises the process group (``init_process_group``, directly or in a callee).
        ret_items: position by position, what it returns when every ``return`` gives a tuple of
            one length (:func:`k8sddp.lint.values.join_items`).
        ret_keys: key by key, what it returns when every ``return`` gives a dict display with
            one set of string keys (:func:`k8sddp.lint.keyed.join_keys`).
        quiet: ``(parameter, literal)`` pairs for which it runs none of its collectives
            (:func:`k8sddp.lint.quiet.quiet_pairs`).
        runs: the parameters it calls (``def gpu_timer(closure): return closure()``), each with
            the classes that call it and whether under a condition of unknown shape: a call
            passing a project function for one runs that function (:mod:`k8sddp.lint.closures`).
        fwd_via: when every collective it runs is a forward through a model one of its
            parameters holds (:attr:`Event.via`), those parameters; ``None`` otherwise.
    """

    ret: Val = dataclasses.field(default_factory=Val)
    sig: tuple[str, ...] = ()
    first: tuple[str, int] = ("", 0)
    reads: tuple[str, ...] = ()
    writes: tuple[WriteSum, ...] = ()
    write0: str = ""
    write_some: str = ""
    quiet: tuple[tuple[str, object], ...] = ()
    ret_by: tuple[str, Val, Val] | None = None
    init_pg: bool = False
    ret_items: tuple[Val, ...] | None = None
    ret_keys: tuple[tuple[str, Val], ...] | None = None
    runs: tuple[tuple[str, int, bool], ...] = ()
    fwd_via: frozenset[str] | None = None


def forward_params(colls: list[Event]) -> frozenset[str] | None:
    """:attr:`Summary.fwd_via` of a function whose collective events are ``colls``."""
    if not colls or not all(e.via for e in colls):
        return None
    return frozenset().union(*(e.via for e in colls))


@dataclasses.dataclass(frozen=True)
class Raw:
    """A finding before configuration, suppressions and the catalogue's texts are applied.

    Attributes:
        rule_id: catalogue id (``KDP501``).
        line: 1-based line.
        col: 1-based column (0 when unknown).
        message: what is wrong at this place and what to do.
        fix: a machine-applicable fix, ``("timeout", call_node)``; None when none is safe.
    """

    rule_id: str
    line: int
    col: int
    message: str
    fix: tuple[str, ast.AST] | None = None


def at(rule_id: str, node: ast.AST, message: str, fix: tuple[str, ast.AST] | None = None) -> Raw:
    """A :class:`Raw` located at ``node``."""
    return Raw(rule_id, int(getattr(node, "lineno", 0)), int(getattr(node, "col_offset", -1)) + 1, message, fix)


def cond_text(node: ast.AST | None, limit: int = 70) -> str:
    """Short source text of a condition or statement, for messages."""
    if node is None:
        return ""
    try:
        text = ast.unparse(node.test if isinstance(node, (ast.If, ast.While)) else node).split("\n")[0]
    except RecursionError:  # `rank + 1 + 1 + ...` hundreds of terms deep
        return f"the expression at line {getattr(node, 'lineno', '?')}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_CHECKPOINT_WRITERS = ("torch.save", "save_pretrained", "save_file", "save_model", "save_checkpoint", "save_recovery")


def binary_write_open(node: ast.AST) -> bool:
    """``open(path, "wb")`` (or ``"xb"``, ``"ab"``, a path manager's ``.open(path, "wb")``): what
    model files are written through (``torch.save(state, f)``, ``pickle.dump(snapshot, f)``,
    ``model.tofile(f)``), unlike the text opens of logs and settings."""
    if not isinstance(node, ast.Call):
        return False
    mode = next((k.value for k in node.keywords if k.arg == "mode"), node.args[1] if len(node.args) > 1 else None)
    text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else ""
    return "b" in text and any(c in text for c in "wxa")


def is_checkpoint(e: Event) -> bool:
    """True for an event that writes a checkpoint (what KDP512 fences): a known checkpoint
    writer, a binary open for writing (:func:`binary_write_open`), a call of a project function
    whose body makes such a write (directly or through its callees: ``ckpt``; its name does not
    count: ``save_config`` writing a YAML text file is no checkpoint), or a rank-0-only
    checkpoint write (``write0``)."""
    if e.kind == "write":
        return e.op.endswith(_CHECKPOINT_WRITERS) or (e.op == "open" and e.ckpt)
    if e.kind == "cwrite":
        return e.ckpt
    return e.kind == "write0"


def rank0_checkpoint(events: list[Event], entry_mask: int, module: str) -> str:
    """What a function's callers see as its rank-0 checkpoint write (:attr:`Summary.write0`),
    from the function's ``events`` (walked with ``entry_mask``, in file ``module``): the first
    checkpoint write on global rank 0 only (``save_on_master``, or a write under a rank-0
    guard) with no collective after it in the function, else ``""``."""
    for e in events:
        # a guarded write, or any write of a body only rank 0 runs (``@rank_zero_only``)
        on_zero = bool(e.mask & Z) and (e.kind == "write0" or e.mask != entry_mask or entry_mask != ALL)
        # an earlier exit of unknown shape (`if args.rank != 0 or epoch % k: return`) leaves the
        # write on some of rank 0's runs: still rank 0 only (VICRegL's utils.checkpoint)
        some = e.many is not None and not (e.cause_is_exit and e.many is e.cause)
        if not is_checkpoint(e) or some or not on_zero or e.fenced:
            continue
        loop = e.loops[-1] if e.loops else None
        if any(c.kind == "coll" and (c.seq > e.seq or (loop is not None and loop in c.loops)) for c in events):
            return ""  # fenced there, or reported there (also the next iteration's collective)
        return f"{e.op}() at {module.rsplit('/', 1)[-1]}:{e.line}"
    return ""


def some_checkpoint(events: list[Event], entry_mask: int, module: str) -> str:
    """:attr:`Summary.write_some` from a function's ``events`` (walked with ``entry_mask``, in file
    ``module``): its first checkpoint write on the ranks of its entry, under a condition of unknown
    shape (not an earlier exit), with no collective after it in the function, else ``""``."""
    for e in events:
        if not is_checkpoint(e) or e.fenced or e.kind == "write0" or e.mask != entry_mask:
            continue
        if e.many is None or (e.cause_is_exit and e.many is e.cause):
            continue
        loop = e.loops[-1] if e.loops else None
        if any(c.kind == "coll" and (c.seq > e.seq or (loop is not None and loop in c.loops)) for c in events):
            return ""
        return f"{e.op}() at {module.rsplit('/', 1)[-1]}:{e.line}"
    return ""
