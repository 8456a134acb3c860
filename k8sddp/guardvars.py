"""The guard variables of ``../shared/CONTRACT.md``: names, defaults, accepted values.

One source for render (what it bakes in), validate (what it demands), the runtime (what it
reads) and ``fix`` (what it adds). Facts behind the values: ``../shared/reference/NOTES.md``.
"""

from __future__ import annotations

# -- baseline ---------------------------------------------------------------------------------
#: Current name. 3 = kill the process on a communicator error without aborting first, so the
#: flight recorder can still dump (1 can kill rank 0 before it does: pytorch/pytorch#121055).
ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
#: Deprecated alias, the only name torch < 2.2 knows; the TORCH_ name wins when both are set.
LEGACY_ASYNC_ERROR_HANDLING = "NCCL_ASYNC_ERROR_HANDLING"
ASYNC_ERROR_HANDLING_VALUE = "3"
LEGACY_ASYNC_ERROR_HANDLING_VALUE = "1"
#: Values validate accepts for either name: 1 (abort + kill) or 3 (kill).
ASYNC_ERROR_HANDLING_ACCEPTED = ("1", "3")
#: First torch release that knows the TORCH_-prefixed name and mode 3.
TORCH_NAME_SINCE = (2, 2)

FAULTHANDLER = "PYTHONFAULTHANDLER"
FAULTHANDLER_VALUE = "1"

# -- strict -----------------------------------------------------------------------------------
PG_TIMEOUT = "K8SDDP_PG_TIMEOUT_SECONDS"
DEFAULT_PG_TIMEOUT_SECONDS = 1800
WATCHDOG_TIMEOUT = "K8SDDP_WATCHDOG_TIMEOUT_SECONDS"
DEFAULT_WATCHDOG_TIMEOUT_SECONDS = 300
MAX_HANG_RESTARTS = "K8SDDP_MAX_HANG_RESTARTS"
DEFAULT_MAX_HANG_RESTARTS = 3
FR_DUMP_TEMP_FILE = "TORCH_FR_DUMP_TEMP_FILE"
LEGACY_FR_DUMP_TEMP_FILE = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
ARTIFACT_DIR = "K8SDDP_ARTIFACT_DIR"

#: Variables whose value ``0`` switches a safety net off (strict rejects it).
SAFETY_NETS: tuple[str, ...] = (
    "TORCH_NCCL_ENABLE_MONITORING",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
)

#: Every variable a user's own env may not set to a different value than render's.
MANDATORY: tuple[str, ...] = (
    ASYNC_ERROR_HANDLING,
    LEGACY_ASYNC_ERROR_HANDLING,
    FAULTHANDLER,
    PG_TIMEOUT,
    WATCHDOG_TIMEOUT,
    MAX_HANG_RESTARTS,
    FR_DUMP_TEMP_FILE,
    ARTIFACT_DIR,
)


def parse_torch_version(text: str) -> tuple[int, int]:
    """``"2.1.2+cu121"`` -> ``(2, 1)``.

    Raises:
        ValueError: not of the form ``MAJOR.MINOR[...]``.
    """
    parts = text.strip().split(".")
    if len(parts) < 2:
        raise ValueError(f"torch version {text!r} is not MAJOR.MINOR[.PATCH]")
    minor = "".join(ch for ch in parts[1] if ch.isdigit())
    if not parts[0].isdigit() or not minor:
        raise ValueError(f"torch version {text!r} is not MAJOR.MINOR[.PATCH]")
    return int(parts[0]), int(minor)


def guard_env(
    *,
    torch_version: str | None,
    artifact_dir: str,
    pg_timeout_seconds: int = DEFAULT_PG_TIMEOUT_SECONDS,
    watchdog_timeout_seconds: int = DEFAULT_WATCHDOG_TIMEOUT_SECONDS,
    max_hang_restarts: int = DEFAULT_MAX_HANG_RESTARTS,
) -> list[tuple[str, str]]:
    """The mandatory variables, as ``(name, value)`` pairs in a stable order.

    Args:
        torch_version: the image's torch version (``"2.4"``), or ``None`` for a current one.
            Older than 2.2 adds the legacy ``NCCL_ASYNC_ERROR_HANDLING=1``.
        artifact_dir: absolute path on the checkpoint volume for traces, records and
            flight-recorder dumps (the dump prefix is ``<artifact_dir>/fr/rank-``).
        pg_timeout_seconds: process-group timeout (seconds, > 0).
        watchdog_timeout_seconds: heartbeat timeout (seconds, > 0).
        max_hang_restarts: consecutive hang exits without progress before the exit is final.

    Raises:
        ValueError: an unparseable ``torch_version``.
    """
    env: list[tuple[str, str]] = []
    if torch_version is not None and parse_torch_version(torch_version) < TORCH_NAME_SINCE:
        env.append((LEGACY_ASYNC_ERROR_HANDLING, LEGACY_ASYNC_ERROR_HANDLING_VALUE))
    else:
        env.append((ASYNC_ERROR_HANDLING, ASYNC_ERROR_HANDLING_VALUE))
    env += [
        (FAULTHANDLER, FAULTHANDLER_VALUE),
        (PG_TIMEOUT, str(pg_timeout_seconds)),
        (WATCHDOG_TIMEOUT, str(watchdog_timeout_seconds)),
        (MAX_HANG_RESTARTS, str(max_hang_restarts)),
        (ARTIFACT_DIR, artifact_dir),
        (FR_DUMP_TEMP_FILE, artifact_dir.rstrip("/") + "/fr/rank-"),
    ]
    return env


# -- Ray Train ----------------------------------------------------------------------------------
#: Ray Train's bound on its own collectives (``ray.train.report`` reached by some ranks only waits
#: forever without it; Ray's default is no timeout). Set by render, demanded by strict validate,
#: returned by ``k8sddp.ray.trainer_kwargs()``.
RAY_COLLECTIVE_TIMEOUT = "RAY_TRAIN_COLLECTIVE_TIMEOUT_S"
#: k8sddp's value: the process-group timeout, so neither bound outlives the other.
DEFAULT_RAY_COLLECTIVE_TIMEOUT_SECONDS = DEFAULT_PG_TIMEOUT_SECONDS
#: Ray Train's own ``TorchConfig.timeout_s`` default (ray-project/ray python/ray/train/torch/config.py):
#: the same 1800 s as k8sddp's process-group timeout.
RAY_TORCH_CONFIG_TIMEOUT_SECONDS = 1800
#: ``FailureConfig.max_failures`` at least this: a hang exit must be restarted from the checkpoint.
MIN_RAY_MAX_FAILURES = 1
