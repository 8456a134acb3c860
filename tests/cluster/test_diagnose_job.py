"""``k8sddp diagnose --job NAME`` against the fake API server: the reader pod mounts the job's
claim read-only, its log (a base64 tar of the artifact folder's ``runs/``) is unpacked and
diagnosed, and the pod is deleted. The fake plays the kubelet: on the pod's creation it writes
the log a real ``busybox`` would print and marks the pod Succeeded."""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from k8sddp.cli import main
from tests.cluster.conftest import rendered_demo
from tests.cluster.fakeapi import FakeApiServer
from tests.diagnose.synth import rank0_hang


def _archive(volume: Path) -> list[str]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(volume / "runs", arcname="runs")
    text = base64.b64encode(buf.getvalue()).decode()
    return [text[i:i + 76] for i in range(0, len(text), 76)]  # busybox base64 wraps at 76


def _submit(api: FakeApiServer, kubeconfig: Path) -> None:
    from k8sddp.cluster.client import Cluster

    with Cluster.connect(kubeconfig=str(kubeconfig)) as c:
        c.create_job(rendered_demo())


def test_reader_pod_streams_the_artifacts_back(api: FakeApiServer, kubeconfig: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    _submit(api, kubeconfig)
    lines = _archive(rank0_hang(tmp_path / "volume"))
    seen: dict[str, Any] = {}

    def kubelet(ns: str, name: str, body: dict[str, Any]) -> None:
        seen.update(body)
        for line in lines:
            api.append_log(ns, name, line)
        api.append_log(ns, name, "", done=True)
        with api._lock:
            api._pods[(ns, name)]["status"]["phase"] = "Succeeded"

    api.on_pod_created = kubelet
    assert main(["diagnose", "--job", "demo", "--kubeconfig", str(kubeconfig), "--cluster"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("culprit: rank 0 on node 0: hang, phase checkpoint, step 3")
    spec = seen["spec"]
    assert spec["volumes"] == [{"name": "artifacts", "persistentVolumeClaim": {"claimName": "demo-checkpoints",
                                                                             "readOnly": True}}]
    (c,) = spec["containers"]
    assert c["volumeMounts"][0]["readOnly"] is True and "/k8sddp-artifacts/k8sddp" in c["command"][-1]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert api.deleted_pods == [seen["metadata"]["name"]]


def test_forbidden_reader_pod_is_a_cluster_error(api: FakeApiServer, kubeconfig: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _submit(api, kubeconfig)
    api.forbidden.add(("create", "pods", "ml"))
    assert main(["diagnose", "--job", "demo", "--kubeconfig", str(kubeconfig), "--cluster"]) == 3
    assert "forbidden" in capsys.readouterr().err


def test_missing_job_is_a_cluster_error(api: FakeApiServer, kubeconfig: Path) -> None:
    assert main(["diagnose", "--job", "nope", "--kubeconfig", str(kubeconfig), "--cluster"]) == 3
