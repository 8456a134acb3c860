"""``k8sddp diagnose`` on what ``k8sddp.ray`` leaves (fast: volumes written by hand in the guard's
formats; the real ones come from Ray Train in ``tests/ray/test_ray_train.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from k8sddp.diagnose import diagnose_dir
from k8sddp.diagnose.load import find_attempt_dirs
from k8sddp.diagnose.stacks import parse_stacks

SITE = "/usr/lib/python3.11/site-packages"
#: Ray's worker actor: its idle main thread (faulthandler's last block) is never the rank's.
RAY_MAIN = ("Thread 0x00007f00000000aa (most recent call first):\n"
            f'  File "{SITE}/ray/_private/worker.py", line 1030 in main_loop\n'
            f'  File "{SITE}/ray/_private/workers/default_worker.py", line 330 in <module>\n')
THREAD = "0x00007f0000000001"


def _stacks(rank: int, top: list[tuple[str, int, str]], fatal: bool) -> str:
    frames = "".join(f'  File "{f}", line {n} in {fn}\n' for f, n, fn in top)
    loop = [("/app/train.py", 40, "train_loop"), (f"{SITE}/k8sddp/ray.py", 300, "wrapped"),
            (f"{SITE}/ray/train/v2/_internal/execution/worker_group/thread_runner.py", 50, "_run_target"),
            ("/usr/lib/python3.11/threading.py", 982, "run"), ("/usr/lib/python3.11/threading.py", 1002, "_bootstrap")]
    frames += "".join(f'  File "{f}", line {n} in {fn}\n' for f, n, fn in loop)
    text = (f"--- k8sddp rank {rank}: training thread {THREAD} ---\n"
            f"--- k8sddp rank {rank}: watchdog: no heartbeat for 4.10 s in phase 'step' at step 9 (budget 4 s) ---\n"
            f"Current thread 0x00007f0000000002 (most recent call first):\n"
            f'  File "{SITE}/k8sddp/runtime/report.py", line 120 in dump_stacks\n\n'
            f"Thread {THREAD} (most recent call first):\n{frames}\n{RAY_MAIN}")
    if fatal:
        text += (f"Fatal Python error: Aborted\n\nThread {THREAD} (most recent call first):\n{frames}\n{RAY_MAIN}")
    return text


def _rank(folder: Path, rank: int, *, kind: str | None, step: int, phase: str, stacks: str | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    base = {"rank": rank, "node": 0, "world_size": 2, "step": step, "phase": phase}
    (folder / f"started-rank{rank}.json").write_text(json.dumps({**base, "guard_mode": "ray", "runner": "ray"}))
    (folder / f"trace-rank{rank}.jsonl").write_text(json.dumps({"rank": rank, "step": step, "phase": phase,
                                                               "mono": 1.0, "wall": 2.0}) + "\n")
    if kind is not None:
        rec = {**base, "kind": kind, "exit_code": 0 if kind == "exited" else 142, "message": ""}
        (folder / f"failure-rank{rank}.json").write_text(json.dumps(rec))
    if stacks is not None:
        (folder / f"stacks-rank{rank}.txt").write_text(stacks)


def _volume(root: Path) -> Path:
    runs = root / "runs"
    stalled = runs / "ray-20261202T001500.120Z-a1b2c3"
    # rank 1 stood in its own loop (time.sleep: no Python frame above it); rank 0 waited in
    # Ray Train's report barrier; Ray killed rank 0 before its own budget passed
    _rank(stalled, 1, kind="hang", step=9, phase="step",
          stacks=_stacks(1, [], fatal=True))
    _rank(stalled, 0, kind=None, step=9, phase="checkpoint", stacks=None)
    again = runs / "ray-20261202T001530.900Z-d4e5f6"
    for r in (0, 1):
        _rank(again, r, kind="exited", step=12, phase="step", stacks=None)
    (root / "ray" / "stall").mkdir(parents=True)
    return root


def test_ray_attempts_newest_finished_and_the_one_before_names_the_stalled_rank(tmp_path: Path) -> None:
    root = _volume(tmp_path)
    newest = diagnose_dir(root)
    assert newest.culprits == [] and "finished" in newest.verdict and newest.restarts == 2
    diag = diagnose_dir(root, restart=1).as_dict()
    (c,) = diag["culprits"]
    assert (c["kind"], c["rank"], c["node"], c["phase"], c["step"]) == ("hang", 1, 0, "step", 9)
    assert any("/app/train.py:40 in train_loop" in e for e in c["evidence"])
    # Ray's storage path (or an experiment folder) inside the volume finds the same attempts
    assert find_attempt_dirs(root / "ray" / "stall") == find_attempt_dirs(root)


def test_the_training_thread_is_the_rank_and_ray_report_is_a_wait() -> None:
    busy = parse_stacks(_stacks(1, [], fatal=True))
    assert busy.frames[0].where() == "/app/train.py:40 in train_loop" and busy.waiting is False
    report = [("/usr/lib/python3.11/threading.py", 320, "wait"), (f"{SITE}/ray/_private/worker.py", 900, "get"),
              (f"{SITE}/ray/train/v2/_internal/execution/train_fn_utils.py", 180, "report"),
              (f"{SITE}/k8sddp/ray.py", 150, "wrapped")]
    waiting = parse_stacks(_stacks(0, report, fatal=False))
    assert waiting.waiting is True and waiting.stalled_frame() is not None
    assert waiting.stalled_frame().where() == "/app/train.py:40 in train_loop"  # type: ignore[union-attr]
