"""The k8sddp watchdog inside Ray Train workers, and the driver settings that go with it.

``pip install 'k8sddp[ray]'``. Two pieces (``docs/ray.md``):

- :func:`guard` wraps a ``train_loop_per_worker``. In each worker it checks the guard env
  (:func:`k8sddp.runtime.config.check_guard_env`) and runs the very guard of ``k8sddp launch``
  (:class:`k8sddp.runtime.guard.Guard`, mode ``ray``): the phase-aware watchdog with its C-level
  hard stop, the learned per-phase budgets (:mod:`k8sddp.runtime.budgets`: ``factor x`` the
  longest interval on any rank, clamped to ``[K8SDDP_WATCHDOG_MIN_SECONDS, the phase's fixed
  budget]``, ``K8SDDP_WATCHDOG_TIMEOUT_SECONDS`` for steps), and zero-code mode's torch hooks
  (:func:`k8sddp.runtime.autoguard.install`: a beat after every optimizer step, around every
  DataLoader batch, ``GradScaler.update`` and ``torch.save``), plus a beat around every
  ``ray.train.report`` (Ray's ``DistributedTrainFnUtils.report``, which the public
  ``ray.train.report`` calls, so ``from ray.train import report`` is covered too). The loop may
  beat itself (:func:`beat`, :func:`phase`); it need not.
- When a budget passes without a beat, the guard writes every thread's stack (faulthandler,
  with the training thread named in the file), the flight recorder and a failure record ``hang``
  (step, phase, budget and where the budget was learned from) to the attempt folder, then ends
  the worker process with ``os.abort()``. Ray Train runs the loop in a thread (where
  ``signal.signal`` cannot be called) while the actor keeps answering health checks, so Ray
  itself never sees a hung collective; the abort is a worker death, after which Ray's
  ``FailureConfig`` restarts the worker group from the last reported checkpoint. A worker whose
  watchdog thread cannot run (the GIL held inside C code) is ended by the hard stop
  (``faulthandler.dump_traceback_later`` plus the kernel timer's SIGALRM, both C-level).
- :func:`trainer_kwargs` returns what only the driver can set: ``TorchConfig(timeout_s)``,
  ``FailureConfig(max_failures >= 1)`` and ``RAY_TRAIN_COLLECTIVE_TIMEOUT_S``, from the k8sddp
  variables with the defaults of :mod:`k8sddp.guardvars` (the same ones render and strict
  validate use).

Where it writes (``K8SDDP_ARTIFACT_DIR``, the checkpoint volume; nothing without it):
``runs/ray-<UTC start>-<hex>/`` per worker group (one attempt: every rank of every node, the
name chosen by rank 0 and handed to the others with ``ray.train.collective.broadcast_from_rank_zero``,
so names sort by start time), holding the runtime's usual ``started-``, ``failure-``, ``trace-``,
``stacks-rank<R>`` and ``fr-rank<R>.pkl``, each record with the rank's ``node``; and
``budgets/ray-<experiment>/learned-rank<R>.json`` (restarts of one experiment learn from the
earlier attempts, other experiments on the volume do not). ``k8sddp diagnose`` reads both.

Ray Train sets ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` in every worker where it is unset
(ray-project/ray python/ray/train/torch/config.py), so inside a worker an unset variable reads as
``1``: only ``validate`` on the manifest can tell. ``guard`` still refuses ``0``, ``2`` or an empty
value (they disable the error handling).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import math
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from . import guardvars as gv
from .runtime import autoguard
from .runtime.artifacts import RUNS
from .runtime.config import RuntimeConfig, check_guard_env
from .runtime.failures import classify
from .runtime.guard import Guard
from .runtime.watchdog import Heartbeat

__all__ = ["GuardEnvError", "beat", "current", "guard", "heartbeat", "phase", "trainer_kwargs"]

F = TypeVar("F", bound=Callable[..., Any])

#: ``guard``: the active loop's :class:`Guard`; ``beats``: the torch hooks' target (installed
#: once per process, rebound to each loop's guard). One Ray Train worker per process.
_STATE: dict[str, Any] = {}
_LOCK = threading.Lock()
#: Phases after which a report's closing beat goes back to ``step``.
_STEP_PHASES = ("init", "data", "step", "hook", "checkpoint")


class GuardEnvError(RuntimeError):
    """The worker's guard env is unusable (raised in the worker: Ray reports it as the worker's error)."""


def current() -> Guard | None:
    """This worker's guard inside a :func:`guard`-ed loop, else ``None``."""
    return _STATE.get("guard")


