"""Benchmark: manifests per second for ``k8sddp validate`` and for ``check-jsonschema`` on the same
corpus, in the same run.

Usage (from the repository root)::

    python bench/validate_bench.py                # 10,000 manifests, every core
    python bench/validate_bench.py --count 20000 --jobs 2 --keep /tmp/corpus

The corpus is generated (deterministically, ``--seed``) into a temporary folder, one manifest per
file: PyTorchJobs of varied shapes (guarded and unguarded, Master+Worker and elastic Worker-only,
env from ConfigMaps), the ConfigMaps they read, Services, Deployments, plain ConfigMaps, and about
5% invalid files (unparseable YAML, duplicate keys, structure errors). Both tools run as
subprocesses on exactly the same files: ``python -m k8sddp validate DIR`` (every core unless
``--jobs``) and ``check-jsonschema --schemafile schemas/pytorchjob.structure.json FILE...`` (one
process: it has no parallel mode). Target (issue 2): k8sddp at least 15x check-jsonschema.

kubeconform (github.com/yannh/kubeconform, Go; built by ``tests/kube/cluster.sh build`` into
``${K8SDDP_KUBE_CACHE:-~/.cache/k8sddp-kube}/bin``, or on ``PATH``) is the throughput anchor: a
compiled, parallel schema validator, run on the same folder with one worker per core and the
PyTorchJob CRD converted to its schema format (:func:`crd_to_kubeconform`, as its
``openapi2jsonschema.py`` does: the ``openAPIV3Schema`` of each served version, objects with
``properties`` closed with ``additionalProperties: false`` unless they preserve unknown
fields, written as ``{kind}_{version}.json``). Kinds without a local schema are skipped
(``-ignore-missing-schemas``: there is no network to fetch the built-in ones).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "schemas" / "pytorchjob.structure.json"
KUBE_CACHE = Path(os.environ.get("K8SDDP_KUBE_CACHE") or Path.home() / ".cache" / "k8sddp-kube")
CRD_NAME = "kubeflow/kubeflow.org_pytorchjobs.yaml"

GUARDS = (
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"),
    ("PYTHONFAULTHANDLER", "1"),
    ("K8SDDP_PG_TIMEOUT_SECONDS", "1800"),
    ("K8SDDP_WATCHDOG_TIMEOUT_SECONDS", "300"),
    ("K8SDDP_MAX_HANG_RESTARTS", "3"),
    ("K8SDDP_ARTIFACT_DIR", "/checkpoints/k8sddp"),
    ("TORCH_FR_DUMP_TEMP_FILE", "/checkpoints/k8sddp/fr/rank-"),
)


def _env(pairs: list[tuple[str, str]], indent: int) -> str:
    pad = " " * indent
    return "".join(f'{pad}- name: {k}\n{pad}  value: "{v}"\n' for k, v in pairs)


def _replica(rtype: str, n: int, env: str, nproc: int, gpus: int, env_from: str = "") -> str:
    limits = f"                nvidia.com/gpu: {gpus}\n" if gpus else ""
    return f"""    {rtype}:
      replicas: {n}
      restartPolicy: ExitCode
      template:
        metadata:
          labels:
            app.kubernetes.io/name: trainer
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/acme/train:{n}.{nproc}
            imagePullPolicy: IfNotPresent
            command: [k8sddp, launch, --, torchrun, --nproc-per-node={nproc}, train.py, --epochs=10]
{env_from}            env:
{env}            resources:
              requests:
                cpu: "{4 * nproc}"
                memory: {8 * nproc}Gi
              limits:
                memory: {8 * nproc}Gi
{limits}            volumeMounts:
            - name: dshm
              mountPath: /dev/shm
            - name: checkpoints
              mountPath: /checkpoints
          volumes:
          - name: dshm
            emptyDir:
              medium: Memory
          - name: checkpoints
            persistentVolumeClaim:
              claimName: ckpt
