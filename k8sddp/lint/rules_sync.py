"""KDP501-KDP503: collectives that not every rank reaches, in the same order.

From one walked function (:class:`~k8sddp.lint.flow.Walker`): each class of ranks (global rank 0,
other local rank 0s, the rest) has a sequence of collectives. A collective that only some
classes run must be matched, at the same position, by the same collective on the others (the
``if rank != 0: barrier()`` ... ``if rank == 0: barrier()`` idiom pairs up); otherwise:

- KDP501: it is reached under a rank-dependent condition (or inside a ``main_process_first``
  body, which ranks run one after the other around a barrier);
- KDP503: it is a barrier without a partner in the other arm of the rank branch;
- KDP502: the mismatch comes from a rank-dependent ``return``/``break``/``continue``/``raise``/
  ``sys.exit``, or such an exit leaves a loop that holds collectives.

A collective on a process group whose membership test is the branch condition (``if rank in
ranks: all_reduce(t, group=new_group(ranks))``) is fine.
"""

from __future__ import annotations

import ast

from .events import Event, Raw, at, cond_text
from .flow import Walker
from .project import dotted
from .scopes import exclusive_arms
from .values import ALL, LZ, N, Z

__all__ = ["check_sync"]

_CLASSES = (Z, LZ, N)


def _group_ok(e: Event) -> bool:
    keys = e.group_keys - {"None", "dist.group.WORLD", "group.WORLD"}
    return bool(keys & e.guard_names)


def _where(e: Event) -> str:
    if e.cause is not None and not e.cause_is_exit:
        return f"`{cond_text(e.cause)}` (line {getattr(e.cause, 'lineno', '?')})"
    if e.many is not None:
        if isinstance(e.many, ast.stmt) and not isinstance(e.many, (ast.If, ast.While)):
            # an earlier exit some ranks took: name it as such, not as a condition
            return f"the ranks that did not take the earlier `{cond_text(e.many)}` (line {e.many.lineno})"
        return f"`{cond_text(e.many)}` (line {getattr(e.many, 'lineno', '?')})"
    return "the rank-dependent decorator of this function"


def _in_loop_raise(node: ast.AST, exits: list[Event]) -> bool:
    for x in exits:
        if x.node is node:
            return bool(x.loops)
    return False


def _exits_cleanly(stmt: ast.Raise) -> bool:
    """``raise SystemExit`` (or ``SystemExit(0)``/``(None)``): the process ends with status 0,
    like ``sys.exit(0)``, and torchrun does not stop the other workers for it."""
    exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    if not (isinstance(exc, ast.Name) and exc.id == "SystemExit"):
        return False
    args = stmt.exc.args if isinstance(stmt.exc, ast.Call) else []
    return not args or (isinstance(args[0], ast.Constant) and args[0].value in (0, None))


def check_sync(w: Walker) -> list[Raw]:
    """KDP501/502/503 findings of one walked function."""
    coll = [e for e in w.events if e.kind == "coll"]
    exits = [e for e in w.events if e.kind == "exit"]
    if not coll:
        return []
    out: list[Raw] = []
    seqs = {c: [e for e in coll if e.many is None and e.mask & c] for c in _CLASSES}
    blamed_exits: dict[int, tuple[ast.AST, Event]] = {}

    def blame_exit(stmt: ast.AST, e: Event) -> None:
        if isinstance(stmt, ast.Raise) and not _in_loop_raise(stmt, exits) and not _exits_cleanly(stmt):
            return  # the process dies; torchrun tears the job down (not on `raise SystemExit(0)`)
        blamed_exits.setdefault(id(stmt), (stmt, e))

    for e in coll:
        if e.ordered is not None:
            out.append(at("KDP501", e.node,
                          f"{e.detail} runs inside `with {cond_text(e.ordered)}`: the ranks run that body one "
                          "after another around a barrier, so this collective meets the other ranks' barrier "
                          "(a mismatch or a hang); move it out of the block"))
            continue
        if e.many is not None:
            if _group_ok(e):
                continue
            if e.cause_is_exit and e.cause is not None:
                blame_exit(e.cause, e)
                continue
            if isinstance(e.many, (ast.For, ast.AsyncFor, ast.While)):
                # the loop is rank-dependent only because of an exit in it: report that exit once,
                # not every collective of the following iterations
                carried = next((x for x in exits if e.many in x.loops), None)
                if carried is not None:
                    blame_exit(carried.node, e)
                    continue
            out.append(_unmatched(e))
            continue
        if e.mask in (ALL, 0):
            continue
        first = next(c for c in _CLASSES if e.mask & c)
        idx = seqs[first].index(e)
        # a partner runs the same collective at the same position on exactly the other classes
        unpaired = any(
            idx >= len(seqs[c]) or seqs[c][idx].op != e.op or seqs[c][idx].mask & e.mask
            for c in _CLASSES if not c & e.mask
        )
        if not unpaired or _group_ok(e):
            continue
        # reported once: later collectives are paired as if this one were not there, so one
        # mismatch does not make every later pair look broken (review 7 item 3)
        for c in _CLASSES:
            if e in seqs[c]:
                seqs[c].remove(e)
        if e.cause_is_exit and e.cause is not None:
            blame_exit(e.cause, e)
            continue
        out.append(_unmatched(e))

    for x in exits:
        stmt = x.node
        if not x.loops:
            continue
        if x.cause_is_exit and x.cause is not None and x.many in (None, x.cause) and any(y.node is x.cause for y in exits):
            continue  # restricted only by an earlier exit, which is reported itself
        hit: Event | None
        if x.op == "continue":
            loop = x.loops[-1]
            hit = next((c for c in coll if loop in c.loops and c.seq > x.seq
                        and not exclusive_arms(loop, x.node, c.node, x.guard_names | c.guard_names)), None)
        else:
            loop = x.loops[-1] if x.op == "break" else x.loops[0]
            hit = next((c for c in coll if loop in c.loops
                        and not exclusive_arms(loop, x.node, c.node, x.guard_names | c.guard_names)), None)
        if hit is not None:
            blamed_exits.setdefault(id(stmt), (stmt, hit))

    for stmt, e in blamed_exits.values():
        found = next((ev for ev in exits if ev.node is stmt), None)
        cond = _where(found) if found is not None else "a rank-dependent condition"
        call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
        word = dotted(call.func) or "sys.exit" if call is not None else getattr(stmt, "word", type(stmt).__name__.lower())
        out.append(at("KDP502", stmt,
                      f"`{word}` taken only on ranks where {cond}, while the loop or code after it runs "
                      f"{e.detail} (line {e.line}): the other ranks wait in that collective until the "
                      "process-group timeout; decide on every rank (all_reduce the flag) or use a uniform condition"))
    return out


def _unmatched(e: Event) -> Raw:
    if e.op == "barrier":
        return at("KDP503", e.node,
                  f"{e.detail} is reached only on ranks where {_where(e)}, and the other arm of that "
                  "rank branch has no matching barrier: the ranks that skip it never meet it")
    return at("KDP501", e.node,
              f"{e.detail}{',' if ', which ' in e.detail else ''} is a collective reached only on ranks where {_where(e)}: the other ranks "
              "never join it and the job hangs until the process-group timeout; run it on every rank")
