"""KDP510: ``forward`` code whose branches or tensor shapes depend on tensor values.

A branch on a tensor's value (``if x.sum() > 0:``, ``if torch.isnan(loss).any():``) forces a
device-to-host sync and lets ranks take different paths: DDP then reduces gradients of
parameters some ranks did not use (an error, or a hang with ``find_unused_parameters=False``) and
FSDP ranks issue different all-gathers. Value-dependent shapes (``x[mask]``, ``nonzero``,
``unique``, ``masked_select``) do the same to every later collective's sizes and break
``torch.compile`` graphs. Shapes, dtypes, devices, ``is None`` tests and ``self.training`` are
fine.
"""

from __future__ import annotations

import ast

from .events import Raw, at
from .project import Module, dotted

__all__ = ["check_forward"]

_SHAPE_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "layout", "is_sparse"})
_SHAPE_METHODS = frozenset({"size", "dim", "numel", "ndimension", "element_size", "stride", "get_device", "is_contiguous", "nelement"})
_VALUE_SHAPE_FUNCS = frozenset({"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"})
_NON_TENSOR_CALLS = frozenset({"len", "isinstance", "hasattr", "getattr", "callable", "type", "range", "enumerate", "zip"})


_PLAIN_TYPES = frozenset({"bool", "int", "float", "str", "bytes", "dict", "list", "tuple", "Callable"})


def _plain(annotation: ast.expr | None) -> bool:
    """True for annotations that say "not a tensor" (``bool``, ``Optional[int]``, ``str | None``)."""
    if annotation is None:
        return False
    names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)}
    names -= {"Optional", "Union", "None", "typing"}
    return bool(names) and names <= _PLAIN_TYPES


class _Tensors:
    def __init__(self, func: ast.FunctionDef | ast.AsyncFunctionDef, mod: Module) -> None:
        self.mod = mod
        self.names: set[str] = set()
        self.masks: set[str] = set()
        a = func.args
        positional = [*a.posonlyargs, *a.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        for p, d in zip(positional, defaults, strict=True):
            if p.arg in ("self", "cls"):
                continue
            if (d is None or (isinstance(d, ast.Constant) and d.value is None)) and not _plain(p.annotation):
                self.names.add(p.arg)
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            if (d is None or (isinstance(d, ast.Constant) and d.value is None)) and not _plain(p.annotation):
                self.names.add(p.arg)

    def valued(self, node: ast.expr) -> bool:
        """True when ``node``'s value depends on the values held in a tensor."""
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Constant):
            return False
        if isinstance(node, ast.Attribute):
            if node.attr in _SHAPE_ATTRS:
                return False
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return False
            return self.valued(node.value)
        if isinstance(node, ast.Subscript):
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr == "shape":
                return False
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and base.func.attr in _SHAPE_METHODS:
                return False
            return self.valued(base)
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in _SHAPE_METHODS:
                return False
            if isinstance(f, ast.Name) and (f.id in _NON_TENSOR_CALLS or _identity_test(self.mod, f.id)):
                return False
            if isinstance(f, ast.Attribute) and self.valued(f.value):
                return True
            return any(self.valued(a) for a in node.args) or any(self.valued(k.value) for k in node.keywords)
        if isinstance(node, ast.Compare):
            if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                return False
            return self.valued(node.left) or any(self.valued(c) for c in node.comparators)
        if isinstance(node, (ast.BinOp, ast.BoolOp, ast.UnaryOp)):
            return any(self.valued(c) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))
        return False

    def is_mask(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.masks
        if isinstance(node, ast.Compare) and not all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            return self.valued(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return self.is_mask(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
            return self.is_mask(node.left) or self.is_mask(node.right)
        if isinstance(node, ast.Call):
            q = dotted(node.func, self.mod.aliases) or ""
            return q.split(".")[-1] in ("isnan", "isinf", "isfinite", "bool", "eq", "ne", "gt", "lt", "ge", "le")
        return False


def _identity_test(mod: Module, name: str) -> bool:
    """``name`` is a function of ``mod`` that only tests what its argument is: its body (after a
    docstring) is ``return x is not None`` / ``is None`` / ``isinstance(...)`` or a negation
    (the ``exists(x)`` helper of lucidrains' models, used as ``if exists(time_emb):``)."""
    f = mod.functions.get(name)
    if f is None or isinstance(f.node, ast.Module):
        return False
    body = [b for b in f.node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return False
    test = body[0].value
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Compare):
        return all(isinstance(op, (ast.Is, ast.IsNot)) for op in test.ops)
    return isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id in ("isinstance", "callable")


def check_forward(mod: Module) -> list[Raw]:
    """KDP510 findings in every ``forward`` method of ``mod``."""
    out: list[Raw] = []
    for methods in mod.classes.values():
        f = methods.get("forward")
        if f is None or isinstance(f.node, ast.Module) or not f.params or f.params[0] != "self":
            continue  # autograd.Function.forward(ctx, ...) is a staticmethod, not module code
        if any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in f.node.decorator_list):
            continue
        t = _Tensors(f.node, mod)
        for stmt in _statements(f.node.body):
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                valued = t.valued(stmt.value)
                mask = t.is_mask(stmt.value)
                for tg in targets:
                    for n in ast.walk(tg):
                        if isinstance(n, ast.Name):
                            if valued:
                                t.names.add(n.id)
                            if mask:
                                t.masks.add(n.id)
            if isinstance(stmt, (ast.If, ast.While)) and t.valued(stmt.test):
                out.append(at("KDP510", stmt,
                              f"forward branches on tensor values (`{ast.unparse(stmt.test)[:60]}`): a host sync, "
                              "and ranks can take different paths (DDP unused-parameter errors, FSDP "
                              "mismatched all-gathers); use torch.where or a mask instead"))
            for node in _own_exprs(stmt):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Call):
                        q = dotted(sub.func, mod.aliases) or ""
                        last = q.split(".")[-1]
                        single_where = last == "where" and len(sub.args) == 1 and not sub.keywords
                        if (last in _VALUE_SHAPE_FUNCS or single_where) and (
                            q.startswith("torch.") or (isinstance(sub.func, ast.Attribute) and t.valued(sub.func.value))
                        ):
                            out.append(at("KDP510", sub,
                                          f"{ast.unparse(sub.func)}() in forward gives a shape that depends on "
                                          "tensor values: ranks disagree on sizes and the graph cannot be "
                                          "compiled; keep shapes static (masks, padding)"))
                    # a masked *write* (`out[mask] = y`, `out[mask] += 1`) keeps out's shape: Load only
                    elif (isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Load)
                          and t.valued(sub.value) and t.is_mask(sub.slice)):
                        out.append(at("KDP510", sub,
                                      f"boolean-mask indexing `{ast.unparse(sub)[:60]}` in forward gives a "
                                      "shape that depends on tensor values; keep shapes static (torch.where)"))
    return out


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for s in body:
        out.append(s)
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(s, field, None)
            if isinstance(inner, list) and not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.extend(_statements(inner))
        if isinstance(s, ast.Try):
            for h in s.handlers:
                out.extend(_statements(h.body))
    return out


def _own_exprs(stmt: ast.stmt) -> list[ast.expr]:
    """The expressions of ``stmt`` itself, not of the statements nested in it."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in stmt.items]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)):
        return []
    return [c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.expr)]
