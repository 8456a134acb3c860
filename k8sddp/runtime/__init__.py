"""The watchdog-guarded training entrypoint (``docs/runtime.md``).

Two processes: ``k8sddp launch -- torchrun ...`` (:mod:`.launcher`, torch-free, the pod's main
process) and ``k8sddp train --task MODULE:ATTR`` (:mod:`.worker`, one per rank, needs the
``train`` extra). Torch is imported only by the modules that need it (``checkpoint``, ``loop``,
``worker``, ``demo``, ``plain``); the names below are torch-free or imported lazily.

Public API::

    Task, StepContext, load_task          what a task supplies       (.task)
    Heartbeat, Watchdog, Stall            the phase-aware watchdog   (.watchdog)
    Guard                                 one rank's guard: watchdog, signals, records (.guard),
                                          shared by the Task loop, zero-code mode (.autoguard)
                                          and the k8sddp.guard API; learned budgets (.budgets)
    Rank0IO, Rank0IOError, Rank0IOTimeout the rank-0 IO guard        (.ioguard)
    launch, Launcher                      the container main process (.launcher)
    RuntimeConfig                         settings from the env      (.config)
    exitcodes                             the exit codes             (.exitcodes)
"""

from __future__ import annotations

import importlib
from typing import Any

from . import exitcodes
from .config import RuntimeConfig
from .watchdog import Heartbeat, Stall, Watchdog

__all__ = [
    "Guard",
    "Heartbeat",
    "Launcher",
    "Rank0IO",
    "Rank0IOError",
    "Rank0IOTimeout",
    "RuntimeConfig",
    "Stall",
    "StepContext",
    "Task",
    "Watchdog",
    "exitcodes",
    "launch",
    "load_task",
]

_LAZY = {
    "Guard": ".guard",
    "Launcher": ".launcher", "launch": ".launcher",
    "Rank0IO": ".ioguard", "Rank0IOError": ".ioguard", "Rank0IOTimeout": ".ioguard",
    "StepContext": ".task", "Task": ".task", "load_task": ".task",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