def heartbeat() -> Heartbeat | None:
    """This worker's heartbeat inside a :func:`guard`-ed loop, else ``None``."""
    g = current()
    return g.hb if g is not None else None


def beat(step: int | None = None, phase: str = "step") -> None:
    """Beat from the loop (optional: optimizer steps, batches and reports beat by themselves):
    ``step`` (default: the last one) entering ``phase`` (``data``, ``step``, ``eval``,
    ``checkpoint``; budgets as under ``k8sddp launch``). A no-op outside a guarded loop."""
    g = current()
    if g is not None:
        g.beat(step, phase)


@contextlib.contextmanager
def phase(name: str, budget: float | None = None) -> Iterator[None]:
    """Run the body in phase ``name`` (e.g. ``"eval"``) with that phase's budget, seconds
    (:meth:`k8sddp.runtime.guard.Guard.phase`); outside a guarded loop it only runs the body.

    Raises:
        ValueError: a malformed name or a budget that is not > 0.
    """
    g = current()
    if g is None:
        yield
        return
    with g.phase(name, budget):
        yield


def _problems(env: Mapping[str, str]) -> list[str]:
    """The guard-env problems that a Ray worker can still see (an absent async-handling variable
    reads as Ray's ``1``)."""
    return check_guard_env(env)


def _report_beats(report: Callable[..., Any], ckpt_at: int) -> Callable[..., Any]:
    """Wrap a report function: phase ``checkpoint`` (with a checkpoint) or ``step`` while it runs
    (it waits for every worker: Ray Train's report is a barrier), then a ``step`` beat, one step
    on unless the optimizer hook counts the steps. ``ckpt_at``: the checkpoint's position."""

    @functools.wraps(report)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        g = current()
        if g is None:
            return report(*args, **kwargs)
        hb = g.hb
        ckpt = kwargs.get("checkpoint", args[ckpt_at] if len(args) > ckpt_at else None)
        before = hb.phase
        hb.beat(hb.step, "checkpoint" if ckpt is not None else ("step" if before in _STEP_PHASES else before))
        out = report(*args, **kwargs)
        beats = _STATE.get("beats")
        counted = beats is not None and beats.started
        hb.beat(hb.step if counted else hb.step + 1, "step" if before in _STEP_PHASES else before)
        return out

    wrapped.__k8sddp_beating__ = True  # type: ignore[attr-defined]
    return wrapped


def _patch_report() -> str:
    """Beat around Ray's report, once per process; returns what was patched."""
    try:
        from ray.train.v2._internal.constants import is_v2_enabled
        from ray.train.v2._internal.execution.train_fn_utils import DistributedTrainFnUtils

        if not is_v2_enabled():  # RAY_TRAIN_V2_ENABLED=0: v1 never calls the v2 class
            raise ImportError("Ray Train v1")
    except ImportError:  # Ray Train v1: the public function only
        import ray.train

        if not getattr(ray.train.report, "__k8sddp_beating__", False):
            ray.train.report = _report_beats(ray.train.report, 1)
        return "ray.train.report"
    if not getattr(DistributedTrainFnUtils.report, "__k8sddp_beating__", False):
        DistributedTrainFnUtils.report = _report_beats(DistributedTrainFnUtils.report, 2)  # type: ignore[method-assign]
    return "DistributedTrainFnUtils.report"


