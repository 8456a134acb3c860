"""``k8sddp train --task MODULE:ATTR``: one worker under torchrun (needs torch).

Order matters and is deliberate:

1. configuration and task import (a problem -> ``config`` record, exit 2);
2. signals: Python handlers for SIGTERM/SIGINT (they only set a flag), SIGALRM back to its default
   action (the hard stop), then ``faulthandler.register`` for SIGTERM (``chain=True``: dump every
   thread's stack, then run the flag handler) and SIGUSR1 (dump only; ``chain=False``, since the
   default action of SIGUSR1 would end the process). ``PYTHONFAULTHANDLER`` alone prints nothing
   on a hang or a SIGTERM (Python docs: faulthandler; measured);
3. heartbeat and watchdog (phase ``init``, budget ``max(pg timeout, watchdog timeout)``), both
   through :class:`k8sddp.runtime.guard.Guard` (the same pieces as zero-code mode and the
   ``k8sddp.guard`` API: one watchdog, one record format, learned budgets);
4. ``init_process_group`` with the explicit ``K8SDDP_PG_TIMEOUT_SECONDS`` timeout, NCCL when CUDA
   is available (device ``cuda:LOCAL_RANK``) and gloo otherwise;
5. the loop; its outcome becomes the worker's exit code (0, 1 task error, 142 comm failure or
   hang, 143 SIGTERM). Failure paths leave with ``os._exit`` after writing their record: normal
   interpreter shutdown can block on a broken process group.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import guardvars as gv
from ..errors import UsageError
from . import exitcodes as ec
from .artifacts import RunDir
from .failures import classify
from .guard import Guard
from .report import Reporter
from .stop import StopController
from .task import Task, load_task


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


def run_worker(task_spec: str, env: Mapping[str, str] | None = None, *,
               task_args: Sequence[str] = ()) -> int:
    """Run one worker; returns 0 on success (failure paths end the process themselves).

    Args:
        task_spec: ``MODULE:ATTR`` naming the task.
        env: the environment (default ``os.environ``).
        task_args: arguments for the task's factory (:func:`k8sddp.runtime.task.load_task`).

    Raises:
        UsageError: bad configuration or ``--task`` (after writing a ``config`` record).
    """
    env = os.environ if env is None else env
    rank = _int_env(env, "RANK", 0)
    local_rank = _int_env(env, "LOCAL_RANK", 0)
    world = _int_env(env, "WORLD_SIZE", 1)
    raw_run = env.get("K8SDDP_RUN_DIR", "").strip()
    try:
        guard = Guard(env, mode="task")
    except UsageError as exc:
        if raw_run:
            Reporter(RunDir(Path(raw_run)), rank=rank, local_rank=local_rank, world_size=world).failure(
                "config", exit_code=ec.CONFIG_ERROR, message=str(exc))
        raise
    cfg, run, reporter = guard.cfg, guard.run, guard.reporter
    try:
        task: Task = load_task(task_spec, task_args)
    except UsageError as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, BaseException) else None
        reporter.failure("config", exit_code=ec.CONFIG_ERROR, message=str(exc), exc=cause)
        raise

    stop = StopController(run, rank=rank, world_size=world, grace_s=cfg.stop_grace_s, reporter=reporter)
    signal.signal(signal.SIGTERM, stop.handle)
    signal.signal(signal.SIGINT, stop.handle)
    guard.start(on_signal=stop.on_signal_thread)  # SIGALRM default, faulthandler, watchdog
    hb = guard.hb
    assert guard.watchdog is not None
    watchdog = stop.watchdog = guard.watchdog

    import torch
    import torch.distributed as dist

    from .loop import Place, TrainingLoop

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    nccl = None
    if cuda:
        with contextlib.suppress(Exception):
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    guard.record_started(
        task=task_spec, task_args=list(task_args), backend=backend, device=str(device), seed=cfg.seed,
        torch_version=torch.__version__, nccl_version=nccl, cuda_version=torch.version.cuda,
        pg_timeout_s=cfg.pg_timeout_s, pg_timeout_source=gv.PG_TIMEOUT,
        watchdog_timeout_s=cfg.watchdog_timeout_s, budgets=cfg.budgets,
        async_error_handling=env.get(gv.ASYNC_ERROR_HANDLING) or env.get(gv.LEGACY_ASYNC_ERROR_HANDLING),
        restart_count=env.get("TORCHELASTIC_RESTART_COUNT"), hostname=socket.gethostname(),
    )
    outcome = "done"
    try:
        timeout = dt.timedelta(seconds=cfg.pg_timeout_s)
        if world > 1 or "MASTER_ADDR" in env:
            dist.init_process_group(backend, timeout=timeout, rank=rank, world_size=world)
        else:  # one process without torchrun: DDP still wants a process group
            dist.init_process_group(backend, timeout=timeout, rank=0, world_size=1,
                                    store=dist.HashStore())
        stop.store = dist.distributed_c10d._get_default_store()
        loop = TrainingLoop(task, cfg, Place(rank, local_rank, world, device), hb, stop, reporter)
        outcome = loop.run()
    except BaseException as exc:  # noqa: BLE001 - every failure gets a record and an exit code
        kind = classify(exc)
        if isinstance(exc, UsageError):  # e.g. checkpoints of another task: final
            kind, code = "config", ec.CONFIG_ERROR
        elif stop.requested and kind == "comm" and stop.is_preemption():
            kind, code = "preempted", ec.PREEMPTED
        else:
            code = ec.HANG if kind == "comm" else ec.TASK_ERROR
        if kind != "exception":
            reporter.dump_flight_recorder()
        reporter.failure(kind, exit_code=code, message=f"{type(exc).__name__}: {exc}", exc=exc)
        reporter.flush()
        watchdog.disarm_hard()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)
    if outcome == "preempted":
        reporter.failure("preempted", exit_code=ec.PREEMPTED, checkpoint_step=loop.saved_step,
                         agreed=stop.agreed, message=f"SIGTERM: final checkpoint at step {loop.saved_step}")
        reporter.flush()
        watchdog.disarm_hard()
        os._exit(ec.PREEMPTED)
    hb.beat(loop.step, "stop")
    if dist.is_initialized():
        dist.destroy_process_group()
    guard.stop()
    print(f"k8sddp train: rank {rank}: done at step {loop.step}"
          + (f" (resumed from step {loop.resumed_from})" if loop.resumed_from is not None else ""),
          file=sys.stderr)
    return ec.SUCCESS
