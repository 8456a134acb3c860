"""The kind-generic client paths with Trainer v2 objects, through the real ``kubernetes`` client and
the fake API server: cluster-scoped and namespaced creates, apply (create / unchanged / configured
by PUT), the runtime read from the cluster or refused, status and pods by the JobSet labels,
``--kind`` and the ambiguous name, ``--wait`` on a TrainJob's conditions, a missing Trainer CRD."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.fakeapi import FakeApiServer
from tests.cluster.test_follow import LABELS, _job

REPO = Path(__file__).resolve().parents[2]
API = "/apis/trainer.kubeflow.org/v1alpha1"


@pytest.fixture
def rendered(tmp_path: Path) -> dict[str, Any]:
    """The bundled example as a TrainJob (no namespace) and the guarded runtime, as objects."""
    from k8sddp.render import load_spec, render_spec
    from k8sddp.render.engine import render_runtime

    spec = load_spec(str(REPO / "examples" / "ddpjob.yaml"))
    job = dict(next(o for o in render_spec(spec, target="trainjob").objects if o.get("kind") == "TrainJob"))
    job["metadata"] = {k: v for k, v in job["metadata"].items() if k != "namespace"}
    runtime = next(dict(o) for o in render_runtime().objects if o.get("kind") == "ClusterTrainingRuntime")
    return {"job": yaml.safe_load(yaml.safe_dump(job)), "runtime": yaml.safe_load(yaml.safe_dump(runtime))}


def write(tmp_path: Path, name: str, *objs: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objs))
    return str(path)


def test_runtime_applied_then_trainjob_created(cli: Any, api: FakeApiServer, kubeconfig: Path, tmp_path: Path,
                                               rendered: dict[str, Any]) -> None:
    both = write(tmp_path, "both.yaml", rendered["runtime"], rendered["job"])
    res = cli("submit", "--kubeconfig", str(kubeconfig), both)
    assert res.code == 0, res.err
    assert res.out == ("clustertrainingruntime.trainer.kubeflow.org/k8sddp-torch created\n"
                       "trainjob.trainer.kubeflow.org/demo created\n")
    # a cluster-scoped create has no namespace in its path; the TrainJob lands in the context's namespace
    assert api.count("POST", f"{API}/clustertrainingruntimes") == 1 and api.count("POST", f"{API}/namespaces/ml/trainjobs") == 1
    assert [j["metadata"]["name"] for j in api.jobs("ml", plural="trainjobs")] == ["demo"]
    assert [r["metadata"]["name"] for r in api.jobs(plural="clustertrainingruntimes")] == ["k8sddp-torch"]
    # the same runtime again: unchanged; a changed one: replaced by PUT with the stored resourceVersion
    runtime = rendered["runtime"]
    other = {**rendered["job"], "metadata": {"name": "demo2"}}
    res = cli("submit", "--kubeconfig", str(kubeconfig), "--dry-run=server", write(tmp_path, "again.yaml", runtime, other))
    assert res.code == 0 and "clustertrainingruntime.trainer.kubeflow.org/k8sddp-torch unchanged (server dry run)" in res.out, res.err
    runtime["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] = 5
    res = cli("submit", "--kubeconfig", str(kubeconfig), write(tmp_path, "changed.yaml", runtime, other))
    assert res.code == 0 and "clustertrainingruntime.trainer.kubeflow.org/k8sddp-torch configured" in res.out, res.err
    # one PUT is the server's dry run (defaulted, compared with the stored spec), one the write
    puts = [r["query"].get("dryRun") for r in api.requests if r["method"] == "PUT"
            and r["path"] == f"{API}/clustertrainingruntimes/k8sddp-torch"]
    assert puts == ["All", None]
    stored = api.jobs(plural="clustertrainingruntimes")[0]
    assert stored["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 5


def _jobset_defaults(obj: dict[str, Any]) -> None:
    """What the API server fills in from the JobSet v0.12.0 CRD's defaults (seen on the real one)."""
    template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    if "failurePolicy" in template:
        template["failurePolicy"].setdefault("restartStrategy", "Recreate")
    for rj in template.get("replicatedJobs") or []:
        rj.setdefault("groupName", "default")
        rj.setdefault("replicas", 1)


