"""``k8sddp launch -- CMD...``: the container's main process around torchrun (torch-free).

What it does, in order (``docs/runtime.md``, "launch"):

1. refuses to start, naming them, when mandatory guard variables are missing or invalid
   (:func:`k8sddp.runtime.config.check_guard_env`) -> exit 2;
2. creates this attempt's folder ``<artifact>/runs/<attempt>/`` and passes it to the workers as
   ``K8SDDP_RUN_DIR``;
3. runs CMD, copying its stdout/stderr through (keeping the last lines for the run record),
   forwarding SIGTERM/SIGINT/SIGHUP/SIGQUIT to it (SIGTERM/SIGINT first drop the ``preempt``
   marker so workers write a final checkpoint) and SIGUSR1 straight to the workers
   (whose faulthandler then dumps their stacks); as PID 1 it also reaps orphans;
4. maps the outcome to the pod's exit code (:mod:`k8sddp.runtime.outcome`) and writes the run record.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import importlib.metadata
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from .. import guardvars as gv
from .._version import __version__
from ..errors import UsageError
from . import exitcodes as ec
from .artifacts import ArtifactDir, RunDir, read_json, write_json_atomic
from .checkpoint_files import newest_complete_step
from .config import AUTOGUARD, CODE_VERSION, IMAGE, RUN_DIR, SEED, _number, check_guard_env
from .outcome import Outcome, apply_hang_streak, decide, refine, valid_state

#: Seconds the launcher of a multi-node job waits for the other nodes' records on a shared
#: artifact volume before it diagnoses (``K8SDDP_PEER_WAIT_SECONDS``; docs/runtime.md).
PEER_WAIT = "K8SDDP_PEER_WAIT_SECONDS"
DEFAULT_PEER_WAIT_S = 5.0

#: Lines of the command's output kept for the run record's failure-log tail.
TAIL_LINES = 80
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
TO_WORKERS = (signal.SIGUSR1,)


def _utc() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def node_rank(env: Mapping[str, str]) -> int:
    """This pod's node rank: ``PET_NODE_RANK`` (set by the operator), else ``GROUP_RANK``, else 0."""
    for name in ("PET_NODE_RANK", "GROUP_RANK"):
        raw = env.get(name, "").strip()
        if raw.isdigit():
            return int(raw)
    return 0


def torchrun_flag(command: Sequence[str], *names: str) -> str | None:
    """The value of a torchrun flag in ``command`` (``--nproc-per-node=2``, ``--nproc_per_node 2``;
    any of ``names``), or ``None`` (also when the command is not torchrun). Only torchrun's own
    arguments are read: the scan stops at ``-m`` or a ``*.py`` script."""
    from .autoguard import torchrun_start

    spellings = {n for name in names for n in (name, "--" + name[2:].replace("-", "_"))}
    args = list(command)
    begin = torchrun_start(args)
    if begin is None:
        return None
    for i in range(begin, len(args)):
        arg = args[i]
        if arg == "-m" or arg.endswith(".py"):
            break
        flag, eq, value = arg.partition("=")
        if flag in spellings:
            if eq:
                return value
            return args[i + 1] if i + 1 < len(args) else None
    return None


def _copy(src: IO[bytes], dst: IO[bytes], tail: collections.deque[str], lock: threading.Lock) -> None:
    for line in iter(src.readline, b""):
        with contextlib.suppress(OSError, ValueError):
            dst.write(line)
            dst.flush()
        with lock:
            tail.append(line.decode("utf-8", "replace").rstrip("\n"))


_SOFT_HEADER = re.compile(r"watchdog: no heartbeat for [\d.]+ s in phase '(\w+)' at step (-?\d+)")


def _stall_header(run: RunDir, rank: int) -> dict[str, Any] | None:
    """``{step, phase}`` from the last soft-watchdog header in a rank's stacks file (written first
    when its watchdog fired, before it stalled or was cut short by the hard stop), or ``None``."""
    try:
        text = run.stacks(rank).read_text(errors="replace")
    except OSError:
        return None
    found = _SOFT_HEADER.findall(text)
    if not found:
        return None
    phase, step = found[-1]
    return {"step": int(step), "phase": phase}


