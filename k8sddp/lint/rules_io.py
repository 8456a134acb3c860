"""KDP504 and KDP506: checkpoint and log writes, and who reads them.

- KDP504: a write (``torch.save``, ``open(..., "w")``, ``save_pretrained``, a TensorBoard
  ``SummaryWriter``, ``wandb.init``) that runs on every rank to one path, or under a guard that
  is true on more than one rank (``LOCAL_RANK == 0`` is true once per node: on a shared
  filesystem the nodes overwrite each other's files). Per-rank names (``f"ckpt_{rank}.pt"``) are
  fine; node-local paths (``/tmp``, ``/dev/shm``, ``tempfile``) are fine under a local-rank guard.
- KDP506: a rank-0-only write followed, on the other ranks, by a read of the same path with no
  collective (barrier) in between: they read a missing or half-written file.

Only modules that use torch.distributed or a distributed framework are checked for KDP504.
"""

from __future__ import annotations

import ast

from .analyzer import Context
from .events import Event, Raw, at, cond_text, delegated, is_checkpoint, rebound
from .flow import Walker
from .host import caller_ranked
from .scopes import exclusive_arms
from .treewalk import walk_lean
from .values import ALL, LZ, Z

__all__ = ["check_io"]

_PER_RANK = ("rank", "other")  # a local-rank name repeats on every node
#: Marks of a node-local path: /tmp, /dev/shm, tempfile, and the environment variables that name a
#: node's own scratch disk (SLURM's SLURM_TMPDIR, TMPDIR, LSCRATCH/LOCAL_SCRATCH; not SCRATCH,
#: which on many clusters is the shared parallel file system).
_NODE_LOCAL = ("'/tmp", '"/tmp', "'/dev/shm", '"/dev/shm', "tempfile.", "gettempdir", "mkdtemp",
               "TMPDIR", "LSCRATCH", "LOCAL_SCRATCH")


#: Writers a helper's finding names that start a tracker run rather than write one file.
_TRACKER_WORDS = ("wandb.", "SummaryWriter", "mlflow.", "aim.", "neptune.", "comet_ml.")


def _own_statements(scope: ast.AST) -> list[ast.stmt]:
    """The statements of ``scope``'s body, nested blocks included, not those of functions or
    classes defined in it."""
    out: list[ast.stmt] = []
    todo = list(getattr(scope, "body", []))
    while todo:
        st = todo.pop()
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        out.append(st)
        for field in ("body", "orelse", "finalbody"):
            todo.extend(getattr(st, field, []) or [])
        for h in getattr(st, "handlers", []) or []:
            todo.extend(h.body)
    return out


def _node_local(path: ast.expr | None, scopes: tuple[ast.AST, ...] = (), depth: int = 2) -> bool:
    """Whether ``path`` names a node-local file (:data:`_NODE_LOCAL`): in its own text, or through
    a name it uses that every assignment of the innermost of ``scopes`` binding it (the function,
    then the module body) binds to such a path, ``depth`` names deep (``dst =
    os.path.join(TMP, "data")`` ... ``shutil.copytree(src, dst)`` with ``TMP =
    os.environ.get("SLURM_TMPDIR", "/tmp")`` at module level)."""
    if path is None:
        return False
    if any(m in ast.unparse(path) for m in _NODE_LOCAL):
        return True
    if depth == 0:
        return False
    for name in {n.id for n in ast.walk(path) if isinstance(n, ast.Name)}:
        for scope in scopes:
            values = [a.value for a in _own_statements(scope) if isinstance(a, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)]
            if values:  # bound here: an outer binding of the name is not it
                if all(_node_local(v, scopes, depth - 1) for v in values):
                    return True
                break
    return False


