"""Fast checks of the analysis on hand-written volumes (formats as the runtime writes them)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from k8sddp.catalogue import DECISIONS, RULES
from k8sddp.cli import main
from k8sddp.diagnose import diagnose_dir
from k8sddp.diagnose.flightrec import read_fr
from k8sddp.diagnose.live import launcher_view
from k8sddp.diagnose.redact import redact
from k8sddp.diagnose.torchrun import worker_exits
from k8sddp.runtime import exitcodes as ec
from k8sddp.runtime.outcome import Outcome, refine
from tests.diagnose.synth import BUSY, WAITING, dump, entry, rank0_hang, rank_files, run_record


def test_names_the_rank_that_never_entered_the_collective(tmp_path: Path) -> None:
    diag = diagnose_dir(rank0_hang(tmp_path))
    (c,) = diag.culprits
    assert (c.kind, c.rank, c.phase, c.step, c.confidence) == ("hang", 0, "checkpoint", 3, "high")
    assert c.frame == "/app/train.py:88 in save_on_rank0"
    assert c.collective == {"seq": 5, "op": "all_reduce", "sizes": "[[2177]]", "site": "/app/k8sddp/runtime/loop.py:398 in run",
                            "entered_by": [1], "not_entered_by": [0]}
    assert {s.rank: s.role for s in diag.ranks} == {0: "culprit", 1: "waiting"}
    assert c.decision == "hang-rank0-branch"


def test_truncated_dump_lowers_confidence_and_says_so(tmp_path: Path) -> None:
    rank0_hang(tmp_path)
    fr = next(tmp_path.glob("runs/*/fr-rank1.pkl"))
    fr.write_bytes(fr.read_bytes()[:100])
    diag = diagnose_dir(tmp_path)
    (c,) = diag.culprits
    assert c.rank == 0 and c.confidence == "low"  # stacks only (medium), lowered for the dump
    assert any("fr-rank1.pkl: truncated" in n for n in diag.notes), diag.notes
    assert any("confidence lowered" in n for n in diag.notes)


def test_one_nodes_view_is_said_and_lowers_confidence(tmp_path: Path) -> None:
    rank0_hang(tmp_path, nodes=2)
    for p in tmp_path.glob("runs/*-node1-*"):
        for f in p.iterdir():
            f.unlink()
        p.rmdir()
    diag = diagnose_dir(tmp_path)
    assert any("records of 1 of 2 ranks are missing (1)" in n for n in diag.notes)
    own = next(tmp_path.glob("runs/*-node0-*"))
    view = launcher_view(own, node=0, nnodes=2, log_tail=[], wait_s=0.0)
    assert view.notes[0].startswith("view of node 0 only")


def test_majority_names_the_odd_collective_among_three_ranks(tmp_path: Path) -> None:
    d = tmp_path / "runs" / "20261201T100000-node0-bbbbbb"
    run_record(d if d.mkdir(parents=True) is None else d, 0)
    common = [entry(s) for s in range(1, 4)]
    for r in (0, 1):
        rank_files(d, r, world=3, kind="hang", step=3, phase="step", stacks=WAITING, fr=dump(common + [entry(4, retired=False)]))
    rank_files(d, 2, world=3, kind="hang", step=3, phase="hook", stacks=WAITING,
               fr=dump(common + [entry(4, op="broadcast", sizes=((3,),), retired=False, file="/app/train.py", line=12)]))
    (c,) = diagnose_dir(tmp_path).culprits
    assert (c.kind, c.rank, c.confidence) == ("collective-mismatch", 2, "high")
    assert c.collective is not None and c.collective["seq"] == 4 and c.collective["op"] == "broadcast"
    assert c.decision == "collective-mismatch" and c.exit_code == 1


def test_gloo_abort_without_dump_names_the_aborting_rank(tmp_path: Path) -> None:
    d = tmp_path / "runs" / "20261201T100000-node0-cccccc"
    d.mkdir(parents=True)
    tail = ["terminate called after throwing an instance of 'gloo::EnforceNotMet'",
            "  what():  [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 2180 vs 4. Received data size "
            "doesn't match expected size. Is there a distributed collective mismatch in your code?",
            "  rank      : 1 (local_rank: 1)", "  exitcode  : -6 (pid: 9)"]
    run_record(d, 0, failure_log_tail=tail, exit_code=137)
    rank_files(d, 0, world=2, kind="comm", step=3, phase="step", stacks=None, fr=dump([entry(s) for s in range(1, 6)]))
    rank_files(d, 1, world=2, kind="x", step=3, phase="hook", stacks=None, fr=None)
    (d / "failure-rank1.json").unlink()
    (d / "stacks-rank1.txt").write_text(
        "Fatal Python error: Aborted\n\nCurrent thread 0x0000000000000001 (most recent call first):\n"
        '  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
        '  File "/app/train.py", line 50 in extra\n  File "/app/k8sddp/runtime/worker.py", line 152 in run_worker\n')
    (c,) = diagnose_dir(tmp_path).culprits
    assert (c.kind, c.rank, c.frame) == ("collective-mismatch", 1, "/app/train.py:50 in extra")
    assert c.collective is not None and c.collective["seq"] == 5
    out = refine(Outcome(ec.WORKER_KILLED, "rank(s) 1 died without a record"), diagnose_dir(tmp_path))
    assert out.code == ec.TASK_ERROR and "collective mismatch" in out.reason


def test_a_rank_ended_by_the_hard_stop_while_its_peer_died_only_waited(tmp_path: Path) -> None:
    """Rank 1 SIGKILLed (the OOM killer); rank 0, waiting for it, ended by the hard stop's SIGALRM
    before its watchdog wrote a record (seen on a loaded CI machine): one culprit, rank 1."""
    d = tmp_path / "runs" / "20261201T100000-node0-eeeeee"
    d.mkdir(parents=True)
    for r in (0, 1):
        rank_files(d, r, world=2, kind="x", step=3, phase="step", stacks=None, fr=None)
        (d / f"failure-rank{r}.json").unlink()
    for code in ("-14", "142"):  # torchrun's signal, or the runtime's own hang exit with its record lost
        tail = ["  rank      : 0 (local_rank: 0)", f"  exitcode  : {code} (pid: 8)",
                "  rank      : 1 (local_rank: 1)", "  exitcode  : -9 (pid: 9)"]
        run_record(d, 0, failure_log_tail=tail, exit_code=137)
        diag = diagnose_dir(tmp_path)
        (c,) = diag.culprits
        assert (c.kind, c.rank, c.signal) == ("died", 1, "SIGKILL")
        assert {s.rank: s.role for s in diag.ranks} == {0: "waiting", 1: "culprit"}
        assert any("rank 0: ended by SIGALRM" in n for n in diag.notes), diag.notes
    # both ended by the aftermath signals alone: neither is set aside
    run_record(d, 0, failure_log_tail=[tail[0], tail[1], tail[2], "  exitcode  : -15 (pid: 9)"], exit_code=137)
    assert sorted(c.rank for c in diagnose_dir(tmp_path).culprits) == [0, 1]


def test_nccl_teardown_stays_retryable(tmp_path: Path) -> None:
    d = tmp_path / "runs" / "20261201T100000-node0-dddddd"
    d.mkdir(parents=True)
    tail = ["[rank0]:[E] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE)",
            "  rank      : 0 (local_rank: 0)", "  exitcode  : -6 (pid: 9)"]
    run_record(d, 0, failure_log_tail=tail, exit_code=137)
    rank_files(d, 0, world=2, kind="x", step=3, phase="step", stacks=WAITING, fr=dump([entry(s) for s in range(1, 8)]))
    (d / "failure-rank0.json").unlink()
    rank_files(d, 1, world=2, kind="terminated", step=3, phase="eval", stacks=BUSY, fr=dump([entry(s) for s in range(1, 7)]))
    diag = diagnose_dir(tmp_path)
    assert (diag.culprits[0].kind, diag.culprits[0].rank) == ("hang", 1)
    out = refine(Outcome(ec.WORKER_KILLED, "rank(s) 0 died without a record"), diag)
    assert out.code == ec.HANG and "NCCL asynchronous-error teardown" in out.reason and out.suspects == [1]


def test_flight_recorder_reader_refuses_classes_and_reports_foreign_files(tmp_path: Path) -> None:
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({"entries": [Path("/etc")]}))
    assert read_fr(evil).status == "unreadable"
    assert read_fr(tmp_path / "none.pkl").status == "missing"


def test_torchrun_summary_and_redaction() -> None:
    assert worker_exits(["  rank      : 3 (local_rank: 1)", "  exitcode  : -9 (pid: 1)"]) == {3: -9}
    text = redact("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx Authorization: Bearer abc.def https://u:pw@host/x "
                  "ghp_abcdefghijklmnopqrstuvwxyz0123 AKIAABCDEFGHIJKLMNOP ok=1")
    assert "hf_abc" not in text and "Bearer abc" not in text and ":pw@" not in text
    assert "ghp_" not in text and "AKIA" not in text and "ok=1" in text


def test_cli_reports_json_svg_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rank0_hang(tmp_path / "v")
    assert main(["diagnose", str(tmp_path / "v"), "--format", "json", "--plot", str(tmp_path / "t.svg")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["culprits"][0]["rank"] == 0 and doc["culprits"][0]["exit_code"] == 142
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml")
    assert main(["diagnose", str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["diagnose", str(tmp_path / "empty")]) == 2
    assert main(["diagnose", str(tmp_path / "v"), "--plot", str(tmp_path / "t.gif")]) == 2
    assert main(["diagnose", str(tmp_path / "v"), "--restart", "3"]) == 2
    assert "holds 1" in capsys.readouterr().err


def test_job_reads_a_local_submit_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    rank0_hang(tmp_path / ".k8sddp-local" / "myjob" / "pvc" / "ckpt")
    monkeypatch.chdir(tmp_path)
    assert main(["diagnose", "--job", "myjob"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("culprit: rank 0 on node 0: hang")


def test_rules_table_comes_from_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["decisions"]
    assert [r["trigger"] for r in rows] == [d.trigger for d in DECISIONS]
    assert all(g["id"] in RULES for r in rows for g in r["guardrails"])
    assert all(r["action"] == ("retry" if r["exit_code"] >= 128 else "stop") for r in rows)


def test_incident_new_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rank0_hang(tmp_path / "v")
    next((tmp_path / "v").glob("runs/*/run-node0.json")).write_text(json.dumps({
        "status": "finished", "node_rank": 0, "exit_code": 142, "image": "img:1", "code_version": "abc123",
        "seed": 7, "failure_log_tail": ["export WANDB_API_KEY=0123456789abcdef0123", "boom"]}))
    assert main(["incident", "new", str(tmp_path / "v"), "--out", str(tmp_path / "inc")]) == 0
    (path,) = (tmp_path / "inc").glob("*.md")
    text = path.read_text()
    assert "trigger: hang-rank0-branch" in text and "code_version: abc123" in text and "seed: 7" in text
    assert "0123456789abcdef0123" not in text and "[REDACTED]" in text
    capsys.readouterr()
    assert main(["incident", "check", str(tmp_path / "inc")]) == 0
    path.write_text(text.replace("confidence: high", "confidence: certain").replace("- KDP601", "- KDP999"))
    assert main(["incident", "check", str(tmp_path / "inc")]) == 1
    out = capsys.readouterr().out
    assert 'confidence: "certain" is not one of' in out and "KDP999 is not a rule" in out


def test_the_core_the_launcher_uses_imports_only_the_stdlib() -> None:
    import subprocess
    import sys

    code = ("import sys, k8sddp.diagnose, k8sddp.diagnose.live, k8sddp.diagnose.text, k8sddp.runtime.launcher; "
            "bad = [m for m in ('torch', 'matplotlib', 'yaml', 'kubernetes', 'jsonschema_rs', 'jinja2') "
            "if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_committed_incident_records_are_valid() -> None:
    # docs/incidents/ holds the seed's hang, written by `k8sddp incident new` from a real run
    repo = Path(__file__).resolve().parents[2]
    assert list((repo / "docs" / "incidents").glob("*.md"))
    assert main(["incident", "check", str(repo / "docs" / "incidents")]) == 0


def test_closed_stdout_is_exit_2_not_a_traceback(tmp_path: Path) -> None:
    """``k8sddp rules >&-`` left ``sys.stdout`` None: an AttributeError traceback, exit 1."""
    import subprocess
    import sys
    rank0_hang(tmp_path)
    for argv in ("rules", f"diagnose {tmp_path}"):
        proc = subprocess.run(f"{sys.executable} -m k8sddp {argv} >&-", shell=True,
                              capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "standard output is closed" in proc.stderr


_SOFT_DUMP = ("--- k8sddp rank {r}: watchdog: no heartbeat for 60.02 s in phase 'init' at step 0 (budget 60 s) ---\n"
              "Current thread 0x00007f00000000aa (most recent call first):\n"
              '  File "/app/k8sddp/runtime/report.py", line 115 in dump_stacks\n'
              '  File "/app/k8sddp/runtime/watchdog.py", line 291 in _run\n'
              '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n\n'
              "Thread 0x00007f00000000bb (most recent call first):\n{main}\n")
# the hard stop fired while the watchdog thread imported torch modules (``<module>`` frames,
# truncated by faulthandler): that thread is listed first, the main thread last
_HARD_DUMP = ("Timeout (0:00:10)!\n"
              "Thread 0x00007f00000000aa (most recent call first):\n"
              '  File "<frozen importlib._bootstrap_external>", line 147 in _path_stat\n'
              '  File "/x/site-packages/torch/distributed/_shard/api.py", line 8 in <module>\n'
              "  ...\n\n"
              "Thread 0x00007f00000000bb (most recent call first):\n{main}\n")
_IN_SLEEP = '  File "/app/stall.py", line 8 in <module>'
_IN_ALLREDUCE = ('  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
                 '  File "/app/stall.py", line 6 in <module>')
# rank 1's main thread at the hard stop: all_reduce had raised, torch's excepthook was dumping
_IN_EXCEPTHOOK = ('  File "<frozen importlib._bootstrap>", line 120 in acquire\n'
                  '  File "/app/k8sddp/runtime/report.py", line 126 in dump_flight_recorder\n'
                  '  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 1928 in _distributed_excepthook')


def test_hard_stop_during_the_watchdogs_import_names_the_main_thread_and_only_the_stalled_rank(
        tmp_path: Path) -> None:
    """Both ranks hard-stopped: diagnose took the watchdog thread's import frames for rank 1's
    main thread and named the rank waiting in all_reduce a gil-starved culprit beside rank 0."""
    from k8sddp.diagnose.stacks import parse_stacks
    d = tmp_path / "runs" / "20261201T100000-node0-aaaaaa"
    run_record(d if d.mkdir(parents=True) is None else d, 0)
    for r, soft, hard in ((0, _IN_SLEEP, _IN_SLEEP), (1, _IN_ALLREDUCE, _IN_EXCEPTHOOK)):
        rank_files(d, r, world=2, kind="x", step=0, phase="init", stacks=None, fr=None)
        (d / f"failure-rank{r}.json").unlink()
        (d / f"stacks-rank{r}.txt").write_text(_SOFT_DUMP.format(r=r, main=soft) + _HARD_DUMP.format(main=hard))
    info = parse_stacks((d / "stacks-rank1.txt").read_text())
    assert info.frames[0].func == "all_reduce" and info.waiting
    report = diagnose_dir(tmp_path)
    assert [(c.rank, c.kind) for c in report.culprits] == [(0, "gil-starved")]
    assert report.culprits[0].frame is not None and "stall.py:8" in report.culprits[0].frame


def test_truncated_records_are_said_in_the_notes_and_lower_the_confidence(tmp_path: Path) -> None:
    """A truncated failure record was read as absent without a word: 'the ranks are still running'."""
    rank0_hang(tmp_path)
    d = next((tmp_path / "runs").iterdir())
    clean = diagnose_dir(tmp_path).culprits[0].confidence
    (d / "failure-rank1.json").write_text('{"rank": 1, "kind": "ha')
    (d / "trace-rank1.jsonl").write_text('{"step": 3')
    report = diagnose_dir(tmp_path)
    assert any("failure-rank1.json" in n and "trace-rank1.jsonl" in n for n in report.notes), report.notes
    assert report.culprits[0].rank == 0 and report.culprits[0].confidence != clean
    (d / "trace-rank1.jsonl").write_text("")  # no beat yet: not damage
    (d / "failure-rank1.json").unlink()
    assert not any("unreadable" in n for n in diagnose_dir(tmp_path).notes)
    for r in (0, 1):  # nothing readable: no culprit is invented (it said "comm" with no evidence)
        (d / f"failure-rank{r}.json").write_text("junk")
        (d / f"stacks-rank{r}.txt").unlink()
        (d / f"fr-rank{r}.pkl").unlink()
    report = diagnose_dir(tmp_path)
    assert report.culprits == [] and report.verdict.startswith("no failure could be read"), report.verdict
    out = tmp_path / "incidents"  # and no incident record is written for it
    assert main(["incident", "new", str(tmp_path), "--out", str(out)]) == 2
    assert not out.exists()


def test_incident_check_takes_one_file_and_reports_bad_yaml_on_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`incident check rec.md` said 'no such folder'; a YAML error spanned five lines."""
    bad = tmp_path / "a.md"
    bad.write_text("---\nid: [\n---\n# x\n")
    assert main(["incident", "check", str(bad)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"{bad}:2: front matter is not YAML"), out
    assert main(["incident", "check", str(tmp_path / "missing.md")]) == 2


@pytest.mark.parametrize("seconds", ["nan", "inf", "0", "-5"])
def test_plot_seconds_out_of_range_is_a_usage_error(tmp_path: Path, seconds: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`--seconds nan --plot t.png` ended in matplotlib's ValueError traceback."""
    rank0_hang(tmp_path / "v")
    assert main(["diagnose", str(tmp_path / "v"), "--seconds", seconds, "--plot", str(tmp_path / "t.png")]) == 2
    assert "--seconds" in capsys.readouterr().err and not (tmp_path / "t.png").exists()
