"""``k8sddp fix`` for one ``pytorch`` container: the edits that give it what the profile demands
(the table in :mod:`k8sddp.fix`'s docstring), planned into a :class:`~k8sddp.fixplan.Plan`, and
the YAML node helpers the job-level planning shares. :mod:`k8sddp.fix` finds the PyTorchJobs and
their replicas, applies the plan and checks the result.
"""

from __future__ import annotations

from typing import Any

import yaml

from . import guardvars as gv
from .fixplan import Note, Plan
from .yamledit import AddKey, AppendItems, FillNull, ReplaceScalar, is_plain_null

__all__ = ["ARTIFACT_SUBDIR", "DSHM_PATH", "SAFETY_NET_DEFAULTS", "child", "fix_container", "merge_key_line", "scalar_text"]

_STR_TAG = "tag:yaml.org,2002:str"
DSHM_PATH = "/dev/shm"
ARTIFACT_SUBDIR = "k8sddp"
#: Values a safety net gets back when set to 0 (the library defaults; NOTES.md).
SAFETY_NET_DEFAULTS = {
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
}


class _AnyNonEmpty(tuple):  # type: ignore[type-arg]
    """``x in _NON_EMPTY`` for every non-empty string (PYTHONFAULTHANDLER accepts any)."""

    def __contains__(self, item: object) -> bool:
        return isinstance(item, str) and item != ""


_NON_EMPTY: tuple[str, ...] = _AnyNonEmpty()


# -- node helpers ---------------------------------------------------------------------------------


def child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    """The value node of ``key`` in a mapping node, or None (not a mapping, or no such key)."""
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def scalar_text(node: yaml.Node | None) -> str | None:
    """The text of a scalar node, or None for any other node (or None)."""
    return node.value if isinstance(node, yaml.ScalarNode) else None


def merge_key_line(*nodes: yaml.Node | None) -> int | None:
    """1-based line of the first YAML merge key (``<<``) in ``nodes`` (mappings), or None."""
    for node in nodes:
        if isinstance(node, yaml.MappingNode):
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag == "tag:yaml.org,2002:merge":
                    return k.start_mark.line + 1
    return None


# -- planning -------------------------------------------------------------------------------------


def _env_entries(env: yaml.Node | None) -> dict[str, tuple[int, yaml.Node, yaml.Node | None]]:
    """name -> (index, entry node, value node or None when valueFrom / absent)."""
    out: dict[str, tuple[int, yaml.Node, yaml.Node | None]] = {}
    if isinstance(env, yaml.SequenceNode):
        for i, entry in enumerate(env.value):
            name = scalar_text(child(entry, "name"))
            if name is not None:
                out[name] = (i, entry, child(entry, "value"))
    return out