def _guard_text(e: Event, ctx: Context, mod_path: str, mask: int) -> str:
    if mask == Z | LZ and e.class_cause is not None:
        # the guard that makes it "local rank 0 of every node", not a value test nested in it
        return f"`{cond_text(e.class_cause)}` (line {getattr(e.class_cause, 'lineno', '?')})"
    if e.cause is not None and not e.cause_is_exit:
        return f"`{cond_text(e.cause)}` (line {getattr(e.cause, 'lineno', '?')})"
    if e.many is not None:
        if isinstance(e.many, ast.stmt) and not isinstance(e.many, (ast.If, ast.While)):
            return f"the ranks left after `{cond_text(e.many)}` (line {e.many.lineno}) that some ranks take"
        return f"`{cond_text(e.many)}` (line {getattr(e.many, 'lineno', '?')})"
    if e.cause is not None:
        return f"the ranks left after `{cond_text(e.cause)}` (line {getattr(e.cause, 'lineno', '?')})"
    if ctx.cause is not None:
        where = "" if ctx.cause_path == mod_path else f"{ctx.cause_path}:"
        line = getattr(ctx.cause, "lineno", "?")
        if ctx.cause_is_exit:
            return f"the ranks left in its caller after `{cond_text(ctx.cause)}` ({where}line {line})"
        return f"`{cond_text(ctx.cause)}` around its caller ({where}line {line})"
    return "a rank-dependent condition"


def _uniform_alternative(w: Walker, guard: ast.AST | None) -> str | None:
    """The text of an operand of ``A or B`` that is the same on every rank (``not
    args.multiprocessing_distributed``): where it holds, the guard is true on every rank. Also
    inside ``U and (A or B)`` (OLMo's ``cfg.wandb is not None and (get_global_rank() == 0 or not
    cfg.wandb.rank_zero_only)``)."""
    if isinstance(guard, ast.BoolOp) and isinstance(guard.op, ast.And):
        return next((t for v in guard.values if (t := _uniform_alternative(w, v))), None)
    if not isinstance(guard, ast.BoolOp) or not isinstance(guard.op, ast.Or):
        return None
    w.silent += 1
    try:
        for operand in guard.values:
            if w.expr(operand).kind is None and not _not_distributed(operand):
                return cond_text(operand, 60)
    finally:
        w.silent -= 1
    return None


def _not_distributed(test: ast.expr) -> bool:
    """``local_rank == -1`` (``in [-1]``): the single-process run's test, not an alternative
    true on every rank of a distributed one (transformers' ``TrainingArguments.local_rank`` is
    read from ``LOCAL_RANK``; a ``--local_rank`` option torchrun leaves at -1 is
    :func:`_cli_local_rank`'s case)."""
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and any(isinstance(c, ast.UnaryOp) and isinstance(c.op, ast.USub) and isinstance(c.operand, ast.Constant)
                    and c.operand.value == 1 for c in (test.left, *test.comparators)))


