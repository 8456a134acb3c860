"""The core-API calls of :class:`k8sddp.cluster.client.Cluster`: pods, pod logs, ConfigMaps.

Split from the client for size; every call goes through the client's one call path
(``Cluster._call``: retries, translated errors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ClusterError
from .apierrors import Call

__all__ = ["CoreCalls"]


class CoreCalls:
    """Pods, logs and ConfigMaps of the connection's namespace (a mixin of ``Cluster``)."""

    namespace: str
    server: str
    api_client: Any
    core: Any

    #: ``Cluster._call``: run a call with retries, translate its failure.
    _call: Callable[..., Any]

    def _call_ns(self, verb: str, resource: str, name: str = "") -> Call:
        return Call(verb, resource, self.namespace, name, self.server)

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