"""


def _job(name: str, replicas: str, *, nproc: int, elastic: bool = False) -> str:
    head = "  elasticPolicy:\n    rdzvBackend: c10d\n    minReplicas: 1\n    maxReplicas: 8\n" if elastic else ""
    return (
        f"apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: {name}\n  namespace: ml\n"
        f"  labels:\n    team: t{len(name) % 7}\nspec:\n  nprocPerNode: \"{nproc}\"\n{head}"
        f"  runPolicy:\n    cleanPodPolicy: Running\n    activeDeadlineSeconds: 86400\n  pytorchReplicaSpecs:\n{replicas}"
    )


def make_manifest(i: int, rng: random.Random) -> tuple[str, str]:
    """``(file name, text)`` of manifest number ``i``."""
    name = f"job-{i:05d}"
    nproc = rng.choice((1, 2, 4, 8))
    gpus = nproc if rng.random() < 0.7 else 0
    workers = rng.randint(1, 16)
    roll = rng.random()
    guarded = _env(list(GUARDS) + [(f"EXTRA_{k}", str(k)) for k in range(rng.randint(0, 6))], 12)
    if roll < 0.40:  # fully guarded, Master + Worker
        reps = _replica("Master", 1, guarded, nproc, gpus) + _replica("Worker", workers, guarded, nproc, gpus)
        return f"{name}.yaml", _job(name, reps, nproc=nproc)
    if roll < 0.55:  # unguarded, as in the operator's examples
        plain = _env([("LOG_LEVEL", "info")], 12)
        reps = _replica("Master", 1, plain, nproc, gpus) + _replica("Worker", workers, plain, nproc, gpus)
        return f"{name}.yaml", _job(name, reps, nproc=nproc)
    if roll < 0.65:  # elastic, Worker only
        return f"{name}.yaml", _job(name, _replica("Worker", workers, guarded, nproc, gpus), nproc=nproc, elastic=True)
    if roll < 0.73:  # env from a ConfigMap (written as the next manifest's neighbour)
        env_from = f"            envFrom:\n            - configMapRef:\n                name: nccl-{i % 50}\n"
        rest = _env(list(GUARDS[2:]), 12)
        reps = _replica("Master", 1, rest, nproc, gpus, env_from) + _replica("Worker", workers, rest, nproc, gpus, env_from)
        return f"{name}.yaml", _job(name, reps, nproc=nproc)
    if roll < 0.80:
        return f"svc-{i:05d}.yaml", (
            f"apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: ml\nspec:\n"
            f"  selector:\n    app: tb\n  ports:\n  - port: {6000 + i % 1000}\n    targetPort: 6006\n"
        )
    if roll < 0.87:
        return f"cm-{i:05d}.yaml", (
            f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nccl-{i % 50}\n  namespace: ml\ndata:\n"
            '  TORCH_NCCL_ASYNC_ERROR_HANDLING: "3"\n  PYTHONFAULTHANDLER: "1"\n  NCCL_DEBUG: WARN\n'
        )
    if roll < 0.95:
        return f"deploy-{i:05d}.yaml", (
            f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-{i}\n  namespace: ml\nspec:\n"
            f"  replicas: {workers}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n"
            "      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n"
            "        ports:\n        - containerPort: 80\n"
        )
    # about 5% invalid
    reps = _replica("Master", 1, guarded, nproc, gpus) + _replica("Worker", workers, guarded, nproc, gpus)
    text = _job(name, reps, nproc=nproc)
    kind = rng.randrange(4)
    if kind == 0:
        text = text.replace("    team:", "    team: [unclosed\n    owner:", 1)  # unparseable YAML
    elif kind == 1:
        text = text.replace("  namespace: ml\n", "  namespace: ml\n  namespace: prod\n", 1)  # duplicate key
    elif kind == 2:
        text = text.replace("      replicas: 1\n", "      replicas: 2\n", 1)  # Master replicas 2
    else:
        text = text.replace("    cleanPodPolicy: Running\n", "    cleanPodPolicy: Running\n    activeDeadline: 60\n", 1)
    return f"bad-{i:05d}.yaml", text


def generate(folder: Path, count: int, seed: int) -> list[Path]:
    """Write ``count`` manifests into ``folder`` (100 per subfolder); return their paths."""
    rng = random.Random(seed)
    paths = []
    for i in range(count):
        name, text = make_manifest(i, rng)
        sub = folder / f"d{i // 100:03d}"
        sub.mkdir(exist_ok=True)
        path = sub / name
        path.write_text(text)
        paths.append(path)
    return paths


def _run(cmd: list[str], **kw: object) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Run ``cmd``; return (wall seconds, CPU seconds of it and its children, the process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def _closed(schema: object) -> object:
    """``additionalProperties: false`` on every object schema with ``properties`` (kubectl's old
    client-side validation, which openapi2jsonschema.py recreates), except where the schema
    keeps unknown fields (``x-kubernetes-preserve-unknown-fields``)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def crd_to_kubeconform(crd_path: Path, folder: Path) -> list[Path]:
    """Write a kubeconform schema ``{kind}_{version}.json`` (lower case) for each version of the
    CRD at ``crd_path`` into ``folder``; return the files. Use with
    ``-schema-location 'folder/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json'``."""
    import yaml

    crd = yaml.safe_load(crd_path.read_text())
    kind = crd["spec"]["names"]["kind"].lower()
    out = []
    for version in crd["spec"]["versions"]:
        schema = _closed(version["schema"]["openAPIV3Schema"])
        path = folder / f"{kind}_{version['name']}.json"
        path.write_text(json.dumps(schema))
        out.append(path)
    return out


