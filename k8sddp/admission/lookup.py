"""Read-only cluster look-ups for the webhook: ConfigMaps and namespace labels.

Uses the official ``kubernetes`` client (extra ``cluster``). RBAC needed by the webhook's
service account (``charts/k8sddp-webhook/templates/rbac.yaml``):

- ``get`` on ``configmaps`` in the namespaces whose jobs it checks (a ClusterRole, or a Role
  per namespace): ``GET /api/v1/namespaces/{ns}/configmaps/{name}``. No ``list``/``watch``.
- ``get`` on ``namespaces``, only with ``--exempt-namespace-selector``:
  ``GET /api/v1/namespaces/{ns}``.

Secrets are never read. Each answer is cached for ``cache_seconds`` (default 5 s) so a burst of
jobs naming one ConfigMap costs one API call; a change to a ConfigMap is seen after at most that.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from ..errors import UsageError
from .review import LookupFailed

__all__ = ["KubeLookup"]


class KubeLookup:
    """ConfigMap and namespace look-ups against the API server, with a small TTL cache.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``; ``None`` builds one from the
            in-cluster service account, else from ``kubeconfig`` (or ``~/.kube/config``).
        kubeconfig: kubeconfig path used when not running in a pod.
        context: kubeconfig context name.
        timeout_seconds: per API call (connect + read), seconds. Keep it well under the
            webhook's ``timeoutSeconds``.
        cache_seconds: how long an answer (found or not found) is reused; 0 disables caching.

    Raises:
        UsageError: the ``kubernetes`` package is missing, or no configuration can be loaded.
    """

    def __init__(
        self,
        api_client: Any = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        timeout_seconds: float = 2.0,
        cache_seconds: float = 5.0,
    ) -> None:
        try:
            from kubernetes import client, config
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise UsageError("ConfigMap look-ups need the kubernetes package: pip install 'k8sddp[cluster]'") from exc
        if api_client is None:
            try:
                if kubeconfig is None and context is None:
                    try:
                        config.load_incluster_config()
                    except config.ConfigException:
                        config.load_kube_config()
                else:
                    config.load_kube_config(config_file=kubeconfig, context=context)
            except (config.ConfigException, OSError) as exc:
                raise UsageError(f"cannot load a Kubernetes configuration for look-ups: {exc}") from exc
            api_client = client.ApiClient()
        api_client.configuration.retries = 0
        self._core = client.CoreV1Api(api_client)
        self._timeout = timeout_seconds
        self._ttl = cache_seconds
        self._cache: dict[tuple[str, str, str], tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def _cached(self, key: tuple[str, str, str], fetch: Any) -> Any:
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

    def _get(self, call: Any, *args: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = call(*args, _preload_content=False, _request_timeout=self._timeout)
            data: dict[str, Any] = json.loads(resp.data)
            return data
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise LookupFailed(f"HTTP {exc.status} {exc.reason}") from None
        except Exception as exc:  # urllib3 connection/timeout errors, bad JSON
            raise LookupFailed(f"{type(exc).__name__}: {exc}") from None

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Read ConfigMap ``namespace/name``; ``None`` if it does not exist.

        Raises:
            LookupFailed: forbidden (missing RBAC), unreachable, timed out.
        """
        result: dict[str, Any] | None = self._cached(
            ("cm", namespace, name),
            lambda: self._get(self._core.read_namespaced_config_map, name, namespace),
        )
        return result

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """The labels of namespace ``namespace``; ``None`` if it does not exist.

        Raises:
            LookupFailed: forbidden (missing RBAC), unreachable, timed out.
        """
        ns = self._cached(("ns", "", namespace), lambda: self._get(self._core.read_namespace, namespace))
        if ns is None:
            return None
        labels = (ns.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}
