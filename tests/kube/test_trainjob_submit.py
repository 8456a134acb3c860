"""`submit`, `status`, `logs`, `delete` of Trainer v2 TrainJobs against the real API server.

The Trainer v2.3.0 CRDs (../shared/reference/kubeflow-trainer/) are installed into the test
cluster here (``cluster.sh`` also runs the real Trainer controller and JobSet: tests/kube/
test_trainer.py). The TrainJobs here carry ``spec.managedBy: kueue.x-k8s.io/multikueue``, which
the Trainer controller leaves to another manager (trainjob_types.go ``ManagedBy``), so their
status is written through the status subresource as the controller would write it (conditions
copied from the JobSet, ``jobsStatus``) without a race, and their pods are created with the
labels JobSet v0.12.0 and the Job controller give them. No kubelet runs, so the pods stay
Pending and their logs cannot be read (the error path).
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..admission.helpers import rendered_job
from .conftest import Kube, k

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO.parent / "shared" / "reference" / "kubeflow-trainer"
CRDS = ("trainjobs", "trainingruntimes", "clustertrainingruntimes")


@pytest.fixture(scope="module")
def trainer_crds(kube: Kube) -> Kube:
    """The Trainer v2.3.0 CRDs, applied (server-side, so a cluster that has them already is fine)."""
    files = [TRAINER / f"trainer.kubeflow.org_{c}.yaml" for c in CRDS]
    if not all(f.is_file() for f in files):
        pytest.skip(f"the Trainer v2.3.0 CRDs are not in {TRAINER}")
    for f in files:
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    for c in CRDS:
        kube.kubectl("wait", "--for", "condition=established", f"crd/{c}.trainer.kubeflow.org", "--timeout", "60s")
    return kube


def _rendered(cli: Any, tmp_path: Path, name: str, runtime: str, namespace: str) -> tuple[Path, Path]:
    """A rendered TrainJob named ``name`` that refers to the rendered runtime ``runtime`` (files)."""
    tj, rt = tmp_path / f"{name}.yaml", tmp_path / f"{runtime}.yaml"
    res = cli("render", "--target", "trainjob", str(REPO / "examples" / "ddpjob.yaml"), "--set", f"metadata.name={name}",
              "--set", f"metadata.namespace={namespace}", "--out", str(tj))
    assert res.code == 0, res.err
    job = yaml.safe_load(tj.read_text())
    job["spec"]["runtimeRef"]["name"] = runtime
    job["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"  # the Trainer controller leaves it alone
    tj.write_text(yaml.safe_dump(job))
    res = cli("runtime", "render", "--name", runtime, "--out", str(rt))
    assert res.code == 0, res.err
    return tj, rt


def _patch_status(kube: Kube, name: str, namespace: str, ctype: str, reason: str, message: str, counts: dict[str, int]) -> None:
    """Write the TrainJob's status as the v2.3.0 controller does (plugins/jobset/jobset.go Status)."""
    status = {"conditions": [{"type": ctype, "status": "True", "reason": reason, "message": message,
                              "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}],
              "jobsStatus": [{"name": "node", "ready": 0, "suspended": 0, **counts}]}
    kube.kubectl("patch", "trainjob", name, "-n", namespace, "--subresource=status", "--type=merge",
                 "-p", json.dumps({"status": status}))


def _pod(name: str, job: str, rank: int) -> dict[str, Any]:
    """A pod of the JobSet of TrainJob ``job`` as JobSet v0.12.0 and the Job controller label it."""
    labels = {"jobset.sigs.k8s.io/jobset-name": job, "jobset.sigs.k8s.io/replicatedjob-name": "node",
              "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(rank)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "node", "image": "registry.invalid/train:0"}]}}


@pytest.fixture
def runtime_name(trainer_crds: Kube) -> Any:
    """A fresh ClusterTrainingRuntime name (cluster-scoped: deleted after the test)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    trainer_crds.kubectl("delete", "clustertrainingruntime", name, "--ignore-not-found", "--wait=false", check=False)


def test_trainjob_submit_status_logs_delete(cli: Any, trainer_crds: Kube, namespace: str, runtime_name: str, tmp_path: Path) -> None:
    kube = trainer_crds
    tj, rt = _rendered(cli, tmp_path, "tj", runtime_name, namespace)
    # the runtime is applied first, then the TrainJob created
    res = k(cli, kube, "submit", "-n", namespace, str(rt), str(tj))
    assert res.code == 0, res.err
    assert res.out == (f"clustertrainingruntime.trainer.kubeflow.org/{runtime_name} created\n"
                       "trainjob.trainer.kubeflow.org/tj created\n")
    stored = kube.get("trainjob", "tj", namespace)
    assert stored is not None and stored["spec"]["runtimeRef"]["name"] == runtime_name
    assert kube.get("clustertrainingruntime", runtime_name) is not None
    # a second TrainJob with the same runtime: the runtime is unchanged; without it in the input it is read from the cluster
    tj2, _ = _rendered(cli, tmp_path, "tj2", runtime_name, namespace)
    res = k(cli, kube, "submit", "-n", namespace, "--dry-run=server", "-o", "name", str(rt), str(tj2))
    assert res.code == 0 and res.out == f"clustertrainingruntime.trainer.kubeflow.org/{runtime_name}\ntrainjob.trainer.kubeflow.org/tj2\n", res.err
    res = k(cli, kube, "submit", "-n", namespace, "--dry-run=server", str(tj2))
    assert res.code == 0 and "trainjob.trainer.kubeflow.org/tj2 created (server dry run)" in res.out, res.err
    assert kube.get("trainjob", "tj2", namespace) is None

    # status: no condition yet, then the controller's Complete
    res = k(cli, kube, "status", "tj", "-n", namespace)
    assert res.code == 0 and res.out.startswith("tj: Pending"), res.out + res.err
    _patch_status(kube, "tj", namespace, "Complete", "AllJobsCompleted", "jobset completed successfully",
                  {"succeeded": 1, "failed": 0, "active": 0})
    for rank in (0, 1):
        kube.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_pod(f"tj-node-0-{rank}-abcde", "tj", rank)))
    res = k(cli, kube, "status", "tj", "-n", namespace, "--kind", "trainjob")
    assert res.code == 0, res.err
    assert res.out.startswith("tj: Complete (AllJobsCompleted) | node 1 succeeded\n  jobset completed successfully\n"), res.out
    assert "tj-node-0-0-abcde  Pending" in res.out and "tj-node-0-1-abcde  Pending" in res.out
    assert "conditions:\n  Complete    True " in res.out

    # logs: pods found by the JobSet labels, but no kubelet serves them (the API server answers the log of
    # a pod without a node with an empty 200, as kubectl shows); a pod without the node container; a rank
    # that has no pod; a replica name of PyTorchJobs
    res = k(cli, kube, "logs", "tj", "-n", namespace)
    assert res.code == 0 and res.out == "", res.err
    odd = _pod("tj-node-0-2-abcde", "tj", 2)
    odd["spec"]["containers"][0]["name"] = "main"
    kube.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(odd))
    res = k(cli, kube, "logs", "tj", "-n", namespace, "--index", "2")
    assert res.code == 2 and 'pod "tj-node-0-2-abcde" has no container named "node" (it has main)' in res.err, res.err
    res = k(cli, kube, "logs", "tj", "-n", namespace, "--index", "7")
    assert res.code == 3 and 'no pods of job "tj" (TrainJob, any replica index 7)' in res.err, res.err
    # any replicatedJob name a runtime may give (none here is "master"); not a DNS label: exit 2
    res = k(cli, kube, "logs", "tj", "-n", namespace, "--replica", "master")
    assert res.code == 3 and 'no pods of job "tj" (TrainJob, master)' in res.err, res.err
    res = k(cli, kube, "logs", "tj", "-n", namespace, "--replica", "not_a_label")
    assert res.code == 2 and "not a replicatedJob name" in res.err and "node, dataset-initializer" in res.err, res.err

    # a PyTorchJob of the same name makes the bare name ambiguous
    job = copy.deepcopy(rendered_job())
    job["metadata"] = {"name": "tj", "namespace": namespace}
    kube.apply(job)
    res = k(cli, kube, "status", "tj", "-n", namespace)
    assert res.code == 2 and "--kind pytorchjob or --kind trainjob" in res.err, res.err
    res = k(cli, kube, "delete", "tj", "-n", namespace, "--kind", "trainjob", "--wait", "--timeout", "60")
    assert res.code == 0 and res.out == 'trainjob.trainer.kubeflow.org "tj" deleted\n', res.err
    assert kube.get("trainjob", "tj", namespace) is None and kube.get("pytorchjob", "tj", namespace) is not None
    res = k(cli, kube, "delete", "tj", "-n", namespace)  # now only the PyTorchJob has the name
    assert res.code == 0 and res.out == 'pytorchjob.kubeflow.org "tj" deleted\n', res.err
    res = k(cli, kube, "status", "tj", "-n", namespace)
    assert res.code == 3 and 'PyTorchJob or TrainJob "tj" not found in namespace' in res.err, res.err


def test_wait_follows_a_trainjob_to_failed(trainer_crds: Kube, namespace: str, runtime_name: str, cli: Any, tmp_path: Path) -> None:
    from k8sddp.cluster.client import Cluster
    from k8sddp.cluster.wait import wait_for_job
    from k8sddp.errors import JobFailedError
    from k8sddp.jobstatus import Progress
    from k8sddp.kinds import TRAINJOB

    kube = trainer_crds
    tj, rt = _rendered(cli, tmp_path, "tjw", runtime_name, namespace)
    res = k(cli, kube, "submit", "-n", namespace, str(rt), str(tj))
    assert res.code == 0, res.err
    message = "applying FailJobSet failure policy action (first failed job: tjw-node-0)"
    timer = threading.Timer(1.5, _patch_status, args=(kube, "tjw", namespace, "Failed", "FailJobSetFailurePolicyAction", message,
                                                       {"succeeded": 0, "failed": 1, "active": 0}))
    timer.start()
    import io

    err = io.StringIO()
    with Cluster.connect(kubeconfig=kube.kubeconfig, namespace=namespace) as cluster, pytest.raises(JobFailedError) as failed:
        wait_for_job(cluster, "tjw", timeout=60, progress=Progress(err, tty=False), kind=TRAINJOB)
    timer.join()
    assert "FailJobSetFailurePolicyAction" in str(failed.value) and "first failed job: tjw-node-0" in str(failed.value)
    assert "tjw: Failed (FailJobSetFailurePolicyAction)" in err.getvalue()


def test_a_runtime_on_neither_input_nor_cluster_is_refused(trainer_crds: Kube, namespace: str, cli: Any, tmp_path: Path) -> None:
    kube = trainer_crds
    absent = f"absent-{uuid.uuid4().hex[:6]}"
    tj, _ = _rendered(cli, tmp_path, "orphan", absent, namespace)
    res = k(cli, kube, "submit", "-n", namespace, str(tj))
    assert res.code == 3, res.out + res.err
    assert f'ClusterTrainingRuntime "{absent}", which orphan refer(s) to, is neither in the input nor on the cluster' in res.err
    assert kube.get("trainjob", "orphan", namespace) is None
