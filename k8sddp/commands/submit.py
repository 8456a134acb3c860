"""``k8sddp submit SPEC_OR_MANIFEST...``: validated PyTorchJobs and TrainJobs to a cluster, or run locally.

Steps: read the inputs (rendering DDPJob specs), read from the cluster the ConfigMaps the jobs take
env from and the training runtimes the TrainJobs refer to that the input lacks (read-only; a
runtime neither in the input nor on the cluster refuses the submission, exit 3), validate
everything with the same code as ``k8sddp validate`` (failing findings: exit 1, nothing submitted;
no flag skips this), apply the input's training runtimes (created, or replaced when they differ,
as kubectl apply), then create each job (``--dry-run=server``: the server's dry run with strict
field validation; ``--dry-run=client``: validation only), print the result kubectl-like, and with
``--wait`` follow the job to its end. ``--local`` runs the jobs on this machine instead
(:mod:`k8sddp.local`). Exit codes (../shared/CONTRACT.md): 0, 1 refused, 2 usage, 3 cluster, 4
Failed, 5 timed out.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import K8sddpError, UsageError, ValidationError
from ._clusterflags import add_cluster_flags, parse_count, parse_duration, parse_seconds


def _plain(text: str) -> str:
    """``text`` without reST markup (``:mod:`x``` -> x, double back-quotes dropped), for ``--help``."""
    import re

    return re.sub(r":\w+:`([^`]+)`", r"\1", text).replace("``", "")


def register(subparsers: Any) -> None:
    """Add the ``submit`` subcommand."""
    p = subparsers.add_parser(
        "submit",
        help="validate and submit PyTorchJobs and TrainJobs to a cluster (or run them locally with --local)",
        description=_plain(__doc__.split("\n\n")[1]) if __doc__ else None,
    )
    p.add_argument("inputs", nargs="+", metavar="SPEC_OR_MANIFEST", help="DDPJob spec or rendered manifest; - for stdin")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a spec value (specs only)")
    p.add_argument("--profile", choices=("baseline", "strict"), default="baseline", help="guardrail profile (default: baseline)")
    add_cluster_flags(p)
    p.add_argument("--dry-run", choices=("client", "server"), help="client: validate only; server: the API server's dry run")
    p.add_argument("-o", "--output", choices=("name", "yaml", "json"), help="print the created objects like kubectl -o")
    p.add_argument("--replace", action="store_true", help="delete a job of the same name, wait until it is gone, create again")
    p.add_argument("--wait", action="store_true", help="follow the job until it Succeeded (0), Failed (4) or --timeout (5)")
    p.add_argument("--timeout", type=parse_duration, help="bound on --wait (and on --local runs): 90, 90s, 10m, 1h")
    local = p.add_argument_group("local run")
    local.add_argument("--local", action="store_true", help="run the job on this machine as the operator would")
    local.add_argument("--local-dir", default=None, help="where persistent volumes and logs of a local run go (default: ./.k8sddp-local/<job>)")
    local.add_argument("--max-restarts", type=parse_count, default=10, help="local runner's own cap on pod restarts (default 10)")
    local.add_argument(
        "--restart-backoff", type=parse_seconds, default=None,
        help="seconds before the first in-place restart under OnFailure/Always (kubelet: 10, doubling to 300)",
    )
    p.set_defaults(handler=run)


def _print_findings(exc: ValidationError) -> None:
    from ..findings import Report
    from ..reporters import render

    report = getattr(exc, "report", None) or Report(findings=list(exc.findings))
    if report.findings:
        sys.stderr.write(render(report, "text", tool="validate"))


def run(args: argparse.Namespace) -> int:
    """Handle ``k8sddp submit``; returns the exit code.

    Raises:
        UsageError, SpecError, ValidationError, ClusterError, JobFailedError, WaitTimeoutError.
    """
    from ..submission import load_inputs

    if args.inputs.count("-") > 1:
        raise UsageError("standard input (-) can be given once")
    try:
        sub = load_inputs(args.inputs, sets=args.set, profile=args.profile)
        _check_duplicates(sub.jobs, args.namespace)
        if args.local:
            return _run_local(args, sub)
        return _run_cluster(args, sub)
    except ValidationError as exc:
        _print_findings(exc)
        raise


def _check_duplicates(jobs: list[dict[str, Any]], namespace: str | None) -> None:
    """Refuse the same job (namespace and name) twice in one input, before anything is created.

    Raises:
        UsageError: exit 2, naming the job.
    """
    seen: set[tuple[str, str]] = set()
    for job in jobs:
        meta = job.get("metadata") or {}
        name = meta.get("name")
        if not name:  # generateName: the server picks distinct names
            continue
        key = (str(meta.get("namespace") or namespace or ""), str(name))
        if key in seen:
            where = f' in namespace "{key[0]}"' if key[0] else ""
            raise UsageError(f'job "{name}"{where} appears twice in the input; nothing was submitted')
        seen.add(key)


def _check_namespaces(jobs: list[dict[str, Any]], namespace: str | None) -> None:
    for job in jobs:
        own = (job.get("metadata") or {}).get("namespace")
        if namespace and own and own != namespace:
            name = job["metadata"].get("name", "?")
            raise UsageError(
                f'job "{name}" says namespace "{own}" but -n says "{namespace}"; drop one of them '
                f"(for a DDPJob spec: --set metadata.namespace={namespace})"
            )


def _note_skipped(sub: Any) -> None:
    """Name the objects of the input that submit does not create or run (ConfigMaps, other kinds)."""
    skipped = [f"ConfigMap/{c['metadata'].get('name')}" for c in sub.configmaps]
    skipped += [f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}" for o, _ in sub.checked] + sub.other
    if skipped:
        sys.stderr.write(
            "note: submit creates PyTorchJobs and TrainJobs (and the training runtimes they use) only; "
            "also in the input (used for validation, not created): " + ", ".join(skipped) + "\n"
        )


def _run_local(args: argparse.Namespace, sub: Any) -> int:
    from ..submission import validate_submission

    if args.dry_run == "server" or args.replace or args.output:
        raise UsageError("--local runs on this machine: --dry-run=server, --replace and -o do not apply")
    if args.kubeconfig or args.context:
        raise UsageError("--local runs on this machine and contacts no cluster: --kubeconfig and --context do not apply")
    _check_namespaces(sub.jobs, args.namespace)
    if args.max_restarts < 0:
        raise UsageError("--max-restarts must be >= 0")
    validate_submission(sub, profile=args.profile, namespace=args.namespace or "default")
    if args.dry_run == "client":
        from ..cluster.output import format_objects

        sys.stdout.write(format_objects(sub.jobs, None, dry_run="client"))
        _note_skipped(sub)
        return 0
    _note_skipped(sub)
    _check_local_gpus(sub.jobs)
    from ..local.runner import LocalOptions, run_jobs

    options = LocalOptions(
        local_dir=args.local_dir,
        max_restarts=args.max_restarts,
        timeout=args.timeout,
        restart_backoff=args.restart_backoff,
    )
    return run_jobs(sub.jobs, configmaps=sub.configmaps, options=options, runtimes=[r for r, _ in sub.runtimes])


def _visible_gpus() -> int:
    """GPUs torch sees on this machine (0 without torch or a GPU build)."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _check_local_gpus(jobs: list[dict[str, Any]]) -> None:
    """Refuse, with the way out, a local run of jobs that ask for more GPUs than this machine has
    (every pod of a local run shares this machine).

    Raises:
        UsageError: the jobs' pods ask for GPUs this machine does not have.
    """
    from ..validate.strictchecks import GPU_RESOURCES

    wanted = 0
    asked: list[str] = []
    for job in jobs:
        for rtype, replica in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
            pod = ((replica or {}).get("template") or {}).get("spec") or {}
            for c in pod.get("containers") or []:
                limits = ((c or {}).get("resources") or {}).get("limits") or {}
                for res in GPU_RESOURCES:
                    n = int(str(limits.get(res, 0))) if str(limits.get(res, 0)).isdigit() else 0
                    if n:
                        pods = int((replica or {}).get("replicas", 1) or 1)
                        wanted += n * pods
                        asked.append(f"{job.get('metadata', {}).get('name')} {rtype}: {pods} pod(s) x {n} {res}")
    if not wanted:
        return
    have = _visible_gpus()
    if wanted <= have:
        return
    raise UsageError(
        f"--local runs every pod on this machine, which has {have} GPU(s) visible to torch; the job(s) ask for {wanted} "
        f"({'; '.join(asked)}). Run it on CPU (gloo) with --set spec.gpusPerNode=0, and choose the size with "
        "--set spec.nodes=N --set spec.procsPerNode=M; for a rendered manifest, remove the GPU limits."
    )