def find_kubeconform() -> str | None:
    """kubeconform from the kube tier's cache, else ``PATH``."""
    built = KUBE_CACHE / "bin" / "kubeconform"
    return str(built) if built.is_file() else shutil.which("kubeconform")


def find_crd() -> Path | None:
    """The PyTorchJob CRD in the shared reference folder (``K8SDDP_REFERENCE``, else ../shared/reference)."""
    for base in (os.environ.get("K8SDDP_REFERENCE"), REPO.parent / "shared" / "reference", "/work/shared/reference"):
        if base and (Path(base) / CRD_NAME).is_file():
            return Path(base) / CRD_NAME
    return None


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000, help="manifests to generate (default 10000)")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=None, help="k8sddp worker processes (default: every core)")
    parser.add_argument("--skip-check-jsonschema", action="store_true", help="do not time check-jsonschema")
    parser.add_argument("--skip-kubeconform", action="store_true", help="do not time kubeconform")
    parser.add_argument("--repeat", type=int, default=3, help="k8sddp runs; the best is reported (default 3)")
    parser.add_argument("--keep", type=Path, help="write the corpus here and keep it")
    args = parser.parse_args(argv)

    if not shutil.which("check-jsonschema") and not args.skip_check_jsonschema:
        print("check-jsonschema is not installed (pip install check-jsonschema)", file=sys.stderr)
        return 2
    tmp = None
    if args.keep:
        folder = args.keep
        folder.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="k8sddp-bench-")
        folder = Path(tmp.name)
    try:
        started = time.perf_counter()
        paths = generate(folder, args.count, args.seed)
        size = sum(p.stat().st_size for p in paths)
        print(f"corpus: {len(paths)} manifests, {size / 2**20:.1f} MiB, in {folder} ({time.perf_counter() - started:.1f} s to write)")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        print(f"cores: {cores}; python {sys.version.split()[0]}")

        print(f"load average before: {_load()} (other work on the machine slows both tools; CPU seconds do not depend on it)")

        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "k8sddp", "validate", "--format", "json", str(folder)]
        if args.jobs:
            cmd[4:4] = ["--jobs", str(args.jobs)]
        runs = []
        for _ in range(args.repeat):
            wall, cpu, proc = _run(cmd, cwd=REPO, env=env)
            if proc.returncode not in (0, 1):
                print(proc.stderr, file=sys.stderr)
                return 2
            runs.append((wall, cpu))
        wall, cpu = min(runs)
        summary = json.loads(proc.stdout)["summary"]
        k_rate, k_cpu_rate = len(paths) / wall, len(paths) / cpu
        print(f"k8sddp validate:   {wall:7.2f} s wall {k_rate:7.0f} manifests/s | {cpu:7.2f} s CPU {k_cpu_rate:6.0f} manifests/CPU-s"
              f"  (best of {len(runs)}; files {summary['files']}, checked {summary['checked']}, errors {summary['errors']}, "
              f"skipped {sum(summary['skipped'].values())})")
        print(f"  command: PYTHONPATH={REPO} {' '.join(cmd[:-1])} CORPUS")
        kubeconform, crd = find_kubeconform(), find_crd()
        if args.skip_kubeconform:
            pass
        elif kubeconform is None or crd is None:
            print("kubeconform:       not run ("
                  + ("kubeconform not built: bash tests/kube/cluster.sh build" if kubeconform is None
                     else "no PyTorchJob CRD: ../shared/reference is absent") + ")")
        else:
            schemas = folder.parent / f"{folder.name}-kubeconform-schemas"
            schemas.mkdir(exist_ok=True)
            crd_to_kubeconform(crd, schemas)
            kc = [kubeconform, "-schema-location", f"{schemas}/{{{{ .ResourceKind }}}}_{{{{ .ResourceAPIVersion }}}}.json",
                  "-ignore-missing-schemas", "-strict", "-summary", "-output", "json", "-n", str(cores), str(folder)]
            kruns = []
            for _ in range(args.repeat):
                wall, cpu, proc = _run(kc, cwd=REPO)
                kruns.append((wall, cpu))
            shutil.rmtree(schemas, ignore_errors=True)
            wall, cpu = min(kruns)
            try:
                ksum = json.loads(proc.stdout).get("summary", {})
            except ValueError:
                ksum = {"output": proc.stdout[-200:]}
            kc_rate = len(paths) / wall
            print(f"kubeconform:       {wall:7.2f} s wall {kc_rate:7.0f} manifests/s | {cpu:7.2f} s CPU {len(paths) / cpu:6.0f} "
                  f"manifests/CPU-s  (best of {len(kruns)}, -n {cores}; exit {proc.returncode}; {ksum})")
            print("  command: kubeconform -schema-location 'SCHEMAS/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json' "
                  f"-ignore-missing-schemas -strict -summary -output json -n {cores} CORPUS")
            print(f"ratio (wall): k8sddp is {k_rate / kc_rate:.2f}x kubeconform (the anchor: a compiled schema-only validator)")
        if args.skip_check_jsonschema:
            return 0

        cj = ["check-jsonschema", "--schemafile", str(SCHEMA), *map(str, paths)]
        wall, cpu, proc = _run(cj, cwd=REPO)
        c_rate, c_cpu_rate = len(paths) / wall, len(paths) / cpu
        print(f"check-jsonschema:  {wall:7.2f} s wall {c_rate:7.0f} manifests/s | {cpu:7.2f} s CPU {c_cpu_rate:6.0f} manifests/CPU-s  (exit {proc.returncode})")
        print("  command: check-jsonschema --schemafile schemas/pytorchjob.structure.json CORPUS/*/*.yaml")
        print(f"load average after: {_load()}")
        print(f"ratio (wall): k8sddp is {k_rate / c_rate:.1f}x check-jsonschema (target >= 15x on 2 cores)")
        print(f"ratio (per CPU-second): {k_cpu_rate / c_cpu_rate:.1f}x; check-jsonschema uses one core, k8sddp every core: "
              f"on {cores} idle cores the wall ratio approaches {k_cpu_rate / c_cpu_rate * cores:.0f}x less the serial start-up")
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
