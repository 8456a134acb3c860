"""Call classification: what a call does to ranks, collectives and files.

A call is, in this order: a function of the linted project (followed through its summary), an
environment read of a rank variable, a rank source (``get_rank()``), a torch.distributed
collective, a distributed checkpoint, a DDP/FSDP wrap, a forward or backward through a wrapped
model, a framework method that is collective (``accelerator.wait_for_everyone()``), a known
helper (``reduce_dict``), a file write or read, or an ordinary call whose value is computed from
its arguments. Tables: :mod:`k8sddp.lint.knowledge`.
"""

from __future__ import annotations

import abc
import ast
import os
from typing import TYPE_CHECKING

from . import knowledge as K
from .calls_io import arg_of as _arg
from .calls_io import display_items, rank_defaults, ranked_attrs
from .calls_io import terminal as _terminal
from .closures import RAN, ClosureMixin, closure_mapping
from .collectives import CollectiveMixin
from .exprs import env_key
from .quiet import NOT_LITERAL, call_args, default_of, literal, quiet_call
from .scopes import needs_value
from .targets import TargetMixin
from .values import ALL, UNIFORM, Val, Z, join, substitute

if TYPE_CHECKING:
    from .events import Event, WriteSum
    from .host import Host
    from .project import FuncInfo, Module

__all__ = ["CallMixin"]

_PURE_METHODS = frozenset(
    {"format", "join", "replace", "get", "split", "rsplit", "strip", "lower", "upper", "zfill",
     "startswith", "endswith", "joinpath", "with_name", "with_suffix", "__truediv__"}
)
_RECV_METHODS = frozenset(
    {"to", "cuda", "cpu", "detach", "item", "float", "half", "bfloat16", "clone", "contiguous",
     "tolist", "numpy", "long", "int", "bool", "squeeze", "unsqueeze", "view", "reshape"}
)
_NO_VALUE_CALLS = frozenset(
    {"torch.device", "torch.cuda.set_device", "torch.cuda.device", "torch.manual_seed", "print",
     "torch.cuda.manual_seed", "random.seed", "numpy.random.seed", "logging.info", "isinstance",
     "hasattr", "callable", "id", "type", "torch.set_default_device"}
)
_MODEL_WORDS = ("model", "net", "module", "encoder", "decoder", "policy", "gpt", "transformer",
                "unet", "vae", "critic", "actor", "backbone", "llm", "classifier", "ddp")
_NOT_MODEL_WORDS = ("optim", "loader", "sched", "data", "opt")
_EXCLUDED_ROOTS = ("torch", "numpy", "jax", "tensorflow", "cupy", "math", "tqdm", "horovod", "scipy")
_FW_ROOTS = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "transformers", "torchrec")


def shown(f: FuncInfo) -> str:
    """How a call of ``f`` is named in a message: a constructor by its class (``Logger()``), an
    instance's ``__call__`` and a static or class method by their class too (``EarlyStopping.__call__()``)."""
    if f.cls and (f.name == "__call__" or any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                                              for d in getattr(f.node, "decorator_list", []))):
        return f"{f.cls}.{f.name}"  # `Logger.init()` called on its class
    return f.cls if f.name == "__init__" and f.cls else f.name


