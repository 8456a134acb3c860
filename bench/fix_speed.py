"""How long ``k8sddp fix`` takes on one PyTorchJob whose pytorch container has N env entries.

Builds the manifest in memory (flow-style env entries, as the review's repro files did), then times
:func:`k8sddp.fix.fix_text` (parse, plan, splice, self-check; no disk I/O) and reports the size and
the best of ``--repeat`` runs. Reference point (review of issue 5): a 400 kB file took 15 s and an
800 kB one 35 s before fix composed with libyaml's events; the API server stores objects up to
about 1.5 MiB. Usage::

    python bench/fix_speed.py                     # N = 100, 2000, 10000, 20000
    python bench/fix_speed.py --sizes 50000 --repeat 1
"""

from __future__ import annotations

import argparse
import time

from k8sddp.fix import fix_text

HEAD = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: big}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: i
            env:
"""


def manifest(n: int) -> str:
    """A PyTorchJob with ``n`` env entries and no guard variables."""
    return HEAD + "".join(f'            - {{name: V{i}, value: "x"}}\n' for i in range(n))


def main() -> None:
    """Print one line per size: entries, kilobytes, best seconds."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 2000, 10000, 20000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'env entries':>12} {'kB':>8} {'best s':>8}")
    for n in args.sizes:
        text = manifest(n)
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = fix_text(text, file="big.yaml")
            best = min(best, time.perf_counter() - t0)
            assert r.changed and r.error is None
        print(f"{n:>12} {len(text.encode()) / 1000:>8.0f} {best:>8.2f}")


if __name__ == "__main__":
    main()
