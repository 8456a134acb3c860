"""Zero-code mode: guard an unchanged ``train.py`` (or ``-m module``) under ``k8sddp launch``.

Injection (``docs/runtime.md``, "Zero-code mode"): the launcher puts
``k8sddp/runtime/_bootstrap`` first on ``PYTHONPATH`` and sets ``K8SDDP_AUTOGUARD_ARM`` to the
command's target (``script:<path>`` or ``module:<name>``). Every Python process that starts with
that environment imports the bootstrap's ``sitecustomize`` (``site`` does, before ``__main__``);
it returns at once unless all of these hold, so DataLoader workers, spawned children, compile
workers and pip are never armed:

* ``K8SDDP_AUTOGUARD_ARM`` is set, and torchrun's worker variables ``TORCHELASTIC_RUN_ID``,
  ``LOCAL_RANK`` and ``RANK`` are there (torch/distributed/elastic/agent/server/api.py);
* the interpreter's own command line (``sys.orig_argv``) runs exactly the target: the script's
  real path, or ``-m`` and the module (a ``multiprocessing`` spawn child runs ``-c ...``);
* then :func:`bootstrap` removes ``K8SDDP_AUTOGUARD_ARM`` from ``os.environ`` before the script
  runs, so nothing the script starts (subprocesses, spawn children) can arm again, and forked
  children (DataLoader workers) drop the inherited registrations (``os.register_at_fork``).

Armed, it starts a :class:`~k8sddp.runtime.guard.Guard` (signals, watchdog, hard stop, start
record, exception/exit records) without importing torch, and installs an import hook that
patches torch modules right after they are first executed (so ``torch.distributed``'s ``from
.distributed_c10d import *`` already re-exports the wrapped ``init_process_group``):

==================================  ==============================================================
``torch.optim.optimizer``           ``register_optimizer_step_post_hook`` (torch's global hook):
                                    a ``step`` beat after every optimizer step; the step number is
                                    the highest step count of any optimizer
``torch.utils.data.dataloader``     ``_BaseDataLoaderIter.__next__``: a ``data`` beat before each
                                    batch, a ``step`` beat after it (gradient accumulation beats
                                    per micro-batch)
``torch.amp.grad_scaler``           ``GradScaler.update``: a ``step`` beat (a step skipped for
                                    inf/NaN gradients runs no optimizer hook, but still updates)
``torch.serialization``             ``save``: phase ``checkpoint`` around every ``torch.save``
``torch.distributed.distributed_c10d`` ``init_process_group``: ``timeout`` from
                                    ``K8SDDP_PG_TIMEOUT_SECONDS`` when the caller passes none (a
                                    framework's own timeout wins; both recorded)
==================================  ==============================================================

torch has no global hook before or after a collective (only per-model DDP communication hooks
and NCCL-only work hooks), so collectives get no beats of their own: a rank waiting in one is
seen by its last beat (the optimizer step or batch before). Until the first optimizer step the
phase stays ``init`` (its budget is ``max(pg timeout, watchdog timeout)``: model building,
``torch.compile``, the first step).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .. import guardvars as gv
from .guard import Guard

#: Set by ``k8sddp launch`` for the workers: ``script:<path>`` or ``module:<name>``.
ARM = "K8SDDP_AUTOGUARD_ARM"
#: Folder holding the injected ``sitecustomize.py``.
BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"
#: torchrun's per-worker variables (torch/distributed/elastic/agent/server/api.py).
WORKER_VARS = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK")

_guard: Guard | None = None
#: Phases a batch or scaler beat may switch between; inside any other phase (``eval``,
#: ``checkpoint``, a script's own) such beats keep that phase and its budget.
_STEP_PHASES = ("init", "data", "step", "hook")


def current() -> Guard | None:
    """The zero-code guard of this process, or ``None`` when it is not armed."""
    return _guard


def torchrun_start(command: Sequence[str]) -> int | None:
    """Index of the first of torchrun's own arguments in ``command`` (after ``torchrun`` or
    ``python -m torch.distributed.run``), or ``None`` when the command is not torchrun."""
    return next((i + 1 for i, a in enumerate(command) if Path(a).name == "torchrun" or a == "torch.distributed.run"), None)


def target_of(command: Sequence[str]) -> str | None:
    """What a torchrun command runs: ``script:<path>``, ``module:<name>``, or ``None`` when it is
    not torchrun, uses ``--no-python``, or runs ``k8sddp train`` (the Task loop guards itself).

    Only torchrun's own arguments are read: the first ``-m MODULE`` or ``*.py`` after the torchrun
    executable (``torchrun`` or ``python -m torch.distributed.run``) is the target.
    """
    args = list(command)
    begin = torchrun_start(args)
    if begin is None:
        return None
    for i in range(begin, len(args)):
        arg = args[i]
        if arg in ("--no-python", "--no_python"):
            return None
        if arg == "-m" or arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            module = args[i + 1] if arg == "-m" and i + 1 < len(args) else arg[2:]
            if not module:
                return None
            if module == "k8sddp" and args[i + 2:i + 3] == ["train"]:
                return None
            return f"module:{module}"
        if arg.endswith(".py") and not arg.startswith("-"):
            return f"script:{arg}"
    return None


def runs_target(target: str, orig_argv: Sequence[str]) -> bool:
    """Whether an interpreter started with ``orig_argv`` runs ``target`` itself (see the module
    docstring): ``-m NAME`` for a module, the script's real path for a script."""
    kind, _, name = target.partition(":")
    args = list(orig_argv[1:])
    if kind == "module":
        return any((a == "-m" and args[i + 1:i + 2] == [name]) or a == f"-m{name}"
                   for i, a in enumerate(args))
    if kind == "script":
        want = os.path.realpath(name)
        for a in args:
            if a.startswith("-"):
                if a in ("-c", "-m") or a.startswith(("-c", "-m")) and len(a) > 2:
                    return False
                continue
            return os.path.realpath(a) == want
    return False


