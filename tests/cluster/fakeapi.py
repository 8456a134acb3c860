"""A small, real HTTP server on 127.0.0.1 that speaks the parts of the Kubernetes API server's REST
contract k8sddp uses, so the real ``kubernetes`` client can be tested end to end without a cluster.

Implemented (paths and behaviour as the API server's; sources: k8s.io/apiserver handlers,
k8s.io/apimachinery pkg/api/errors, the API concepts page on watches):
- discovery: ``/api``, ``/apis``, ``/apis/kubeflow.org/v1`` (absent when the CRD is "not installed");
- PyTorchJobs ``/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs[/{name}]``: create (``dryRun=All``,
  ``fieldValidation=Strict`` with unknown fields found by walking the real CRD schema -> 400
  BadRequest "strict decoding error: unknown field"), get, list (``fieldSelector`` on
  ``metadata.name``, ``labelSelector`` equality), watch (chunked JSON lines of
  ``{"type", "object"}`` from a ``resourceVersion``, ``timeoutSeconds``, 410 Expired ERROR events for a
  compacted history), delete (``propagationPolicy``; an optional delay emulates finalizers);
- ConfigMap get; pod list by label selector; pod create, get, delete; pod logs (``container``,
  ``follow``, ``tailLines``);
- failures as ``Status`` objects with the real codes and reasons: AlreadyExists 409, NotFound 404,
  Forbidden 403 (per verb/resource/namespace rules), Invalid 422 with causes (from an admission hook),
  BadRequest 400, Unauthorized 401 (bearer token), TooManyRequests 429 with ``Retry-After``, 500/503;
- fault injection: a connection reset (TCP RST) before or after the request is applied, a status
  answer (e.g. 429 then success), N times per matching request.

Used only by tests; the server thread is a daemon and :meth:`FakeApiServer.stop` shuts it down.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import functools
import json
import re
import threading
import uuid
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

GROUP = "kubeflow.org"
VERSION = "v1"
PLURAL = "pytorchjobs"
TRAINER = "trainer.kubeflow.org"


@dataclasses.dataclass
class Res:
    """One served custom resource and its objects (``(namespace, name)``; ``""`` for cluster-scoped)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    store: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
CRD_PATH = Path(__file__).resolve().parents[3] / "shared" / "reference" / "kubeflow" / "kubeflow.org_pytorchjobs.yaml"