def _cli_local_rank(w: Walker, guard: ast.AST | None) -> str | None:
    """The text of ``args.local_rank`` when ``guard`` reads a ``--local_rank`` command-line
    option of this module whose default is not taken from ``LOCAL_RANK``: torchrun passes no
    such option (it sets the variable), so under torchrun the option keeps its default on every
    rank (``-1``: ``args.local_rank in [-1, 0]`` is then true on every rank)."""
    if guard is None or "local" not in w.mod.source:
        return None
    reads = [n for n in ast.walk(guard) if isinstance(n, ast.Attribute) and n.attr == "local_rank"
             and isinstance(n.value, ast.Name) and n.value.id not in ("self", "cls")]
    if not reads:
        return None
    for node in ast.walk(w.mod.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not {"--local_rank", "--local-rank"} & set(flags):
            continue
        default = next((k.value for k in node.keywords if k.arg == "default"), None)
        if default is None or "LOCAL_RANK" not in ast.unparse(default):
            return cond_text(reads[0], 40)
    return None


def _rank_zero_apart(w: Walker, path: ast.expr | None) -> bool:
    """True when ``path`` is built from a name bound to ``a if <rank-0 test> else b`` (ScaledYOLOv4's ``log_dir = Path(tb_writer.log_dir) if
    tb_writer else Path(opt.logdir) / 'evolve'``): rank 0 writes its own file, but every other
    rank writes the one ``b`` names (``b`` alike on every rank), so the name is not per rank."""
    todo: list[tuple[ast.expr | None, int]] = [(path, 0)]
    seen: set[str] = set()
    w.silent += 1
    try:
        while todo:
            node, depth = todo.pop()
            for n in walk_lean(node) if node is not None else ():
                if not isinstance(n, ast.Name) or n.id in seen or (src := w.sources.get(n.id)) is None:
                    continue
                seen.add(n.id)
                if isinstance(src, ast.IfExp) and (kind := w.expr(src.test).kind) in ("zero", "lzero", "nzero", "nlzero"):
                    shared = src.orelse if kind in ("zero", "lzero") else src.body  # the arm the other ranks take
                    if w.expr(shared).kind is None:
                        return True
                if depth < 2:  # `results_file = str(log_dir / 'results.txt')`
                    todo.append((src, depth + 1))
    finally:
        w.silent -= 1
    return False


def _param_flag(guard: ast.AST | None, params: tuple[str, ...]) -> bool:
    """True for ``if is_best:`` (or ``if not flag:``) on a parameter: a flag the caller computed,
    rank-dependent only as the call makes it."""
    test = guard.test if isinstance(guard, (ast.If, ast.While)) else guard
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    return isinstance(test, ast.Name) and test.id in params


def check_io(w: Walker, ctx: Context, distributed: bool, unguarded: Context | None = None,
             entry: bool = False, hook: bool = False) -> list[Raw]:
    """KDP504/506 findings of one walked function, called under ``ctx``.

    A write whose path is a parameter, or is built from parameters, is judged at each call site
    (the call's arguments name the file); an unguarded write to a fixed path is judged at the
    call sites under a rank guard and, here, under ``unguarded`` (the context of the calls with
    no guard of their own). An ``entry`` point (no function calls it) that runs collectives has
    its writes to paths built from its parameters judged as fixed-path ones, and so has a
    framework ``hook`` (``TrainerCallback.on_save``: the framework passes every rank the same
    ``args.output_dir``).
    """
    out: list[Raw] = []
    mod_path = w.mod.path
    params = tuple(p for p in w.func.params if p not in ("self", "cls"))
    again = rebound(w.func.node, params, w.events)
    runs_collectives = any(e.kind == "coll" for e in w.events)
    summ = w.an.summaries.get(w.func.key)
    at_calls = ctx.called and summ is not None and bool(summ.writes)  # its calls name this function's writes
    ranked = caller_ranked(w.an, w.func.key)
    for e in w.events:
        if e.kind not in ("write", "tracker", "cwrite") or e.ordered is not None:
            continue
        how = delegated(e, params, w.entry_mask, again=again, func=w.func.node, ranked=ranked)
        if how in ("derived", "param") and w.an.facts.tests_files(w.func.node):
            how = delegated(e, params, w.entry_mask, inside=True, again=again)
        if how == "derived" and runs_collectives and entry:
            how = "fixed"  # `main(args)`: see CallMixin.project_call
        if how in ("param", "derived") and hook:
            how = "fixed"
        if how in ("param", "derived") and (ctx.called or not runs_collectives):
            # judged at the call sites; with none in sight, a helper's path is its caller's
            # (an entry point that itself runs collectives, `main(output_dir)`, is judged here)
            continue
        if how is None and at_calls and _param_flag(e.class_cause or e.cause, params):
            continue  # apex's `if is_best: shutil.copyfile(...)` beside the torch.save its calls report
        ectx = unguarded if (how == "fixed" and ctx.called and unguarded is not None) else ctx
        mask = e.mask & ectx.mask
        many = e.many or ectx.many
        if mask in (0, Z) or e.one:
            continue  # nobody, or one rank alone (a subset of it is still one rank)
        pv = e.path_val
        scopes = (w.func.node, w.mod.tree)
        if pv is not None and (pv.kind in _PER_RANK or pv.kind in ("local", "modrank") and _node_local(e.path, scopes)) \
                and not _rank_zero_apart(w, e.path):
            continue
        if many is None and not mask & ~(Z | LZ) and _node_local(e.path, scopes):
            continue
        if not distributed:
            continue
        what = e.op  # qualified: torch.save, wandb.init, mlflow.start_run; a project helper's name
        target = f" to `{cond_text(e.path, 50)}`" if e.path is not None else ""
        inner = f" (it runs {e.detail})" if e.kind == "cwrite" and e.detail else ""
        if many is None and mask == ALL:
            how_text = "runs on every rank"
        elif mask == Z | LZ and (alt := _uniform_alternative(w, e.class_cause or e.cause)):
            how_text = (f"runs under {_guard_text(e, ectx, mod_path, mask)}, true on every rank when `{alt}` "
                        "holds (as under torchrun), else on local rank 0 of every node")
        elif mask == Z | LZ and (opt := _cli_local_rank(w, e.class_cause or e.cause)):
            how_text = (f"runs under {_guard_text(e, ectx, mod_path, mask)}, true on local rank 0 of every node "
                        f"when the launcher passes --local_rank, and on every rank under torchrun (it passes "
                        f"none: `{opt}` keeps its default)")
        elif mask == Z | LZ:
            how_text = f"runs under {_guard_text(e, ectx, mod_path, mask)}, true on local rank 0 of every node"
        elif alt := _uniform_alternative(w, e.class_cause or e.cause):
            how_text = f"runs under {_guard_text(e, ectx, mod_path, mask)}, true on every rank when `{alt}` holds"
        else:
            how_text = f"runs under {_guard_text(e, ectx, mod_path, mask)}, true on more than one rank"
        tracker = e.kind == "tracker" or (e.kind == "cwrite" and any(t in e.detail for t in _TRACKER_WORDS))
        harm = "the ranks open one tracker run each" if tracker else "the ranks overwrite one file"
        out.append(at("KDP504", e.node,
                      f"{what}(){target}{inner} {how_text}: {harm}; guard it with a global-rank-0 check "
                      "(`dist.get_rank() == 0`) or put the rank in the name"))
    out.extend(_unsynced_reads(w, ctx))
    out.extend(_write_then_collective(w, ctx))
    return out


def _every_rank_left(e: Event, entry_mask: int) -> bool:
    """A collective every rank still in the function reaches: unconditional, or restricted only
    by an earlier exit some ranks may have taken (the writer is among the ranks that stayed)."""
    if e.kind != "coll" or e.mask != entry_mask:
        return False
    return e.many is None or (e.cause_is_exit and e.many is e.cause)


def _holds(st: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(st))


def _exits_between(stmts: list[ast.stmt], write: ast.AST, coll: ast.AST) -> bool:
    """Whether the path from ``write`` to ``coll`` (a later event of one function body
    ``stmts``) always leaves the function first: the statement holding the write, or one after it
    in an enclosing block before the block reaches ``coll``, is a ``return``/``raise``. Inside a
    loop the search stops at the loop (the next iteration comes first)."""
    for i, st in enumerate(stmts):
        if not _holds(st, write):
            continue
        if isinstance(st, (ast.Return, ast.Raise)):
            return True
        if isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
            return _exits_between(st.body, write, coll) if not _holds(st.body[0], coll) else False
        blocks = [b for b in (getattr(st, f, None) for f in ("body", "orelse", "finalbody")) if isinstance(b, list)]
        blocks += [h.body for h in getattr(st, "handlers", ())]
        for block in blocks:
            if (block and isinstance(block[0], ast.stmt) and any(_holds(b, write) for b in block)
                    and _exits_between(block, write, coll)):
                return True
        for later in stmts[i + 1:]:
            if isinstance(later, (ast.Return, ast.Raise)):
                return True
            if _holds(later, coll):
                return False
        return False
    return False


def _apart(w: Walker, a: Event, b: Event) -> bool:
    """``a`` and ``b`` lie in opposite arms of a uniform ``if`` (no run reaches both)."""
    common = [loop for loop in a.loops if loop in b.loops]
    scope = common[-1] if common else w.func.node
    return exclusive_arms(scope, a.node, b.node, a.guard_names | b.guard_names, varying=bool(common))


def _is_barrier(e: Event) -> bool:
    return e.op.split("+")[0] == "barrier"


def _next_collective(w: Walker, wr: Event, later: list[Event], skip: list[ast.If]) -> Event | None:
    """The first of ``later`` that every rank enters after the write ``wr``, where a barrier
    inside a uniform ``if`` that does not hold the write (a step the run may skip: MAR's ``if
    args.online_eval: evaluate(...)``, which starts with a barrier) does not count: the search
    goes on past that ``if`` (added to ``skip``), since without it nothing fences the write."""
    for e in later:
        if not _every_rank_left(e, w.entry_mask) or _apart(w, wr, e) or any(_holds(s, e.node) for s in skip):
            continue
        if _is_barrier(e):
            opt = next((s for s in w.optional_ifs if _holds(s, e.node) and not _holds(s, wr.node)
                        and not _same_test_holds_write(w, s, wr)), None)
            if opt is not None:
                skip.append(opt)
                continue
        return e
    return None


def _bare_test(test: ast.expr) -> str:
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    return ast.dump(test)


def _same_test_holds_write(w: Walker, opt: ast.If, wr: Event) -> bool:
    """The write itself is under an ``if`` on the same test (or its negation: llama-recipes'
    ``if not cfg.enable_fsdp: ... else: save_fsdp(...)`` then ``if cfg.enable_fsdp:
    dist.barrier()``): every run that writes also takes the barrier."""
    key = _bare_test(opt.test)
    return any(isinstance(n, ast.If) and n is not opt and _holds(n, wr.node) and _bare_test(n.test) == key
               for n in ast.walk(w.func.node))


def _write_then_collective(w: Walker, ctx: Context) -> list[Raw]:
    """KDP512: a checkpoint written on some ranks only, then a collective every rank reaches with
    no barrier in between (in the function, or in the next iteration of the loop around both)."""
    out: list[Raw] = []
    events = w.events
    for wr in events:
        if not is_checkpoint(wr) or wr.fenced:  # a helper that fences its own write
            continue
        wmask = (wr.mask & ctx.mask & Z) if wr.kind == "write0" else (wr.mask & ctx.mask)
        # under a condition of unknown shape (`not args.multiprocessing_distributed or rank == 0`)
        # it is still some ranks, unless only an earlier exit restricted it
        some = wr.many is not None and not (wr.cause_is_exit and wr.many is wr.cause)
        if ctx.many is not None or wmask == 0 or (wmask == w.entry_mask & ctx.mask and not some):
            continue
        # the first collective every rank enters next (events are in walk order: the rest of this
        # iteration comes before what follows the loop); only it decides
        skip: list[ast.If] = []  # uniform ifs holding a barrier the run may skip (`if args.eval: evaluate()`)
        nxt = _next_collective(w, wr, events[wr.seq + 1:], skip)
        for loop in reversed(wr.loops):
            if nxt is not None and loop in nxt.loops:
                break
            # nothing more in this iteration: the others go on to the next one, not to what
            # follows the loop (a barrier after the loop fences only the last iteration's write);
            # a loop with no collective (TransVG's `for path in checkpoint_paths: save_on_master`)
            # hands over to the loop around it
            found = _next_collective(w, wr, [e for e in events[:wr.seq] if loop in e.loops], skip)
            if found is not None:
                nxt = found
                break
        if nxt is None or _is_barrier(nxt):  # a barrier, or a call that starts with one
            continue
        if nxt.seq > wr.seq and _exits_between(w.func.node.body, wr.node, nxt.node):
            continue  # `return save(...)`: the writer leaves before that collective (DINOv2 eval-only)
        out.append(at("KDP512", wr.node,
                      f"{wr.op}() writes on some ranks only, and every rank then enters {nxt.detail or nxt.op} "
                      f"(line {nxt.line}) with no barrier in between: the others wait there while the checkpoint "
                      "is written, and a write longer than the process-group timeout kills the job; add "
                      "dist.barrier() after the write (or fence it with k8sddp.runtime.Rank0IO)"))
        break  # one report per function: the first unfenced write
    return out


def _unsynced_reads(w: Walker, ctx: Context) -> list[Raw]:
    out: list[Raw] = []
    events = w.events
    for wr in events:
        if wr.kind not in ("write", "cwrite") or wr.path is None:
            continue
        wmask = wr.mask & ctx.mask
        if wr.many is not None or ctx.many is not None or wmask in (0, ALL) or wmask & ~(Z | LZ):
            continue
        key = ast.unparse(wr.path)
        for rd in events[wr.seq + 1:]:
            if rd.kind != "read" or rd.path is None or ast.unparse(rd.path) != key:
                continue
            if not (rd.mask & ctx.mask) & ~wmask:
                continue
            synced = any(
                e.kind == "coll" and e.many is None and e.mask == w.entry_mask
                for e in events[wr.seq + 1: rd.seq]
            )
            if not synced:
                out.append(at("KDP506", wr.node,
                              f"{wr.op}() to `{cond_text(wr.path, 50)}` runs on one rank only, and the other "
                              f"ranks read it at line {rd.line} with no barrier in between: they can read a "
                              "missing or half-written file; add dist.barrier() before the read"))
            break
    return out