def test_resubmitted_runtime_is_unchanged_despite_server_defaults(cli: Any, api: FakeApiServer, kubeconfig: Path,
                                                                   tmp_path: Path, rendered: dict[str, Any]) -> None:
    """The stored runtime carries the CRD's defaults the input leaves out: the same input again is
    ``unchanged`` (no write), as kubectl apply says, not ``configured`` by a needless PUT; a real
    change is still replaced, and its dry run writes nothing."""
    api.defaulting = _jobset_defaults
    runtime = rendered["runtime"]
    res = cli("submit", "--kubeconfig", str(kubeconfig), write(tmp_path, "first.yaml", runtime, rendered["job"]))
    assert res.code == 0 and "clustertrainingruntime.trainer.kubeflow.org/k8sddp-torch created" in res.out, res.err
    other = {**rendered["job"], "metadata": {"name": "demo2"}}
    res = cli("submit", "--kubeconfig", str(kubeconfig), write(tmp_path, "again.yaml", runtime, other))
    assert res.code == 0 and "clustertrainingruntime.trainer.kubeflow.org/k8sddp-torch unchanged\n" in res.out, res.out + res.err
    assert [r for r in api.requests if r["method"] == "PUT" and "dryRun" not in r["query"]] == []
    stored_rv = api.jobs(plural="clustertrainingruntimes")[0]["metadata"]["resourceVersion"]
    runtime["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] = 5
    third = {**rendered["job"], "metadata": {"name": "demo3"}}
    res = cli("submit", "--kubeconfig", str(kubeconfig), "--dry-run=server", write(tmp_path, "dry.yaml", runtime, third))
    assert res.code == 0 and "k8sddp-torch configured (server dry run)" in res.out, res.out + res.err
    assert api.jobs(plural="clustertrainingruntimes")[0]["metadata"]["resourceVersion"] == stored_rv
    res = cli("submit", "--kubeconfig", str(kubeconfig), write(tmp_path, "changed.yaml", runtime, third))
    assert res.code == 0 and "clustertrainingruntime.trainer.kubeflow.org/k8sddp-torch configured\n" in res.out, res.out + res.err
    assert api.jobs(plural="clustertrainingruntimes")[0]["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 5


def test_runtime_read_from_the_cluster_or_refused(cli: Any, api: FakeApiServer, kubeconfig: Path, tmp_path: Path,
                                                  rendered: dict[str, Any]) -> None:
    job = write(tmp_path, "job.yaml", rendered["job"])
    res = cli("submit", "--kubeconfig", str(kubeconfig), job)
    assert res.code == 3 and 'ClusterTrainingRuntime "k8sddp-torch", which demo refer(s) to, is neither in the input nor on the cluster' in res.err
    assert api.jobs("ml", plural="trainjobs") == []
    # on the cluster it resolves the TrainJob's trainer container: the guards are checked there
    api.put_job({**rendered["runtime"], "metadata": {"name": "k8sddp-torch"}}, plural="clustertrainingruntimes")
    res = cli("submit", "--kubeconfig", str(kubeconfig), job)
    assert res.code == 0 and "trainjob.trainer.kubeflow.org/demo created" in res.out, res.err
    # a runtime on the cluster without the guards refuses the TrainJob (the effective container lacks them)
    bare = yaml.safe_load(yaml.safe_dump(rendered["runtime"]))
    bare["metadata"]["name"] = "bare"
    bare["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"] = []
    api.put_job(bare, plural="clustertrainingruntimes")
    refers = {**rendered["job"], "metadata": {"name": "bare-user"},
              "spec": {**rendered["job"]["spec"], "runtimeRef": {**rendered["job"]["spec"]["runtimeRef"], "name": "bare"}}}
    trainer = dict(refers["spec"]["trainer"])
    trainer["env"] = [e for e in trainer["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    refers["spec"] = {**refers["spec"], "trainer": trainer}
    res = cli("submit", "--kubeconfig", str(kubeconfig), write(tmp_path, "bare.yaml", refers))
    assert res.code == 1 and "KDP202" in res.err, res.err


def test_status_logs_kind_and_ambiguity(cli: Any, api: FakeApiServer, kubeconfig: Path, rendered: dict[str, Any]) -> None:
    api.put_job({**rendered["job"], "metadata": {"name": "demo", "namespace": "ml"}}, plural="trainjobs")
    api.set_job_status("ml", "demo", {"conditions": [{"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts",
                                                      "message": "jobset failed due to reaching max number of restarts (first failed job: demo-node-0)",
                                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                                      "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 0, "failed": 1, "active": 0, "suspended": 0}]},
                       plural="trainjobs")
    labels = {"jobset.sigs.k8s.io/jobset-name": "demo", "jobset.sigs.k8s.io/replicatedjob-name": "node"}
    for rank in (0, 1):
        api.add_pod("ml", f"demo-node-0-{rank}-x7k2p", {**labels, "batch.kubernetes.io/job-completion-index": str(rank)},
                    phase="Failed", containers=("node",), logs=[f"rank {rank} line"])
    res = cli("status", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 0, res.err
    assert res.out.startswith("demo: Failed (ReachedMaxRestarts) | node 1 failed\n"), res.out
    assert "demo-node-0-1-x7k2p  Failed  restarts=0" in res.out
    res = cli("logs", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out == "[demo-node-0-0-x7k2p] rank 0 line\n[demo-node-0-1-x7k2p] rank 1 line\n", res.err
    res = cli("logs", "demo", "--index", "1", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out == "rank 1 line\n"
    # the pods were listed by the JobSet's labels
    selectors = [r["query"].get("labelSelector", "") for r in api.requests if r["path"].endswith("/pods")]
    assert "jobset.sigs.k8s.io/jobset-name=demo,jobset.sigs.k8s.io/replicatedjob-name=node" in selectors
    # a PyTorchJob of the same name: ambiguous without --kind (exit 2), each kind with it
    _job(api)
    api.add_pod("ml", "demo-master-0", {f"{LABELS}/job-name": "demo", f"{LABELS}/replica-type": "master",
                                        f"{LABELS}/replica-index": "0"}, logs=["master line"])
    res = cli("status", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 2 and "PyTorchJob and TrainJob are both named" in res.err and "--kind pytorchjob or --kind trainjob" in res.err
    res = cli("logs", "demo", "--kind", "pytorchjob", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out == "master line\n"
    res = cli("delete", "demo", "--kind", "TrainJob", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out == 'trainjob.trainer.kubeflow.org "demo" deleted\n'
    assert api.jobs("ml", plural="trainjobs") == [] and len(api.jobs("ml")) == 1
    res = cli("status", "demo", "--kind", "rayjob", "--kubeconfig", str(kubeconfig))
    assert res.code == 2 and "invalid choice" in res.err


@pytest.mark.parametrize(("final", "code"), [("Complete", 0), ("Failed", 4)])
def test_wait_on_a_trainjob(cli: Any, api: FakeApiServer, kubeconfig: Path, tmp_path: Path, rendered: dict[str, Any],
                            final: str, code: int) -> None:
    reason = {"Complete": "AllJobsCompleted", "Failed": "FailJobSetFailurePolicyAction"}[final]

    def controller() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(r["query"].get("watch") == "true" and "trainjobs" in r["path"] for r in api.requests):
            time.sleep(0.05)
        time.sleep(0.3)
        api.set_job_status("ml", "demo", {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}, plural="trainjobs")
        time.sleep(0.3)
        api.set_job_status("ml", "demo", {"conditions": [{"type": final, "status": "True", "reason": reason, "message": "m"}]},
                           plural="trainjobs")

    threading.Thread(target=controller, daemon=True).start()
    res = cli("submit", "--kubeconfig", str(kubeconfig), "--wait", "--timeout", "30",
              write(tmp_path, "both.yaml", rendered["runtime"], rendered["job"]))
    assert res.code == code, res.err
    assert f"demo: {final} ({reason})" in res.err and "demo: Running | node 1 active" in res.err


def test_missing_trainer_crd_names_trainer(cli: Any, api: FakeApiServer, kubeconfig: Path, tmp_path: Path,
                                           rendered: dict[str, Any]) -> None:
    api.trainer_installed = False
    res = cli("submit", "--kubeconfig", str(kubeconfig), write(tmp_path, "both.yaml", rendered["runtime"], rendered["job"]))
    assert res.code == 3 and "Kubeflow Trainer v2" in res.err and "trainer.kubeflow.org/v1alpha1" in res.err, res.err
    res = cli("status", "demo", "--kind", "trainjob", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and "does not serve trainjobs.trainer.kubeflow.org" in res.err, res.err


def test_credentials_for_one_kind_only(cli: Any, api: FakeApiServer, kubeconfig: Path) -> None:
    # RBAC that lets a user read PyTorchJobs only: the TrainJob look-up is skipped, not an error
    api.forbidden.add(("get", "trainjobs", "ml"))
    _job(api)
    res = cli("status", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out.startswith("demo: "), res.err
    res = cli("status", "nope", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and 'pytorchjobs.kubeflow.org "nope" not found in namespace "ml"' in res.err
    assert "TrainJobs were not looked at: these credentials may not get trainjobs.trainer.kubeflow.org" in res.err
    res = cli("status", "demo", "--kind", "trainjob", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and "may not get trainjobs.trainer.kubeflow.org" in res.err
    api.forbidden.add(("get", "pytorchjobs", "ml"))
    res = cli("status", "demo", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and "may not get" in res.err and "not found" not in res.err


def test_logs_of_initializer_and_launcher_replicated_jobs(cli: Any, api: FakeApiServer, kubeconfig: Path,
                                                          rendered: dict[str, Any]) -> None:
    """A multi-step TrainJob (reference 05-multi-step): while the dataset initializer runs there is
    no ``node`` pod, and its pod's container is ``dataset-initializer``: logs shows it (the pod's only
    container, as kubectl logs) instead of exit 2; ``--replica`` takes any replicatedJob name the
    runtime has (``launcher`` of the stock DeepSpeed runtime, a custom one), not only the stock three."""
    api.put_job({**rendered["job"], "metadata": {"name": "ms", "namespace": "ml"}}, plural="trainjobs")
    labels = {"jobset.sigs.k8s.io/jobset-name": "ms", "batch.kubernetes.io/job-completion-index": "0"}
    api.add_pod("ml", "ms-dataset-initializer-0-0-abcde", {**labels, "jobset.sigs.k8s.io/replicatedjob-name": "dataset-initializer"},
                containers=("dataset-initializer",), logs=["downloading"])
    res = cli("logs", "ms", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out == "downloading\n", res.err
    res = cli("logs", "ms", "--replica", "dataset-initializer", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out == "downloading\n", res.err
    api.add_pod("ml", "ms-launcher-0-0-abcde", {**labels, "jobset.sigs.k8s.io/replicatedjob-name": "launcher"},
                containers=("node",), logs=["launched"])
    res = cli("logs", "ms", "--replica", "launcher", "--kubeconfig", str(kubeconfig))
    assert res.code == 0 and res.out == "launched\n", res.err
    res = cli("logs", "ms", "--replica", "trainer", "--kubeconfig", str(kubeconfig))
    assert res.code == 3 and 'no pods of job "ms" (TrainJob, trainer)' in res.err, res.err
    res = cli("logs", "ms", "--replica", "Not_A_Label", "--kubeconfig", str(kubeconfig))
    assert res.code == 2 and "not a replicatedJob name" in res.err, res.err
    # a pod of several containers, none the training one and no default-container annotation: exit 2
    api.add_pod("ml", "ms-side-0-0-abcde", {**labels, "jobset.sigs.k8s.io/replicatedjob-name": "side"},
                containers=("a", "b"), logs=["x"])
    res = cli("logs", "ms", "--replica", "side", "--kubeconfig", str(kubeconfig))
    assert res.code == 2 and 'has no container named "node" (it has a, b)' in res.err, res.err