def _run_cluster(args: argparse.Namespace, sub: Any) -> int:
    from ..cluster.output import format_objects
    from ..configrefs import missing_configmaps
    from ..submission import validate_submission
    from ._clusterflags import connect

    _check_namespaces(sub.jobs, args.namespace)
    if args.dry_run == "client" and (args.replace or args.wait):
        raise UsageError("--dry-run=client only validates: --replace and --wait do not apply")
    if args.dry_run == "server" and args.wait:
        raise UsageError("--dry-run=server creates nothing to wait for")

    cluster = None
    extra: list[dict[str, Any]] = []
    namespace = args.namespace
    needs_cluster = args.dry_run != "client"
    lacking = _missing_references(sub, namespace or "default")
    if needs_cluster or lacking or missing_configmaps(sub.jobs + sub.configmaps, namespace=namespace or "default"):
        try:
            cluster = connect(args)
            namespace = cluster.namespace
        except UsageError:
            if needs_cluster:
                raise
            sys.stderr.write("note: no cluster configured; ConfigMaps and training runtimes missing from the input stay unresolved\n")
    namespace = namespace or "default"
    if cluster is not None:
        for ns, name in missing_configmaps(sub.jobs + sub.configmaps, namespace=namespace):
            cm = cluster.with_namespace(ns).read_configmap(name)
            if cm is None:
                sys.stderr.write(f'note: ConfigMap "{name}" is neither in the input nor in namespace "{ns}"\n')
            else:
                extra.append(cm)
    fetched = _read_references(cluster, sub, namespace) if cluster is not None else []
    validate_submission(sub, profile=args.profile, namespace=namespace, extra_configmaps=extra, cluster_runtimes=fetched)

    runtimes = [r for r, _ in sub.runtimes]
    if args.dry_run == "client" or cluster is None:
        sys.stdout.write(format_objects(runtimes + sub.jobs, args.output, dry_run="client"))
        _note_skipped(sub)
        return 0
    results: list[dict[str, Any]] = []
    verbs: list[str] = []  # "replaced" only where an old job was deleted
    for runtime in runtimes:  # before the jobs that use them, as kubectl apply -f runtime.yaml -f job.yaml
        try:
            obj, verb = cluster.apply(runtime, dry_run=args.dry_run == "server")
        except K8sddpError:
            if results:
                _print_results(results, verbs, args)
            raise
        results.append(obj)
        verbs.append(verb)
    applied = len(results)
    for job in sub.jobs:
        try:
            if args.replace:
                obj, existed = cluster.replace_job(job, timeout=args.timeout or 120.0)
                results.append(obj)
                verbs.append("replaced" if existed else "created")
            else:
                results.append(cluster.create_job(job, dry_run=args.dry_run == "server"))
                verbs.append("created")
        except K8sddpError:
            if results:  # like kubectl: the objects before the failing one stay
                _print_results(results, verbs, args)
                jobs = results[applied:]
                names = ", ".join(r["metadata"].get("name", "?") for r in jobs)
                runtimes_note = f" ({applied} training runtime(s) applied before them stay too)" if applied else ""
                sys.stderr.write(f"note: {len(jobs)} job(s) before the failure were created and stay: {names or 'none'}{runtimes_note}\n")
            raise
    _print_results(results, verbs, args)
    results = results[applied:]
    verb = "replaced" if args.replace else "created"
    elsewhere = sorted({str(r["metadata"].get("namespace")) for r in results
                        if r["metadata"].get("namespace") not in (None, cluster.namespace)})
    if elsewhere:
        sys.stderr.write(
            f'note: {verb} in namespace {", ".join(elsewhere)} (named in the input), not in "{cluster.namespace}": '
            f"pass -n {elsewhere[0]} to status, logs and delete\n"
        )
    _note_skipped(sub)
    if not args.wait:
        return 0
    return _wait_all(args, cluster, results)


