"""Items under literal keys: dictionaries built from a display and returned by project functions.

se3-diffusion's ``get_ddp_info()`` returns ``{"node_id": ..., "local_rank": local_rank, "rank":
rank, "world_size": ...}`` and its trainer tests ``self.ddp_info['rank'] not in [0, -1]``. Joined
into one value, the dictionary holds a global and a local rank at once, and that test (a global
rank test) reads as one of "other" shape. Kept key by key, each item has its own value: a dict
display bound to a name (``info = {"rank": rank}``), and a project function whose every
``return`` gives a dict display with one set of string keys, bind ``name['rank']`` (the
environment keys :func:`k8sddp.lint.exprs.item_key` reads) to that item's value.
"""

from __future__ import annotations

import ast
from typing import Protocol

from .values import UNIFORM, Val, join

__all__ = ["bind_keys", "join_keys", "returned"]

class Walker(Protocol):
    """What these functions use of the statement walker (:class:`k8sddp.lint.flow.Walker`)."""

    env: dict[str, Val]
    mask: int
    entry_mask: int
    many: ast.AST | None
    silent: int
    returns: list[Val]
    return_items: list[tuple[Val, ...] | None]
    return_keys: list[dict[str, Val] | None]
    last_keys: tuple[ast.Call, tuple[tuple[str, Val], ...]] | None
    keyed: set[str]

    def expr(self, node: ast.expr | None) -> Val:
        """The value of ``node``."""
        ...


#: at most this many keys are kept per dictionary (larger ones are configuration, not rank info)
MAX_KEYS = 16


def _literal_keys(node: ast.expr | None) -> list[tuple[str, ast.expr]] | None:
    """``[(key, value node)]`` of a dict display with string-literal keys only (``{**d}``, or a
    computed key: ``None``), or of ``dict(rank=..., ...)`` with keywords only."""
    if isinstance(node, ast.Dict) and node.keys and len(node.keys) <= MAX_KEYS:
        if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
            return [(k.value, v) for k, v in zip(node.keys, node.values, strict=True)]  # type: ignore[union-attr]
        return None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args
            and node.keywords and len(node.keywords) <= MAX_KEYS and all(k.arg for k in node.keywords)):
        return [(str(k.arg), k.value) for k in node.keywords]
    return None


def returned(w: Walker, value: ast.expr | None) -> None:
    """Record a ``return value`` of the function ``w`` walks: its value (``w.returns``), the
    items of a returned tuple display (``w.return_items``, :func:`~k8sddp.lint.values.join_items`)
    and the items of a returned dict display (``w.return_keys``, :func:`join_keys`)."""
    keyed = _literal_keys(value)
    if isinstance(value, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in value.elts):
        items = tuple(w.expr(e) for e in value.elts)
        w.return_items.append(items)
        w.return_keys.append(None)
        w.returns.append(join(*items).data_only())
        return
    w.return_items.append(None)
    if keyed is not None:
        vals = {k: w.expr(v) for k, v in keyed}
        w.return_keys.append(vals)
        w.returns.append(join(*vals.values()))
        return
    w.return_keys.append(None)
    if value is not None:
        w.returns.append(w.expr(value))


def join_keys(returns: list[dict[str, Val] | None]) -> tuple[tuple[str, Val], ...] | None:
    """Key by key, the values of a function whose every ``return`` gives a dict display with
    one set of string keys; ``None`` when a return gives anything else."""
    if not returns or any(r is None for r in returns):
        return None
    first = returns[0]
    assert first is not None
    if any(r is not None and set(r) != set(first) for r in returns):
        return None
    return tuple((k, join(*(r[k] for r in returns if r is not None))) for k in first)


def bind_keys(w: Walker, key: str, value_node: ast.expr | None) -> None:
    """After ``key = value_node`` (a name or attribute chain): bind ``key['k']`` for each item
    of a dict display, or of the dict a project function returns (``w.last_keys``, set by the
    call); nothing for other values."""
    if w.keyed:
        prefix = f"{key}['"
        for old in [k for k in w.keyed if k.startswith(prefix)]:
            w.keyed.discard(old)
            w.env.pop(old, None)
    if value_node is None or w.mask != w.entry_mask or w.many is not None:
        return  # a dict only some ranks build: its items keep the container's value
    if w.last_keys is not None and w.last_keys[0] is value_node:
        for k, v in w.last_keys[1]:
            w.env[item := f"{key}[{k!r}]"] = v
            w.keyed.add(item)
        return
    keyed = _literal_keys(value_node)
    if keyed is None:
        return
    w.silent += 1  # the display was evaluated (and its events recorded) once already
    try:
        for k, node in keyed:
            w.env[item := f"{key}[{k!r}]"] = w.expr(node) if not isinstance(node, ast.Constant) else UNIFORM
            w.keyed.add(item)
    finally:
        w.silent -= 1