def fix_container(
    job_ref: str, replica: str, container: yaml.MappingNode, pod: yaml.MappingNode,
    cpath: tuple[Any, ...], ppath: tuple[Any, ...], profile: str, plan: Plan,
) -> None:
    """Plan the edits that give one ``pytorch`` container what ``profile`` demands.

    Args:
        job_ref: ``PyTorchJob/<namespace>/<name>``, for notes.
        replica: the replica type (``Master``, ``Worker``).
        container: the container's mapping node; pod: its pod spec's mapping node.
        cpath, ppath: the document index, then keys and indices, to the container and the pod spec.
        profile: ``baseline`` or ``strict``.
        plan: receives the edits and the notes (changes made, things left for a person).
    """
    where = f"{job_ref} {replica}"
    cline = container.start_mark.line + 1
    env = child(container, "env")
    entries = _env_entries(env)
    adds: list[dict[str, str]] = []

    def note(text: str, rule: str, line: int = cline, changed: bool = True, unresolved: bool = False,
             changes: tuple[int, ...] = ()) -> None:
        plan.note(Note(where, text, rule, line, changed, unresolved), changes)

    merged = merge_key_line(container, pod, *(e for _, e, _ in entries.values()))
    if merged is None and isinstance(env, yaml.SequenceNode):
        merged = merge_key_line(*env.value)
    if merged is not None:
        note(f"a YAML merge key (<<) at line {merged} hides what this container's env, mounts or "
             "volumes hold, and a key added beside it would override the merged one; add the guard "
             "variables by hand (`k8sddp validate` lists them)", "KDP201", merged, False, True)
        return

    def set_value(name: str, new: str, rule: str) -> None:
        idx, _, value = entries[name]
        assert isinstance(value, yaml.ScalarNode)
        c = plan.add(ReplaceScalar(value, new), cpath + ("env", idx, "value"),
                     (cpath + ("env", idx, "value"), "set", new))
        was = repr(value.value) if value.tag == _STR_TAG else f"{value.value}, not a string"
        note(f"set {name}={new} (was {was})", rule, value.start_mark.line + 1, changes=(c,))

    def check_literal(name: str, accepted: tuple[str, ...], target: str, rule: str) -> bool:
        """True when ``name`` is present (fixed or left); False when absent."""
        if name not in entries:
            return False
        idx, entry, value = entries[name]
        line = entry.start_mark.line + 1
        if child(entry, "valueFrom") is not None:
            note(f"{name} comes from valueFrom; not checked", rule, line, False)
            return True
        if value is None and isinstance(entry, yaml.MappingNode):  # no value: the empty string
            at = cpath + ("env", idx)
            c = plan.add(AddKey(entry, "value", target), at, (at, "addkey", ("value", target)))
            note(f"set {name}={target} (was empty)", rule, line, changes=(c,))
            return True
        if is_plain_null(value):  # `value:` with nothing: also the empty string
            at = cpath + ("env", idx)
            c = plan.add(ReplaceScalar(value, target), at + ("value",),  # type: ignore[arg-type]
                         (at + ("value",), "set", target))
            note(f"set {name}={target} (was empty)", rule, line, changes=(c,))
            return True
        text = scalar_text(value)
        if text is None or value is None:
            note(f"{name} has a non-scalar value; fix it by hand", rule, line, False, True)
            return True
        if text in accepted and value.tag == _STR_TAG:
            return True
        set_value(name, text if text in accepted else target, rule)
        return True

    # -- baseline
    aeh, legacy = gv.ASYNC_ERROR_HANDLING, gv.LEGACY_ASYNC_ERROR_HANDLING
    # The current name wins when both are set (NOTES.md); a legacy-only setting is respected.
    if not check_literal(aeh, gv.ASYNC_ERROR_HANDLING_ACCEPTED, gv.ASYNC_ERROR_HANDLING_VALUE,
                         "KDP201") and not check_literal(
            legacy, gv.ASYNC_ERROR_HANDLING_ACCEPTED, gv.LEGACY_ASYNC_ERROR_HANDLING_VALUE, "KDP201"):
        adds.append({"name": aeh, "value": gv.ASYNC_ERROR_HANDLING_VALUE})
    if not check_literal(gv.FAULTHANDLER, _NON_EMPTY, gv.FAULTHANDLER_VALUE, "KDP202"):
        adds.append({"name": gv.FAULTHANDLER, "value": gv.FAULTHANDLER_VALUE})

    mounts_add: list[dict[str, str]] = []
    volumes_add: list[dict[str, Any]] = []
    if profile == "strict":
        has_env_from = child(container, "envFrom") is not None
        for name, default, rule in (
            (gv.PG_TIMEOUT, gv.DEFAULT_PG_TIMEOUT_SECONDS, "KDP301"),
            (gv.WATCHDOG_TIMEOUT, gv.DEFAULT_WATCHDOG_TIMEOUT_SECONDS, "KDP302"),
            (gv.MAX_HANG_RESTARTS, gv.DEFAULT_MAX_HANG_RESTARTS, "KDP303"),
        ):
            if name in entries:
                continue
            if has_env_from:
                note(f"{name} not added: envFrom may set it and an env entry would override it; "
                     "check with `k8sddp validate --profile strict`", rule, changed=False)
            else:
                adds.append({"name": name, "value": str(default)})
        for net, net_default in SAFETY_NET_DEFAULTS.items():
            if net in entries and scalar_text(entries[net][2]) == "0":
                set_value(net, net_default, "KDP306")
        # persistent artifact dir and flight-recorder dumps
        volumes = child(pod, "volumes")
        vol_list = volumes.value if isinstance(volumes, yaml.SequenceNode) else []
        # A claim mounted readOnly (persistentVolumeClaim.readOnly) cannot hold the artifacts either.
        pvcs = {
            scalar_text(child(v, "name")) for v in vol_list
            if child(v, "persistentVolumeClaim") is not None
            and scalar_text(child(child(v, "persistentVolumeClaim"), "readOnly")) not in ("true", "True")
        }
        mounts = child(container, "volumeMounts")
        mount_list = mounts.value if isinstance(mounts, yaml.SequenceNode) else []
        pvc_mount = next(
            (scalar_text(child(m, "mountPath")) for m in mount_list
             if scalar_text(child(m, "name")) in pvcs and scalar_text(child(m, "readOnly")) not in ("true", "True")
             and scalar_text(child(m, "mountPath"))),
            None,
        )
        artifact = scalar_text(entries[gv.ARTIFACT_DIR][2]) if gv.ARTIFACT_DIR in entries else None
        if artifact is None and gv.ARTIFACT_DIR not in entries:
            if pvc_mount:
                artifact = pvc_mount.rstrip("/") + "/" + ARTIFACT_SUBDIR
                adds.append({"name": gv.ARTIFACT_DIR, "value": artifact})
            else:
                note(f"{gv.ARTIFACT_DIR} not added: no PersistentVolumeClaim is mounted writable in the "
                     "pytorch container; mount the checkpoint volume and run fix again", "KDP305",
                     changed=False, unresolved=True)
        if gv.FR_DUMP_TEMP_FILE not in entries and gv.LEGACY_FR_DUMP_TEMP_FILE not in entries:
            if artifact:
                adds.append({"name": gv.FR_DUMP_TEMP_FILE, "value": artifact.rstrip("/") + "/fr/rank-"})
            else:
                note(f"{gv.FR_DUMP_TEMP_FILE} not added: no artifact directory on a persistent volume",
                     "KDP304", changed=False, unresolved=True)
        # /dev/shm
        if not any(scalar_text(child(m, "mountPath")) in (DSHM_PATH, DSHM_PATH + "/") for m in mount_list):
            taken = {scalar_text(child(v, "name")) for v in vol_list}
            vname = "dshm"
            n = 1
            while vname in taken:
                vname, n = f"dshm-{n}", n + 1
            mounts_add.append({"name": vname, "mountPath": DSHM_PATH})
            volumes_add.append({"name": vname, "emptyDir": {"medium": "Memory"}})

    if adds:
        c = _add_list(container, "env", env, adds, cpath, plan)
        if c is None:
            note("env is neither absent nor a list; add " + ", ".join(a["name"] for a in adds) +
                 " by hand", "KDP201", (env or container).start_mark.line + 1, False, True)
        else:
            for a in adds:
                note(f"added {a['name']}={a['value']}", _rule_of(a["name"]), changes=(c,))
    if mounts_add:
        cm = _add_list(container, "volumeMounts", child(container, "volumeMounts"), mounts_add, cpath, plan)
        cv = _add_list(pod, "volumes", child(pod, "volumes"), volumes_add, ppath, plan) if cm is not None else None
        if cm is not None and cv is not None:
            note(f"added volume {volumes_add[0]['name']} (emptyDir, medium Memory) at {DSHM_PATH}",
                 "KDP307", changes=(cm, cv))
        else:
            if cm is not None:  # never a mount without its volume
                plan.changes.pop(cm)
            note(f"mount a memory-backed emptyDir at {DSHM_PATH} by hand", "KDP307", changed=False,
                 unresolved=True)