def _print_results(results: list[dict[str, Any]], verbs: list[str], args: argparse.Namespace) -> None:
    from ..cluster.output import format_objects

    if args.output:
        sys.stdout.write(format_objects(results, args.output, dry_run=args.dry_run))
    else:
        for obj, verb in zip(results, verbs, strict=True):
            sys.stdout.write(format_objects([obj], None, verb=verb, dry_run=args.dry_run))
    sys.stdout.flush()


def _wait_all(args: argparse.Namespace, cluster: Any, results: list[dict[str, Any]]) -> int:
    import time

    from ..cluster.wait import wait_for_job
    from ..jobstatus import Progress, kind_of

    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    progress = Progress(sys.stderr)
    for obj in results:
        meta = obj["metadata"]
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            wait_for_job(cluster.with_namespace(meta.get("namespace") or cluster.namespace), meta["name"],
                         timeout=left, progress=progress, kind=kind_of(obj))
        except KeyboardInterrupt:
            sys.stderr.write(f'\nstopped waiting; job "{meta["name"]}" keeps running on the cluster '
                             f"(k8sddp delete {meta['name']} stops it)\n")
            raise
    return 0


def _references(sub: Any, namespace: str) -> list[tuple[str, str, str | None, str]]:
    """``(group, kind, namespace or None, name)`` of every object the jobs refer to (a TrainJob's
    runtime; ``None``: cluster-scoped), without repeats, in input order."""
    from .. import kinds

    out: list[tuple[str, str, str | None, str]] = []
    for job in sub.jobs:
        kind = kinds.lookup(job.get("apiVersion"), job.get("kind"))
        own_ns = (job.get("metadata") or {}).get("namespace") or namespace
        for key in kind.referenced_objects(job, own_ns) if kind is not None else []:
            if key not in out:
                out.append(key)
    return out


