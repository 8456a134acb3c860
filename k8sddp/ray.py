"""The k8sddp watchdog inside Ray Train workers, and the driver settings that go with it.

``pip install 'k8sddp[ray]'``. Two pieces:

- :func:`guard` wraps a ``train_loop_per_worker``: in each worker it checks the guard env
  (:func:`k8sddp.runtime.config.check_guard_env`), starts the same heartbeat watchdog as
  ``k8sddp launch`` (:mod:`k8sddp.runtime.watchdog`, budgets from the k8sddp variables), beats
  at every ``ray.train.report`` (zero code) and wherever the loop calls :func:`beat`. When a budget
  passes without a beat it writes every thread's stack (faulthandler) and the flight recorder to
  the artifact path, and a failure record ``hang`` (:class:`k8sddp.runtime.report.Reporter`),
  then ends the worker process with ``os.abort()``. Ray Train runs the loop in a thread (where
  ``signal.signal`` cannot be called) while the actor keeps answering health checks, so a hung
  collective is never detected by Ray itself; the abort is a worker death, after which Ray's
  ``FailureConfig`` restarts the group from the last reported checkpoint. The watchdog's C-level
  hard stop (``faulthandler.dump_traceback_later`` plus a kernel interval timer) still ends a
  worker whose soft path cannot run (the GIL held inside C code).
- :func:`trainer_kwargs` returns what only the driver can set: ``TorchConfig(timeout_s)``,
  ``FailureConfig(max_failures >= 1)`` and ``RAY_TRAIN_COLLECTIVE_TIMEOUT_S``, from the k8sddp
  variables with the defaults of :mod:`k8sddp.guardvars` (the same ones render and strict
  validate use).

Ray Train sets ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` in every worker where it is unset
(ray-project/ray python/ray/train/torch/config.py), so inside a worker an unset variable reads as
``1``: only ``validate`` on the manifest can tell. ``guard`` still refuses ``0``, ``2`` or an empty
value (they disable the error handling).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from . import guardvars as gv
from .runtime.artifacts import ArtifactDir
from .runtime.config import RuntimeConfig, check_guard_env
from .runtime.report import Reporter
from .runtime.watchdog import Heartbeat, Stall, Watchdog

__all__ = ["GuardEnvError", "beat", "guard", "heartbeat", "trainer_kwargs"]

F = TypeVar("F", bound=Callable[..., Any])

#: The active worker's heartbeat (one Ray Train worker per process).
_STATE: dict[str, Any] = {}


class GuardEnvError(RuntimeError):
    """The worker's guard env is unusable (raised in the worker: Ray reports it as the worker's error)."""


def heartbeat() -> Heartbeat | None:
    """This worker's heartbeat inside a :func:`guard`-ed loop, else ``None``."""
    return _STATE.get("hb")


def beat(step: int | None = None, phase: str = "step") -> None:
    """Beat from the loop (between ``ray.train.report`` calls): ``step`` (default: the last one)
    entering ``phase`` (``data``, ``step``, ``eval``, ``checkpoint``; budgets as under
    ``k8sddp launch``). A no-op outside a guarded loop."""
    hb = heartbeat()
    if hb is not None:
        hb.beat(hb.step if step is None else step, phase)


def _problems(env: Mapping[str, str]) -> list[str]:
    """The guard-env problems that a Ray worker can still see (an absent async-handling variable
    reads as Ray's ``1``)."""
    return check_guard_env(env)


def _abort_after(reporter: Reporter) -> Callable[[Stall], None]:
    def on_stall(stall: Stall) -> None:
        try:
            reporter.on_stall(stall)
        finally:
            os.abort()  # a worker death: Ray Train restarts the group from the last checkpoint

    return on_stall


def _beating_report(report: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(report)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        hb = heartbeat()
        if hb is not None:
            hb.beat(hb.step, "checkpoint" if kwargs.get("checkpoint") is not None or len(args) > 1 else "step")
        out = report(*args, **kwargs)
        if hb is not None:
            hb.beat(hb.step + 1, "step")
        return out

    wrapped.__k8sddp_beating__ = True  # type: ignore[attr-defined]
    return wrapped


def guard(train_loop: F) -> F:
    """Wrap a Ray Train ``train_loop_per_worker`` with the k8sddp watchdog (see the module docstring).

    Args:
        train_loop: the loop, called with the same arguments (``config`` or none).

    Returns:
        The wrapped loop, for ``TorchTrainer(guard(loop), ...)``.

    Raises (in the worker):
        GuardEnvError: a guard variable is missing or has a value the contract does not accept.
        k8sddp.errors.UsageError: a malformed ``K8SDDP_*`` variable.
    """

    @functools.wraps(train_loop)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        import ray.train

        env = dict(os.environ)
        problems = _problems(env)
        if problems:
            raise GuardEnvError("k8sddp.ray.guard: " + "; ".join(problems))
        cfg = RuntimeConfig.from_env(env)
        ctx = ray.train.get_context()
        rank, local, world = ctx.get_world_rank(), ctx.get_local_rank(), ctx.get_world_size()
        run = ArtifactDir(cfg.artifact_dir).run(f"ray-{os.getpid()}") if cfg.artifact_dir else None
        reporter = Reporter(run, rank=rank, local_rank=local, world_size=world)
        hb = Heartbeat(cfg.budgets, cfg.watchdog_timeout_s, trace_every_s=cfg.trace_interval_s)
        reporter.hb = hb
        reporter.started({"runner": "ray", "ray_experiment": ctx.get_experiment_name()})
        dog = Watchdog(hb, on_stall=_abort_after(reporter), stacks_file=reporter.stacks, on_flush=reporter.write_trace, exit_on_stall=False)
        if not getattr(ray.train.report, "__k8sddp_beating__", False):
            ray.train.report = _beating_report(ray.train.report)
        _STATE["hb"] = hb
        hb.beat(0, "init")
        dog.start()
        try:
            return train_loop(*args, **kwargs)
        except BaseException as exc:
            reporter.failure("exception", exit_code=1, message=str(exc), exc=exc)
            raise
        finally:
            _STATE.pop("hb", None)
            dog.stop()
            reporter.flush()

    return wrapped  # type: ignore[return-value]


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
    torch_kwargs: dict[str, Any] = {"timeout_s": int(cfg.pg_timeout_s)}
    if backend is not None:
        torch_kwargs["backend"] = backend
    if storage_path is None and cfg.artifact_dir is not None:
        storage_path = cfg.artifact_dir / "ray"
    run_kwargs: dict[str, Any] = {"failure_config": FailureConfig(max_failures=max(gv.MIN_RAY_MAX_FAILURES, cfg.max_hang_restarts))}
    if storage_path is not None:
        run_kwargs["storage_path"] = str(storage_path)
    return {"torch_config": TorchConfig(**torch_kwargs), "run_config": RunConfig(**run_kwargs)}