def should_arm(env: Mapping[str, str], orig_argv: Sequence[str]) -> str | None:
    """The target when this process is a torchrun worker running it, else ``None``."""
    target = env.get(ARM, "").strip()
    if not target or any(not env.get(v, "").strip() for v in WORKER_VARS):
        return None
    return target if runs_target(target, orig_argv) else None


# -- the torch patches ------------------------------------------------------------------------------
class _Beats:
    """The beats torch's hooks send into the guard (one per process)."""

    def __init__(self, guard: Guard) -> None:
        self.g = guard
        self.steps: dict[int, int] = {}
        self.step = 0
        self.started = False  # first optimizer step done: leave phase init

    def rebind(self, guard: Guard) -> None:
        """Send the beats to ``guard`` from now on, counting afresh (``k8sddp.ray``: torch is
        patched once per process, each guarded loop brings its own guard)."""
        self.g = guard
        self.steps = {}
        self.step = 0
        self.started = False

    def optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        key = id(optimizer)
        n = self.steps.get(key, 0) + 1
        self.steps[key] = n
        hb = self.g.hb
        # never lower the step: an explicit beat (guard.beat, a framework callback's global
        # step after a resume) may be ahead of this attempt's count
        self.step = max(self.step, n, hb.step)
        self.started = True
        hb.beat(self.step, "step")

    def progress(self, phase: str) -> None:
        hb = self.g.hb
        if hb.step > self.step:
            self.step = hb.step
        if not self.started:
            phase = "init"
        elif hb.phase not in _STEP_PHASES:  # inside eval, checkpoint or a script's own phase
            phase = hb.phase
        hb.beat(self.step, phase)


def _patch_optimizer(mod: ModuleType, beats: _Beats) -> None:
    mod.register_optimizer_step_post_hook(beats.optimizer_step)


def _patch_dataloader(mod: ModuleType, beats: _Beats) -> None:
    cls = mod._BaseDataLoaderIter
    inner = cls.__next__

    @functools.wraps(inner)
    def __next__(self: Any) -> Any:
        beats.progress("data")
        try:
            return inner(self)
        finally:
            beats.progress("step")

    cls.__next__ = __next__


