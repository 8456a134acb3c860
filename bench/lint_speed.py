"""Lint throughput: files per second on a large generated tree of training code.

Generates ``--files`` Python files (default 2000) under a temporary folder (or ``--out``): the
corpus scripts (tests/lint/corpus) copied into packages, plus synthetic modules of
``--functions`` functions each that import helpers from sibling modules, branch on ranks, run
collectives and write checkpoints, so that the call graph spans files. Then lints the whole tree
in one process (as ``k8sddp lint TREE`` does) and prints files/s and lines/s (wall clock, and per
CPU-second of this process, which other load on a shared machine does not skew) and the
findings count.

Usage: ``python bench/lint_speed.py [--files N] [--functions N] [--repeat N] [--out DIR]``
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k8sddp.lint import lint_paths  # noqa: E402

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


def generate(root: Path, files: int, functions: int, seed: int = 0) -> tuple[int, int]:
    """Write the tree; return (files, lines)."""
    rng = random.Random(seed)
    corpus = sorted((ROOT / "tests" / "lint" / "corpus").rglob("*.py"))
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--functions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", help="generate here (kept) instead of a temporary folder")
    args = parser.parse_args()
    tmp = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="k8sddp-lint-bench-"))
    try:
        if tmp.exists() and args.out:
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        files, lines = generate(tmp, args.files, args.functions)
        best = best_cpu = float("inf")
        findings = 0
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            report = lint_paths([str(tmp)]).report
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
            findings = len(report.findings)
        print(f"tree: {files} files, {lines} lines, {args.functions} generated functions per module")
        print(f"lint: {best:.2f} s wall (best of {args.repeat}); {files / best:.0f} files/s, "
              f"{lines / best:.0f} lines/s; {findings} findings")
        # CPU time of this process: the figure that does not depend on other load on the machine
        print(f"lint: {best_cpu:.2f} s CPU; {files / best_cpu:.0f} files per CPU-second, "
              f"{lines / best_cpu:.0f} lines per CPU-second")
    finally:
        if not args.out:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
