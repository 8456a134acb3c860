"""The guard checks over pod-template views: any kind's training containers and their effective envs.

:mod:`.checks` applies the PyTorchJob-shaped guard schemas (``schemas/pytorchjob.*.json``) to a
PyTorchJob; a kind with another layout (KubeRay's head and worker groups) hands its
:class:`~k8sddp.kinds.base.PodTemplateView` list and the effective env of each view's training
container here instead. The rules and their messages are the same (KDP201, KDP202; KDP301-KDP306
under strict): the accepted values are those of the guard schemas (:mod:`k8sddp.schemagen`) and
the message text is :func:`.checks` ``_env_message``'s, with the group and container named
instead of a PyTorchJob replica.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import guardvars as gv
from ..schemabase import SAFETY_NET_OFF
from .checks import _env_message
from .envresolve import EnvValue
from .jobparts import MAPPING, as_list
from .rawfinding import RawFinding
from .strictchecks import PERSISTENT_VOLUME_KINDS

if TYPE_CHECKING:
    from ..kinds.base import PodTemplateView

__all__ = ["LayeredEnv", "check_guard_views", "describe_group", "on_persistent_volume"]

#: What the guard schemas accept (schemagen ``_strict_container_rules``).
_POSITIVE = re.compile(r"^[1-9][0-9]*$")
_WHOLE = re.compile(r"^[0-9]+$")
_ABSOLUTE = re.compile(r"^/.")

#: A locator: the path (from the object's root) to report a rule's finding at, given the view,
#: the variable the rule is about (``None``: the rule is about the container) and its value.
Locator = Callable[["PodTemplateView", str | None, EnvValue | None], tuple[Any, ...]]


class LayeredEnv(dict[str, EnvValue]):
    """An effective env with variables laid over it that win (a Ray runtime env over the pod's).

    Lookups of a variable the top layer does not set go to ``base`` (which may answer
    *unresolved* for a variable an unreadable ``envFrom`` source might set).
    """

    def __init__(self, base: Mapping[str, EnvValue], top: Mapping[str, EnvValue]) -> None:
        super().__init__({**dict(base), **top})
        self.base = base
        self.top = dict(top)

    def __contains__(self, name: object) -> bool:
        return name in self.top or name in self.base

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        if name in self.top:
            return self.top[name]
        return self.base.get(name, default)

    def __getitem__(self, name: str) -> EnvValue:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value


def describe_group(view: PodTemplateView) -> str:
    """The message prefix naming the view's group and container: ``group head, container ray-head: ``."""
    name = view.container.get("name") if isinstance(view.container, MAPPING) else None
    index = view.container_index if view.container_index is not None else 0
    return f"group {view.group}, container {name!r} (containers[{index}]): "


def _message(rule_id: str, view: PodTemplateView, env: Mapping[str, EnvValue]) -> str:
    return _env_message(rule_id, describe_group(view), dict(env) if not isinstance(env, dict) else env)


def _value_ok(value: EnvValue | None, pattern: re.Pattern[str]) -> bool:
    return value is not None and value.value is not None and bool(pattern.match(value.value))


def _async_ok(env: Mapping[str, EnvValue]) -> bool:
    current = env.get(gv.ASYNC_ERROR_HANDLING)
    if current is not None:
        return current.value in gv.ASYNC_ERROR_HANDLING_ACCEPTED
    legacy = env.get(gv.LEGACY_ASYNC_ERROR_HANDLING)
    return legacy is not None and legacy.value in gv.ASYNC_ERROR_HANDLING_ACCEPTED


def _safety_nets_ok(env: Mapping[str, EnvValue]) -> bool:
    for name in gv.SAFETY_NETS:
        value = dict.get(env, name) if isinstance(env, dict) else env.get(name)  # (see checks._safety_net_value)
        if value is not None and (value.value is None or re.search(SAFETY_NET_OFF[name], value.value)):
            return False
    return True


def guard_failures(env: Mapping[str, EnvValue], profile: str) -> Iterator[tuple[str, str | None]]:
    """``(rule id, variable)`` of each guard rule ``env`` fails under ``profile`` (the same values
    as the guard schemas accept; the persistence of paths is :func:`on_persistent_volume`'s)."""
    if not _async_ok(env):
        yield "KDP201", gv.ASYNC_ERROR_HANDLING if gv.ASYNC_ERROR_HANDLING in env or gv.LEGACY_ASYNC_ERROR_HANDLING not in env else gv.LEGACY_ASYNC_ERROR_HANDLING
    faulthandler = env.get(gv.FAULTHANDLER)
    if faulthandler is None or not faulthandler.value:
        yield "KDP202", gv.FAULTHANDLER
    if profile != "strict":
        return
    for rule_id, name, pattern in (
        ("KDP301", gv.PG_TIMEOUT, _POSITIVE),
        ("KDP302", gv.WATCHDOG_TIMEOUT, _POSITIVE),
        ("KDP303", gv.MAX_HANG_RESTARTS, _WHOLE),
        ("KDP304", gv.FR_DUMP_TEMP_FILE, _ABSOLUTE),
        ("KDP305", gv.ARTIFACT_DIR, _ABSOLUTE),
    ):
        if not _value_ok(env.get(name), pattern):
            yield rule_id, name
    if not _safety_nets_ok(env):
        yield "KDP306", None


def on_persistent_volume(pod_spec: Mapping[str, Any], container: Mapping[str, Any], path: str) -> bool:
    """True when absolute ``path`` lies under a ``volumeMount`` of ``container`` whose pod volume
    outlives the pod (:data:`.strictchecks.PERSISTENT_VOLUME_KINDS`); paths are normalised, so
    ``/ckpt/../tmp`` is not on ``/ckpt``."""
    target = posixpath.normpath(path)
    volumes = {v.get("name"): v for v in as_list(pod_spec.get("volumes")) if isinstance(v, MAPPING)}
    for mount in as_list(container.get("volumeMounts")):
        if not isinstance(mount, MAPPING) or not mount.get("mountPath"):
            continue
        mount_path = posixpath.normpath(str(mount["mountPath"]))
        if target == mount_path or target.startswith(mount_path.rstrip("/") + "/"):
            vol = volumes.get(mount.get("name"))
            if isinstance(vol, MAPPING) and any(k in vol for k in PERSISTENT_VOLUME_KINDS):
                return True
    return False


def _container_path(view: PodTemplateView, var: str | None, value: EnvValue | None) -> tuple[Any, ...]:
    base = view.container_path or view.path
    container = view.container if isinstance(view.container, MAPPING) else {}
    return (*base, "env") if "env" in container else base


def check_guard_views(
    views: Sequence[PodTemplateView],
    envs: Sequence[Mapping[str, EnvValue]],
    profile: str,
    *,
    locate: Locator | None = None,
) -> list[RawFinding]:
    """KDP201 and KDP202 (and KDP301-KDP306 under ``strict``) for each view's training container.

    Args:
        views: the pod templates; a view without a training container is skipped (layer 1 says so).
        envs: the effective env of each view's training container, in the order of ``views``.
        profile: ``baseline`` or ``strict``.
        locate: where each finding goes (default: the container's ``env``, else the container).

    Returns:
        One finding per rule and view, its message naming the group and container.
    """
    locate = locate or _container_path
    findings = []
    for view, env in zip(views, envs, strict=True):
        if view.container is None:
            continue
        failed: dict[str, str | None] = dict(guard_failures(env, profile))
        if profile == "strict":
            for rule_id, var in (("KDP304", gv.FR_DUMP_TEMP_FILE), ("KDP305", gv.ARTIFACT_DIR)):
                value = env.get(var)
                if rule_id not in failed and value is not None and value.value and not on_persistent_volume(view.pod_spec, view.container, value.value):
                    where = "" if value.source == "env" else f" (from {value.source})"
                    findings.append(
                        RawFinding(
                            rule_id,
                            locate(view, var, value),
                            f"{describe_group(view)}{var}={value.value!r}{where} is not on a persistent volume (no volumeMount of a "
                            "persistentVolumeClaim or nfs volume contains it); it would die with the pod",
                        )
                    )
        for rule_id, name in failed.items():
            findings.append(RawFinding(rule_id, locate(view, name, env.get(name) if name else None), _message(rule_id, view, env)))
    findings.sort(key=lambda f: (f.rule_id, str(f.path)))
    return findings

