"""How long ``k8sddp migrate`` takes: one file of N PyTorchJobs (k8sddp's own PyTorchJob render of
examples/ddpjob.yaml, renamed), in memory (no disk I/O).

Times :func:`k8sddp.migrate.migrate_text`: split, ruamel.yaml round-trip load, convert, dump, and the
checks (each job's strict check of the input, each TrainJob's check with its runtime). Reports
milliseconds per job, best of ``--repeat`` runs. Usage::

    python bench/migrate_speed.py                  # N = 1, 10, 50
    python bench/migrate_speed.py --sizes 200 --repeat 1
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from k8sddp.migrate import migrate_text
from k8sddp.render import load_spec, render_spec, to_yaml

SPEC = Path(__file__).resolve().parent.parent / "examples" / "ddpjob.yaml"


def manifest(jobs: int) -> str:
    """``jobs`` PyTorchJobs, ``---``-separated."""
    (job,) = render_spec(load_spec(str(SPEC))).objects
    docs = []
    for i in range(jobs):
        job["metadata"]["name"] = f"demo-{i}"
        docs.append(to_yaml([job]))
    return "---\n".join(docs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    migrate_text(manifest(1))  # warm: the shared runtime is rendered once per process
    for size in args.sizes:
        text = manifest(size)
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = migrate_text(text, "bench.yaml")
            best = min(best, time.perf_counter() - start)
        assert result.jobs == size
        print(f"{size:5d} jobs  {len(text) / 1024:8.1f} KiB  {best:7.3f} s  {best / size * 1000:7.1f} ms/job")


if __name__ == "__main__":
    main()