def _attempt_name(rank: int) -> tuple[str, bool]:
    """This worker group's attempt folder name, the same on every worker (chosen by rank 0);
    ``False`` with a per-process name when Ray has no ``broadcast_from_rank_zero`` (Train v1)."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%f")[:-3] + "Z"
    mine = f"ray-{now}-{secrets.token_hex(3)}"
    try:
        from ray.train.collective import broadcast_from_rank_zero
    except ImportError:
        return f"{mine}-rank{rank}-pid{os.getpid()}", False
    try:
        name = broadcast_from_rank_zero(mine if rank == 0 else None)
    except Exception:  # noqa: BLE001 - outside a Train v2 worker group: one folder per process
        return f"{mine}-rank{rank}-pid{os.getpid()}", False
    return (name, True) if isinstance(name, str) and re.fullmatch(r"ray-[\w.-]+", name) else (mine, False)


def _scope(experiment: str) -> str:
    """``budgets/`` sub-folder of an experiment: ``ray-`` and its name, file-name safe."""
    return "ray-" + (re.sub(r"[^\w.-]+", "_", experiment).strip("._") or "experiment")[:120]


def _start(env: Mapping[str, str]) -> Guard:
    import ray.train

    cfg = RuntimeConfig.from_env(env)
    ctx = ray.train.get_context()
    rank, local, world = ctx.get_world_rank(), ctx.get_local_rank(), ctx.get_world_size()
    node: int | None = None
    with contextlib.suppress(Exception):
        node = int(ctx.get_node_rank())
    experiment = str(ctx.get_experiment_name() or "")
    attempt, shared = _attempt_name(rank)
    run_dir = cfg.artifact_dir / RUNS / attempt if cfg.artifact_dir is not None else None
    try:
        g = Guard(env, mode="ray", rank=rank, local_rank=local, world=world, node=node, run_dir=run_dir,
                  budgets_scope=_scope(experiment), on_stalled=os.abort)
    except OSError as exc:  # as under k8sddp launch: the variable, not a bare OSError from mkdir
        raise GuardEnvError(f"k8sddp.ray.guard: {gv.ARTIFACT_DIR}={cfg.artifact_dir}: cannot write there: {exc}") from None
    fr = env.get(gv.FR_DUMP_TEMP_FILE, "").strip()
    if fr:  # torch's own dump (NCCL's watchdog) writes there and creates no folder; launch creates it too
        try:
            Path(fr).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GuardEnvError(f"k8sddp.ray.guard: {gv.FR_DUMP_TEMP_FILE}={fr}: cannot create its folder: {exc}") from None
    g.start()
    try:
        _hook(g, ctx, experiment, shared)
    except BaseException:
        with _LOCK:
            _STATE.pop("guard", None)
        g.stop()
        raise
    return g


def _hook(g: Guard, ctx: Any, experiment: str, shared: bool) -> None:
    """Point the torch hooks and the report beats at ``g`` (installed once per process) and write
    the start record."""
    with _LOCK:
        beats = _STATE.get("beats")
        if beats is None:
            _STATE["beats"] = autoguard.install(g)
            _STATE["report_patch"] = _patch_report()
        else:
            beats.rebind(g)
        _STATE["guard"] = g
    info: dict[str, Any] = {"runner": "ray", "ray_experiment": experiment, "pid": os.getpid(),
                            "attempt_shared": shared, "hard_stop": g.hard_stop,
                            "report_beats": _STATE.get("report_patch"),
                            "thread": threading.current_thread().name,
                            "pg_timeout_s": None, "pg_timeout_source": "ray TorchConfig.timeout_s"}
    with contextlib.suppress(Exception):
        import torch
        import torch.distributed as dist

        info["torch_version"] = torch.__version__
        if dist.is_initialized():
            info.update(backend=str(dist.get_backend()), world_size=dist.get_world_size())
    with contextlib.suppress(Exception):
        info["ray_storage"] = str(ctx.get_storage().experiment_fs_path)
    g.record_started(**info)


class _Guarded:
    """A guarded loop: a callable object of this module rather than a closure, so that Ray's
    cloudpickle pickles it by reference to this class with the user's loop as its state. A
    closure made by :func:`functools.wraps` takes the loop's ``__module__`` (``__main__`` for a
    loop defined in the driver script, the usual case): cloudpickle then pickled the closure by
    value with the globals it names, this module's lock (not picklable: ``fit()`` failed) and a
    copy of its state."""

    def __init__(self, train_loop: Callable[..., Any]) -> None:
        self.train_loop = train_loop
        functools.update_wrapper(self, train_loop)  # name, doc, __wrapped__ (Ray reads the signature)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        env = os.environ
        problems = _problems(env)
        if problems:
            raise GuardEnvError("k8sddp.ray.guard: " + "; ".join(problems))
        g = _start(env)
        try:
            out = self.train_loop(*args, **kwargs)
        except BaseException as exc:
            kind = "exception"
            with contextlib.suppress(Exception):
                kind = classify(exc)
            if kind == "comm":
                g.reporter.dump_flight_recorder()
            g.reporter.failure(kind, exit_code=1, message=f"{type(exc).__name__}: {exc}", exc=exc)
            raise
        else:
            # a clean end: "exited" with exit code 0 (k8sddp diagnose reads the rank as done)
            g.reporter.failure("exited", exit_code=0, message="train_loop_per_worker returned")
            return out
        finally:
            with _LOCK:
                _STATE.pop("guard", None)
            g.stop()


def guard(train_loop: F) -> F:
    """Wrap a Ray Train ``train_loop_per_worker`` with the k8sddp guard (see the module docstring).

    Args:
        train_loop: the loop, called with the same arguments (``config`` or none).

    Returns:
        The wrapped loop, for ``TorchTrainer(guard(loop), ...)``: a callable that pickles (Ray
        sends it to the workers) wherever the loop is defined, the driver script included.

    Raises:
        TypeError: ``train_loop`` is not callable (at once, not later in every worker).

    Raises (in the worker):
        GuardEnvError: a guard variable is missing or has a value the contract does not accept.
        k8sddp.errors.UsageError: a malformed ``K8SDDP_*`` variable.
    """
    if not callable(train_loop):
        raise TypeError(f"k8sddp.ray.guard: train_loop must be callable, not {type(train_loop).__name__}")
    return _Guarded(train_loop)  # type: ignore[return-value]


def trainer_kwargs(env: Mapping[str, str] | None = None, *, backend: str | None = None, storage_path: str | Path | None = None) -> dict[str, Any]:
    """``TorchTrainer`` keyword arguments from the k8sddp variables: ``torch_config`` and ``run_config``.

    Args:
        env: the variables (default ``os.environ``): ``K8SDDP_PG_TIMEOUT_SECONDS`` gives
            ``TorchConfig.timeout_s`` (default 1800, Ray's own); ``K8SDDP_MAX_HANG_RESTARTS``
            gives ``FailureConfig.max_failures`` (at least :data:`k8sddp.guardvars.MIN_RAY_MAX_FAILURES`).
        backend: ``TorchConfig.backend`` (``None``: Ray's choice, nccl with GPUs, gloo without).
        storage_path: ``RunConfig.storage_path`` (default: ``K8SDDP_ARTIFACT_DIR``/``ray``, so
            checkpoints land on the checkpoint volume).

    Also sets ``RAY_TRAIN_COLLECTIVE_TIMEOUT_S`` in ``os.environ`` when unset (the driver reads it;
    default :data:`k8sddp.guardvars.DEFAULT_RAY_COLLECTIVE_TIMEOUT_SECONDS`).

    Raises:
        k8sddp.errors.UsageError: a malformed ``K8SDDP_*`` variable.
    """
    from ray.train import FailureConfig, RunConfig
    from ray.train.torch import TorchConfig

    env = os.environ if env is None else env
    cfg = RuntimeConfig.from_env(env)
    if gv.RAY_COLLECTIVE_TIMEOUT not in os.environ:
        os.environ[gv.RAY_COLLECTIVE_TIMEOUT] = str(gv.DEFAULT_RAY_COLLECTIVE_TIMEOUT_SECONDS)
    # whole seconds, rounded up: int() made a fraction of a second 0 (every collective timed out at once)
    torch_kwargs: dict[str, Any] = {"timeout_s": max(1, math.ceil(cfg.pg_timeout_s))}
    if backend is not None:
        torch_kwargs["backend"] = backend
    if storage_path is None and cfg.artifact_dir is not None:
        storage_path = cfg.artifact_dir / "ray"
    run_kwargs: dict[str, Any] = {"failure_config": FailureConfig(max_failures=max(gv.MIN_RAY_MAX_FAILURES, cfg.max_hang_restarts))}
    if storage_path is not None:
        run_kwargs["storage_path"] = str(storage_path)
    return {"torch_config": TorchConfig(**torch_kwargs), "run_config": RunConfig(**run_kwargs)}
