"""The webhook serves Kubeflow Trainer v2 kinds: a TrainJob is judged with its runtime read from the
(fake, real-HTTP) API server through KubeLookup; a runtime is judged on its own."""

from __future__ import annotations

from typing import Any

import pytest

from k8sddp.admission.lookup import KubeLookup
from k8sddp.admission.review import AdmissionDecider, configmap_names, parse_review
from k8sddp.render import load_spec, render_runtime, render_spec

from ..conftest import REPO
from .helpers import FakeApiServer, review

TRAINER = ("trainer.kubeflow.org", "v1alpha1", "TrainJob")
RUNTIME_PATH = "apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/k8sddp-torch"

pytest.importorskip("kubernetes")


def _job() -> dict[str, Any]:
    (job,) = render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml")), "trainjob").objects
    job["metadata"]["namespace"] = "team-a"
    return job


def _decide(server: FakeApiServer, obj: dict[str, Any], kind: tuple[str, str, str] = TRAINER, profile: str = "strict") -> Any:
    lookup = KubeLookup(server.api_client(), cache_seconds=0)
    decider = AdmissionDecider(profile=profile, configmaps=lookup, runtimes=lookup)
    return decider.decide(parse_review(__import__("json").dumps(review(obj, kind=kind)).encode()))


def test_trainjob_with_the_guarded_runtime_is_allowed() -> None:
    with FakeApiServer() as server:
        server.objects[RUNTIME_PATH] = render_runtime().objects[0]
        verdict = _decide(server, _job())
        assert verdict.allowed, verdict.message
        assert f"/{RUNTIME_PATH}" in [r.split("?")[0] for r in server.requests]


def test_trainjob_with_an_unguarded_runtime_is_denied_on_the_trainjob() -> None:
    runtime = render_runtime().objects[0]
    container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    job = _job()
    job["spec"]["trainer"]["env"] = [e for e in job["spec"]["trainer"]["env"] if e["name"] != "PYTHONFAULTHANDLER"]
    with FakeApiServer() as server:
        server.objects[RUNTIME_PATH] = runtime
        verdict = _decide(server, job, profile="baseline")
    assert not verdict.allowed and verdict.failed_rules() == ["KDP202"]
    assert "TrainJob team-a/demo" in verdict.message


def test_missing_runtime_is_unverifiable() -> None:
    with FakeApiServer() as server:
        verdict = _decide(server, _job())
    assert not verdict.allowed and "KDP230" in verdict.failed_rules()
    assert any("ClusterTrainingRuntime k8sddp-torch not found" in w for w in verdict.warnings)


def test_a_runtime_is_judged_on_its_own() -> None:
    runtime = render_runtime().objects[0]
    with FakeApiServer() as server:
        assert _decide(server, runtime, kind=("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime")).allowed
        del runtime["spec"]["template"]["spec"]["failurePolicy"]
        verdict = _decide(server, runtime, kind=("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime"))
    assert not verdict.allowed and verdict.failed_rules() == ["KDP340"]


def test_configmap_names_of_a_trainjob() -> None:
    job = _job()
    job["spec"]["trainer"]["env"].append({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "x"}}})
    assert configmap_names(job) == ["settings"]