def _patch_grad_scaler(mod: ModuleType, beats: _Beats) -> None:
    cls = mod.GradScaler
    inner = cls.update

    @functools.wraps(inner)
    def update(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return inner(self, *args, **kwargs)
        finally:
            beats.progress("step")

    cls.update = update


def _patch_save(mod: ModuleType, beats: _Beats) -> None:
    inner = mod.save

    @functools.wraps(inner)
    def save(*args: Any, **kwargs: Any) -> Any:
        hb = beats.g.hb  # read per call: k8sddp.ray rebinds the beats to each loop's guard
        before = hb.phase
        if before == "checkpoint":
            return inner(*args, **kwargs)
        hb.beat(hb.step, "checkpoint")
        try:
            return inner(*args, **kwargs)
        finally:
            hb.beat(hb.step, before)

    setattr(mod, "save", save)  # noqa: B010 - a module attribute mypy cannot see


def _patch_c10d(mod: ModuleType, beats: _Beats) -> None:
    inner = mod.init_process_group

    @functools.wraps(inner)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        guard = beats.g
        # signature: (backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, ...)
        given = kwargs.get("timeout", args[2] if len(args) > 2 else None)
        source = "the script"
        if given is None:
            given = dt.timedelta(seconds=guard.cfg.pg_timeout_s)
            source = gv.PG_TIMEOUT
            if len(args) > 2:
                args = (*args[:2], given, *args[3:])
            else:
                kwargs["timeout"] = given
        result = inner(*args, **kwargs)
        info: dict[str, Any] = {"pg_timeout_source": source}
        with contextlib.suppress(Exception):
            info["pg_timeout_s"] = given.total_seconds()
        with contextlib.suppress(Exception):
            import torch

            info.update(backend=str(mod.get_backend()), world_size=mod.get_world_size(),
                        torch_version=torch.__version__, cuda_version=torch.version.cuda)
            if torch.cuda.is_available():
                info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        guard.record_started(**info)
        beats.progress("init")
        return result

    setattr(mod, "init_process_group", init_process_group)  # noqa: B010


PATCHES: dict[str, Callable[[ModuleType, _Beats], None]] = {
    "torch.optim.optimizer": _patch_optimizer,
    "torch.utils.data.dataloader": _patch_dataloader,
    "torch.amp.grad_scaler": _patch_grad_scaler,
    "torch.serialization": _patch_save,
    "torch.distributed.distributed_c10d": _patch_c10d,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, patch: Callable[[ModuleType], None]) -> None:
        self.inner = inner
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        try:
            self.patch(module)
        except Exception as exc:  # a torch without the hook: guard the rest, say so
            print(f"k8sddp autoguard: cannot patch {module.__name__}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)


class PostImportHook(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that runs ``patches[name](module)`` right after module
    ``name`` is first executed (nothing is imported ahead of the script)."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches = dict(patches)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        """The spec the other finders give for ``fullname``, its loader wrapped so the patch
        runs after the module's code (once; ``None`` for every other module)."""
        patch = self.patches.pop(fullname, None)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def _apply(fn: Callable[[ModuleType, _Beats], None], beats: _Beats, mod: ModuleType) -> None:
    fn(mod, beats)


def install(guard: Guard) -> _Beats:
    """Patch torch for ``guard``: modules already imported now, the others on first import.

    Returns:
        The beats the patches send into (:meth:`_Beats.rebind` moves them to another guard)."""
    beats = _Beats(guard)
    pending: dict[str, Callable[[ModuleType], None]] = {}
    for name, fn in PATCHES.items():
        bound: Callable[[ModuleType], None] = functools.partial(_apply, fn, beats)
        if name in sys.modules:
            with contextlib.suppress(Exception):
                bound(sys.modules[name])
        else:
            pending[name] = bound
    if pending:
        sys.meta_path.insert(0, PostImportHook(pending))
    return beats


def bootstrap(env: dict[str, str] | os._Environ[str] | None = None) -> Guard | None:
    """Called by the injected ``sitecustomize``: arm this process when it is a torchrun worker
    running the target (:func:`should_arm`), else do nothing. Never raises: a guard that cannot
    start says why on stderr and the script runs unguarded."""
    global _guard
    environ = os.environ if env is None else env
    target = should_arm(environ, getattr(sys, "orig_argv", sys.argv))
    environ.pop(ARM, None)
    if target is None or _guard is not None:
        return None
    try:
        guard = Guard(environ, mode="autoguard")
        guard.start()
        guard.install_exit_records()
        install(guard)
        os.register_at_fork(after_in_child=guard.after_fork_in_child)
        guard.record_started(target=target, pid=os.getpid(), pg_timeout_s=guard.cfg.pg_timeout_s,
                             pg_timeout_source=None)
    except Exception as exc:  # noqa: BLE001 - never break the user's script
        print(f"k8sddp autoguard: not guarding this worker: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    _guard = guard
    return guard
