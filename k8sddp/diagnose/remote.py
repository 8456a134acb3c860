"""``k8sddp diagnose --job NAME`` on a cluster: a short-lived reader pod streams the artifacts back.

1. GET the PyTorchJob; find, in its Master's ``pytorch`` container, the volume mount that holds
   ``K8SDDP_ARTIFACT_DIR`` and the PersistentVolumeClaim behind it (``--claim`` overrides);
2. create pod ``<job>-diagnose-<hex>`` (``restartPolicy: Never``, ``activeDeadlineSeconds``,
   non-root, no privilege escalation, every capability dropped, read-only root file system) that
   mounts the claim **read-only** and runs ``tar czf - runs launcher-state-node*.json | base64``
   in the artifact folder (checkpoints are not read);
3. wait until it Succeeded, read its log (the base64 text), delete it, unpack into a temporary
   folder (``tarfile`` with the ``data`` filter: no absolute paths, links out, devices).

RBAC it needs in the job's namespace (``docs/diagnose.md`` has the Role): ``get`` on
``pytorchjobs.kubeflow.org``; ``create``, ``get``, ``delete`` on ``pods``; ``get`` on ``pods/log``.
A ReadWriteOnce claim can be mounted by a second pod only on the node that already mounts it
(or once the job's pods are gone): the reader pod then waits Pending until ``--timeout``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import io
import secrets
import tarfile
import tempfile
import time
from typing import Any

from ..errors import ClusterError, UsageError

READER_IMAGE = "busybox:1.36"
READ_TIMEOUT_S = 300.0
MOUNT = "/k8sddp-artifacts"


def find_claim(job: dict[str, Any], claim: str | None) -> tuple[str, str]:
    """``(claim name, sub-path of the artifact folder inside the claim)`` for a PyTorchJob.

    Raises:
        UsageError: the job mounts no claim where ``K8SDDP_ARTIFACT_DIR`` points (and ``--claim``
            was not given).
    """
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    for role in ("Master", "Worker", *specs):
        pod = ((specs.get(role) or {}).get("template") or {}).get("spec") or {}
        for c in pod.get("containers") or []:
            env = {e.get("name"): e.get("value") for e in c.get("env") or [] if isinstance(e, dict)}
            art = env.get("K8SDDP_ARTIFACT_DIR")
            if not art:
                continue
            vols = {v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, dict)}
            mounts = sorted((m for m in c.get("volumeMounts") or [] if isinstance(m, dict)
                             and (art == m.get("mountPath") or art.startswith(str(m.get("mountPath", "")).rstrip("/") + "/"))),
                            key=lambda m: -len(str(m.get("mountPath"))))
            for m in mounts:
                pvc = (vols.get(m.get("name")) or {}).get("persistentVolumeClaim") or {}
                name = claim or pvc.get("claimName")
                if name:
                    sub = art[len(str(m["mountPath"]).rstrip("/")):].strip("/")
                    if m.get("subPath"):
                        sub = f"{str(m['subPath']).strip('/')}/{sub}".strip("/")
                    return str(name), sub
    if claim:
        return claim, "k8sddp"
    raise UsageError(f"job {job.get('metadata', {}).get('name')}: no persistentVolumeClaim is mounted where "
                     "K8SDDP_ARTIFACT_DIR points; give --claim NAME")


def reader_pod(job: str, claim: str, sub: str, image: str) -> dict[str, Any]:
    """The reader pod's manifest (see the module docstring)."""
    folder = f"{MOUNT}/{sub}" if sub else MOUNT
    script = (f"cd {folder!r} && tar czf - $(ls -d runs launcher-state-node*.json 2>/dev/null) | base64")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job[:40]}-diagnose-{secrets.token_hex(3)}",
                     "labels": {"app.kubernetes.io/managed-by": "k8sddp", "k8sddp.dev/diagnose-reader": job}},
        "spec": {
            "restartPolicy": "Never", "activeDeadlineSeconds": int(READ_TIMEOUT_S),
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "reader", "image": image, "command": ["sh", "-c", script],
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
                "volumeMounts": [{"name": "artifacts", "mountPath": MOUNT, "readOnly": True}],
            }],
            "volumes": [{"name": "artifacts", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
        },
    }


def unpack(text: bytes, into: str) -> None:
    """Unpack the reader's base64 tar stream into folder ``into``.

    Raises:
        ClusterError: the stream is not base64 of a gzip tar (the reader failed).
    """
    try:
        data = base64.b64decode(b"".join(text.split()), validate=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(into, filter="data")
    except (binascii.Error, tarfile.TarError, EOFError, OSError) as exc:
        raise ClusterError(f"the reader pod's output is not the artifact archive ({type(exc).__name__}: {exc})") from None


def fetch_job_artifacts(args: argparse.Namespace, *, poll_s: float = 1.0) -> tempfile.TemporaryDirectory[str]:
    """Copy a cluster job's artifact folder (runs only) into a temporary folder, via a reader pod.

    Raises:
        UsageError: no kubeconfig, no claim to read.
        ClusterError: unreachable, forbidden, no such job, the reader pod failed or timed out.
    """
    from ..commands._clusterflags import connect

    cluster = connect(args)
    try:
        job = cluster.get_job(args.job)
        claim, sub = find_claim(job, args.claim)
        body = reader_pod(args.job, claim, sub, args.image or READER_IMAGE)
        pod = cluster.create_pod(body)
        name = pod["metadata"]["name"]
        try:
            deadline = time.monotonic() + READ_TIMEOUT_S
            while True:
                phase = (cluster.read_pod(name).get("status") or {}).get("phase")
                if phase == "Succeeded":
                    break
                if phase == "Failed":
                    raise ClusterError(f"reader pod {name} failed (claim {claim}, folder {sub or '/'})")
                if time.monotonic() > deadline:
                    raise ClusterError(f"reader pod {name} did not finish within {READ_TIMEOUT_S:g} s (phase "
                                       f"{phase}; a ReadWriteOnce claim mounted on another node?)")
                time.sleep(poll_s)
            text = b"".join(cluster.pod_log(name, container="reader"))
        finally:
            cluster.delete_pod(name)
    finally:
        cluster.close()
    tmp = tempfile.TemporaryDirectory(prefix=f"k8sddp-diagnose-{args.job[:40]}-")
    try:
        unpack(text, tmp.name)
    except BaseException:
        tmp.cleanup()
        raise
    return tmp
