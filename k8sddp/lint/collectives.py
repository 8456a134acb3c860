"""``torch.distributed`` collectives at a call: the event, and what they do to their tensors.

An all-reduce, broadcast or all-gather leaves its in-place argument the same on every rank
(:data:`~k8sddp.lint.knowledge.UNIFORM_INPLACE`); a reduce, gather, scatter or receive leaves it
per rank (:data:`~k8sddp.lint.knowledge.RANKED_INPLACE`). A collective on a ``group=`` carries
that group's membership keys, for the subgroup check of :mod:`k8sddp.lint.rules_sync`.
"""

from __future__ import annotations

import ast
import dataclasses

from . import knowledge as K
from .calls_io import IOMixin
from .calls_io import arg_of as _arg
from .exprs import env_key
from .values import UNIFORM, Val

__all__ = ["CollectiveMixin"]


class CollectiveMixin(IOMixin):
    """The collective half of the call classification (mixed into :class:`k8sddp.lint.calls.CallMixin`)."""

    def torch_collective(self, node: ast.Call, last: str, kws: dict[str | None, Val], shown: str = "") -> Val:
        """A ``torch.distributed`` collective: emit it (with its group's membership keys) and
        apply its in-place result (uniform or per-rank); findings name it ``shown`` (a library's
        own: ``ts.distributed.gather``), else ``dist.<last>``."""
        op = {"monitored_barrier": "barrier", "new_subgroups": "new_group",
              "new_subgroups_by_enumeration": "new_group"}.get(last, last)
        group_node = _arg(node, 0 if last in ("barrier", "monitored_barrier") else -1, "group")
        keys: set[str] = set()
        if group_node is not None:
            keys.add(ast.unparse(group_node))
            keys |= self.expr(group_node).group
        self.emit("coll", op, node, detail=f"{shown or 'dist.' + last}()", group_keys=frozenset(keys))
        if last in K.UNIFORM_INPLACE:
            self.inplace(node, K.UNIFORM_INPLACE[last], None)
        elif last in K.RANKED_INPLACE:
            self.inplace(node, K.RANKED_INPLACE[last], "other")
        if last == "new_group":
            ranks = _arg(node, 0, "ranks")
            gk: set[str] = set()
            if ranks is not None:
                gk.add(ast.unparse(ranks))
                gk |= {n.id for n in ast.walk(ranks) if isinstance(n, ast.Name) and n.id != "rank"}
            return Val(group=frozenset(gk) or frozenset({"<new_group>"}))
        return UNIFORM

    def inplace(self, node: ast.Call, index: int, kind: str | None) -> None:
        """A collective wrote its result into argument ``index``: rebind its rank kind."""
        if index >= len(node.args):
            return
        targets = [node.args[index]]
        if isinstance(targets[0], ast.IfExp):  # gather(t, out if rank == 0 else None)
            targets = [targets[0].body, targets[0].orelse]
        for target in targets:
            if isinstance(target, ast.Subscript):
                target = target.value
            self._rebind(target, kind)

    def _rebind(self, target: ast.expr, kind: str | None) -> None:
        key = env_key(target)
        if key is None:
            return
        cur = self.env.get(key) or self.lookup(target) or UNIFORM
        # the collective's doing: the same on every rank again (no longer per-rank data), or not
        # the result no longer depends on what the function's parameters held on this rank: a
        # helper that all-reduces a tensor built from its argument returns a uniform value
        # (`t = torch.tensor([x]); dist.all_reduce(t); return t.item()`), so drop `params`
        self.env[key] = dataclasses.replace(cur, rank=kind, prank=None, ddp_out=cur.ddp_out and kind is not None,
                                            synced=kind is None, params=cur.params if kind else frozenset())
