"""Reading a rank's ``stacks-rank<R>.txt`` (faulthandler output; stdlib only).

A stacks file holds one or more dumps: the watchdog's (header ``--- k8sddp rank R: watchdog:
no heartbeat for S s in phase 'P' at step N ...``), a SIGTERM's or SIGUSR1's (faulthandler,
no header of k8sddp's), the hard stop's (``Timeout (h:mm:ss)!``, ``faulthandler.dump_traceback_later``)
and a fatal signal's (``Fatal Python error: Aborted``, ``Segmentation fault``; the worker points
faulthandler's fatal handler at this file). faulthandler prints each thread most recent call first
(CPython ``Python/traceback.c``, ``_Py_DumpTracebackThreads``).

"The main thread" is the thread that runs the training: the interpreter's main thread, or,
where a guard started in another thread (``k8sddp.ray``: Ray Train's training thread), the one
named by the file's ``--- k8sddp rank R: training thread 0x... ---`` line (faulthandler prints
thread ids, not names). A rank inside Ray Train's own synchronising calls (``ray.train.report``,
``ray.train.collective``) waits for its peers just as one inside a torch collective does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Paths of frames that belong to torch or to k8sddp's own loop, not to the task.
TORCH_PARTS = ("/torch/", "/site-packages/torch")
RUNTIME_PARTS = ("/k8sddp/runtime/", "/k8sddp/cli.py", "/k8sddp/__main__.py", "/k8sddp/commands/",
                 "/k8sddp/ray.py", "<frozen runpy>", "/threading.py")
#: Top frames of a main thread that waits for its peers: a collective, DDP's backward all-reduce.
WAITING_PARTS = ("/torch/distributed/", "/torch/autograd/", "/torch/nn/parallel/", "/torch/_tensor.py")
#: Frames of Ray Train's calls that wait for every worker (report's barrier, its collectives);
#: a thread inside one, above the task's innermost frame, waits for its peers.
RAY_WAITING_PARTS = ("/ray/train/",)
_RAY = "/site-packages/ray/"

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (\S+)', re.M)
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+", re.M)
_SOFT = re.compile(r"watchdog: no heartbeat for ([\d.]+) s in phase '(\w+)' at step (-?\d+)")
_FATAL = re.compile(r"^Fatal Python error: (.+)$", re.M)
#: The thread that wrote a k8sddp watchdog dump (faulthandler marks it ``Current thread``): the
#: watchdog's own thread, never the main thread.
_DUMPER = re.compile(r"^--- k8sddp rank \d+: watchdog[^\n]*\nCurrent thread (0x[0-9a-f]+)", re.M)
_THREAD_ID = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
#: Written by a guard started outside the main thread (:mod:`k8sddp.runtime.guard`).
_TRAINING = re.compile(r"^--- k8sddp rank \d+: training thread (0x[0-9a-f]+) ---$", re.M)


@dataclass(frozen=True)
class Frame:
    """One stack frame: ``file`` path, ``line`` number, ``func`` name."""

    file: str
    line: int
    func: str

    def where(self) -> str:
        """``file:line in func``."""
        return f"{self.file}:{self.line} in {self.func}"

    @property
    def in_torch(self) -> bool:
        """Inside torch itself."""
        return any(p in self.file for p in TORCH_PARTS)

    @property
    def in_runtime(self) -> bool:
        """Inside k8sddp's runtime, the CLI or the interpreter's start-up."""
        return any(p in self.file for p in RUNTIME_PARTS)

    @property
    def in_ray(self) -> bool:
        """Inside Ray (its worker, Ray Train's report and thread runner)."""
        return _RAY in self.file


def _stdlib(f: Frame) -> bool:
    return f.file.startswith("<frozen") or ("/lib/python3" in f.file and "-packages/" not in f.file)


@dataclass
class StackInfo:
    """What the last dump of a stacks file says about the main thread.

    Attributes:
        dumps: how many dumps the file holds.
        frames: the main thread's frames of the last dump, most recent first.
        hard_stop: a ``Timeout (`` dump (the C-level hard stop) is in the file.
        fatal: ``Fatal Python error: X`` text of a fatal signal, or ``None``.
        soft: ``(phase, step)`` of the last watchdog header, or ``None``.
    """

    dumps: int = 0
    frames: list[Frame] = field(default_factory=list)
    hard_stop: bool = False
    fatal: str | None = None
    soft: tuple[str, int] | None = None

    @property
    def waiting(self) -> bool | None:
        """The main thread was inside a collective or a backward pass (``None``: no frames)."""
        if not self.frames:
            return None
        if any(p in self.frames[0].file for p in WAITING_PARTS):
            return True
        for f in self.frames:  # most recent first: Ray Train's wait above the task's own frames
            if any(p in f.file for p in RAY_WAITING_PARTS):
                return True
            if not (f.in_torch or f.in_runtime or f.in_ray or _stdlib(f)):
                return False
        return False

    def task_frame(self) -> Frame | None:
        """The innermost frame of the task's own code (neither torch nor k8sddp's runtime), else
        the innermost frame outside torch, else the innermost frame."""
        for f in self.frames:
            if not f.in_torch and not f.in_runtime and not f.in_ray:
                return f
        for f in self.frames:
            if not f.in_torch:
                return f
        return self.frames[0] if self.frames else None

    def stalled_frame(self) -> Frame | None:
        """The frame to show as where the rank stood: its innermost frame outside torch's
        internals when it waits in a collective (the call site), else the innermost frame."""
        if not self.frames:
            return None
        if self.waiting:
            return self.task_frame()
        return self.frames[0]


def _is_helper(block: str, frames: list[Frame], dumpers: set[str]) -> bool:
    """A thread other than the main one: the watchdog that wrote a dump, or any thread started by
    ``threading`` (its oldest frame is ``threading.py``'s ``_bootstrap``). An import running in such
    a thread has ``<module>`` frames too, so :func:`_is_main` alone would take it for the main thread."""
    m = _THREAD_ID.match(block)
    if m and m.group(1) in dumpers:
        return True
    return any(f.file.endswith("/threading.py") and f.func in ("_bootstrap", "_bootstrap_inner")
               for f in frames)


def _is_main(frames: list[Frame]) -> bool:
    return any(f.file.endswith(("k8sddp/runtime/worker.py", "k8sddp/__main__.py")) or f.func == "<module>"
               for f in frames)


def parse_stacks(text: str) -> StackInfo:
    """Parse a stacks file's text (any mix of the dumps in the module docstring)."""
    info = StackInfo()
    soft = _SOFT.findall(text)
    if soft:
        info.soft = (soft[-1][1], int(soft[-1][2]))
    info.hard_stop = "Timeout (" in text
    fatal = _FATAL.findall(text)
    info.fatal = fatal[-1].strip() if fatal else None
    starts = [m.start() for m in _THREAD.finditer(text)]
    if not starts:
        return info
    # group thread blocks into dumps: a dump is a run of thread blocks with no other text between
    blocks = [text[s:e] for s, e in zip(starts, [*starts[1:], len(text)], strict=True)]
    info.dumps = max(1, text.count("--- k8sddp rank") + text.count("Timeout (") + len(fatal)
                     + text.count("\nCurrent thread", 0, starts[0] + 1))
    dumpers = set(_DUMPER.findall(text))
    training = _TRAINING.findall(text)
    main: list[Frame] | None = None
    for block in reversed(blocks):  # the last dump's main thread: the newest evidence
        frames = [Frame(f, int(n), fn) for f, n, fn in _FRAME.findall(block)]
        if not frames:
            continue
        if training:
            m = _THREAD_ID.match(block)
            if m and m.group(1) == training[-1]:
                main = frames
                break
        elif _is_main(frames) and not _is_helper(block, frames, dumpers):
            main = frames
            break
    info.frames = main or []
    return info
