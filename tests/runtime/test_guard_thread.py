"""The runtime's Guard started outside the main thread (as ``k8sddp.ray`` starts it in Ray Train's
training thread), in a real child process: the soft path ends it with ``os.abort`` after the
records; a GIL-holding stall is ended by the C-level hard stop, also where SIGALRM has a Python
handler that a thread cannot reset; ``k8sddp diagnose``'s stack reader picks the training thread."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from k8sddp.diagnose.load import read_attempt
from k8sddp.diagnose.stacks import parse_stacks
from tests.runtime.helpers import REPO

SCRIPT = textwrap.dedent('''
    import os, re, signal, sys, threading, time
    from pathlib import Path
    from k8sddp.runtime.guard import Guard

    run, how = Path(sys.argv[1]), sys.argv[2]
    if how == "gil-handler":
        signal.signal(signal.SIGALRM, lambda *a: None)  # the main thread's: a thread cannot undo it
    env = {"K8SDDP_ARTIFACT_DIR": str(run.parent.parent), "K8SDDP_WATCHDOG_TIMEOUT_SECONDS": "1",
           "K8SDDP_LEARN_BUDGETS": "0"}

    def training_thread_body():
        g = Guard(env, mode="ray", rank=1, local_rank=1, world=2, node=0, run_dir=run, on_stalled=os.abort)
        g.start()
        g.record_started(hard_stop=g.hard_stop)
        g.beat(3, "step")
        if how == "soft":
            time.sleep(60)  # the GIL released: the watchdog thread fires
        else:
            re.match(r"(a+)+$", "a" * 64 + "b")  # one C call holding the GIL: only the hard stop ends it

    t = threading.Thread(target=training_thread_body, name="TrainingThread")
    t.start()
    while True:
        time.sleep(1)  # the main thread idles, as a Ray worker actor's does
''')


def _run(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    run = tmp_path / "runs" / "ray-20261202T000000.000Z-abcdef"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(run), how], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=False)
    return proc, run


def test_soft_stall_in_a_thread_writes_records_then_aborts(tmp_path: Path) -> None:
    proc, run = _run(tmp_path, "soft")
    assert proc.returncode == -signal.SIGABRT, proc.stderr  # os.abort from the watchdog thread
    rec = json.loads((run / "failure-rank1.json").read_text())
    assert (rec["kind"], rec["rank"], rec["node"], rec["step"], rec["phase"]) == ("hang", 1, 0, 3, "step")
    assert rec["since_beat_s"] >= 1.0 and rec["budget_s"] == 1.0
    started = json.loads((run / "started-rank1.json").read_text())
    assert started["guard_mode"] == "ray" and started["hard_stop"] == "SIGALRM"
    text = (run / "stacks-rank1.txt").read_text()
    assert f"training thread {started['main_thread']}" in text  # the thread that ran the guard
    assert "watchdog: no heartbeat" in text and "Fatal Python error: Aborted" in text
    info = parse_stacks(text)
    assert info.frames and info.frames[0].func == "training_thread_body"  # not the idle main thread
    assert info.waiting is False and info.fatal == "Aborted"
    a = read_attempt(run)
    assert a.ranks[1].node == 0  # from the record: a Ray folder names no node


def test_gil_held_in_a_thread_is_ended_by_the_hard_stop(tmp_path: Path) -> None:
    proc, run = _run(tmp_path, "gil")
    assert proc.returncode == -signal.SIGALRM, proc.stderr  # SIGALRM at its default action
    assert "Timeout (" in (run / "stacks-rank1.txt").read_text()


def test_hard_stop_uses_faulthandler_exit_where_sigalrm_has_a_handler(tmp_path: Path) -> None:
    proc, run = _run(tmp_path, "gil-handler")
    assert proc.returncode == 1, proc.stderr  # faulthandler.dump_traceback_later(exit=True)
    assert json.loads((run / "started-rank1.json").read_text())["hard_stop"] == "faulthandler exit 1"
    text = (run / "stacks-rank1.txt").read_text()
    assert "Timeout (" in text
    # the training thread, stopped inside the C call (re.match) called from its body
    assert [f.func for f in parse_stacks(text).frames][:2] == ["match", "training_thread_body"]
