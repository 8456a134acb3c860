"""The same real failures fed to ``k8sddp diagnose``, torchrun's failure summary and ``torchfrtrace``.

Each case runs for real (``k8sddp launch`` + torchrun + 2 gloo ranks on CPU, the planted culprits
of ``tests/diagnose/dg_tasks.py``, 2 s watchdog budget); then the table says which rank each tool
names:

* k8sddp diagnose: the culprit's rank, kind and phase;
* torchrun: the rank of its "Root Cause (first observed failure)" block (the first worker that
  exited non-zero, usually the victim whose watchdog fired first);
* torchfrtrace (torch's flight-recorder analyser, ``torch/distributed/flight_recorder``): run on
  the same dumps (renamed ``fr-rank<R>`` as it wants); with torch 2.13 it crashes on gloo dumps
  (``KeyError`` in ``build_collectives``), which the table records as it happens.

    python bench/diagnose_compare.py            # every case (about 3-4 minutes on two busy cores)
    python bench/diagnose_compare.py own_code   # some cases
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "diagnose")]

from k8sddp.diagnose import diagnose_dir  # noqa: E402
from tests.runtime.helpers import Run, guard_env, launch_cmd, run_dirs  # noqa: E402

CASES = {  # name: (task, extra env, planted culprit rank)
    "own_code": ("dg_tasks:own_code", {}, 1),
    "eval_rank0": ("dg_tasks:in_phase", {"DG_PHASE": "eval", "DG_RANK": "0"}, 0),
    "extra_collective": ("dg_tasks:extra_collective", {}, 1),
    "sigkill": ("dg_tasks:die", {}, 1),
    "exception": ("dg_tasks:boom", {}, 1),
    "gil": ("dg_tasks:gil", {}, 1),
}
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")


def torchrun_root_cause(log: str) -> str:
    """The rank torchrun's summary names as the root cause, or ``-``."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if "Root Cause (first observed failure)" in line:
            for nxt in lines[i + 1:i + 8]:
                m = _ROOT_RANK.match(nxt)
                if m:
                    return m.group(1)
    return "-"


def torchfrtrace(attempt: Path) -> str:
    """torchfrtrace's verdict on the attempt's dumps: its last line, or how it crashed."""
    dumps = sorted(attempt.glob("fr-rank*.pkl"))
    if not dumps:
        return "no dumps"
    with tempfile.TemporaryDirectory() as tmp:
        for d in dumps:
            shutil.copy(d, Path(tmp) / d.stem)
        exe = shutil.which("torchfrtrace")
        cmd = [exe] if exe else [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
        proc = subprocess.run([*cmd, tmp, "-p", "fr-rank", "--allow-incomplete-ranks"], capture_output=True,
                              text=True, timeout=120, check=False)
    text = (proc.stdout + proc.stderr).strip().splitlines()
    if proc.returncode != 0:
        err = next((x for x in reversed(text) if re.match(r"^\w+(Error|Exception)", x)), text[-1] if text else "")
        return f"crashed (exit {proc.returncode}): {err[:80]}"
    return (text[-1] if text else "(no output)")[:80]


def main() -> int:
    """Run the cases; print the comparison table."""
    wanted = sys.argv[1:] or list(CASES)
    rows = []
    for name in wanted:
        task, extra, planted = CASES[name]
        with tempfile.TemporaryDirectory(prefix="k8sddp-compare-") as tmp:
            art = Path(tmp) / "a"
            art.mkdir()
            env = guard_env(art, K8SDDP_WATCHDOG_TIMEOUT_SECONDS="2", K8SDDP_MAX_HANG_RESTARTS="3", **extra)
            env["PYTHONPATH"] = f"{REPO / 'tests' / 'diagnose'}:{env['PYTHONPATH']}"
            run = Run(launch_cmd(task), env, Path(tmp) / "log.txt")
            code = run.wait(200)
            log = run.output()
            c = diagnose_dir(art).culprits
            ours = f"rank {c[0].rank} {c[0].kind} ({c[0].phase})" if c else "-"
            ok = "yes" if c and c[0].rank == planted else "NO"
            rows.append((name, planted, code, ours, ok, torchrun_root_cause(log), torchfrtrace(run_dirs(art)[0])))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print("| case | planted | launch exit | k8sddp diagnose | right | torchrun root cause | torchfrtrace |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | rank {r[1]} | {r[2]} | {r[3]} | {r[4]} | rank {r[5]} | {r[6]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