#: Top frames of a main thread that waits for its peers (a collective, DDP's backward all-reduce).
WAITING_FRAMES = ("/torch/distributed/", "/torch/autograd/", "/torch/nn/parallel/")


def waiting_in_collective(run: RunDir, rank: int, main_thread: str | None = None) -> bool | None:
    """Whether a rank's main thread, in its last stack dump, was inside torch.distributed or a
    backward pass (waiting for its peers), ``None`` when unknown. faulthandler prints each thread
    most recent call first; the main thread is the one whose id the start record names
    (``main_thread``, ``0x%016x`` as faulthandler prints it), else the one running
    ``k8sddp/runtime/worker.py``."""
    try:
        text = run.stacks(rank).read_text(errors="replace")
    except OSError:
        return None
    last = text.rsplit("--- k8sddp rank", 1)[-1]
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", last):
        frames = re.findall(r'File "([^"]+)"', block)
        mine = (block.lstrip().split(" (", 1)[0].endswith(main_thread) if main_thread
                else any(f.endswith("k8sddp/runtime/worker.py") for f in frames))
        if frames and mine:
            return any(w in frames[0] for w in WAITING_FRAMES)
    return None


def _hard_stopped(run: RunDir, ranks: Sequence[int]) -> set[int]:
    out = set()
    for rank in ranks:
        try:
            text = run.stacks(rank).read_text(errors="replace")
        except OSError:
            continue
        if "Timeout (" in text:
            out.add(rank)
    return out


