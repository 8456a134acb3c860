"""KDP505, KDP507-KDP509: call-site rules that need no data flow.

- KDP505: ``init_process_group`` without ``timeout=``: the default differs by backend (10 min
  NCCL, 30 min gloo; torch.distributed.constants) and is invisible in the script. Fixable.
- KDP507: a ``DataLoader`` in a file that trains on GPUs without ``pin_memory=True``.
- KDP508: a ``DataLoader`` with workers but without ``persistent_workers=True``: every epoch
  re-forks the workers.
- KDP509: a shuffling ``DistributedSampler`` whose epoch loop never calls ``set_epoch``: every
  epoch sees the same order (torch.utils.data.distributed.DistributedSampler docstring).
"""

from __future__ import annotations

import ast
import re

from . import knowledge as K
from .branches import fact_flag
from .events import Raw, at
from .project import Module, Project, dotted
from .rules_setup import check_setup
from .samplers import escape_of, escaped_without_set_epoch
from .treewalk import parents, walk, walk_lean

__all__ = ["check_misc"]

_EVAL_WORDS = ("val", "eval", "test", "valid", "dev")


def _kw(node: ast.Call, name: str, index: int = -1) -> ast.expr | None:
    for k in node.keywords:
        if k.arg == name:
            return k.value
    if 0 <= index < len(node.args):
        return node.args[index]
    return None


def _has_star_kwargs(node: ast.Call) -> bool:
    return any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args)


def _dict_keys(name: str, tree: ast.AST, depth: int = 0) -> dict[str, ast.expr] | None:
    """The keys a dict variable is built with in the module (``kw = {"num_workers": 2}``,
    ``kw = dict(...)``, ``kw.update(other)``), or ``None`` when it is built some other way."""
    out: dict[str, ast.expr] = {}
    found = False
    for node in walk(tree):
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and ast.unparse(node.targets[0]) == name:
            value, found = node.value, True
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
              and ast.unparse(node.func.value) == name and len(node.args) == 1):
            value = node.args[0]
        if value is None:
            continue
        if isinstance(value, ast.Dict) and all(isinstance(k, ast.Constant) for k in value.keys):
            out.update({str(k.value): v for k, v in zip(value.keys, value.values, strict=True)
                        if isinstance(k, ast.Constant)})
        elif isinstance(value, ast.Call) and ast.unparse(value.func) == "dict" and not value.args:
            out.update({k.arg: k.value for k in value.keywords if k.arg is not None})
        elif isinstance(value, ast.Name) and depth < 3:
            inner = _dict_keys(value.id, tree, depth + 1)
            if inner is None:
                return None
            out.update(inner)
        else:
            return None
    return out if found else None


def _effective(node: ast.Call, tree: ast.AST) -> tuple[ast.Call, bool]:
    """``node`` with its ``**kw`` dicts spelled out where the module builds them from literals;
    and whether every starred argument was resolved."""
    if not _has_star_kwargs(node):
        return node, True
    keywords = [k for k in node.keywords if k.arg is not None]
    resolved = not any(isinstance(a, ast.Starred) for a in node.args)
    for k in node.keywords:
        if k.arg is None:
            keys = _dict_keys(ast.unparse(k.value), tree) if isinstance(k.value, (ast.Name, ast.Attribute)) else None
            if keys is None:
                resolved = False
                continue
            keywords.extend(ast.keyword(arg=name, value=v) for name, v in keys.items())
    return ast.Call(func=node.func, args=node.args, keywords=keywords), resolved


