"""KDP511 and KDP513: how a script sets up its device and its process group.

- KDP511: the CUDA device index comes from the global rank (``RANK``, ``dist.get_rank()``,
  ``SLURM_PROCID``) instead of the local rank. On one node they agree; on the second node rank 8
  asks for GPU 8 of an 8-GPU machine (``invalid device ordinal``), or two processes share a GPU.
  ``rank % torch.cuda.device_count()`` is a local index and fine. Accelerate's ``process_index``
  is global too (``device_map={"": Accelerator().process_index}``).
- KDP513: ``deepspeed.init_distributed()`` or a Lightning/Fabric strategy (``DDPStrategy``,
  ``FSDPStrategy``, ...) without ``timeout=``. The framework's default (1800 s) is explicit in its
  source, so this is a warning, not the KDP505 error of a bare ``init_process_group``.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from . import knowledge as K
from .events import Raw, at
from .project import Module, Project, dotted
from .treewalk import node_offset

__all__ = ["check_setup"]

_GLOBAL_RANK_ENV = frozenset({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
_DEVICE_CALLS = frozenset({"set_device", "set_device_index"})


def _env_read(node: ast.expr) -> str | None:
    """The variable name of ``os.environ["X"]``, ``os.environ.get("X", d)``, ``os.getenv("X")``."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and "environ" in ast.unparse(node.value):
        return node.slice.value if isinstance(node.slice.value, str) else None
    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "getenv")):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def _global_rank_source(node: ast.expr, names: set[str]) -> bool:
    """``int(os.environ["RANK"])``, ``dist.get_rank()`` (no group), or a name bound to one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int" and len(node.args) == 1:
        return _global_rank_source(node.args[0], names)
    if _env_read(node) in _GLOBAL_RANK_ENV:
        return True
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        text = ast.unparse(node.func)
        if text in ("dist.get_rank", "torch.distributed.get_rank", "get_rank"):
            return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and (node_offset(node.left) or node_offset(node.right)):
        return True  # `args.node_rank * args.gpus + gpu`: the global rank
    if isinstance(node, ast.Attribute) and node.attr == "process_index":
        return True  # Accelerate's Accelerator/PartialState: the global index (local_process_index is per node)
    return isinstance(node, (ast.Name, ast.Attribute)) and ast.unparse(node) in names


def _device_index(node: ast.Call, q: str) -> ast.expr | None:
    """The device index a call chooses: ``torch.cuda.set_device(i)``, ``torch.device("cuda", i)``,
    ``x.cuda(i)``, ``x.to(i)``, ``DistributedDataParallel(m, device_ids=[i])``, transformers'
    ``from_pretrained(..., device_map={"": i})``."""
    last = q.split(".")[-1] if q else (node.func.attr if isinstance(node.func, ast.Attribute) else "")
    if last in _DEVICE_CALLS and node.args:
        return node.args[0]
    if q == "torch.device" and len(node.args) == 2:
        return node.args[1]
    if isinstance(node.func, ast.Attribute) and node.func.attr in ("cuda", "to") and len(node.args) == 1:
        return node.args[0]
    for k in node.keywords:
        if k.arg == "device_ids" and isinstance(k.value, ast.List) and len(k.value.elts) == 1:
            return k.value.elts[0]
        if k.arg == "device_map" and isinstance(k.value, ast.Dict) and len(k.value.values) == 1:
            return k.value.values[0]  # `from_pretrained(..., device_map={"": index})`: the whole model there
    return None


def _percent_index(node: ast.BinOp) -> ast.expr | None:
    """``i`` of ``"cuda:%d" % i``."""
    if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str) \
            and node.left.value.endswith("cuda:%d") and isinstance(node.right, (ast.Name, ast.Attribute)):
        return node.right
    return None


def _shadowed(mod: Module, node: ast.AST, index: ast.expr, given: set[str]) -> bool:
    """``index`` is a name the innermost function around ``node`` takes as a parameter, one no
    call in the file passes the global rank: the name read there is that parameter, not a
    same-named global rank bound in another function."""
    if not isinstance(index, ast.Name):
        return False
    line = getattr(node, "lineno", 0)
    around = [f for f in mod.all_functions() if isinstance(f.node, (ast.FunctionDef, ast.AsyncFunctionDef))
              and f.node.lineno <= line <= (f.node.end_lineno or f.node.lineno)]
    if not around:
        return False
    inner = max(around, key=lambda f: f.node.lineno if isinstance(f.node, ast.FunctionDef | ast.AsyncFunctionDef) else 0)
    return index.id in inner.params and index.id not in given


def _fstring_index(node: ast.JoinedStr) -> ast.expr | None:
    """``i`` of ``f"cuda:{i}"``."""
    parts = node.values
    for a, b in zip(parts, parts[1:], strict=False):
        if isinstance(a, ast.Constant) and str(a.value).endswith("cuda:") and isinstance(b, ast.FormattedValue):
            return b.value
    return None


def _params_given_global_rank(mod: Module, nodes: Sequence[ast.AST]) -> set[str]:
    """Parameters of this module's functions that a call here passes the global rank
    (conditional-flow-matching's ``train(rank=int(os.getenv("RANK", 0)), ...)`` under torchrun,
    whose body then calls ``.to(rank)``)."""
    out: set[str] = set()
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in mod.functions):
            continue
        params = mod.functions[node.func.id].params
        given = [(params[i], a) for i, a in enumerate(node.args) if i < len(params) and not isinstance(a, ast.Starred)]
        given += [(k.arg, k.value) for k in node.keywords if k.arg is not None]
        out |= {p for p, a in given if _global_rank_source(a, set())}
    return out


def _returned_global_ranks(project: Project | None, mod: Module, node: ast.Assign) -> set[str]:
    """The names ``a, b, c = setup(...)`` binds to the global rank, where ``setup`` is a project
    function whose every ``return`` is a tuple holding, at that position, a global rank source or
    a name its body binds once to one (EfficientMoE's ``rank, device, seed = setup_ddp0(cfg)``,
    returning ``rank = dist.get_rank()``); also ``rank = setup()`` where every ``return`` is one."""
    target, call = node.targets[0], node.value
    if project is None or not isinstance(target, (ast.Tuple, ast.Name)) or not isinstance(call, ast.Call) \
            or not isinstance(call.func, ast.Name) or (isinstance(target, ast.Name) and "rank" not in target.id.lower()):
        return set()  # (a single name is followed only when it says rank: most `x = f()` are not)
    f = project.resolve_function(mod, call.func.id)
    if f is None:
        return set()
    bound: dict[str, list[ast.expr]] = {}
    for a in ast.walk(f.node):
        if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name):
            bound.setdefault(a.targets[0].id, []).append(a.value)
    ranks = {n for n, vs in bound.items() if len(vs) == 1 and _global_rank_source(vs[0], set())}
    rets = [r.value for r in ast.walk(f.node) if isinstance(r, ast.Return)]
    if isinstance(target, ast.Name):  # `rank = setup()`, returning `rank = dist.get_rank()`
        ok = bool(rets) and all(r is not None and _global_rank_source(r, ranks) for r in rets)
        return {target.id} if ok else set()
    if not rets or any(not isinstance(r, ast.Tuple) or len(r.elts) != len(target.elts) for r in rets):
        return set()
    return {ast.unparse(t) for i, t in enumerate(target.elts)
            if all(_global_rank_source(r.elts[i], ranks) for r in rets if isinstance(r, ast.Tuple))}


def _strategy_subclass(project: Project | None, mod: Module, func: ast.expr, depth: int = 3) -> bool:
    """``ApexDDPStrategy(...)`` (earth-forecasting-transformer): a project class derived from a
    framework strategy (:data:`~k8sddp.lint.knowledge.FRAMEWORK_PG_SETUP`), directly or through
    project classes (``depth`` deep), none of which has an ``__init__`` naming ``timeout``: it
    takes the strategy's default timeout as its base does."""
    if project is None or not isinstance(func, ast.Name) or (found := project.resolve_class(mod, func.id)) is None:
        return False
    cmod, cls = found
    init = cmod.classes[cls].get("__init__")
    if init is not None and "timeout" in ast.unparse(init.node):
        return False
    for b in cmod.class_bases.get(cls, []):
        if b.split(".")[-1] in K.FRAMEWORK_PG_SETUP - {"init_distributed"}:
            return True
        if depth > 1 and "." not in b and _strategy_subclass(project, cmod, ast.Name(id=b), depth - 1):
            return True  # `class Derived(Base)`, `class Base(DDPStrategy)`
    return False