def _short(path: str) -> str:
    """``path`` relative to the working folder when it lies below it (messages)."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _none_default(node: ast.Call, f: FuncInfo, params: list[str], p: str, line: int) -> bool:
    """True when call ``node`` of ``f`` leaves parameter ``p`` at a default of ``None``, or
    passes a literal ``None`` (PET's ``evaluate(model, loader, device, epoch, None)`` for its
    ``vis_dir``), and ``f``'s write at ``line`` needs ``p`` (it sits under ``if p:``/``if p is
    not None:``, or after ``if p is None: return``): a path built from it is no path at this call.
    A ``None`` the callee replaces (SLRT's ``tag = ... if epoch != None else 'step_...'``,
    OpenOCR's ``if prefix is None: path = ...best.pth``) still makes a path."""
    if p not in params:
        return False
    d = _arg(node, params.index(p), p)
    if d is None:
        d = default_of(f.node, p)
    return isinstance(d, ast.Constant) and d.value is None and needs_value(f.node, p, line)


def _data_only(node: ast.expr) -> bool:
    name = (env_key(node) or "").split(".")[-1].lower()
    return any(w in name for w in ("loader", "optim", "sched")) and not any(w in name for w in _MODEL_WORDS)


def _model_like(node: ast.expr) -> bool:
    name = (env_key(node) or "").split(".")[-1].lower()
    return any(w in name for w in _MODEL_WORDS) and not any(w in name for w in _NOT_MODEL_WORDS)


class CallMixin(TargetMixin, CollectiveMixin, ClosureMixin):
    """The call half of the walker; see the module docstring."""

    an: Host
    events: list[Event]
    mask: int
    many: ast.AST | None
    cause: ast.AST | None
    silent: int
    uses_rank: bool
    param_io: set[tuple[str, str]]
    file_objects: set[str]
    instances: dict[str, tuple[Module, str]]
    fn_alias: dict[str, str]
    last_keys: tuple[ast.Call, tuple[tuple[str, Val], ...]] | None
    inits_pg: bool
    #: a name whose calls are recorded with the classes that make them (Analyzer.gate_mask)
    probe: str | None = None
    probe_hits: list[tuple[int, bool]]

    @abc.abstractmethod
    def emit(self, kind: str, op: str, node: ast.AST, **kw: object) -> None:
        """Record an event (see :class:`~k8sddp.lint.events.Event`)."""
        ...

    # -- project functions -------------------------------------------------------------------
    def project_call(self, node: ast.Call, f: FuncInfo, bound: bool) -> Val:
        """A call of project function ``f`` (``bound``: ``self`` is implicit): record the
        arguments for its parameters, emit its collectives as one event, and return its summary's
        value with the arguments' rank dependence substituted."""
        params = list(f.params)
        if bound and params:
            params = params[1:]
        mapping: dict[str, Val] = {}
        for i, arg_node in enumerate(node.args):
            if isinstance(arg_node, ast.Starred):
                break
            if i < len(params):
                mapping[params[i]] = self.expr(arg_node)
        for k in node.keywords:
            v = self.expr(k.value)
            if k.arg is not None:
                mapping[k.arg] = v
        mapping.update(rank_defaults(node, f.node, params, set(mapping)))  # `save_rank(text, path)`, rank=0
        mapping.update(ranked_attrs(self.env, node, params))  # `args.save_logs = is_master(args)`
        mapping.update(display_items(self.expr, node, params))  # `train(rank, [net_g, net_d], ...)`
        if f.parent is not None:  # a nested function: what this caller binds of its closure
            mapping.update(closure_mapping(self.env, f))
        self.an.record_call(f, mapping, self)
        summ = self.an.summaries.get(f.key)
        if summ is None:
            return UNIFORM
        if summ.runs:  # `gpu_timer(train_step)`: the helper calls what this call passes it
            mapping = {**mapping, **self.run_passed(node, f, params, summ)}
        args = call_args(node, f.node, params) if summ.sig or summ.ret_by is not None else {}
        off = bool(summ.quiet) and quiet_call(summ.quiet, args)  # `create_dataloader(rank=-1)`
        via: frozenset[str] = frozenset()
        if summ.fwd_via is not None:  # forwards of the models passed in: `evaluate(model.module)` runs none
            held = [p for p in summ.fwd_via if p in mapping and (mapping[p].wrapped or mapping[p].fw)]
            off = off or not held
            via = self.param_names(*(_arg(node, params.index(p), p) if p in params else None for p in held))
        if summ.sig and not off and not self.an.is_rank_zero_only(f):
            desc, line = summ.first
            where = f" at line {line}" if f.module is self.mod else f" ({f.module.path}:{line})"
            self.emit("coll", "+".join(summ.sig), node, detail=f"{shown(f)}(), which runs {desc}{where}",
                      callee=f.key, callee_args=tuple(args.items()), via=via)
        for p in summ.reads:
            arg = _arg(node, params.index(p), p) if p in params else None
            if arg is not None:
                self.emit("read", shown(f), node, path=arg, path_val=mapping.get(p))
        if summ.writes and not (bound and self.an.overridden(f)):  # `self.save()` a subclass overrides: which runs?
            # module code calling a function that runs collectives: a training entry point
            # (`main(args)`), whose writes to paths built from its parameters are judged in it
            entry = bool(summ.sig) and (isinstance(self.func.node, ast.Module) or f.key in self.an.launched)
            self.call_writes(node, f, params, mapping, summ.writes, entry)
        self.inits_pg = self.inits_pg or summ.init_pg
        # save_on_master is recorded by name; `if is_main_process(): eval_step()` (write_some) too
        if (summ.write0 and f.name != "save_on_master") or (summ.write_some and self.mask & Z and self.mask != ALL):
            self.io_event("write0", shown(f), node, None)
        ret = summ.ret
        if summ.ret_by is not None and (flag := literal(args.get(summ.ret_by[0]))) is not NOT_LITERAL:
            ret = summ.ret_by[1] if flag else summ.ret_by[2]  # `is_master(args)`: local=False
        elif summ.ret_items is not None:  # `ddp, rank, ... = compute_init()`: see tuple_parts
            self.last_items = (node, [substitute(v, mapping) for v in summ.ret_items])
        elif summ.ret_keys is not None:  # `info = get_ddp_info()`: lint/keyed.py
            self.last_keys = (node, tuple((k, substitute(v, mapping)) for k, v in summ.ret_keys))
        return substitute(ret, mapping)

    def call_writes(self, node: ast.Call, f: FuncInfo, params: list[str], mapping: dict[str, Val],
                    writes: tuple[WriteSum, ...], entry: bool = False) -> None:
        """The writes of project function ``f`` judged at this call: those to a path the call
        passes or one built from its parameters (always; but for an ``entry`` point, the
        latter as fixed paths), and its unguarded fixed-path writes when this call is under a
        rank guard (unguarded calls leave those to be reported inside ``f``). Each is a
        ``cwrite`` event at the call, naming ``f`` and the writer inside it."""
        guarded = self.mask != ALL or self.many is not None or self.cause is not None
        for ws in writes:
            if ws.param is not None:
                arg = _arg(node, params.index(ws.param), ws.param) if ws.param in params else None
                val = mapping.get(ws.param)
                if arg is None:  # not passed: the parameter's default (`filename="checkpoint.pth"`)
                    arg, val = default_of(f.node, ws.param), UNIFORM
                if arg is None or (isinstance(arg, ast.Constant) and arg.value is None):
                    continue  # no path: `save_results_path=None` not passed (contriever's evaluate_model)
                path: ast.expr | None = arg
            elif ws.val is not None and not entry:  # built from parameters: as this call's arguments make it
                if any(_none_default(node, f, params, p, ws.line) for p in ws.val.params):
                    continue  # `if save_results_path is not None: torch.save(..., f"{save_results_path}")`
                path, val = ws.path, substitute(ws.val, mapping)
            elif guarded:
                path, val = ws.path, ws.val or UNIFORM
            else:
                continue
            saved = self.mask, self.many
            self.mask &= ws.mask
            if ws.many and self.many is None:
                self.many = node
            try:
                where = f"line {ws.line}" if ws.module == self.mod.path else f"{_short(ws.module)}:{ws.line}"
                detail = ws.what if "() at " in ws.what else f"{ws.what}() at {where}"
                if ws.module != self.mod.path and "() at line " in detail:  # a line of ws.module
                    detail = detail.replace("() at line ", f"() at {_short(ws.module)}:", 1)
                self.emit("cwrite", shown(f), node, path=path, path_val=val, detail=detail, fenced=ws.fenced,
                          ckpt=ws.ckpt)
            finally:
                self.mask, self.many = saved

    def duck_writes(self, node: ast.Call, m: FuncInfo, args: list[Val], kws: dict[str | None, Val]) -> None:
        """``x.name(path)`` on a receiver of unknown class, where one project class alone defines
        a method ``name`` (``m``) that writes the path passed to it (TinyBERT's
        ``model_to_save.config.to_json_file(output_config_file)``): that write, judged here. Not
        for a receiver built from a project class that lacks ``name`` (a ``__getattr__`` proxy
        such as physicsnemo's ``RankZeroLoggingWrapper``, which runs the method on rank 0 only)."""
        summ = self.an.summaries.get(m.key)
        writes = tuple(ws for ws in summ.writes if ws.param is not None) if summ is not None else ()
        if not writes:
            return
        params = list(m.params[1:]) if m.cls and m.params else list(m.params)
        mapping = {p: v for p, v in zip(params, args, strict=False)}
        mapping.update((k, v) for k, v in kws.items() if k is not None)
        self.call_writes(node, m, params, mapping, writes)

    # -- the dispatcher ----------------------------------------------------------------------
    def call(self, node: ast.Call) -> Val:
        """Evaluate a call; see the module docstring for the order of the cases."""
        func = node.func
        if self.probe is not None and isinstance(func, ast.Name) and func.id == self.probe:
            self.probe_hits.append((self.mask, self.many is not None))  # Analyzer.gate_mask
        target, bound = self.resolve_target(func)
        if isinstance(func, ast.Name) and func.id in self.func.params:  # `closure()`: lint/closures.py
            self.note_run(func.id, self.mask, self.many is not None)
            pv = self.env.get(func.id)
            if target is None and (pv is None or not (pv.wrapped or pv.fw)):  # what the passed function returns
                vals = [self.expr(a) for a in node.args] + [self.expr(k.value) for k in node.keywords]
                return join(*vals, Val(params=frozenset({RAN.format(func.id)}))).data_only()
        if target is not None:
            if target.name == "save_on_master":  # the torchvision/DINO helper, linted or not
                self.io_event("write0", target.name, node, _arg(node, 1, "f"))
            return self.project_call(node, target, bound)
        recv_node = func.value if isinstance(func, ast.Attribute) else None
        callee_val = self.lookup(func) if isinstance(func, (ast.Name, ast.Attribute)) else None
        if callee_val is not None and not callee_val.wrapped:
            callee_val = None
        recv = self.expr(recv_node) if recv_node is not None and callee_val is None else None
        args = [self.expr(a) for a in node.args]
        kws = {k.arg: self.expr(k.value) for k in node.keywords}
        every = join(*args, *kws.values()) if (args or kws) else UNIFORM
        if isinstance(func, ast.Attribute) and not self.project_instance(recv_node) \
                and (m := self.an.unique_method(func.attr)) is not None:
            self.duck_writes(node, m, args, kws)  # `model.config.to_json_file(path)`
        q = self._dotted(func) or ""
        q = self.fn_alias.get(q, q)
        last = _terminal(func)

        if q in K.MODEL_RUNNERS and args and args[0].wrapped:  # `flop_count(model, inputs)` runs its forward
            self.emit("coll", "forward", node, detail=f"{q.split('.')[-1]}(), which runs a forward through the "
                      f"{args[0].wrapped.upper()}-wrapped model")
        if last in K.ITER_PASSTHROUGH and (q == last or q.split(".")[0] in ("tqdm", "builtins")) and args:
            return args[0].data_only()
        special = self.known_call(node, q, last, recv_node, recv, callee_val, args, kws)
        if special is not None:
            return special
        self.io_call(node, q, last, recv_node, kws)
        # ordinary calls: the value is computed from the receiver and (for functions) arguments;
        # a class reached through its module (`torch.utils.data.DataLoader(...)`) is a constructor
        if recv is not None and not (last[:1].isupper() and self.module_path(recv_node)):
            if last in _PURE_METHODS:
                return join(recv, every).data_only()
            if recv.wrapped and last in K.WRAPPED_KEEP_METHODS:  # `model = model.eval()`: still the wrapper
                return recv
            if last in _RECV_METHODS:
                return recv.data_only()
            out = recv.data_only()
            # a placement keyword says where the result lives, not what it is (RoseTTAFold2's
            # `torch.load(f, map_location={"cuda:0": "cuda:%d" % rank})` in a helper given the rank)
            placed = join(*args, *(v for k, v in kws.items() if k not in K.PLACEMENT_KWARGS)) if (args or kws) else UNIFORM
            return Val(out.rank, out.prank, out.params | placed.params, None, out.ddp_out or every.ddp_out)
        if q in _NO_VALUE_CALLS:
            return UNIFORM
        if last[:1].isupper() and last not in ("Path", "PurePath", "PosixPath"):
            return Val(ddp_out=every.ddp_out)
        if q not in K.VALUE_CALLS and last not in K.VALUE_CALLS:
            # a function the linter cannot see: a rank flag or a placement passed to it
            # (`verbose=rank == 0`, `device=local_rank`, an object only rank 0 built) says who
            # logs or where tensors live, not what the result is
            every = join(*(a for a in args if a.kind not in K.TEST_KINDS),
                         *(v for k, v in kws.items() if k not in K.PLACEMENT_KWARGS and v.kind not in K.TEST_KINDS))
        return every.data_only()

    def known_call(
        self, node: ast.Call, q: str, last: str, recv_node: ast.expr | None, recv: Val | None,
        callee_val: Val | None, args: list[Val], kws: dict[str | None, Val],
    ) -> Val | None:
        """Calls the knowledge tables recognise; ``None`` when none applies."""
        if recv is not None and recv.ddp_out and last in K.TENSOR_CONFIG_METHODS and not args:
            return UNIFORM  # `logits.dim()`: the model's, on every rank
        if q == "len" and len(args) == 1:  # how many layers, heads, samples: the same on every rank
            return Val(rank=args[0].rank, prank=args[0].prank, params=args[0].params)  # (DistributedSampler pads)
        # environment reads
        if q in ("os.environ.get", "os.getenv", "os.environ.setdefault") and node.args:
            return self.env_read(node.args[0])
        if q in K.UNIQUE_PER_PROCESS or last in ("uuid4", "uuid1"):  # differs on every rank (lhotse.utils.uuid4 too)
            return Val(rank="other")
        if q in K.CLOCK_READS:  # per-rank data: each rank reads its own clock (a name built from it is not per rank)
            return Val(ddp_out=True)
        # launchers: the target's first parameter is the process index
        if q in K.SPAWN_FUNCTIONS or (last in ("spawn", "start_processes") and "multiprocessing" in q):
            fn = _arg(node, 0, "fn")
            if isinstance(fn, ast.Name):
                f = self.an.project.resolve_function(self.mod, fn.id)
                if f is not None:
                    self.an.spawn_targets.add(f.key)
            return UNIFORM
        root = q.split(".")[0]
        is_torch_dist = q.startswith(K.TORCH_DIST_PREFIXES) and q.count(".") >= 2
        if q.startswith("horovod.") and last in ("rank", "local_rank", "cross_rank"):
            return Val(rank={"rank": "rank", "local_rank": "local"}.get(last, "other"))  # hvd.rank()
        if last in K.RANK_FUNCTIONS and root not in _EXCLUDED_ROOTS[1:]:
            if last == "get_rank" and (node.args or node.keywords):
                return Val(rank="other")
            if last == "is_primary" and any(k.arg == "local" for k in node.keywords):
                return Val(rank="lzero")  # timm: is_primary(args, local=True)
            return Val(rank=K.RANK_FUNCTIONS[last])
        if last in K.UNIFORM_FUNCTIONS:
            if last in ("is_initialized", "is_dist_avail_and_initialized", "is_torchelastic_launched") or (
                    last == "is_available" and is_torch_dist):  # ANCE's `not dist.is_available() or ...`
                return Val(distflag=1)
            return UNIFORM
        # torch.distributed collectives and point-to-point receives
        if is_torch_dist and q.split(".")[-2] in ("distributed", "distributed_c10d", "c10d"):
            if last in K.TORCH_COLLECTIVES:
                return self.torch_collective(node, last, kws)
            if last in ("recv", "irecv"):
                self.inplace(node, K.RANKED_INPLACE[last], "other")
            if last in ("init_process_group", "init_device_mesh"):
                self.inits_pg = True
                return UNIFORM
        if q in K.DCP_COLLECTIVES or (q.startswith("torch.distributed.checkpoint") and last in ("save", "load", "async_save")):
            self.emit("coll", "dcp." + last, node, detail=f"the distributed checkpoint call {q.replace('torch.distributed.checkpoint', 'dcp')}()")
            return UNIFORM
        owner = _terminal(node.func.value) if isinstance(node.func, ast.Attribute) else ""
        # `args.dist = torch.distributed`; a library's own package of them (torchshard: `ts.distributed.gather`)
        if owner in ("dist", "distributed") and not is_torch_dist and last in K.TORCH_COLLECTIVES:
            return self.torch_collective(node, last, kws, "" if owner == "dist" else ast.unparse(node.func))
        if (owner == "hvd" or q.startswith("horovod.")) and last in K.HOROVOD_COLLECTIVES:
            tag = _arg(node, -1, "name")  # `hvd.allreduce(torch.tensor(0), name="barrier")`: the barrier idiom
            named = isinstance(tag, ast.Constant) and "barrier" in str(tag.value)
            self.emit("coll", "barrier" if named else K.HOROVOD_COLLECTIVES[last], node,
                      detail=f"the Horovod collective {ast.unparse(node.func)}()")
            return UNIFORM
        if q.startswith(K.MPI_COMM_PREFIXES) and last in K.MPI_COLLECTIVES:
            self.emit("coll", "mpi." + last.lower(), node, detail=f"the MPI collective {q.removeprefix('mpi4py.')}()")
            return UNIFORM
        if q.startswith("deepspeed") and last == "init_distributed":
            self.inits_pg = True
        if q in K.DEEPSPEED_GATHERS:
            self.emit("coll", "zero-gather", node, detail=f"{q}() (it all-gathers the ZeRO-3 partitions)")
            return UNIFORM
        wrapper = q.rpartition(".")[2] if q else last  # `from apex.parallel import DistributedDataParallel as DDP`
        if q in K.DDP_WRAPPERS or q in K.FSDP_WRAPPERS or wrapper in ("DistributedDataParallel", "FullyShardedDataParallel"):
            kind = "fsdp" if (q in K.FSDP_WRAPPERS or wrapper == "FullyShardedDataParallel") else "ddp"
            self.emit("coll", kind + "-init", node, detail=f"the {kind.upper()} constructor (it broadcasts parameters from rank 0)")
            return Val(wrapped=kind)
        if q in K.FSDP_INPLACE or (last == "fully_shard" and (q == last or q.startswith("torch."))):
            self.emit("coll", "fsdp-init", node, detail="fully_shard()")
            if node.args:
                key = env_key(node.args[0])
                if key:
                    self.env[key] = Val(wrapped="fsdp")
            return Val(wrapped="fsdp")
        if q in ("torch.compile",) and args:
            return args[0]
        # forward through a wrapped model
        if callee_val is not None and callee_val.wrapped:
            self.emit("coll", "forward", node, detail=f"a forward through the {callee_val.wrapped.upper()}-wrapped "
                      f"model `{ast.unparse(node.func)}`", via=self.param_names(node.func))
            return Val(ddp_out=True)
        if recv is not None and recv.wrapped:
            if last == "forward":
                self.emit("coll", "forward", node, detail=f"a forward through the {recv.wrapped.upper()}-wrapped model",
                          via=self.param_names(recv_node))
                return Val(ddp_out=True)
            if recv.wrapped == "fsdp" and last in K.FSDP_COLLECTIVE_METHODS:
                self.emit("coll", "fsdp." + last, node, detail=f"FSDP {last}() (it all-gathers the shards)")
                return UNIFORM
            if recv.wrapped == "engine" and last in K.FRAMEWORK_COLLECTIVES["engine"]:
                self.emit("coll", "engine." + last, node, detail=f"the DeepSpeed engine's {last}()")
                return UNIFORM
        # backward of a loss computed through a wrapped model
        if last == "backward" and recv is not None and recv.ddp_out and recv.fw is None:
            self.emit("coll", "backward", node, detail="a backward through the DDP/FSDP-wrapped model (gradient all-reduce)")
            return UNIFORM
        if q == "torch.autograd.backward" and args and args[0].ddp_out:
            self.emit("coll", "backward", node, detail="a backward through the DDP/FSDP-wrapped model (gradient all-reduce)")
            return UNIFORM
        # frameworks
        fw = recv.fw if recv is not None else None
        if fw is None and recv_node is not None:
            fw = K.FRAMEWORK_NAMES.get(_terminal(recv_node))
        if fw in K.CHECKPOINTER_WRITES and last in K.CHECKPOINTER_WRITES[fw][1] and recv_node is not None:
            self.io_event(K.CHECKPOINTER_WRITES[fw][0], f"{ast.unparse(recv_node)}.{last}", node, None)
            return UNIFORM  # timm's saver.save_checkpoint(), detectron2's periodic_checkpointer.step()
        if fw == "accelerator" and last == "save":  # Accelerator.save writes on the main process only
            self.io_event("write0", "accelerator.save", node, _arg(node, 1, "f"))
            return UNIFORM
        if fw == "accelerator" and last == "prepare" and node.args and all(_data_only(a) for a in node.args):
            return UNIFORM  # `accelerator.prepare(train_loader)` (EDGE): loaders and optimizers alone wrap no model
        if fw and last in K.FRAMEWORK_COLLECTIVES.get(fw, frozenset()):
            op = "barrier" if last in ("wait_for_everyone", "barrier") else f"{fw}.{last}"
            recv_text = ast.unparse(recv_node) if recv_node is not None else fw
            self.emit("coll", op, node, detail=f"{recv_text}.{last}()")
            if last in ("prepare", "setup"):
                return Val(wrapped="ddp") if len(node.args) == 1 and _model_like(node.args[0]) else UNIFORM
            if last in ("setup_module", "prepare_model"):  # a model alone: Fabric's strategy / Accelerate's DDP
                return Val(wrapped="ddp") if node.args else UNIFORM
            return UNIFORM
        if isinstance(recv_node, ast.Name) and recv_node.id == "self" and self.an.is_lightning(self.func):
            if last == "all_gather":
                self.emit("coll", "all_gather", node, detail="self.all_gather()")
                return UNIFORM
            if last in ("log", "log_dict"):
                for k in node.keywords:
                    if k.arg == "sync_dist" and not (isinstance(k.value, ast.Constant) and not k.value.value):
                        self.emit("coll", "all_reduce", node, detail=f"self.{last}(..., sync_dist=True) (an all-reduce)")
        if last in K.CHECKPOINTER_CLASSES and (root in ("timm", "detectron2", "fvcore") or (q == last and last != "Checkpointer")):
            return Val(fw=K.CHECKPOINTER_CLASSES[last])
        if last in K.FRAMEWORK_CONSTRUCTORS and (q == last or root in _FW_ROOTS or root in ("L", "pl")):
            return Val(fw=K.FRAMEWORK_CONSTRUCTORS[last])
        if q == "deepspeed.initialize":
            self.emit("coll", "deepspeed.initialize", node, detail="deepspeed.initialize()")
            return Val(wrapped="engine", fw="engine")
        # well-known helpers copied between training repos, when their source is not linted
        if last in K.GENERIC_COLLECTIVE_HELPERS and self.helper_callee(node.func, q):
            self.emit("coll", K.GENERIC_COLLECTIVE_HELPERS[last], node, detail=f"{ast.unparse(node.func)}()")
            return UNIFORM if last in K.GENERIC_UNIFORM_HELPERS else join(*args).data_only()
        return None

    def module_path(self, node: ast.expr | None) -> bool:
        """True when ``node`` is an imported module's dotted name (``torch.utils.data``), not a
        local object's attribute chain."""
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name) and node.id in self.mod.aliases and node.id not in self.env \
            and node.id not in self.locals_

    def helper_callee(self, func: ast.expr, q: str) -> bool:
        """True when ``func`` names a helper function (not a method of some local object)."""
        if q.split(".")[0] in _EXCLUDED_ROOTS:
            return False
        last = _terminal(func)
        if isinstance(func, ast.Name):
            return True
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            if owner in self.env or owner in self.locals_ or owner == "self":
                return False
            if last == "synchronize":
                return owner in ("comm", "utils", "dist_utils", "misc", "distributed")
            return owner in self.mod.aliases
        return False

    def tuple_parts(self, node: ast.expr | None, n: int) -> list[Val] | None:
        """Element-wise values of a call that returns a tuple (``accelerator.prepare``,
        ``fabric.setup``, ``deepspeed.initialize``), or ``None``."""
        if not isinstance(node, ast.Call):
            return None
        if self.last_items is not None and self.last_items[0] is node and len(self.last_items[1]) == n:
            return self.last_items[1]  # a project function returning a tuple (project_call)
        last = _terminal(node.func)
        q = self._dotted(node.func) or ""
        kinds = K.TUPLE_RANK_HELPERS.get(last)
        if kinds is not None and len(kinds) == n:  # `args.local_rank, args.rank, _ = world_info_from_env()`
            return [Val(rank=k) if k else UNIFORM for k in kinds]
        if q == "deepspeed.initialize":
            return [Val(wrapped="engine", fw="engine")] + [UNIFORM] * (n - 1)
        recv_node = node.func.value if isinstance(node.func, ast.Attribute) else None
        if last in ("prepare", "setup") and recv_node is not None:
            self.silent += 1
            try:
                rv = self.expr(recv_node)
                fw = rv.fw or K.FRAMEWORK_NAMES.get(_terminal(recv_node))
                if fw not in ("accelerator", "fabric"):
                    return None
                out = []
                for i in range(n):
                    a = node.args[i] if i < len(node.args) else None
                    if a is None:
                        out.append(UNIFORM)
                    elif _model_like(a) or (fw == "fabric" and i == 0):
                        out.append(Val(wrapped="ddp"))
                    else:
                        out.append(self.expr(a).data_only())
                return out
            finally:
                self.silent -= 1
        return None