class Launcher:
    """One attempt: see the module docstring.

    Args:
        command: the command to run (``torchrun ... -m k8sddp train --task ...``).
        env: the pod's environment (default ``os.environ``).
        out, err: where the command's stdout/stderr are copied (binary streams).
        analyse: the shared analysis of an attempt's records,
            ``(run folder, *, node, nnodes, log_tail, wait_s) -> Diagnosis``
            (:func:`k8sddp.diagnose.live.launcher_view`, which ``k8sddp launch`` passes); ``None``:
            the launcher's own verdict from this node's records. Passed in, not imported, so the
            runtime imports nothing of k8sddp beyond itself and the contract.
    """

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        out: IO[bytes] | None = None,
        err: IO[bytes] | None = None,
        analyse: Callable[..., Any] | None = None,
    ) -> None:
        if not command:
            raise UsageError("no command given (usage: k8sddp launch -- torchrun ...)")
        self.command = list(command)
        self.env = dict(os.environ if env is None else env)
        self.out = out if out is not None else sys.stdout.buffer
        self.err = err if err is not None else sys.stderr.buffer
        self.analyse = analyse
        self.signalled: int | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.run_dir: RunDir | None = None

    # -- setup ----------------------------------------------------------------------------------
    def _prepare(self) -> tuple[ArtifactDir, RunDir, int]:
        problems = check_guard_env(self.env)
        try:
            _number(self.env, PEER_WAIT, DEFAULT_PEER_WAIT_S, minimum=0.0, maximum=120.0)
        except UsageError as exc:
            problems.append(str(exc))
        from .autoguard import target_of

        script = target_of(self.command)
        if script is not None and script.startswith("script:") and not os.path.isfile(script[7:]):
            # torchrun would start every worker only for each to print "can't open file" and exit
            # 2, which the launcher then reported as the script's own sys.exit (1, final)
            problems.append(f"{script[7:]}: no such training script (relative to {os.getcwd()})")
        if problems:
            raise UsageError("refusing to start: " + "; ".join(problems))
        artifacts = ArtifactDir(Path(self.env[gv.ARTIFACT_DIR]))
        node = node_rank(self.env)
        attempt = (dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
                   + f"-node{node}-{secrets.token_hex(3)}")
        run = artifacts.run(attempt)
        try:
            run.path.mkdir(parents=True, exist_ok=False)
            artifacts.checkpoints.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{gv.ARTIFACT_DIR}={artifacts.root}: cannot write there: {exc}") from None
        fr = Path(self.env[gv.FR_DUMP_TEMP_FILE])
        try:
            fr.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{gv.FR_DUMP_TEMP_FILE}={fr}: cannot create its folder: {exc}") from None
        return artifacts, run, node

    def _record_base(self, run: RunDir, node: int) -> dict[str, Any]:
        env = self.env
        guard = {n: env.get(n) for n in (*gv.MANDATORY, *gv.SAFETY_NETS) if n in env}
        guard.update({n: v for n, v in env.items() if n.startswith("K8SDDP_") and n != RUN_DIR})
        # torchrun: a flag on the command line wins over its PET_* default (argparse_util.py)
        nnodes = torchrun_flag(self.command, "--nnodes") or env.get("PET_NNODES")
        nproc = torchrun_flag(self.command, "--nproc-per-node") or env.get("PET_NPROC_PER_NODE")
        return {
            "format": 1,
            "attempt": run.path.name,
            "node_rank": node,
            "host": socket.gethostname(),
            "command": self.command,
            "k8sddp_version": __version__,
            "image": env.get(IMAGE),
            "code_version": env.get(CODE_VERSION),
            "torch_version": _dist_version("torch"),
            "seed": int(env[SEED]) if env.get(SEED, "").isdigit() else 0,
            "nnodes": nnodes,
            "nproc_per_node": nproc,
            "world_size": env.get("WORLD_SIZE"),
            "guard_variables": guard,
            "start": _utc(),
        }

    # -- signals --------------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: Any) -> None:
        child, run = self.child, self.run_dir
        if signum in TO_WORKERS:
            for rec in (run.started_records().values() if run else ()):
                with contextlib.suppress(OSError, TypeError, ValueError):
                    os.kill(int(rec["pid"]), signum)
            return
        if signum in (signal.SIGTERM, signal.SIGINT) and self.signalled is None:
            self.signalled = signum
            if run is not None:
                with contextlib.suppress(OSError):
                    write_json_atomic(run.preempt_marker, {"signal": signum, "time": _utc()})
        if child is not None and child.poll() is None:
            with contextlib.suppress(OSError):
                child.send_signal(signal.SIGTERM if signum == signal.SIGINT else signum)

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        if os.getpid() != 1:
            return child.wait()
        while True:  # PID 1: reap every orphan, return when our child ends
            pid, status = os.waitpid(-1, 0)
            if pid == child.pid:
                child.returncode = os.waitstatus_to_exitcode(status)
                return child.returncode

    # -- main -----------------------------------------------------------------------------------
    def run(self) -> int:
        """Run one attempt and return the pod's exit code.

        Raises:
            UsageError: missing or invalid guard variables, an unwritable artifact folder.
        """
        artifacts, run, node = self._prepare()
        self.run_dir = run
        record = self._record_base(run, node)
        write_json_atomic(run.run_record(node), {**record, "status": "running"})
        try:
            return self._run(artifacts, run, node, record)
        except Exception as exc:  # a bug in k8sddp launch: the run record still gets its end
            return self._crashed(run, node, record, exc)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: record, then let it go
            self._crashed(run, node, record, exc, code=ec.INTERRUPTED)
            raise

    def _crashed(self, run: RunDir, node: int, record: dict[str, Any], exc: BaseException,
                 code: int = ec.TASK_ERROR) -> int:
        record.update({
            "status": "finished", "end": _utc(), "exit_code": code, "exit_name": "launcher-error",
            "retryable": ec.is_retryable(code), "exit_reason": f"k8sddp launch failed: {type(exc).__name__}: {exc}",
            "launcher_traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        })
        with contextlib.suppress(Exception):
            write_json_atomic(run.run_record(node), record)
        with contextlib.suppress(OSError, ValueError):
            self.err.write(f"k8sddp launch: exit {code} (launcher-error): "
                           f"{record['exit_reason']}; run record {run.run_record(node)}\n".encode())
            self.err.flush()
        return code

    def autoguard_target(self) -> str | None:
        """What zero-code mode guards in this command (:func:`.autoguard.target_of`), or
        ``None``: not a torchrun script/module, ``k8sddp train`` (guarded by its own loop), or
        ``K8SDDP_AUTOGUARD=0``."""
        if self.env.get(AUTOGUARD, "").strip() == "0":
            return None
        from .autoguard import target_of

        return target_of(self.command)

    def _run(self, artifacts: ArtifactDir, run: RunDir, node: int, record: dict[str, Any]) -> int:
        child_env = dict(self.env)
        child_env[RUN_DIR] = str(run.path)
        target = self.autoguard_target()
        record["autoguard"] = target
        if target is not None:  # the workers' sitecustomize arms (docs/runtime.md, "Zero-code mode")
            from .autoguard import ARM, BOOTSTRAP_DIR

            child_env[ARM] = target
            child_env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(BOOTSTRAP_DIR), child_env.get("PYTHONPATH", "")) if p)
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        lock = threading.Lock()
        previous = {s: signal.signal(s, self._on_signal) for s in (*FORWARDED, *TO_WORKERS)}
        started_at = time.monotonic()
        try:
            try:
                self.child = child = subprocess.Popen(
                    self.command, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            except FileNotFoundError as exc:
                return self._finish(run, node, record, artifacts, ec.NOT_FOUND, str(exc), tail)
            except PermissionError as exc:
                return self._finish(run, node, record, artifacts, ec.NOT_EXECUTABLE, str(exc), tail)
            if self.signalled is not None:  # a signal that came before the child existed
                with contextlib.suppress(OSError):
                    child.send_signal(signal.SIGTERM)
            assert child.stdout is not None and child.stderr is not None
            copiers = [threading.Thread(target=_copy, args=(child.stdout, self.out, tail, lock), daemon=True),
                       threading.Thread(target=_copy, args=(child.stderr, self.err, tail, lock), daemon=True)]
            for t in copiers:
                t.start()
            code = self._wait(child)
            for t in copiers:
                t.join(timeout=5)
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
        record["duration_s"] = round(time.monotonic() - started_at, 3)
        return self._finish(run, node, record, artifacts, code, None, tail)

    def _diagnose(self, run: RunDir, node: int, tail: collections.deque[str], *, succeeded: bool) -> Any:
        """The shared analysis (:mod:`k8sddp.diagnose`) of this attempt and, on a shared volume,
        the other nodes' (waiting at most ``K8SDDP_PEER_WAIT_SECONDS``, not at all when this
        node's command ``succeeded``: a node whose ranks all finished blames no peer, and its
        pod should not linger); ``None`` if it fails (the launcher's own verdict then stands,
        with a warning); ``None`` without one (``analyse``)."""
        if self.analyse is None:
            return None
        raw = torchrun_flag(self.command, "--nnodes") or self.env.get("PET_NNODES") or "1"
        nnodes = int(raw.split(":")[-1]) if raw.split(":")[-1].isdigit() else 1
        wait = 0.0 if succeeded else _number(self.env, PEER_WAIT, DEFAULT_PEER_WAIT_S, minimum=0.0,
                                             maximum=120.0)  # checked in _prepare
        try:
            return self.analyse(run.path, node=node, nnodes=nnodes, log_tail=list(tail),
                                 wait_s=wait)
        except Exception as exc:  # the diagnosis must never cost the pod its exit code
            self._warn(f"diagnosis failed ({type(exc).__name__}: {exc}); using this node's records only")
            return None

    def _warn(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.err.write(f"k8sddp launch: warning: {text}\n".encode())
            self.err.flush()

    def _finish(self, run: RunDir, node: int, record: dict[str, Any], artifacts: ArtifactDir,
                child_code: int, error: str | None, tail: collections.deque[str]) -> int:
        started = run.started_records()
        failures = run.failure_records()
        quiet = [r for r in started if r not in failures]
        if error is not None:
            outcome = Outcome(child_code, f"cannot run {self.command[0]!r}: {error}")
        else:
            hard = _hard_stopped(run, quiet)
            # a hard-stopped rank: its soft watchdog's header, when it got that far, is newer
            # than its trace (the thread that writes the trace starved)
            last = {r: (_stall_header(run, r) if r in hard else None) or run.last_trace_entry(r)
                    for r in quiet}
            outcome = decide(
                child_code=child_code, started=started, failures=failures,
                last_trace=last, hard_stopped=hard, signalled=self.signalled,
                log_tail=list(tail))
        if len(outcome.suspects) > 1:  # a tie on step and phase: drop ranks seen waiting on peers
            busy = [r for r in outcome.suspects
                    if waiting_in_collective(run, r, started.get(r, {}).get("main_thread")) is False]
            if busy:
                outcome.suspects = busy
        diagnosis = self._diagnose(run, node, tail, succeeded=child_code == 0) if error is None else None
        if diagnosis is not None:
            outcome = refine(outcome, diagnosis)
        progress = max(outcome.max_step, newest_complete_step(artifacts.checkpoints))
        state_path = artifacts.launcher_state(node)
        raw_state = read_json(state_path)
        state = valid_state(raw_state)
        if state is None and state_path.exists():
            self._warn(f"ignoring malformed hang-streak state {state_path} "
                       f"({str(raw_state)[:100] if raw_state is not None else 'not JSON'})")
        outcome, new_state = apply_hang_streak(
            outcome, state,
            max_restarts=int(self.env.get(gv.MAX_HANG_RESTARTS, gv.DEFAULT_MAX_HANG_RESTARTS)),
            progress_step=progress)
        try:
            if new_state is None:
                with contextlib.suppress(FileNotFoundError):
                    state_path.unlink()
            elif new_state is not state:
                write_json_atomic(state_path, new_state)
        except OSError as exc:
            self._warn(f"cannot update the hang-streak state {state_path}: {exc}")
        rank0 = started.get(0) or next(iter(started.values()), {})
        if record.get("autoguard") and error is None and not started:
            # the workers' bootstrap never armed (it says why on stderr, "k8sddp autoguard:
            # bootstrap failed"): the run was not guarded, which an exit 0 alone would hide
            self._warn(f"zero-code guard for {record['autoguard']} armed no worker (no started "
                       "record): the script ran unguarded; see 'k8sddp autoguard:' lines above")
        record.update({
            "autoguard_armed": bool(started) if record.get("autoguard") else None,
            "status": "finished",
            "end": _utc(),
            "child_exit_code": child_code,
            "exit_code": outcome.code,
            "exit_name": ec.NAMES.get(outcome.code, "unknown"),
            "retryable": ec.is_retryable(outcome.code),
            "exit_reason": outcome.reason,
            "causes": {str(k): v for k, v in outcome.causes.items()},
            "suspected_stuck_ranks": outcome.suspects,
            "ranks": {str(k): v for k, v in outcome.ranks.items()},
            "max_step": outcome.max_step,
            "hang_streak": new_state,
            "world_size": rank0.get("world_size", record.get("world_size")),
            "torch_version": rank0.get("torch_version", record.get("torch_version")),
            "nccl_version": rank0.get("nccl_version"),
            "backend": rank0.get("backend"),
            "seed": rank0.get("seed", record.get("seed")),
            "code_version": rank0.get("code_version") or record.get("code_version"),
            "pg_timeout_s": rank0.get("pg_timeout_s"),
            "pg_timeout_source": rank0.get("pg_timeout_source"),
            "guard_mode": rank0.get("guard_mode"),
            "tracebacks": {str(r): f.get("traceback") for r, f in failures.items() if f.get("traceback")},
            "failure_log_tail": list(tail),
            "diagnosis": diagnosis.as_dict() if diagnosis is not None else None,
        })
        write_json_atomic(run.run_record(node), record)
        suspects = ""
        if outcome.suspects:
            parts = []
            named = {c["rank"]: c for c in outcome.culprits}
            for r in outcome.suspects:
                info = named.get(r) or outcome.ranks.get(r, {})
                where = f" on node {info['node']}" if info.get("node") is not None else ""
                frame = f" at {info['frame']}" if info.get("frame") else ""
                parts.append(f"rank {r}{where} (phase {info.get('phase')}, step {info.get('step')}){frame}")
            suspects = "; suspected stuck: " + ", ".join(parts)
        msg = (f"k8sddp launch: exit {outcome.code} ({ec.NAMES.get(outcome.code, 'unknown')}, "
               f"{'retryable' if ec.is_retryable(outcome.code) else 'final' if outcome.code else 'done'}): "
               f"{outcome.reason}"
               f"{suspects}; run record {run.run_record(node)}\n")
        with contextlib.suppress(OSError, ValueError):
            self.err.write(msg.encode())
            self.err.flush()
        return outcome.code


def launch(command: Sequence[str], env: Mapping[str, str] | None = None, *,
           analyse: Callable[..., Any] | None = None) -> int:
    """Run ``command`` under the launcher and return the pod's exit code (:class:`Launcher`;
    ``analyse`` as there)."""
    return Launcher(command, env, analyse=analyse).run()