def check_setup(mod: Module, nodes: Sequence[ast.AST], project: Project | None = None) -> list[Raw]:
    """KDP511/513 findings of one module; ``nodes`` are its calls, f-strings and assignments;
    ``project`` resolves the module's calls of project functions (the global rank they return)."""
    out: list[Raw] = []
    src = mod.source
    names: set[str] = set()
    given: set[str] = set()
    if "RANK" in src or "get_rank" in src or "PROCID" in src or project is not None:
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and _global_rank_source(node.value, set()):
                names.add(ast.unparse(node.targets[0]))
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                names |= _returned_global_ranks(project, mod, node)
        given = _params_given_global_rank(mod, nodes)
        names |= given
    for node in nodes:
        if isinstance(node, ast.JoinedStr):
            index = _fstring_index(node)
        elif isinstance(node, ast.BinOp):
            index = _percent_index(node)
        elif isinstance(node, ast.Call):
            q = dotted(node.func, mod.aliases) or ""
            last = q.split(".")[-1]
            if (last in K.FRAMEWORK_PG_SETUP and (q.startswith(("deepspeed", "lightning", "pytorch_lightning", "L.", "pl."))
                                                  or q == last and last != "init_distributed")) \
                    or _strategy_subclass(project, mod, node.func):
                if not any(k.arg == "timeout" or k.arg is None for k in node.keywords):
                    what = "deepspeed.init_distributed()" if last == "init_distributed" else f"{last}()"
                    out.append(at("KDP513", node,
                                  f"{what} has no timeout=: the framework's default (1800 s) bounds every "
                                  "collective and is invisible here; pass timeout=datetime.timedelta(seconds=...) "
                                  "(K8SDDP_PG_TIMEOUT_SECONDS, default 1800)"))
                continue
            index = _device_index(node, q)
        else:
            continue
        if index is not None and _global_rank_source(index, names) and not _shadowed(mod, node, index, given):
            out.append(at("KDP511", node,
                          f"the CUDA device index `{ast.unparse(index)}` is the global rank: on the second node it "
                          "names a GPU the node does not have (or one another process uses); use LOCAL_RANK "
                          "(or `rank % torch.cuda.device_count()`)"))
    return out
