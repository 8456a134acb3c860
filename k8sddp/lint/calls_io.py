"""File IO of the call classification: writes, tracker starts and reads, recorded as events
for :mod:`k8sddp.lint.rules_io` (tables: :data:`k8sddp.lint.knowledge.WRITE_CALLS` and friends).
"""

from __future__ import annotations

import abc
import ast
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import knowledge as K
from .events import binary_write_open
from .exprs import ExprEval, env_key
from .values import UNIFORM, Val, join

if TYPE_CHECKING:
    from .project import FuncInfo

__all__ = ["IOMixin", "arg_of", "rank_defaults", "terminal"]


def terminal(node: ast.expr) -> str:
    """The last name of a callee: ``save`` of ``torch.save``, ``f`` of ``f()()``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return terminal(node.func)
    return ""


def ranked_attrs(env: dict[str, Val], node: ast.Call, params: list[str]) -> dict[str, Val]:
    """``{"param.attr": value}`` for the rank-dependent attributes the caller set on a plain name it
    passes (``args.save_logs = ... is_master(args)`` then ``save_checkpoint(args, ...)``: inside,
    ``args.save_logs`` is a rank-0 flag). One level of attributes; only ranks and rank tests (not
    values of unknown shape, such as a counter only some ranks advance)."""
    passed: dict[str, str] = {}
    for i, a in enumerate(node.args):
        if isinstance(a, ast.Starred):
            break
        if isinstance(a, ast.Name) and i < len(params):
            passed[a.id] = params[i]
    for k in node.keywords:
        if k.arg is not None and isinstance(k.value, ast.Name):
            passed[k.value.id] = k.arg
    if not passed:
        return {}
    out: dict[str, Val] = {}
    for key, v in env.items():
        if v.kind not in ("zero", "lzero", "rank", "local") or not ("." in key or key.endswith("]")):
            continue  # not a value some ranks bumped
        base, sep, attr = key.partition("[") if key.endswith("]") and "." not in key else key.partition(".")
        if base in passed and "." not in attr:
            out[f"{passed[base]}{sep}{attr}"] = v  # `args.save_logs`, `config['output_path']`
    return out


def rank_defaults(node: ast.Call, func: ast.AST, params: list[str], bound: set[str]) -> dict[str, Val]:
    """Values for the rank-named parameters (:data:`~k8sddp.lint.knowledge.RANK_PARAMS`) that call
    ``node`` leaves out (``bound``: the ones it passes). A parameter the body compares with the
    process's own rank (``def save_rank(text, path, rank=0)``: ``if dist.get_rank() == rank:``) is
    the target rank, not this process's: left at a literal number, it is that number on every rank.
    Any other rank-named parameter left out keeps the seed its name gives it (stylegan2-pytorch's
    ``Trainer(rank=0)`` default is the process's rank, passed by a launcher not linted). After a
    ``*args``/``**kwargs`` spread the call may pass it: the name's own seed too."""
    spread = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
    out: dict[str, Val] = {}
    for p in params:
        if p in bound or p not in K.RANK_PARAMS:
            continue
        if spread:
            out[p] = Val(prank=K.RANK_PARAMS[p])
            continue
        d = param_default(func, p)
        if isinstance(d, ast.UnaryOp) and isinstance(d.op, ast.USub):
            d = d.operand
        if isinstance(d, ast.Constant) and isinstance(d.value, int) and not isinstance(d.value, bool) \
                and _compared_with_rank(func, p):
            out[p] = UNIFORM
    return out


def _compared_with_rank(func: ast.AST, param: str) -> bool:
    """Whether ``func`` compares ``param`` with a rank call (``dist.get_rank() == rank``)."""
    for n in ast.walk(func):
        if isinstance(n, ast.Compare) and len(n.comparators) == 1:
            sides = (n.left, n.comparators[0])
            if any(isinstance(x, ast.Name) and x.id == param for x in sides) and any(
                    isinstance(x, ast.Call) and terminal(x.func) in K.RANK_FUNCTIONS for x in sides):
                return True
    return False


def display_items(expr: Callable[[ast.expr], Val], node: ast.Call, params: list[str]) -> dict[str, Val]:
    """``{"param[i]": value}`` for each element of a list or tuple display passed whole to a
    parameter (``train_and_evaluate(rank, [net_g, net_d], [train_loader, eval_loader])``, as VITS
    does): inside, ``net_g, net_d = nets`` then takes each element's own value, so ``None`` passed
    on the other ranks in place of rank 0's ``eval_loader`` leaves ``train_loader`` uniform. Kept
    only where every call passes such a display (:func:`keep_display_items`)."""
    out: dict[str, Val] = {}
    if not any(isinstance(a, (ast.List, ast.Tuple)) for a in (*node.args, *(k.value for k in node.keywords))):
        return out
    pairs = [(params[i], a) for i, a in enumerate(node.args) if i < len(params)]
    if any(isinstance(a, ast.Starred) for a in node.args):
        pairs = pairs[:next(i for i, a in enumerate(node.args) if isinstance(a, ast.Starred))]
    pairs += [(k.arg, k.value) for k in node.keywords if k.arg is not None]
    for p, a in pairs:
        if isinstance(a, (ast.List, ast.Tuple)) and a.elts and not any(isinstance(e, ast.Starred) for e in a.elts):
            for i, e in enumerate(a.elts):
                out[f"{p}[{i}]"] = expr(e)
    return out


def keep_display_items(table: dict[str, Val], counts: dict[str, int], calls: int) -> None:
    """Drop from one callee's joined argument ``table`` the display items
    (:func:`display_items`) that not all of its ``calls`` passed (``counts``: key -> calls that
    passed it): a call passing a plain list leaves the items unknown, so the list's value holds."""
    for key in [k for k in table if is_display_item(k)]:
        if counts.get(key, 0) < calls:
            del table[key]


_DISPLAY_ITEM = re.compile(r"\w+\[\d+\]")


def held_items(env: dict[str, Val], key: str | None, n: int) -> list[Val] | None:
    """The values of the ``n`` display items (:func:`display_items`) ``key`` holds, or ``None``
    when it holds no such items (or another number of them)."""
    if key is None or f"{key}[{n}]" in env:
        return None
    held = [env.get(f"{key}[{i}]") for i in range(n)]
    return [v for v in held if v is not None] if all(v is not None for v in held) else None


def drop_items(env: dict[str, Val], key: str) -> None:
    """Forget the display items of ``key`` (it was bound anew)."""
    i = 0
    while f"{key}[{i}]" in env:
        del env[f"{key}[{i}]"]
        i += 1


def is_display_item(key: str) -> bool:
    """True for a key :func:`display_items` makes (``nets[0]``)."""
    return _DISPLAY_ITEM.fullmatch(key) is not None


def param_default(func: ast.AST, name: str) -> ast.expr | None:
    """The default of parameter ``name`` of the function ``func`` (``None``: none, or not a
    function): StyleGAN2-ADA's ``Logger(file_name=None, file_mode="w")`` opens the file in that
    mode unless told otherwise."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = func.args
    positional = a.posonlyargs + a.args
    for p, d in zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True):
        if p.arg == name:
            return d
    return next((d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if p.arg == name), None)


def arg_of(node: ast.Call, index: int, name: str) -> ast.expr | None:
    """The argument passed as keyword ``name`` or at position ``index`` (none past a ``*args``)."""
    for k in node.keywords:
        if k.arg == name:
            return k.value
    if 0 <= index < len(node.args) and not any(isinstance(a, ast.Starred) for a in node.args[: index + 1]):
        return node.args[index]
    return None


#: Receivers of ``.open(path, mode)`` that open files like the builtin: iopath's path manager
#: (``PathManager``, ``g_pathmgr``: detectron2, SlowFast, fvcore), fsspec, TensorFlow's gfile.
_PATH_MANAGERS = ("pathmgr", "pathmanager", "fsspec", "gfile")


def _path_manager(recv: ast.expr) -> bool:
    text = terminal(recv).lower()
    return any(m in text for m in _PATH_MANAGERS)


class IOMixin(ExprEval):
    """The IO half of the call classification (mixed into :class:`k8sddp.lint.calls.CallMixin`)."""

    func: FuncInfo
    silent: int
    param_io: set[tuple[str, str]]
    file_objects: set[str]
    mask: int
    many: ast.AST | None
    #: names bound under a rank guard: key -> (mask, many, the guarded value bound, the value
    #: before the guard's shape was put on it); see :meth:`note_guarded`
    guarded_at: dict[str, tuple[int, ast.AST | None, Val, Val]]

    def note_guarded(self, key: str, raw: Val, val: Val) -> Val:
        """Remember that ``key`` was bound to ``val`` (``raw`` before the guard's shape) under
        the current guard, or forget it (``val is raw``); returns ``val``. A write under that same
        guard reads the name as its ranks computed it (:meth:`arm_path_val`)."""
        if val is raw:
            self.guarded_at.pop(key, None)
        else:
            self.guarded_at[key] = (self.mask, self.many, val, raw)
        return val

    def arm_path_val(self, path: ast.expr, *more: ast.expr) -> Val:
        """The value of a write's ``path`` as the ranks that run the write compute it: a name
        bound under the guard the write is under (``if epoch % f == 0 and main_process():
        filename = save_path + str(epoch); torch.save(state, filename)``) holds, on each of those
        ranks, what they all computed alike, not the "differs between ranks" shape the guard puts
        on it for code after the branch. With ``more`` nodes: the join of all their values (a
        tracker's arguments)."""
        if not self.guarded_at:  # nothing bound under a guard here: the plain values
            return join(*(self.expr(p) for p in (path, *more))) if more else self.expr(path)
        swapped: dict[str, Val] = {}
        for n in (n for p in (path, *more) for n in ast.walk(p)):
            key = env_key(n) if isinstance(n, (ast.Name, ast.Attribute)) else None
            held = self.guarded_at.get(key) if key is not None else None
            if held is None or self.env.get(key) is not held[2]:  # type: ignore[arg-type]
                continue
            mask, many, _, raw = held
            if self.mask & ~mask == 0 and (many is None or many is self.many):
                swapped[key] = self.env[key]  # type: ignore[index]
                self.env[key] = raw  # type: ignore[index]
        try:
            return join(*(self.expr(p) for p in (path, *more)))
        finally:
            self.env.update(swapped)

    @abc.abstractmethod
    def emit(self, kind: str, op: str, node: ast.AST, **kw: object) -> None:
        """Record an event (see :class:`~k8sddp.lint.events.Event`); the walker defines it."""
        ...

    # -- IO ----------------------------------------------------------------------------------
    def io_call(self, node: ast.Call, q: str, last: str, recv_node: ast.expr | None, kws: dict[str | None, Val]) -> None:
        """Record file writes, tracker starts and file reads."""
        if q in K.SAFE_WRITERS or last in K.SAFE_WRITERS:
            if last == "save_on_master":  # writes on global rank 0 only: KDP512 still wants its barrier
                self.io_event("write0", last, node, arg_of(node, 1, "f"))
            return
        path: ast.expr | None = None
        if q == "logging.basicConfig":  # a log file only with filename= (SAM-Med3D, HAWQ)
            path = arg_of(node, -1, "filename")
            if path is not None:
                self.io_event("write", q, node, path)
            return
        if q in K.WRITE_CALLS:
            idx, name = K.WRITE_CALLS[q]
            path = arg_of(node, idx, name)
            if path is None and q in K.OPTIONAL_PATH_WRITERS:
                return  # timm's setup_default_logging() with no log_path opens no file
            if path is not None and (env_key(path) in self.file_objects or (
                    isinstance(path, ast.Call) and terminal(path.func) in K.FILE_OBJECT_CALLS)):
                return  # a file object or buffer: its open() is checked itself
            self.io_event("write", q, node, path)
            return
        if q in ("open", "io.open", "builtins.open", "codecs.open") or (last == "open" and recv_node is not None and (
                q.endswith("Path.open") or _path_manager(recv_node))):
            mode_node = arg_of(node, 1, "mode") if q != "Path.open" else arg_of(node, 0, "mode")
            if isinstance(mode_node, ast.Name) and mode_node.id in self.func.params:
                mode_node = param_default(self.func.node, mode_node.id)  # `open(file_name, file_mode)`
            mode = mode_node.value if isinstance(mode_node, ast.Constant) and isinstance(mode_node.value, str) else "r"
            path = arg_of(node, 0, "file")
            if path is not None and ast.unparse(path) in ("os.devnull", "'/dev/null'"):
                return
            writes = any(c in mode for c in "wax") or ("+" in mode and _updates_file(self.func.node, node))
            ckpt = writes and binary_write_open(node) and not _dumps_config(self.func.node, node)
            self.io_event("write" if writes else "read", "open", node, path, ckpt=ckpt)
            return
        if last in K.WRITE_METHODS_ARG and recv_node is not None:  # `fig.savefig(path)`
            self.io_event("write", last, node, arg_of(node, *K.WRITE_METHODS_ARG[last]))
            return
        if last in K.WRITE_METHODS and recv_node is not None:
            if last == "save_pretrained":
                path = arg_of(node, 0, "save_directory")
                if any(k.arg == "is_main_process" for k in node.keywords):  # written on the main process only
                    self.io_event("write0", last, node, path)
                    return
            elif last.startswith("to_"):
                path = arg_of(node, 0, "path_or_buf")
            else:
                path = recv_node
            self.io_event("write", last, node, path)
            return
        if q in K.TRACKER_CALLS or last == "SummaryWriter":
            path = arg_of(node, 0, "log_dir")
            given = [*node.args, *(k.value for k in node.keywords)]
            every = self.arm_path_val(*given) if given else UNIFORM  # as the guarded ranks compute them
            self.io_event("tracker", q or last, node, path, every)
            return
        if q in K.READ_CALLS:
            idx, name = K.READ_CALLS[q]
            self.io_event("read", q, node, arg_of(node, idx, name))
            return
        if last in K.READ_METHODS and recv_node is not None:
            path = recv_node if last.startswith("read_") else arg_of(node, 0, "pretrained_model_name_or_path")
            self.io_event("read", last, node, path)

    def io_event(self, kind: str, op: str, node: ast.Call, path: ast.expr | None, val: Val | None = None,
                 ckpt: bool = False) -> None:
        """Emit a file event for ``path`` (its value decides whether the name is per-rank);
        ``ckpt``: a binary open that writes a checkpoint (:attr:`~k8sddp.lint.events.Event.ckpt`)."""
        if isinstance(path, ast.Name) and path.id in self.func.params and kind in ("read", "write"):
            self.param_io.add((kind, path.id))
        if val is None:
            self.silent += 1
            try:
                val = self.arm_path_val(path) if path is not None else UNIFORM
            finally:
                self.silent -= 1
        self.emit(kind, op, node, path=path, path_val=val, ckpt=ckpt)


def _handle_of(scope: ast.AST, call: ast.Call) -> tuple[str | None, list[ast.stmt]] | None:
    """The name the file object of ``open`` call ``call`` is bound to in ``scope``, with the
    statements that can use it: a ``with`` item's name and its body, or ``f = open(...)`` and the
    whole of ``scope``; ``(None, [])`` when it is bound to no plain name; ``None`` when bound nowhere."""
    for n in ast.walk(scope):
        if isinstance(n, (ast.With, ast.AsyncWith)):
            item = next((i for i in n.items if i.context_expr is call), None)
            if item is not None:
                return (item.optional_vars.id, n.body) if isinstance(item.optional_vars, ast.Name) else (None, [])
        elif isinstance(n, ast.Assign) and n.value is call:
            if len(n.targets) != 1 or not isinstance(n.targets[0], ast.Name):
                return None, []
            body = getattr(scope, "body", [])
            return n.targets[0].id, body if isinstance(body, list) else []
    return None


def _updates_file(scope: ast.AST, call: ast.Call) -> bool:
    """For ``open(path, "r+")``: whether the file is written, not only read, through its handle
    (:func:`_handle_of`): ``f.write``/``writelines``/``truncate``, ``print(..., file=f)``, or passed
    to a ``dump``/``save`` (GFSLT-VLP's ``with open(args.config, 'r+') as f: config = yaml.load(f)``
    only reads). True when the handle is not bound to a name (a file object passed on)."""
    found = _handle_of(scope, call)
    if found is None or found[0] is None:
        return True
    f, body = found
    for m in (x for st in body for x in ast.walk(st)):
        if not isinstance(m, ast.Call):
            continue
        if isinstance(m.func, ast.Attribute) and isinstance(m.func.value, ast.Name) and m.func.value.id == f:
            if m.func.attr in ("write", "writelines", "truncate"):
                return True
        elif any(k.arg == "file" and isinstance(k.value, ast.Name) and k.value.id == f for k in m.keywords):
            return True  # print(..., file=f)
        elif (terminal(m.func) or "").endswith(("dump", "save")) and any(
                isinstance(a, ast.Name) and a.id == f for a in (*m.args, *(k.value for k in m.keywords))):
            return True
    return False


_CONFIG_WORDS = ("cfg", "config", "args", "hparams", "opt")


def _dumps_config(scope: ast.AST, call: ast.Call) -> bool:
    """Whether the handle ``call`` opens (:func:`_handle_of`) only has the configuration dumped
    into it (``with open(p, "wb") as f: cloudpickle.dump(cfg, f)``): a quick write, no checkpoint."""
    found = _handle_of(scope, call)
    if found is None or found[0] is None:
        return False
    f, body = found
    dumped = [m.args[0] for st in body for m in ast.walk(st) if isinstance(m, ast.Call) and len(m.args) > 1
              and any(isinstance(a, ast.Name) and a.id == f for a in m.args[1:])]
    return bool(dumped) and all(any(w in (env_key(d) or "").split(".")[-1].lower() for w in _CONFIG_WORDS)
                                for d in dumped)