def _in_input(sub: Any, key: tuple[str, str, str | None, str], namespace: str) -> bool:
    from ..validate.objindex import api_group

    group, kind, ns, name = key
    for obj, _ in sub.runtimes:
        meta = obj.get("metadata") or {}
        same = api_group(obj.get("apiVersion")) == group and obj.get("kind") == kind and meta.get("name") == name
        if same and (ns is None or (meta.get("namespace") or namespace) == ns):
            return True
    return False


def _missing_references(sub: Any, namespace: str) -> list[tuple[str, str, str | None, str]]:
    """The references of :func:`_references` that the input does not hold."""
    return [key for key in _references(sub, namespace) if not _in_input(sub, key, namespace)]


def _read_references(cluster: Any, sub: Any, namespace: str) -> list[dict[str, Any]]:
    """Read from the cluster the objects the jobs refer to that the input lacks (read-only).

    Raises:
        ClusterError: one is neither in the input nor on the cluster (exit 3: the controller would
            fail the job, ``TrainingRuntimeNotSupported`` or never start it), or the API failed.
    """
    from .. import kinds
    from ..errors import ClusterError

    fetched: list[dict[str, Any]] = []
    for group, kind_name, ns, name in _missing_references(sub, namespace):
        kind = kinds.lookup(f"{group}/", kind_name)
        if kind is None or not kind.versions:
            continue  # (not a kind k8sddp reads: validation reports the reference)
        obj = cluster.find(name, kind, namespace=ns)
        if obj is None:
            users = [j["metadata"].get("name") for j in sub.jobs
                     if any(r[1] == kind_name and r[3] == name
                            for r in (kinds.lookup(j.get("apiVersion"), j.get("kind")) or kind).referenced_objects(j, ns))]
            where = f' in namespace "{ns}"' if ns else ""
            raise ClusterError(
                f'{kind_name} "{name}"{where}, which {", ".join(map(str, users))} refer(s) to, is neither in the input nor on the '
                f"cluster: nothing was submitted. Add it to the input (k8sddp runtime render --name {name} writes a guarded one) "
                "or install it first",
                status=404,
                reason="NotFound",
            )
        fetched.append(obj)
    return fetched
