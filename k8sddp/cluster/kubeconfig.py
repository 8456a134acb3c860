"""Finding the cluster configuration as kubectl does.

``--kubeconfig`` (or ``$KUBECONFIG``'s first existing file, or ``~/.kube/config``) with
``--context``; without any kubeconfig file, the in-cluster service account
(``KUBERNETES_SERVICE_HOST`` and the token mounted under
``/var/run/secrets/kubernetes.io/serviceaccount``). The namespace is ``-n``, else the chosen
context's namespace, else the in-cluster namespace, else ``default``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ClusterError, UsageError

__all__ = ["load_configuration"]

_IN_CLUSTER_NS = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _default_kubeconfig() -> str | None:
    """``$KUBECONFIG``'s first existing file, else ``~/.kube/config`` when it exists."""
    env = os.environ.get("KUBECONFIG", "")
    for part in env.split(os.pathsep):
        if part and Path(part).expanduser().is_file():
            return str(Path(part).expanduser())
    home = Path("~/.kube/config").expanduser()
    return str(home) if home.is_file() else None


def _check_parses(path: str) -> None:
    """Raise a one-line :class:`UsageError` unless ``path`` is a YAML mapping.

    The kubernetes client would otherwise fail with a parser traceback or a ``TypeError``.
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read kubeconfig {path}: {exc}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" (line {mark.line + 1}, column {mark.column + 1})"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"kubeconfig {path} is not valid YAML{where}: {problem}") from exc
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise UsageError(f"kubeconfig {path} is {kind}, not a mapping with clusters, users and contexts")


def load_configuration(
    *, kubeconfig: str | None, context: str | None, namespace: str | None
) -> tuple[Any, str]:
    """A ``kubernetes.client.Configuration`` and the namespace to use.

    Args:
        kubeconfig: ``--kubeconfig``, or ``None`` to search as kubectl does.
        context: ``--context``, or ``None`` for the current context.
        namespace: ``-n``, or ``None``.

    Raises:
        UsageError: the kubeconfig is missing, unreadable, not YAML or not a mapping, names no
            such context, or there is no configuration at all (exit 2).
        ClusterError: the in-cluster configuration is unusable (exit 3).
    """
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise UsageError(
            "talking to a cluster needs the kubernetes client: pip install 'k8sddp[cluster]'"
        ) from exc
    path = kubeconfig or _default_kubeconfig()
    ns = namespace
    configuration = client.Configuration()
    if path:
        if not Path(path).is_file():
            raise UsageError(f"kubeconfig {path} does not exist")
        _check_parses(path)
        try:
            contexts, active = config.list_kube_config_contexts(config_file=path)
            chosen = active
            if context:
                chosen = next((c for c in contexts if c.get("name") == context), None)
                if chosen is None:
                    names = ", ".join(sorted(c.get("name", "") for c in contexts)) or "none"
                    raise UsageError(
                        f'kubeconfig {path} has no context "{context}" (it has: {names})'
                    )
            if ns is None and chosen:
                ns = (chosen.get("context") or {}).get("namespace")
            config.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except ConfigException as exc:
            raise UsageError(f"kubeconfig {path}: {exc}") from exc
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise UsageError(f"cannot read kubeconfig {path}: {exc}") from exc
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise ClusterError(f"in-cluster configuration unusable: {exc}") from exc
        if ns is None and _IN_CLUSTER_NS.is_file():
            ns = _IN_CLUSTER_NS.read_text().strip() or None
    else:
        raise UsageError(
            "no cluster configured: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, "
            "or run inside a pod"
        )
    # Our own retries replace urllib3's: they are bounded, and a create is only retried
    # where a duplicate can be ruled out (see create_job).
    configuration.retries = False
    return configuration, ns or "default"
