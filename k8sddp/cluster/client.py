"""The one place k8sddp talks to a cluster: a thin wrapper over the official ``kubernetes`` client.

Needs the optional extra ``k8sddp[cluster]``. Every call goes through :func:`Cluster._call`, which
retries transient failures (:mod:`k8sddp.cluster.retry`) and turns every failure into a
:class:`k8sddp.errors.ClusterError` (:mod:`k8sddp.cluster.apierrors`). PyTorchJobs are
``kubeflow.org/v1`` ``pytorchjobs`` (the Kubeflow training operator's CRD; see
../shared/reference/kubeflow/kubeflow.org_pytorchjobs.yaml).

Configuration is found as kubectl finds it: ``--kubeconfig`` (or ``$KUBECONFIG``, or
``~/.kube/config``) with ``--context``; without any kubeconfig file, the in-cluster service
account (``KUBERNETES_SERVICE_HOST``). The namespace is ``-n``, else the context's namespace, else
the in-cluster namespace, else ``default``.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import ClusterError, UsageError
from ..kinds.pytorchjob import PYTORCHJOB
from .apierrors import Call, parse_status, translate
from .retry import RetryPolicy, call_with_retries

__all__ = [
    "Cluster",
    "GROUP",
    "KIND",
    "PLURAL",
    "RESOURCE",
    "SUBMISSION_ANNOTATION",
    "VERSION",
]

# The submitted kind's API coordinates come from its kind module (one source of truth).
GROUP = PYTORCHJOB.group
VERSION = PYTORCHJOB.status.version
PLURAL = PYTORCHJOB.status.plural
KIND = PYTORCHJOB.kind
RESOURCE = f"{PLURAL}.{GROUP}"
#: Annotation holding a fresh id per submission: after a connection reset, a create that meets
#: AlreadyExists reads the job back and knows it is its own first attempt by this id.
SUBMISSION_ANNOTATION = "k8sddp.dev/submission-id"
#: Characters of Kubernetes' generateName suffix (k8s.io/apiserver names.SimpleNameGenerator).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

T = TypeVar("T")


class Cluster:
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
    def _call(self, call: Call, fn: Callable[[int], T], *, retry: bool = True) -> T:
        """Run ``fn(attempt)`` with retries; translate the final failure.

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
            raise self._diagnose(exc, call, attempts[0]) from None
        except Exception as exc:
            from .retry import is_transport_error

            if is_transport_error(exc):
                raise translate(exc, call, attempts=attempts[0]) from None
            raise

    def _diagnose(self, exc: BaseException, call: Call, attempts: int) -> ClusterError:
        """Like :func:`translate`, and tell a missing CRD from a missing object on 404."""
        st = parse_status(exc)
        if (
            st.code == 404
            and call.resource == RESOURCE
            and not st.details.get("name")
            and not self.crd_installed()
        ):
            return ClusterError(
                f"the API server at {self.server} does not serve {RESOURCE} ({GROUP}/{VERSION}): "
                "the Kubeflow training operator (which installs the PyTorchJob CRD) is needed "
                "on this cluster; see docs/cluster.md",
                status=404,
                reason="NotFound",
            )
        return translate(exc, call, attempts=attempts)

    def crd_installed(self) -> bool:
        """True when discovery lists ``pytorchjobs`` under ``kubeflow.org/v1``.

        Raises:
            ClusterError: discovery itself failed (other than 404).
        """
        from kubernetes.client.exceptions import ApiException

        call = Call("get", f"apis/{GROUP}/{VERSION}", self.namespace, server=self.server)
        try:
            resources = self._call(
                call,
                lambda _a: self.custom.get_api_resources(GROUP, VERSION, _request_timeout=30),
            )
        except ClusterError as exc:
            if exc.status == 404:
                return False
            raise
        except ApiException:  # pragma: no cover - _call translates
            return False
        names = [r.name for r in (resources.resources or [])]
        return PLURAL in names

    def _call_ns(self, verb: str, resource: str, name: str = "") -> Call:
        return Call(verb, resource, self.namespace, name, self.server)

    # -- PyTorchJobs ------------------------------------------------------------------------------
    def create_job(self, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Create a PyTorchJob (``POST``), never twice.

        A ``generateName`` without ``name`` is resolved here (same alphabet and length as the API
        server), so every attempt uses the same name; a fresh id goes into the annotation
        :data:`SUBMISSION_ANNOTATION`. When an attempt after the first meets AlreadyExists, the job
        is read back: if it carries this submission's id, the earlier attempt landed (its reply was
        lost) and that job is returned.

        Args:
            body: the PyTorchJob (not mutated).
            dry_run: server-side dry run (``dryRun=All``); nothing is persisted.

        Returns:
            The object the server returned.

        Raises:
            ClusterError: AlreadyExists (another job), CRD not installed, Forbidden, Invalid,
                BadRequest (unknown fields: ``fieldValidation=Strict``), unreachable.
        """
        obj = _prepare_for_create(body)
        name = obj["metadata"]["name"]
        marker = obj["metadata"]["annotations"][SUBMISSION_ANNOTATION]
        namespace = obj["metadata"].get("namespace") or self.namespace
        obj["metadata"]["namespace"] = namespace
        call = Call("create", RESOURCE, namespace, name, self.server)

        def attempt(n: int) -> dict[str, Any]:
            from kubernetes.client.exceptions import ApiException

            try:
                result: dict[str, Any] = self.custom.create_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    obj,
                    dry_run="All" if dry_run else None,
                    field_validation="Strict",
                    _request_timeout=60,
                )
                return result
            except ApiException as exc:
                if exc.status == 409 and n > 1 and not dry_run:
                    existing = self._get_job_once(name, namespace)
                    annotations = (existing or {}).get("metadata", {}).get("annotations") or {}
                    if existing is not None and annotations.get(SUBMISSION_ANNOTATION) == marker:
                        return existing
                raise

        return self._call(call, attempt)

    def _get_job_once(self, name: str, namespace: str) -> dict[str, Any] | None:
        """GET with its own retries; ``None`` on 404."""
        try:
            return self.get_job(name, namespace=namespace)
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise

    def get_job(self, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """GET one PyTorchJob.

        Raises:
            ClusterError: 404 (``status == 404``), CRD missing, forbidden, unreachable.
        """
        ns = namespace or self.namespace
        call = Call("get", RESOURCE, ns, name, self.server)
        result: dict[str, Any] = self._call(
            call,
            lambda _a: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name, _request_timeout=30
            ),
        )
        return result

    def delete_job(self, name: str, *, propagation: str = "Background") -> dict[str, Any]:
        """DELETE one PyTorchJob.

        Args:
            name: the job's name.
            propagation: ``Background`` (kubectl's default) or ``Foreground`` (the job goes
                only after its pods are gone).

        Raises:
            ClusterError: 404, forbidden, unreachable.
        """
        call = self._call_ns("delete", RESOURCE, name)
        result: dict[str, Any] = self._call(
            call,
            lambda _a: self.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                propagation_policy=propagation,
                _request_timeout=30,
            ),
        )
        return result

    def wait_job_gone(self, name: str, *, namespace: str | None = None, timeout: float = 120.0) -> None:
        """Block until GET answers 404 for the job (polling each 0.5-2 s).

        Raises:
            ClusterError: still there after ``timeout`` seconds (reason ``Timeout``).
        """
        ns = namespace or self.namespace
        deadline = time.monotonic() + timeout
        delay = 0.5
        while True:
            if self._get_job_once(name, ns) is None:
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f'{RESOURCE} "{name}" in namespace "{ns}" was still there {timeout:.0f} s '
                    "after it was deleted (finalizers or pods still terminating?)",
                    reason="Timeout",
                )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(2.0, delay * 1.5)

    def replace_job(self, body: dict[str, Any], *, timeout: float = 120.0) -> tuple[dict[str, Any], bool]:
        """Delete the job of the same name (Foreground: its pods first), wait until it is gone,
        and create ``body``. A missing old job is not an error.

        Returns:
            The created job, and whether an old job was deleted (``False``: plainly created).

        Raises:
            ClusterError: as :meth:`delete_job`, :meth:`wait_job_gone`, :meth:`create_job`.
        """
        name = (body.get("metadata") or {}).get("name")
        existed = False
        if name:
            ns = body["metadata"].get("namespace") or self.namespace
            try:
                self.with_namespace(ns).delete_job(name, propagation="Foreground")
                existed = True
            except ClusterError as exc:
                if exc.status != 404:
                    raise
            self.wait_job_gone(name, namespace=ns, timeout=timeout)
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
        self, name: str, *, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """One watch stream of the named job from ``resource_version``: yields raw events
        ``{"type": ADDED|MODIFIED|DELETED|ERROR|BOOKMARK, "object": {...}}`` until the server
        ends the stream (``timeout_seconds``) or the connection breaks (the caller reconnects).

        Raises:
            ClusterError: the watch request itself was refused.
        """
        import json as _json

        call = self._call_ns("watch", RESOURCE, name)
        resp = self._call(
            call,
            lambda _a: self.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                watch=True,
                _preload_content=False,
                _request_timeout=(30, timeout_seconds + 30),
            ),
        )
        def event(line: bytes) -> dict[str, Any]:
            try:
                data = _json.loads(line)
            except ValueError:
                data = None
            if not isinstance(data, dict):
                raise ClusterError(f"the watch of job {name!r} sent something that is not an event: {line[:200]!r}")
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

    # -- pods, logs, ConfigMaps ----------------------------------------------------------------
    def list_pods(self, label_selector: str) -> list[dict[str, Any]]:
        """List pods by label selector, as plain dicts sorted by name.

        Raises:
            ClusterError: forbidden, unreachable.
        """
        call = self._call_ns("list", "pods")
        result = self._call(
            call,
            lambda _a: self.core.list_namespaced_pod(
                self.namespace, label_selector=label_selector, _request_timeout=30
            ),
        )
        pods = [self.api_client.sanitize_for_serialization(p) for p in result.items]
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def pod_log(
        self, pod: str, *, container: str = "pytorch", follow: bool = False, tail_lines: int | None = None
    ) -> Iterator[bytes]:
        """Stream a container's log as raw byte chunks (``follow`` keeps the stream open until
        the container ends).

        Raises:
            ClusterError: 404 (pod gone), 400 (container not started yet), forbidden.
        """
        call = self._call_ns("get", "pods/log", pod)
        resp = self._call(
            call,
            lambda _a: self.core.read_namespaced_pod_log(
                pod,
                self.namespace,
                container=container,
                follow=follow,
                tail_lines=tail_lines,
                _preload_content=False,
                _request_timeout=None if follow else 60,
            ),
        )
        try:
            yield from resp.stream(4096, decode_content=False)
        finally:
            resp.release_conn()

    def create_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a pod (``k8sddp diagnose --job``'s reader); returns it as the server stored it.

        Raises:
            ClusterError: forbidden, invalid, unreachable.
        """
        call = self._call_ns("create", "pods", body["metadata"]["name"])
        result = self._call(call, lambda _a: self.core.create_namespaced_pod(self.namespace, body, _request_timeout=30),
                            retry=False)
        out: dict[str, Any] = self.api_client.sanitize_for_serialization(result)
        return out

    def read_pod(self, name: str) -> dict[str, Any]:
        """GET a pod.

        Raises:
            ClusterError: 404, forbidden, unreachable.
        """
        result = self._call(self._call_ns("get", "pods", name),
                            lambda _a: self.core.read_namespaced_pod(name, self.namespace, _request_timeout=30))
        out: dict[str, Any] = self.api_client.sanitize_for_serialization(result)
        return out

    def delete_pod(self, name: str) -> None:
        """DELETE a pod; one already gone is fine.

        Raises:
            ClusterError: forbidden, unreachable.
        """
        try:
            self._call(self._call_ns("delete", "pods", name),
                       lambda _a: self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0,
                                                                  _request_timeout=30))
        except ClusterError as exc:
            if exc.status != 404:
                raise

    def read_configmap(self, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """GET a ConfigMap (read-only); ``None`` when it does not exist.

        Raises:
            ClusterError: forbidden, unreachable.
        """
        ns = namespace or self.namespace
        call = Call("get", "configmaps", ns, name, self.server)
        try:
            result = self._call(
                call,
                lambda _a: self.core.read_namespaced_config_map(name, ns, _request_timeout=30),
            )
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise
        data: dict[str, Any] = self.api_client.sanitize_for_serialization(result)
        data.setdefault("apiVersion", "v1")
        data.setdefault("kind", "ConfigMap")
        return data

    def read_object(self, group: str, version: str, plural: str, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """GET a custom object (read-only): ``namespace`` ``None`` for a cluster-scoped resource
        (``clustertrainingruntimes``); ``None`` when it, or its resource, does not exist.

        Raises:
            ClusterError: forbidden, unreachable.
        """
        call = Call("get", f"{plural}.{group}", namespace or "", name, self.server)
        if namespace is None:
            fn = lambda _a: self.custom.get_cluster_custom_object(group, version, plural, name, _request_timeout=30)  # noqa: E731
        else:
            fn = lambda _a: self.custom.get_namespaced_custom_object(group, version, namespace, plural, name, _request_timeout=30)  # noqa: E731
        try:
            result: dict[str, Any] = self._call(call, fn)
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise
        return result


def _prepare_for_create(body: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``body`` with a concrete name and a fresh submission id.

    Raises:
        UsageError: neither ``metadata.name`` nor ``metadata.generateName``.
    """
    import copy

    obj = copy.deepcopy(body)
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        prefix = meta.get("generateName")
        if not prefix:
            raise UsageError("the PyTorchJob has neither metadata.name nor metadata.generateName")
        meta["name"] = prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
    meta.pop("generateName", None)
    annotations = meta.get("annotations") or {}
    annotations[SUBMISSION_ANNOTATION] = uuid.uuid4().hex
    meta["annotations"] = annotations
    return obj
