"""Read-only cluster look-ups for the webhook: ConfigMaps and namespace labels.

Uses the official ``kubernetes`` client (extra ``cluster``). RBAC needed by the webhook's
service account (``charts/k8sddp-webhook/templates/rbac.yaml``):

- ``get`` on ``configmaps`` in the namespaces whose jobs it checks (a ClusterRole, or a Role
  per namespace): ``GET /api/v1/namespaces/{ns}/configmaps/{name}``. No ``list``/``watch``.
- ``get`` on ``namespaces``, only with ``--exempt-namespace-selector``:
  ``GET /api/v1/namespaces/{ns}``.

Secrets are never read. Each answer is cached for ``cache_seconds`` (default 5 s) so a burst of
jobs naming one ConfigMap costs one API call; a change to a ConfigMap is seen after at most that.

Time bound: every call runs once (urllib3 retries are off: the client's default of 3 retries
turned a 2 s limit into 8 s) with ``urllib3.Timeout(total=timeout)``, and the caller waits for it
at most ``timeout`` seconds (a worker thread with a deadline), so a slow or dribbling API
server cannot hold a review longer than asked.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from .sources import LookupFailed

__all__ = ["KubeLookup", "describe_error", "no_retries"]

#: Worker threads for look-ups; a call stuck past its deadline holds one until urllib3's own
#: timeout (the same deadline) ends it, so this bounds threads, not latency.
_WORKERS = 16


def no_retries(api_client: Any) -> Any:
    """Make ``api_client`` (a ``kubernetes.client.ApiClient``) try each request once.

    The kubernetes client builds its urllib3 pool from ``configuration.retries`` when the
    ``ApiClient`` is created, so setting the attribute later has no effect: the REST client is
    rebuilt here with ``urllib3.util.Retry(total=0)`` (no connect, read or redirect retries).
    Returns ``api_client``.
    """
    from kubernetes.client import rest
    from urllib3.util import Retry

    api_client.configuration.retries = Retry(total=0, redirect=0, raise_on_status=False)
    old = api_client.rest_client
    api_client.rest_client = rest.RESTClientObject(api_client.configuration)
    old.close()
    return api_client


def describe_error(exc: BaseException, timeout: float) -> str:
    """A one-line reason for a failed API call (no urllib3 ``MaxRetryError`` repr).

    Args:
        exc: what the call raised.
        timeout: the call's limit in seconds (named in the text for time-outs).
    """
    import urllib3.exceptions as ue

    reason: BaseException = exc
    if isinstance(exc, ue.MaxRetryError) and exc.reason is not None:
        reason = exc.reason
    if isinstance(reason, ue.NewConnectionError):  # before TimeoutError: urllib3 subclasses it
        return "cannot connect to the API server (connection refused or unreachable)"
    if isinstance(reason, (ue.TimeoutError, TimeoutError, concurrent.futures.TimeoutError)):
        return f"the API server did not answer within {round(timeout, 1):g} s"
    if isinstance(reason, ue.SSLError):
        return "TLS error talking to the API server"
    if isinstance(reason, (ue.ProtocolError, ConnectionError)):
        return "the connection to the API server broke"
    if isinstance(reason, ValueError):
        return "the API server's answer is not JSON"
    return f"{type(reason).__name__}: {str(reason)[:120]}"


class KubeLookup:
    """ConfigMap and namespace look-ups against the API server, with a small TTL cache.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``; ``None`` builds one from the
            in-cluster service account, else from ``kubeconfig`` (or ``~/.kube/config``).
            Its urllib3 retries are turned off (:func:`no_retries`).
        kubeconfig: kubeconfig path used when not running in a pod.
        context: kubeconfig context name.
        timeout_seconds: the most one call may take, seconds (connect + answer, no retries);
            callers may ask for less per call. Keep it well under the webhook's
            ``timeoutSeconds``.
        cache_seconds: how long an answer (found or not found) is reused; 0 disables caching.
        way_out: the end of a start-up error, saying how to run without a cluster (default:
            ``--no-configmap-lookup``).

    Raises:
        UsageError: the ``kubernetes`` package is missing, or no configuration can be loaded
            (one line, naming ``--kubeconfig`` and ``way_out``).
    """

    def __init__(
        self,
        api_client: Any = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        timeout_seconds: float = 2.0,
        cache_seconds: float = 5.0,
        way_out: str = "run with --no-configmap-lookup (guard variables from ConfigMaps then stay unverifiable)",
    ) -> None:
        try:
            from kubernetes import client
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise UsageError(
                f"cluster look-ups need the kubernetes package: pip install 'k8sddp[cluster]', or {way_out}"
            ) from exc
        if api_client is None:
            api_client = client.ApiClient(_load_configuration(kubeconfig, context, way_out))
        self._core = client.CoreV1Api(no_retries(api_client))
        self._custom = client.CustomObjectsApi(api_client)
        self._timeout = timeout_seconds
        self._ttl = cache_seconds
        self._cache: dict[tuple[str, str, str], tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(_WORKERS, thread_name_prefix="k8sddp-lookup")

    def _cached(self, key: tuple[str, str, str], fetch: Callable[[], Any]) -> Any:
        now = time.monotonic()
        if self._ttl > 0:
            with self._lock:
                hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self._ttl:
                return hit[1]
        value = fetch()
        if self._ttl > 0:
            with self._lock:
                if len(self._cache) > 4096:
                    self._cache.clear()
                self._cache[key] = (now, value)
        return value

    def _limit(self, timeout: float | None) -> float:
        return self._timeout if timeout is None else max(0.0, min(timeout, self._timeout))

    def _get(self, call: Any, args: tuple[str, ...], timeout: float) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        if timeout <= 0:
            raise LookupFailed("no time left for the look-up")

        def _fetch() -> dict[str, Any]:
            resp = call(*args, _preload_content=False, _request_timeout=timeout)
            data: dict[str, Any] = json.loads(resp.data)
            return data

        future = self._pool.submit(_fetch)
        try:
            return future.result(timeout=timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise LookupFailed(f"HTTP {exc.status} {exc.reason}") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise LookupFailed(describe_error(TimeoutError(), timeout)) from None
        except Exception as exc:  # urllib3 connection/timeout errors, bad JSON
            raise LookupFailed(describe_error(exc, timeout)) from None

    def get_configmap(self, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        """Read ConfigMap ``namespace/name``; ``None`` if it does not exist.

        Args:
            timeout: seconds this call may take (capped at ``timeout_seconds``); ``None``:
                ``timeout_seconds``.

        Raises:
            LookupFailed: forbidden (missing RBAC), unreachable, timed out.
        """
        limit = self._limit(timeout)
        result: dict[str, Any] | None = self._cached(
            ("cm", namespace, name),
            lambda: self._get(self._core.read_namespaced_config_map, (name, namespace), limit),
        )
        return result

    def get_runtime(self, kind: str, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        """Read a Kubeflow Trainer runtime: ``ClusterTrainingRuntime`` ``name``, or
        ``TrainingRuntime`` ``namespace/name`` (``trainer.kubeflow.org/v1alpha1``); ``None`` if it
        does not exist (or is of another kind).

        Args:
            timeout: as for :meth:`get_configmap`.

        Raises:
            LookupFailed: forbidden (missing RBAC), unreachable, timed out.
        """
        limit = self._limit(timeout)
        group, version = "trainer.kubeflow.org", "v1alpha1"
        call: Any
        args: tuple[str, ...]
        if kind == "ClusterTrainingRuntime":
            call, args = self._custom.get_cluster_custom_object, (group, version, "clustertrainingruntimes", name)
        elif kind == "TrainingRuntime":
            call, args = self._custom.get_namespaced_custom_object, (group, version, namespace, "trainingruntimes", name)
        else:
            return None
        result: dict[str, Any] | None = self._cached((kind, namespace, name), lambda: self._get(call, args, limit))
        return result

    def namespace_labels(self, namespace: str, *, timeout: float | None = None) -> dict[str, str] | None:
        """The labels of namespace ``namespace``; ``None`` if it does not exist.

        Args:
            timeout: as for :meth:`get_configmap`.

        Raises:
            LookupFailed: forbidden (missing RBAC), unreachable, timed out.
        """
        limit = self._limit(timeout)
        ns = self._cached(("ns", "", namespace), lambda: self._get(self._core.read_namespace, (namespace,), limit))
        if ns is None:
            return None
        labels = (ns.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}


def _load_configuration(kubeconfig: str | None, context: str | None, way_out: str) -> Any:
    """A ``kubernetes.client.Configuration`` from the pod's service account or a kubeconfig.

    Raises:
        UsageError: none can be loaded, or the kubeconfig is not a valid kubeconfig (one line,
            naming ``--kubeconfig``/``--no-configmap-lookup``).
    """
    from kubernetes import client, config

    cfg = client.Configuration()
    hint = f"; pass --kubeconfig FILE (outside a cluster), or {way_out}"
    try:
        if kubeconfig is None and context is None:
            try:
                config.load_incluster_config(client_configuration=cfg)
                return cfg
            except config.ConfigException:
                pass
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except (config.ConfigException, OSError) as exc:
        raise UsageError(f"cannot load a Kubernetes configuration for look-ups: {_one_line(exc)}{hint}") from exc
    except Exception as exc:  # a file that is YAML but not a kubeconfig: TypeError, KeyError, ...
        where = kubeconfig or "the default kubeconfig"
        raise UsageError(
            f"cannot load a Kubernetes configuration for look-ups: {where} is not a valid kubeconfig "
            f"({type(exc).__name__}: {_one_line(exc)}){hint}"
        ) from exc
    return cfg


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
