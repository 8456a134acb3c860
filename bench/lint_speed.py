"""Lint throughput: files per second on a large generated tree of training code.

Generates ``--files`` Python files (default 2000) under a temporary folder (or ``--out``): the
corpus scripts (tests/lint/corpus) copied into packages, plus synthetic modules of
``--functions`` functions each that import helpers from sibling modules, branch on ranks, run
collectives and write checkpoints, so that the call graph spans files (``--small``: only the
generated modules, no corpus scripts). Then lints the whole tree in one process (as
``k8sddp lint TREE`` does) and prints files/s and lines/s (wall clock, and per CPU-second of this
process, which other load on a shared machine does not skew) and the findings count.

``--linter DIR`` imports ``k8sddp`` from another checkout (``/work/main``) instead of this one, so
that two linters are timed on the very same tree; ``--findings FILE`` writes every finding, one
sorted line each, for a byte-for-byte comparison of two linters (``cmp``). ``--torchfix PATH``
also runs that ``torchfix`` executable with ``-j 1`` on the same tree and prints its files/s
(wall and per CPU-second of the child) and the ratio.

Usage: ``python bench/lint_speed.py [--files N] [--functions N] [--small] [--repeat N]
[--out DIR] [--linter DIR] [--findings FILE] [--torchfix PATH]``
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEADER = '''"""Generated module {i}."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from pkg{pkg}.helpers{h} import helper_sync, is_master, save_state
'''

FUNC = '''

def step_{i}_{j}(model, batch, epoch, out_dir):
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    loss = model(batch).sum()
    loss.backward()
    total = torch.tensor([loss.item()])
    dist.all_reduce(total)
    if total.item() > {j}:
        helper_sync(total)
    if is_master():
        save_state(model.state_dict(), os.path.join(out_dir, "model_{j}.pt"))
    for k in range({j} % 5 + 1):
        if rank == 0 and k > 2:
            print("rank 0 log", k)
        if local_rank == 0:
            torch.save({{"k": k}}, f"/tmp/cache_{{k}}_{j}.pt")
    return total
'''

HELPERS = '''"""Generated helpers."""
import torch
import torch.distributed as dist


def is_master():
    return dist.get_rank() == 0


def helper_sync(t):
    dist.all_reduce(t)
    return t


def save_state(state, path):
    torch.save(state, path)
'''


def generate(root: Path, files: int, functions: int, seed: int = 0, small: bool = False) -> tuple[int, int]:
    """Write the tree (``small``: generated modules only, no corpus scripts); return (files, lines)."""
    rng = random.Random(seed)
    corpus = [] if small else sorted((ROOT / "tests" / "lint" / "corpus").rglob("*.py"))
    n = lines = 0
    pkg = 0
    while n < files:
        d = root / f"pkg{pkg}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "__init__.py").write_text("")
        for h in range(2):
            (d / f"helpers{h}.py").write_text(HELPERS)
            lines += HELPERS.count("\n")
        n += 3
        for i in range(20):
            if n >= files:
                break
            if corpus and rng.random() < 0.3:
                src = rng.choice(corpus).read_text()
            else:
                src = HEADER.format(i=i, pkg=pkg, h=i % 2) + "".join(FUNC.format(i=i, j=j) for j in range(functions))
            (d / f"mod{i}.py").write_text(src)
            lines += src.count("\n")
            n += 1
        pkg += 1
    return n, lines


def _finding_lines(findings: list, tree: Path) -> list[str]:
    """One line per finding (path relative to the tree, line, column, rule, severity, exemption,
    message), sorted: what two linters must agree on byte for byte."""
    out = []
    for f in findings:
        path = os.path.relpath(f.file, tree)
        sev = getattr(f.severity, "value", f.severity)
        out.append(f"{path}:{f.line}:{f.column}: {f.rule_id} {sev} {f.exempted_by or '-'} {f.message}")
    return sorted(out)


def run_torchfix(exe: str, tree: Path, files: int, lint_wall: float, lint_cpu: float) -> None:
    """Run ``exe -j 1 tree`` (TorchFix) and print its files/s and the ratio to the lint figures."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([exe, "-j", "1", str(tree)], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    reported = sum(1 for line in proc.stdout.splitlines() if line.strip())
    print(f"torchfix: {wall:.2f} s wall, {files / wall:.1f} files/s; {cpu:.2f} s CPU, "
          f"{files / cpu:.1f} files per CPU-second; exit {proc.returncode}, {reported} output lines")
    print(f"ratio: lint is {wall / lint_wall:.1f}x TorchFix by wall clock, {cpu / lint_cpu:.1f}x by CPU time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--functions", type=int, default=8)
    parser.add_argument("--small", action="store_true", help="only the generated modules, no corpus scripts")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", help="generate here (kept) instead of a temporary folder")
    parser.add_argument("--linter", help="a checkout whose k8sddp to time instead of this one")
    parser.add_argument("--findings", help="write the sorted findings to this file")
    parser.add_argument("--torchfix", metavar="PATH", help="also time this torchfix executable (-j 1)")
    args = parser.parse_args()
    if args.files < 1 or args.functions < 1 or args.repeat < 1:
        parser.error("--files, --functions and --repeat must be at least 1")
    sys.path.insert(0, str(Path(args.linter).resolve() if args.linter else ROOT))
    lint_paths = importlib.import_module("k8sddp.lint").lint_paths
    tmp = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="k8sddp-lint-bench-"))
    try:
        if tmp.exists() and args.out:
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        files, lines = generate(tmp, args.files, args.functions, small=args.small)
        best = best_cpu = float("inf")
        findings: list = []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            report = lint_paths([str(tmp)]).report
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
            findings = report.findings
        linter = Path(sys.modules["k8sddp"].__file__ or ".").resolve().parent.parent
        print(f"tree: {files} files, {lines} lines, {args.functions} generated functions per module"
              f"{' (generated modules only)' if args.small else ''}; linter from {linter}")
        print(f"lint: {best:.2f} s wall (best of {args.repeat}); {files / best:.0f} files/s, "
              f"{lines / best:.0f} lines/s; {len(findings)} findings")
        # CPU time of this process: the figure that does not depend on other load on the machine
        print(f"lint: {best_cpu:.2f} s CPU; {files / best_cpu:.0f} files per CPU-second, "
              f"{lines / best_cpu:.0f} lines per CPU-second")
        if args.findings:
            Path(args.findings).write_text("".join(line + "\n" for line in _finding_lines(findings, tmp)))
        if args.torchfix:
            run_torchfix(args.torchfix, tmp, files, best, best_cpu)
    finally:
        if not args.out:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