#: ObjectMeta fields the API server knows (k8s.io/apimachinery ObjectMeta, json names).
OBJECT_META_FIELDS = {
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
}


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_obj(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``Status`` failure object as the API server writes it."""
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        out["details"] = details
    return out


@dataclasses.dataclass
class Fault:
    """One injected fault.

    Attributes:
        method: HTTP method to match (``POST``), or ``*``.
        path: regular expression searched in the request path.
        action: ``reset_before`` (RST without applying), ``reset_after`` (apply, then RST without
            answering), ``status`` (answer ``status`` with ``retry_after``, nothing applied), or
            ``status_after`` (apply a create, then answer ``status``: a gateway timeout that hid
            a success).
        status: HTTP status for ``status``.
        retry_after: ``Retry-After`` seconds for ``status`` (None: no header).
        times: how many matching requests it hits.
    """

    method: str
    path: str
    action: str
    status: int = 503
    retry_after: int | None = None
    times: int = 1


class _Reset(Exception):
    """Raised inside a handler to end the connection with a TCP RST."""


class FakeApiServer:
    """The fake API server. Use as a context manager or call :meth:`start` / :meth:`stop`.

    Attributes:
        token: bearer token required from clients.
        crd_installed: whether ``kubeflow.org/v1 pytorchjobs`` is served.
        faults: injected faults, consumed in order.
        requests: every request seen: ``{"method", "path", "query", "body"}``.
        forbidden: set of ``(verb, resource, namespace)`` denied with 403.
        admission: optional ``hook(obj) -> list of (field, message)``; a non-empty list -> 422.
        defaulting: optional ``hook(obj)`` that fills defaults in place on create and update (dry
            runs too), as the API server does from a CRD's ``default`` markers.
        delete_delay: seconds a deleted job lingers with ``deletionTimestamp`` (finalizers).
        watch_timeout_cap: the longest a watch stream stays open (seconds).
    """

    def __init__(self, *, crd_schema: dict[str, Any] | None = None) -> None:
        self.token = "k8sddp-test-token-" + uuid.uuid4().hex[:8]
        self.crd_installed = True
        self.faults: list[Fault] = []
        self.requests: list[dict[str, Any]] = []
        self.forbidden: set[tuple[str, str, str]] = set()
        self.admission: Callable[[dict[str, Any]], list[tuple[str, str]]] | None = None
        self.defaulting: Callable[[dict[str, Any]], None] | None = None
        self.delete_delay = 0.0
        self.watch_timeout_cap = 60.0
        self._schema = crd_schema
        self._lock = threading.Condition()
        self._rv = 100
        #: what is served: the PyTorchJob (``crd_installed``) and the Trainer v2 kinds (``trainer_installed``)
        self.resources = [Res(GROUP, VERSION, PLURAL, "PyTorchJob"), Res(TRAINER, "v1alpha1", "trainjobs", "TrainJob"),
                          Res(TRAINER, "v1alpha1", "trainingruntimes", "TrainingRuntime"),
                          Res(TRAINER, "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", namespaced=False)]
        self.trainer_installed = True
        self._jobs = self.resources[0].store
        self._events: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, object) for jobs
        self._compacted_rv = 0
        self._configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._logs: dict[tuple[str, str], list[str]] = {}
        self._log_done: set[tuple[str, str]] = set()
        #: called with (namespace, name, body) after a pod is created (a test plays the kubelet)
        self.on_pod_created: Callable[[str, str, dict[str, Any]], None] | None = None
        self.deleted_pods: list[str] = []
        self._stopping = False
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        from tests.cluster.fakeapi_http import make_handler

        handler = make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def write_kubeconfig(self, path: Path, *, namespace: str = "default", token: str | None = None) -> Path:
        """Write a kubeconfig with contexts ``fake`` (current, ``namespace``) and ``other``
        (namespace ``other-ns``), both for this server."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-user", "user": {"token": token or self.token}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake-user", "namespace": namespace}},
                {"name": "other", "context": {"cluster": "fake", "user": "fake-user", "namespace": "other-ns"}},
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(cfg))
        return path

    # -- state helpers for tests -------------------------------------------------------------
    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        self._events.append((int(obj["metadata"]["resourceVersion"]), kind, copy.deepcopy(obj)))
        self._lock.notify_all()

    def res(self, plural: str) -> Res:
        """The served resource ``plural``."""
        return next(r for r in self.resources if r.plural == plural)

    def served(self, res: Res) -> bool:
        """Whether the resource's CRD is installed."""
        return self.crd_installed if res.group == GROUP else self.trainer_installed

    def jobs(self, namespace: str | None = None, plural: str = PLURAL) -> list[dict[str, Any]]:
        """Stored objects of ``plural`` (copies; PyTorchJobs by default), optionally of one namespace."""
        with self._lock:
            return [copy.deepcopy(j) for (ns, _), j in sorted(self.res(plural).store.items()) if namespace in (None, ns)]

    def put_job(self, obj: dict[str, Any], plural: str = PLURAL) -> dict[str, Any]:
        """Store an object directly (as if created earlier by someone else)."""
        with self._lock:
            return self._store_new(copy.deepcopy(obj), self.res(plural))

    def _store_new(self, obj: dict[str, Any], res: Res | None = None) -> dict[str, Any]:
        res = res or self.resources[0]
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta["namespace"] = ""
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta["generation"] = 1
        meta["resourceVersion"] = str(self._next_rv())
        obj.pop("status", None)
        res.store[(meta["namespace"], meta["name"])] = obj
        self._emit("ADDED", obj)
        out = copy.deepcopy(obj)
        if not res.namespaced:
            out["metadata"].pop("namespace")
        return out

    def set_job_status(self, namespace: str, name: str, status: dict[str, Any], plural: str = PLURAL) -> None:
        """Replace an object's status (as its controller does) and emit MODIFIED."""
        with self._lock:
            obj = self.res(plural).store[(namespace, name)]
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = str(self._next_rv())
            self._emit("MODIFIED", obj)

    def compact(self) -> None:
        """Forget the watch history so far: older resourceVersions now answer 410 Expired."""
        with self._lock:
            self._compacted_rv = self._rv
            self._events.clear()

    def add_configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        with self._lock:
            self._configmaps[(namespace, name)] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                             "resourceVersion": str(self._next_rv())},
                "data": dict(data),
            }

    def add_pod(
        self,
        namespace: str,
        name: str,
        labels: dict[str, str],
        *,
        phase: str = "Running",
        containers: tuple[str, ...] = ("pytorch",),
        restarts: int = 0,
        logs: list[str] | None = None,
        done: bool = True,
    ) -> None:
        """Add a pod with its ``pytorch`` container's log lines (``done``: no more lines come)."""
        with self._lock:
            self._pods[(namespace, name)] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                             "uid": str(uuid.uuid4()), "resourceVersion": str(self._next_rv()),
                             "creationTimestamp": now_iso()},
                "spec": {"containers": [{"name": c, "image": "img"} for c in containers]},
                "status": {
                    "phase": phase,
                    "containerStatuses": [
                        {"name": c, "ready": phase == "Running", "restartCount": restarts,
                         "image": "img", "imageID": "", "state": {"running": {}}}
                        for c in containers
                    ],
                },
            }
            self._logs[(namespace, name)] = list(logs or [])
            if done:
                self._log_done.add((namespace, name))
            else:
                self._log_done.discard((namespace, name))

    def append_log(self, namespace: str, name: str, line: str, *, done: bool = False) -> None:
        with self._lock:
            self._logs[(namespace, name)].append(line)
            if done:
                self._log_done.add((namespace, name))
            self._lock.notify_all()

    def count(self, method: str, path_part: str) -> int:
        """How many requests with ``method`` had ``path_part`` in their path."""
        return sum(1 for r in self.requests if r["method"] == method and path_part in r["path"])

    # -- request handling (called from handler threads) ---------------------------------------
    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fault.method in ("*", method) and re.search(fault.path, path):
                    fault.times -= 1
                    return fault
        return None

    def schema(self) -> dict[str, Any] | None:
        if self._schema is None and CRD_PATH.is_file():
            self._schema = _crd_schema()
        return self._schema


@functools.lru_cache(maxsize=1)
def _crd_schema() -> dict[str, Any]:
    """The real PyTorchJob CRD's v1 schema, parsed once per test process (the 640 KB file took
    1.4 s of CPU with the pure-Python loader, once per fake server, that is per cluster test);
    only read, never changed, by :func:`unknown_fields`."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(CRD_PATH.read_text(), Loader=loader)  # a safe loader, the C one where built
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Paths of fields in ``value`` that ``schema`` does not declare (what pruning would drop and
    ``fieldValidation=Strict`` reports), e.g. ``spec.pytorchReplicaSpecs.Worker.foo``."""
    out: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return out
    if isinstance(value, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        for key, sub in value.items():
            child = f"{path}.{key}" if path else key
            if path == "metadata" and not props:
                if key not in OBJECT_META_FIELDS:
                    out.append(child)
                continue
            if props is not None and key in props:
                out += unknown_fields(sub, props[key], child)
            elif isinstance(addl, dict):
                out += unknown_fields(sub, addl, child)
            elif props is not None or addl is False:
                out.append(child)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += unknown_fields(item, schema["items"], f"{path}[{i}]")
    return out
