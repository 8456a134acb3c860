"""Runtime settings read from the pod's environment (torch-free; both processes use it).

Every variable read here is listed in ``docs/runtime.md``. The guard variables and their defaults
come from :mod:`k8sddp.guardvars` (the interface contract); the rest are runtime knobs with
defaults that need no setting.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import bounds
from .. import guardvars as gv
from ..errors import UsageError

# Runtime-only knobs (not guard variables; documented in docs/runtime.md).
RUN_DIR = "K8SDDP_RUN_DIR"  # set by ``k8sddp launch`` for its workers
SEED = "K8SDDP_SEED"
CHECKPOINT_EVERY = "K8SDDP_CHECKPOINT_EVERY"
CHECKPOINT_KEEP = "K8SDDP_CHECKPOINT_KEEP"
STOP_GRACE = "K8SDDP_STOP_GRACE_SECONDS"
PHASE_TIMEOUTS = "K8SDDP_PHASE_TIMEOUTS"
TRACE_INTERVAL = "K8SDDP_TRACE_INTERVAL_SECONDS"
IMAGE = "K8SDDP_IMAGE"
CODE_VERSION = "K8SDDP_CODE_VERSION"
#: Floor of a learned budget (the interface contract, "Runtime knobs").
WATCHDOG_MIN = "K8SDDP_WATCHDOG_MIN_SECONDS"
#: ``0`` turns off zero-code guarding under ``k8sddp launch`` (the interface contract).
AUTOGUARD = "K8SDDP_AUTOGUARD"
LEARN_BUDGETS = "K8SDDP_LEARN_BUDGETS"  # 0: fixed budgets only
LEARN_FACTOR = "K8SDDP_LEARN_FACTOR"
LEARN_WARMUP = "K8SDDP_LEARN_WARMUP"

#: Phases the training loop names in its beats (``docs/runtime.md``, "Watchdog").
PHASES = ("init", "data", "step", "hook", "eval", "checkpoint", "stop")
#: eval and checkpoint budgets default to this many step budgets.
LONG_PHASE_FACTOR = 3.0
DEFAULT_STOP_GRACE_SECONDS = 20.0
DEFAULT_CHECKPOINT_KEEP = 3
DEFAULT_TRACE_INTERVAL_SECONDS = 1.0
#: Learned budgets (``bench/guard_bench.py`` measures them; ``docs/runtime.md``, "Learned budgets").
DEFAULT_LEARN_FACTOR = 5.0
DEFAULT_LEARN_WARMUP = 20
DEFAULT_WATCHDOG_MIN_SECONDS = 60.0
#: Upper bound of every duration knob (seconds): 7 days (:data:`k8sddp.bounds.MAX_DURATION_SECONDS`,
#: shared with render, validate and the schemas). Larger values are typos (ms for s) and overflow
#: ``faulthandler.dump_traceback_later`` / the process group's timeout (review of issue 3, item 2:
#: ``inf`` or ``1e12`` crashed every worker with ``OverflowError``).
MAX_SECONDS = float(bounds.MAX_DURATION_SECONDS)


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float,
            maximum: float = MAX_SECONDS, seconds: bool = True) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{name}={raw!r} must be a finite number" + (" of seconds" if seconds else ""))
    if value < minimum:
        raise UsageError(f"{name}={raw!r} must be >= {minimum:g}")
    if value > maximum:  # "(7 days)" only where that is the bound (not K8SDDP_LEARN_FACTOR's 1000)
        days = " (7 days)" if maximum == MAX_SECONDS else ""
        raise UsageError(f"{name}={raw!r} must be <= {maximum:g}{days}")
    return value


def _switch(env: Mapping[str, str], name: str) -> bool:
    """An on/off variable: unset, empty or ``1`` on, ``0`` off; anything else (``false``, ``off``,
    ``no``) is refused, since it would otherwise silently mean on."""
    raw = env.get(name, "").strip()
    if raw not in ("", "0", "1"):
        raise UsageError(f"{name}={raw!r} must be 0 (off) or 1 (on)")
    return raw != "0"


def _integer(env: Mapping[str, str], name: str, default: int, *, minimum: int,
             maximum: int = bounds.INT32_MAX) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.lstrip("-").isdigit():
        raise UsageError(f"{name}={raw!r} is not an integer")
    value = int(raw)
    if value < minimum:
        raise UsageError(f"{name}={raw!r} must be >= {minimum}")
    if value > maximum:
        raise UsageError(f"{name}={raw!r} must be <= {maximum}")
    return value


def parse_phase_timeouts(text: str, *, name: str = PHASE_TIMEOUTS) -> dict[str, float]:
    """``"eval=900,checkpoint=1200"`` -> ``{"eval": 900.0, "checkpoint": 1200.0}`` (seconds).

    Raises:
        UsageError: an unknown phase, a missing ``=``, or a value that is not a finite number in
            ``(0, MAX_SECONDS]``.
    """
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        phase, sep, value = item.partition("=")
        phase = phase.strip()
        if not sep or phase not in PHASES:
            raise UsageError(f"{name}: {item!r} is not PHASE=SECONDS with PHASE in {', '.join(PHASES)}")
        try:
            seconds = float(value)
        except ValueError:
            raise UsageError(f"{name}: {item!r}: {value!r} is not a number") from None
        if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_SECONDS:
            raise UsageError(f"{name}: {item!r}: seconds must be > 0 and <= {MAX_SECONDS:g} (7 days)")
        out[phase] = seconds
    return out


@dataclass(frozen=True)
class RuntimeConfig:
    """What a worker reads from its environment.

    Attributes:
        artifact_dir: ``K8SDDP_ARTIFACT_DIR`` (the checkpoint volume), or ``None`` when unset:
            then nothing is written but stderr, and nothing is resumed.
        run_dir: this attempt's folder (``K8SDDP_RUN_DIR``, set by ``k8sddp launch``), or
            ``<artifact_dir>/runs/local`` when the worker runs without the launcher.
        pg_timeout_s: process-group timeout (seconds), ``K8SDDP_PG_TIMEOUT_SECONDS``.
        watchdog_timeout_s: heartbeat budget of the step and data phases (seconds).
        max_hang_restarts: ``K8SDDP_MAX_HANG_RESTARTS`` (read by the launcher).
        budgets: seconds per phase (``init``, ``data``, ``step``, ``hook``, ``eval``,
            ``checkpoint``, ``stop``).
        seed: base seed; rank ``r`` seeds its generators with ``seed + r``.
        checkpoint_every: steps between checkpoints (``None``: the task's own setting).
        checkpoint_keep: newest complete checkpoints kept (>= 1).
        stop_grace_s: seconds from SIGTERM to the final checkpoint before the worker gives up.
        trace_interval_s: at most one step/data beat per this many seconds goes to the trace
            (0: every beat); phase changes to another budget are always traced.
        learn: learn budgets (``K8SDDP_LEARN_BUDGETS``, default on; :mod:`.budgets`).
        learn_factor: learned budget = this x the longest interval (``K8SDDP_LEARN_FACTOR``).
        learn_warmup: intervals seen before a budget is learned (``K8SDDP_LEARN_WARMUP``).
        min_budget_s: floor of a learned budget (``K8SDDP_WATCHDOG_MIN_SECONDS``, seconds).
    """

    artifact_dir: Path | None
    run_dir: Path | None
    pg_timeout_s: float
    watchdog_timeout_s: float
    max_hang_restarts: int
    budgets: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    checkpoint_every: int | None = None
    checkpoint_keep: int = DEFAULT_CHECKPOINT_KEEP
    stop_grace_s: float = DEFAULT_STOP_GRACE_SECONDS
    trace_interval_s: float = DEFAULT_TRACE_INTERVAL_SECONDS
    learn: bool = True
    learn_factor: float = DEFAULT_LEARN_FACTOR
    learn_warmup: int = DEFAULT_LEARN_WARMUP
    min_budget_s: float = DEFAULT_WATCHDOG_MIN_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RuntimeConfig:
        """Read the configuration.

        Raises:
            UsageError: a variable that is set but malformed (named in the message).
        """
        env = os.environ if env is None else env
        pg = _number(env, gv.PG_TIMEOUT, float(gv.DEFAULT_PG_TIMEOUT_SECONDS), minimum=0.001)
        wd = _number(env, gv.WATCHDOG_TIMEOUT, float(gv.DEFAULT_WATCHDOG_TIMEOUT_SECONDS), minimum=0.001)
        budgets = {
            "init": max(pg, wd),
            "data": wd,
            "step": wd,
            "hook": wd,  # the task's on_step_end (its own code, its own collectives)
            "eval": wd * LONG_PHASE_FACTOR,
            "checkpoint": wd * LONG_PHASE_FACTOR,
        }
        grace = _number(env, STOP_GRACE, DEFAULT_STOP_GRACE_SECONDS, minimum=0.001)
        budgets["stop"] = grace
        budgets.update(parse_phase_timeouts(env.get(PHASE_TIMEOUTS, "")))
        raw_dir = env.get(gv.ARTIFACT_DIR, "").strip()
        artifact = Path(raw_dir) if raw_dir else None
        raw_run = env.get(RUN_DIR, "").strip()
        run_dir = Path(raw_run) if raw_run else (artifact / "runs" / "local" if artifact else None)
        every = env.get(CHECKPOINT_EVERY, "").strip()
        return cls(
            artifact_dir=artifact,
            run_dir=run_dir,
            pg_timeout_s=pg,
            watchdog_timeout_s=wd,
            max_hang_restarts=_integer(env, gv.MAX_HANG_RESTARTS, gv.DEFAULT_MAX_HANG_RESTARTS, minimum=0),
            budgets=budgets,
            seed=_integer(env, SEED, 0, minimum=0, maximum=bounds.MAX_SEED),
            checkpoint_every=_integer(env, CHECKPOINT_EVERY, 0, minimum=0) if every else None,
            checkpoint_keep=_integer(env, CHECKPOINT_KEEP, DEFAULT_CHECKPOINT_KEEP, minimum=1),
            stop_grace_s=grace,
            trace_interval_s=_number(env, TRACE_INTERVAL, DEFAULT_TRACE_INTERVAL_SECONDS, minimum=0.0),
            learn=_switch(env, LEARN_BUDGETS),
            learn_factor=_number(env, LEARN_FACTOR, DEFAULT_LEARN_FACTOR, minimum=1.0, maximum=1000.0,
                                 seconds=False),
            learn_warmup=_integer(env, LEARN_WARMUP, DEFAULT_LEARN_WARMUP, minimum=1),
            min_budget_s=_number(env, WATCHDOG_MIN, DEFAULT_WATCHDOG_MIN_SECONDS, minimum=0.001),
        )


def check_guard_env(env: Mapping[str, str]) -> list[str]:
    """Problems with the mandatory variables, one sentence each (empty: all present and valid).

    The mandatory set is what ``render`` bakes into every pod (:func:`k8sddp.guardvars.guard_env`):
    ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` (or, where it is absent, the legacy
    ``NCCL_ASYNC_ERROR_HANDLING``) in ``1``/``3``, a non-empty ``PYTHONFAULTHANDLER``, the three
    ``K8SDDP_*`` numbers, ``K8SDDP_ARTIFACT_DIR`` and ``TORCH_FR_DUMP_TEMP_FILE``. The check must
    run in the launcher: torchrun sets ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` in every worker when it
    is unset, so a worker can no longer tell
    (torch/distributed/elastic/agent/server/local_elastic_agent.py).
    """
    problems: list[str] = []
    missing: list[str] = []
    if gv.ASYNC_ERROR_HANDLING in env:
        value = env[gv.ASYNC_ERROR_HANDLING].strip()
        if value not in gv.ASYNC_ERROR_HANDLING_ACCEPTED:
            problems.append(f"{gv.ASYNC_ERROR_HANDLING}={value!r} must be 1 or 3 (0 and 2 let a hang live)")
    elif gv.LEGACY_ASYNC_ERROR_HANDLING in env:
        value = env[gv.LEGACY_ASYNC_ERROR_HANDLING].strip()
        if value not in gv.ASYNC_ERROR_HANDLING_ACCEPTED:
            problems.append(f"{gv.LEGACY_ASYNC_ERROR_HANDLING}={value!r} must be 1 or 3")
    else:
        missing.append(gv.ASYNC_ERROR_HANDLING)
    for name in (gv.FAULTHANDLER, gv.PG_TIMEOUT, gv.WATCHDOG_TIMEOUT, gv.MAX_HANG_RESTARTS,
                 gv.ARTIFACT_DIR, gv.FR_DUMP_TEMP_FILE):
        if not env.get(name, "").strip():
            missing.append(name)
    if missing:
        problems.insert(0, "missing mandatory variable(s): " + ", ".join(missing))
    raw_dir = env.get(gv.ARTIFACT_DIR, "").strip()
    if raw_dir and not os.path.isabs(raw_dir):
        problems.append(f"{gv.ARTIFACT_DIR}={raw_dir!r} must be an absolute path (a relative one "
                        "depends on the working directory, which differs between image and pod)")
    checks: list[tuple[str, float]] = [(gv.PG_TIMEOUT, 0.001), (gv.WATCHDOG_TIMEOUT, 0.001)]
    for name, low in checks:
        if env.get(name, "").strip():
            try:
                _number(env, name, 0.0, minimum=low)
            except UsageError as exc:
                problems.append(str(exc))
    if env.get(gv.MAX_HANG_RESTARTS, "").strip():
        try:
            _integer(env, gv.MAX_HANG_RESTARTS, 0, minimum=0)
        except UsageError as exc:
            problems.append(str(exc))
    for name in (gv.SAFETY_NETS):
        if env.get(name, "").strip() == "0":
            problems.append(f"{name}=0 switches a safety net off")
    try:  # the optional knobs too: a worker would refuse them anyway, after torchrun started
        _switch(env, AUTOGUARD)
        RuntimeConfig.from_env(env)
    except UsageError as exc:
        if str(exc) not in problems:
            problems.append(str(exc))
    return problems