def _is_const(node: ast.expr | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value == value and type(node.value) is type(value)


def _parents(mod: Module) -> dict[ast.AST, ast.AST]:
    """Each node of ``mod`` -> its parent."""
    return parents(mod.tree, mod.nodes())


def _assigned_name(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str | None:
    p = parents.get(node)
    while isinstance(p, ast.IfExp):  # sampler = DistributedSampler(ds) if distributed else None
        node, p = p, parents.get(p)
    if isinstance(p, ast.Assign) and len(p.targets) == 1 and p.value is node:
        return ast.unparse(p.targets[0])
    if isinstance(p, (ast.AnnAssign,)) and p.value is node:
        return ast.unparse(p.target)
    return None


def check_misc(mod: Module, project: Project) -> list[Raw]:
    """KDP505/507/508/509 findings of one module."""
    out: list[Raw] = []
    src = mod.source
    misc = any(w in src for w in ("init_process_group", "DataLoader", "DistributedSampler"))
    setup = any(m in src for m in ("cuda", "device", "init_distributed", "Strategy"))
    if not misc and not setup:
        return out
    # one walk for every rule of this module: the calls, f-strings and assignments it holds
    nodes = [n for n in mod.nodes() if isinstance(n, (ast.Call, ast.JoinedStr, ast.Assign))
             or (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and isinstance(n.left, ast.Constant))]
    if setup:
        out.extend(check_setup(mod, nodes, project))
    if not misc:
        return out
    gpu = any(m in src for m in K.GPU_MARKERS)
    parents = _parents(mod) if any(w in src for w in ("DataLoader", "DistributedSampler")) else {}
    samplers: list[tuple[ast.Call, str | None]] = []
    loaders: dict[str, ast.Call] = {}
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        own, sub = "", None  # a project subclass of DataLoader: its __init__'s source
        q = dotted(node.func, mod.aliases) or ""
        last = q.split(".")[-1]
        if last == "init_process_group" and (q == last or q.startswith("torch.distributed")):
            if not _has_star_kwargs(node) and _kw(node, "timeout", 2) is None:
                out.append(at("KDP505", node,
                              "init_process_group() has no timeout=: every collective then waits the "
                              "backend's hidden default (10 min NCCL, 30 min gloo) before a hang fails; "
                              "pass timeout=datetime.timedelta(seconds=...) (K8SDDP_PG_TIMEOUT_SECONDS, "
                              "default 1800)", fix=("timeout", node)))
        elif (last in K.DATALOADER_DROP_INS and (q == last or q.startswith(K.DATALOADER_MODULES)
                                                 or "torch_geometric" in q.split("."))  # mace vendors PyG's loader
              or (sub := _loader_subclass(mod, project, node.func)) is not None):
            own = sub or ""
            name = _assigned_name(node, parents)
            if name:
                loaders[name] = node
            if _single_process_arm(node, parents):
                continue
            call, resolved = _effective(node, mod.tree)
            pin = _kw(call, "pin_memory", 7)
            if gpu and resolved and (pin is None or _is_const(pin, False)) and "pin_memory" not in own:
                out.append(at("KDP507", node,
                              "DataLoader feeding GPU training has no pin_memory=True: host-to-device "
                              "copies are synchronous and slower"))
            # an explicit num_workers decides; a persistent_workers hidden in an unknown **dict is rare
            workers = _kw(call, "num_workers", 5)
            persistent = _kw(call, "persistent_workers")
            if (last != "MultiEpochsDataLoader" and workers is not None and not _is_const(workers, 0)
                    and (persistent is None or _is_const(persistent, False)) and "persistent_workers" not in own):
                out.append(at("KDP508", node,
                              "DataLoader with worker processes has no persistent_workers=True: the "
                              "workers are killed and forked again every epoch "
                              "(use persistent_workers=num_workers > 0 when it can be 0)"))
        elif last == "DistributedSampler" and (q == last or q.startswith("torch.utils.data")):
            shuffle = _kw(node, "shuffle", 3)
            if shuffle is not None and not _is_const(shuffle, True) and not isinstance(shuffle, ast.Name):
                continue  # a Name: shuffling when it is a helper's parameter its callers set (samplers.py)
            samplers.append((node, _assigned_name(node, parents)))
    if samplers:
        out.extend(_check_set_epoch(mod, project, samplers, loaders, parents))
    return out


def _check_set_epoch(
    mod: Module, project: Project, samplers: list[tuple[ast.Call, str | None]],
    loaders: dict[str, ast.Call], parents: dict[ast.AST, ast.AST],
) -> list[Raw]:
    receivers = _epoch_receivers(mod)
    out: list[Raw] = []
    for node, name in samplers:
        holder = None
        parent = parents.get(node)
        if isinstance(parent, ast.keyword):
            call = parents.get(parent)
            if isinstance(call, ast.Call):
                holder = _assigned_name(call, parents)
        names = {n for n in (name, holder) if n}
        if name:
            names |= {ln for ln, call in loaders.items() if any(
                k.arg == "sampler" and ast.unparse(k.value) == name for k in call.keywords)}
        label = " ".join([*names, ast.unparse(node.args[0]) if node.args else "", _enclosing_def(node, parents)]).lower()
        if any(re.search(rf"(^|[^a-z]){w}", label) for w in _EVAL_WORDS):
            continue
        esc = escape_of(node, _kw(node, "shuffle", 3), names, parents)
        if esc is not None:  # returned to the callers: judged there
            if escaped_without_set_epoch(project, mod, esc, lambda m, ns: _sets_epoch(m, project, ns)):
                out.append(at("KDP509", node,
                              "DistributedSampler shuffles, but the callers of the function that "
                              "returns it never call set_epoch(epoch) on it: every epoch sees the same order"))
            continue
        if not names or (shuffle := _kw(node, "shuffle", 3)) is not None and not _is_const(shuffle, True):
            continue
        held = holder or (name and any(isinstance(k, ast.keyword) and k.arg == "sampler" and isinstance(k.value, ast.Name)
                                       and k.value.id == name for k in mod.nodes()))
        if held and any(r.endswith(".sampler") for r in receivers):
            continue  # a loader holds it, and the module sets the epoch through some loader's .sampler
        if not _sets_epoch(mod, project, names, receivers):
            out.append(at("KDP509", node,
                          f"DistributedSampler `{name or holder}` shuffles, but no epoch loop calls "
                          "set_epoch(epoch) on it: every epoch sees the same order"))
    return out


def _loader_subclass(mod: Module, project: Project, func: ast.expr, hops: int = 3) -> str | None:
    """When ``func`` names a project class that subclasses a ``DataLoader`` and says so in its name
    (YOLOP's ``DataLoaderX`` adding a background prefetch thread, ReLoRA's ``SkipDataLoader``;
    only such names are resolved, which keeps other calls cheap), the source of its
    ``__init__`` ("" without one: the loader's own keywords decide); else ``None``. An ``__init__``
    that names ``pin_memory`` or ``persistent_workers`` sets them itself."""
    name = func.id if isinstance(func, ast.Name) and "loader" in func.id.lower() else None  # cheap first
    found = project.resolve_class(mod, name) if name else None
    while found is not None and hops > 0:
        where, cname = found
        bases = where.class_bases.get(cname, [])
        if any(b.split(".")[-1] in K.DATALOADER_DROP_INS for b in bases):
            init = where.classes[cname].get("__init__")
            return ast.unparse(init.node) if init is not None else ""
        plain = [b for b in bases if "." not in b]
        found = project.resolve_class(where, plain[0]) if plain else None
        hops -= 1
    return None


def _single_process_arm(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """``node`` sits in the arm of an ``if`` on a distributed-mode flag that distributed runs never
    take (equiformer's ``if args.distributed: ... DataLoader(sampler=...) else: DataLoader(shuffle=True)``):
    the loader there feeds a single-process run, not a rank (flags named as
    :data:`~k8sddp.lint.knowledge.DIST_FLAG_NAMES`, :func:`~k8sddp.lint.branches.fact_flag`)."""
    child, up = node, parents.get(node)
    while up is not None and not isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        if isinstance(up, ast.If) and child is not up.test:
            flag = fact_flag({}, up.test)
            if flag and (flag == -1) == (child in up.body):
                return True
        child, up = up, parents.get(up)
    return False


def _enclosing_def(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """The name of the function ``node`` is in (``get_valid_dataloader``: an evaluation
    sampler, as its name says), or ``""``."""
    p = parents.get(node)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
        p = parents.get(p)
    return p.name if p is not None else ""


def _epoch_receivers(mod: Module) -> set[str]:
    """The receivers of every ``.set_epoch(...)`` call in ``mod`` (``sampler``, ``loader.sampler``)."""
    return {ast.unparse(n.func.value) for n in mod.nodes()
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "set_epoch"}


def _sets_epoch(mod: Module, project: Project, names: set[str], receivers: set[str] | None = None) -> bool:
    """True when ``set_epoch`` is called in ``mod`` on one of ``names`` (or its ``.sampler``, or on
    a bare ``sampler``), or one of them is passed to a project function or class that calls it."""
    rs = _epoch_receivers(mod) if receivers is None else receivers
    names = _holders(mod, names)
    if any(r in names or (r.endswith(".sampler") and r[: -len(".sampler")] in names) or r == "sampler" for r in rs):
        return True
    return _passed_to_set_epoch(mod, project, names)


def _holders(mod: Module, names: set[str], rounds: int = 2) -> set[str]:
    """``names`` and what holds them in ``mod``: a loader built with ``sampler=`` one of them, a
    name bound to one of them, to its ``.sampler``, or to a choice between them (HRNet's ``current_trainloader =
    trainloader if ... else extra_trainloader`` ... ``current_trainloader.sampler.set_epoch``)."""
    out = set(names)
    for _ in range(rounds):
        for n in mod.nodes():
            # a list it is appended to, and the loop variables over that list (LaBraM's
            # `sampler_train_list.append(sampler_train)` ... `for dataset, sampler in zip(..., sampler_train_list)`)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append" \
                    and isinstance(n.func.value, ast.Name) and any(isinstance(a, ast.Name) and a.id in out for a in n.args):
                out.add(n.func.value.id)
            elif isinstance(n, ast.For) and any(isinstance(x, ast.Name) and x.id in out for x in ast.walk(n.iter)):
                out |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
                continue
            v = n.value
            held = (isinstance(v, ast.Call) and any(k.arg == "sampler" and ast.unparse(k.value) in out for k in v.keywords)) \
                or (isinstance(v, (ast.Name, ast.IfExp, ast.BoolOp))
                    and any(isinstance(x, ast.Name) and x.id in out for x in ast.walk(v))) \
                or (isinstance(v, ast.Attribute) and v.attr == "sampler" and ast.unparse(v.value) in out)
            if held:
                out.add(n.targets[0].id)
    return out


def _calls_set_epoch(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "set_epoch" for n in walk_lean(node))


def _passed_to_set_epoch(mod: Module, project: Project, names: set[str]) -> bool:
    """True when one of ``names`` is passed to a project function whose body calls set_epoch, or
    to a project class one of whose methods does (the multinode tutorial's ``Trainer(loader)``
    stores it as ``self.train_data`` and calls ``self.train_data.sampler.set_epoch(epoch)``)."""
    for node in mod.nodes():
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):  # `tools.train(..., train_sampler=...)`
            target = project.resolve_module_alias(mod, func.value.id)
            f = project.resolve_function(target, func.attr) if target is not None else None
            passed = [ast.unparse(a) for a in node.args] + [ast.unparse(k.value) for k in node.keywords]
            if f is not None and set(passed) & names and _calls_set_epoch(f.node):
                return True
            continue
        if not isinstance(func, ast.Name):
            continue
        passed = [ast.unparse(a) for a in node.args] + [ast.unparse(k.value) for k in node.keywords]
        if not set(passed) & names:
            continue
        f = project.resolve_function(mod, func.id)
        if f is not None and _calls_set_epoch(f.node):
            return True
        cls = project.resolve_class(mod, func.id) if f is None else None
        if cls is not None and any(_calls_set_epoch(m.node) for m in cls[0].classes[cls[1]].values()):
            return True
    return False
