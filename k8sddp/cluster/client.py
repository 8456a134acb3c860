"""The one place k8sddp talks to a cluster: a thin wrapper over the official ``kubernetes`` client.

Needs the optional extra ``k8sddp[cluster]``. Every call goes through :func:`Cluster._call`, which
retries transient failures (:mod:`k8sddp.cluster.retry`) and turns every failure into a
:class:`k8sddp.errors.ClusterError` (:mod:`k8sddp.cluster.apierrors`). Custom objects of every
registered kind go through the same methods: the object's ``apiVersion`` and ``kind`` pick its
kind (:mod:`k8sddp.kinds`), whose :class:`~k8sddp.kinds.StatusModel` gives the plural, version and
scope (:mod:`k8sddp.cluster.resources`); methods that take a name take the kind too (default: the
PyTorchJob, ``kubeflow.org/v1`` ``pytorchjobs``). Pods, logs and ConfigMaps:
:mod:`k8sddp.cluster.coreapi`.

Configuration is found as kubectl finds it: ``--kubeconfig`` (or ``$KUBECONFIG``, or
``~/.kube/config``) with ``--context``; without any kubeconfig file, the in-cluster service
account (``KUBERNETES_SERVICE_HOST``). The namespace is ``-n``, else the context's namespace, else
the in-cluster namespace, else ``default``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ClusterError
from ..kinds.pytorchjob import PYTORCHJOB
from .apierrors import Call, parse_status, translate
from .coreapi import CoreCalls
from .resources import SUBMISSION_ANNOTATION, Resource, prepare_for_create, resource_of
from .retry import RetryPolicy, call_with_retries

if TYPE_CHECKING:
    from ..kinds.base import Kind

__all__ = [
    "Cluster",
    "GROUP",
    "KIND",
    "PLURAL",
    "RESOURCE",
    "Resource",
    "SUBMISSION_ANNOTATION",
    "VERSION",
]

# The default kind's API coordinates (the PyTorchJob's), from its kind module.
GROUP = PYTORCHJOB.group
VERSION = PYTORCHJOB.status.version
PLURAL = PYTORCHJOB.status.plural
KIND = PYTORCHJOB.kind
RESOURCE = f"{PLURAL}.{GROUP}"

T = TypeVar("T")


def _res(kind: Kind | Resource | None) -> Resource:
    if kind is None:
        return Resource.of(PYTORCHJOB)
    return kind if isinstance(kind, Resource) else Resource.of(kind)


class Cluster(CoreCalls):
    """A connection to one API server, in one namespace.

    Build it with :meth:`connect`. Methods return plain dicts (the JSON the server sent) and raise
    :class:`ClusterError` (exit 3) on any failure, after retries where the failure is transient.

    Attributes:
        namespace: the namespace calls go to.
        server: the API server URL (for messages).
        policy: the retry policy.
    """

    def __init__(self, api_client: Any, *, namespace: str, policy: RetryPolicy | None = None) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.namespace = namespace
        self.server = str(api_client.configuration.host)
        self.policy = policy or RetryPolicy.from_env()
        # typed Any: the generated API returns `object` for custom resources and raw responses
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        policy: RetryPolicy | None = None,
    ) -> Cluster:
        """Load the configuration as kubectl would and return a :class:`Cluster`.

        Args:
            kubeconfig: path of a kubeconfig file (``--kubeconfig``); ``None`` looks for
                ``$KUBECONFIG``, ``~/.kube/config``, then the in-cluster service account.
            context: kubeconfig context (``--context``); ``None`` uses its current context.
            namespace: ``-n``; ``None`` uses the context's namespace, else ``default``.
            policy: retry policy; ``None`` reads :meth:`RetryPolicy.from_env`.

        Raises:
            UsageError: the kubeconfig file is missing or unreadable, or names no such context,
                or no configuration exists at all (exit 2).
            ClusterError: the configuration cannot be used (bad credentials file).
        """
        from kubernetes import client

        from .kubeconfig import load_configuration

        configuration, ns = load_configuration(kubeconfig=kubeconfig, context=context, namespace=namespace)
        api_client = client.ApiClient(configuration)
        return cls(api_client, namespace=ns or "default", policy=policy)

    def close(self) -> None:
        """Release the connection pool."""
        self.api_client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one call path ----------------------------------------------------------------------
    def _call(self, call: Call, fn: Callable[[int], T], *, retry: bool = True, res: Resource | None = None) -> T:  # type: ignore[override]
        """Run ``fn(attempt)`` with retries; translate the final failure (a 404 on ``res``
        without a name: is its CRD served at all?).

        Raises:
            ClusterError: with the server's status, reason and causes.
        """
        from kubernetes.client.exceptions import ApiException

        attempts = [0]

        def counted(attempt: int) -> T:
            attempts[0] = attempt
            return fn(attempt)

        policy = self.policy if retry else RetryPolicy(max_attempts=1)
        try:
            return call_with_retries(counted, policy)
        except ClusterError:
            raise
        except ApiException as exc:
            raise self._diagnose(exc, call, attempts[0], res) from None
        except Exception as exc:
            from .retry import is_transport_error

            if is_transport_error(exc):
                raise translate(exc, call, attempts=attempts[0]) from None
            raise

    def _diagnose(self, exc: BaseException, call: Call, attempts: int, res: Resource | None = None) -> ClusterError:
        """Like :func:`translate`, and tell a missing CRD from a missing object on 404."""
        st = parse_status(exc)
        if res is not None and st.code == 404 and not st.details.get("name") and not self.crd_installed(res):
            return ClusterError(
                f"the API server at {self.server} does not serve {res.name} ({res.api_version}): "
                f"{res.needs or 'the operator that installs the ' + res.kind + ' CRD'} is needed on this cluster; see docs/cluster.md",
                status=404,
                reason="NotFound",
            )
        return translate(exc, call, attempts=attempts)

    def crd_installed(self, kind: Kind | Resource | None = None) -> bool:
        """True when discovery lists the kind's plural under its group and version (default: the PyTorchJob).

        Raises:
            ClusterError: discovery itself failed (other than 404).
        """
        res = _res(kind)
        call = Call("get", f"apis/{res.api_version}", self.namespace, server=self.server)
        try:
            resources = self._call(call, lambda _a: self.custom.get_api_resources(res.group, res.version, _request_timeout=30))
        except ClusterError as exc:
            if exc.status == 404:
                return False
            raise
        names = [r.name for r in (resources.resources or [])]
        return res.plural in names

    def _ns_of(self, res: Resource, namespace: str | None) -> str | None:
        """The namespace of a call on ``res`` (``None`` for a cluster-scoped resource)."""
        return (namespace or self.namespace) if res.namespaced else None

    def _custom(self, verb: str, res: Resource, ns: str | None, *args: Any, **kwargs: Any) -> Any:
        """``CustomObjectsApi.<verb>_namespaced_custom_object`` or ``<verb>_cluster_custom_object``."""
        if ns is None:
            return getattr(self.custom, f"{verb}_cluster_custom_object")(res.group, res.version, res.plural, *args, **kwargs)
        return getattr(self.custom, f"{verb}_namespaced_custom_object")(res.group, res.version, ns, res.plural, *args, **kwargs)

    # -- custom objects (jobs, runtimes) --------------------------------------------------------
    def create_job(self, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Create an object of a registered kind (a PyTorchJob, a TrainJob, a runtime) with ``POST``, never twice.

        A ``generateName`` without ``name`` is resolved here (same alphabet and length as the API
        server), so every attempt uses the same name; a fresh id goes into the annotation
        :data:`SUBMISSION_ANNOTATION`. When an attempt after the first meets AlreadyExists, the
        object is read back: if it carries this submission's id, the earlier attempt landed (its
        reply was lost) and that object is returned.

        Args:
            body: the object (not mutated); its ``apiVersion`` and ``kind`` pick the resource.
            dry_run: server-side dry run (``dryRun=All``); nothing is persisted.

        Returns:
            The object the server returned.

        Raises:
            UsageError: ``body`` is not of a registered kind.
            ClusterError: AlreadyExists (another object), CRD not installed, Forbidden, Invalid,
                BadRequest (unknown fields: ``fieldValidation=Strict``), unreachable.
        """
        res = resource_of(body)
        obj = prepare_for_create(body, res.kind)
        obj["apiVersion"] = res.api_version
        name = obj["metadata"]["name"]
        marker = obj["metadata"]["annotations"][SUBMISSION_ANNOTATION]
        ns = self._ns_of(res, obj["metadata"].get("namespace"))
        if ns is not None:
            obj["metadata"]["namespace"] = ns
        else:
            obj["metadata"].pop("namespace", None)
        call = Call("create", res.name, ns or "", name, self.server)

        def attempt(n: int) -> dict[str, Any]:
            from kubernetes.client.exceptions import ApiException

            try:
                result: dict[str, Any] = self._custom(
                    "create", res, ns, obj, dry_run="All" if dry_run else None, field_validation="Strict", _request_timeout=60
                )
                return result
            except ApiException as exc:
                if exc.status == 409 and n > 1 and not dry_run:
                    existing = self._get_once(name, ns, res)
                    annotations = (existing or {}).get("metadata", {}).get("annotations") or {}
                    if existing is not None and annotations.get(SUBMISSION_ANNOTATION) == marker:
                        return existing
                raise

        return self._call(call, attempt, res=res)

    def _get_once(self, name: str, namespace: str | None, kind: Kind | Resource | None = None) -> dict[str, Any] | None:
        """GET with its own retries; ``None`` on 404."""
        try:
            return self.get_job(name, namespace=namespace, kind=kind)
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise

    def get_job(self, name: str, *, namespace: str | None = None, kind: Kind | Resource | None = None) -> dict[str, Any]:
        """GET one object of ``kind`` (default: a PyTorchJob).

        Raises:
            ClusterError: 404 (``status == 404``), CRD missing, forbidden, unreachable.
        """
        res = _res(kind)
        ns = self._ns_of(res, namespace)
        call = Call("get", res.name, ns or "", name, self.server)
        result: dict[str, Any] = self._call(call, lambda _a: self._custom("get", res, ns, name, _request_timeout=30), res=res)
        return result

    def find(self, name: str, kind: Kind | Resource, *, namespace: str | None = None) -> dict[str, Any] | None:
        """GET one object of ``kind``; ``None`` when there is none (404, the CRD not served included).

        Raises:
            ClusterError: forbidden, unreachable.
        """
        return self._get_once(name, namespace, kind)

    def read_object(self, group: str, version: str, plural: str, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """GET a custom object (read-only): ``namespace`` ``None`` for a cluster-scoped resource
        (``clustertrainingruntimes``); ``None`` when it, or its resource, does not exist.

        Raises:
            ClusterError: forbidden, unreachable.
        """
        res = Resource(group, version, plural, plural, namespaced=namespace is not None)
        return self._get_once(name, namespace, res)

    def apply(self, body: dict[str, Any], *, dry_run: bool = False) -> tuple[dict[str, Any], str]:
        """Create ``body``, or replace the object of the same name when its ``spec`` differs
        (``PUT`` with the stored ``resourceVersion``, as ``kubectl apply`` ends up doing).

        Returns:
            The object as the server returned it, and ``created``, ``configured`` or ``unchanged``.

        Raises:
            UsageError: ``body`` is not of a registered kind, or has no ``metadata.name``.
            ClusterError: forbidden, invalid, a conflicting concurrent write, unreachable.
        """
        import copy

        from ..errors import UsageError

        res = resource_of(body)
        name = (body.get("metadata") or {}).get("name")
        if not name:
            raise UsageError(f"the {res.kind} to apply has no metadata.name")
        ns = self._ns_of(res, (body.get("metadata") or {}).get("namespace"))
        existing = self._get_once(name, ns, res)
        if existing is None:
            return self.create_job(body, dry_run=dry_run), "created"
        if existing.get("spec") == body.get("spec"):
            return existing, "unchanged"
        obj = copy.deepcopy(body)
        obj["apiVersion"] = res.api_version
        obj.setdefault("metadata", {})["resourceVersion"] = existing["metadata"].get("resourceVersion")
        if ns is not None:
            obj["metadata"]["namespace"] = ns
        call = Call("update", res.name, ns or "", name, self.server)
        # The stored spec carries the CRD's defaults (a JobSet's ``replicas``, ``groupName``,
        # ``restartStrategy``) that the input leaves out, so an equal input rarely compares equal:
        # the server's dry run of the PUT defaults it the same way, and a spec equal after that
        # is ``unchanged`` (no write), as kubectl apply says. Safe to retry: nothing is written.
        dry: dict[str, Any] = self._call(
            call, lambda _a: self._custom("replace", res, ns, name, obj, dry_run="All",
                                          field_validation="Strict", _request_timeout=60), res=res
        )
        if dry.get("spec") == existing.get("spec"):
            return existing, "unchanged"
        if dry_run:
            return dry, "configured"
        result: dict[str, Any] = self._call(
            call, lambda _a: self._custom("replace", res, ns, name, obj,
                                          field_validation="Strict", _request_timeout=60), retry=False, res=res
        )
        return result, "configured"

    def delete_job(self, name: str, *, propagation: str = "Background", kind: Kind | Resource | None = None) -> dict[str, Any]:
        """DELETE one object of ``kind`` (default: a PyTorchJob) in this namespace.

        Args:
            name: the object's name.
            propagation: ``Background`` (kubectl's default) or ``Foreground`` (the job goes
                only after its pods are gone).
            kind: the kind.

        Raises:
            ClusterError: 404, forbidden, unreachable.
        """
        res = _res(kind)
        ns = self._ns_of(res, None)
        call = Call("delete", res.name, ns or "", name, self.server)
        result: dict[str, Any] = self._call(
            call, lambda _a: self._custom("delete", res, ns, name, propagation_policy=propagation, _request_timeout=30), res=res
        )
        return result

    def wait_job_gone(self, name: str, *, namespace: str | None = None, timeout: float = 120.0,
                      kind: Kind | Resource | None = None) -> None:
        """Block until GET answers 404 for the object (polling each 0.5-2 s).

        Raises:
            ClusterError: still there after ``timeout`` seconds (reason ``Timeout``).
        """
        res = _res(kind)
        ns = namespace or self.namespace
        deadline = time.monotonic() + timeout
        delay = 0.5
        while True:
            if self._get_once(name, ns, res) is None:
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f'{res.name} "{name}" in namespace "{ns}" was still there {timeout:.0f} s '
                    "after it was deleted (finalizers or pods still terminating?)",
                    reason="Timeout",
                )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(2.0, delay * 1.5)

    def replace_job(self, body: dict[str, Any], *, timeout: float = 120.0) -> tuple[dict[str, Any], bool]:
        """Delete the object of the same kind and name (Foreground: its pods first), wait until
        it is gone, and create ``body``. A missing old object is not an error.

        Returns:
            The created object, and whether an old one was deleted (``False``: plainly created).

        Raises:
            ClusterError: as :meth:`delete_job`, :meth:`wait_job_gone`, :meth:`create_job`.
        """
        res = resource_of(body)
        name = (body.get("metadata") or {}).get("name")
        existed = False
        if name:
            ns = body["metadata"].get("namespace") or self.namespace
            try:
                self.with_namespace(ns).delete_job(name, propagation="Foreground", kind=res)
                existed = True
            except ClusterError as exc:
                if exc.status != 404:
                    raise
            self.wait_job_gone(name, namespace=ns, timeout=timeout, kind=res)
        return self.create_job(body), existed

    def with_namespace(self, namespace: str) -> Cluster:
        """This connection, aimed at another namespace (shares the connection pool)."""
        if namespace == self.namespace:
            return self
        other = Cluster.__new__(Cluster)
        other.__dict__.update(self.__dict__)
        other.namespace = namespace
        return other

    def watch_jobs(
        self, name: str, *, resource_version: str, timeout_seconds: int, kind: Kind | Resource | None = None
    ) -> Iterator[dict[str, Any]]:
        """One watch stream of the named object of ``kind`` (default: a PyTorchJob) from
        ``resource_version``: yields raw events ``{"type": ADDED|MODIFIED|DELETED|ERROR|BOOKMARK,
        "object": {...}}`` until the server ends the stream (``timeout_seconds``) or the connection
        breaks (the caller reconnects).

        Raises:
            ClusterError: the watch request itself was refused.
        """
        import json as _json

        res = _res(kind)
        ns = self._ns_of(res, None)
        call = Call("watch", res.name, ns or "", name, self.server)
        resp = self._call(
            call,
            lambda _a: self._custom(
                "list", res, ns,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                watch=True,
                _preload_content=False,
                _request_timeout=(30, timeout_seconds + 30),
            ),
            res=res,
        )

        def event(line: bytes) -> dict[str, Any]:
            try:
                data = _json.loads(line)
            except ValueError:
                data = None
            if not isinstance(data, dict):
                raise ClusterError(f"the watch of {res.kind} {name!r} sent something that is not an event: {line[:200]!r}")
            return data

        buf = b""
        try:
            for chunk in resp.stream(4096, decode_content=False):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield event(line)
            if buf.strip():
                yield event(buf)
        finally:
            resp.release_conn()