def _rule_of(name: str) -> str:
    return {
        gv.ASYNC_ERROR_HANDLING: "KDP201", gv.FAULTHANDLER: "KDP202", gv.PG_TIMEOUT: "KDP301",
        gv.WATCHDOG_TIMEOUT: "KDP302", gv.MAX_HANG_RESTARTS: "KDP303",
        gv.FR_DUMP_TEMP_FILE: "KDP304", gv.ARTIFACT_DIR: "KDP305",
    }.get(name, "KDP201")


def _add_list(
    parent: yaml.MappingNode, key: str, node: yaml.Node | None, items: list[Any],
    ppath: tuple[Any, ...], plan: Plan,
) -> int | None:
    """Plan appending ``items`` to ``parent[key]`` (created when absent or null); None if impossible."""
    if node is None:
        if not parent.value:
            return None
        return plan.add(AddKey(parent, key, items), ppath, (ppath, "addkey", (key, items)))
    if is_plain_null(node):  # `env:` with no value: the API server reads it as absent
        return plan.add(FillNull(parent, key, node, items),  # type: ignore[arg-type]
                        ppath + (key,), (ppath, "addkey", (key, items)))
    if isinstance(node, yaml.SequenceNode) and (node.value or node.flow_style):
        return plan.add(AppendItems(node, items), ppath + (key,), (ppath + (key,), "extend", items))
    return None
