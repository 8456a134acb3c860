"""``k8sddp fix``: add the guard variables a PyTorchJob lacks, in place, keeping the file's format.

For every PyTorchJob (``kubeflow.org/v1``) in a file, and every replica of it, the container named
``pytorch`` gets what the profile demands (``../shared/CONTRACT.md``; values from
:mod:`k8sddp.guardvars`). What fix adds, corrects, or leaves for a person:

========================================  ===========================================================
baseline
----------------------------------------------------------------------------------------------------
``TORCH_NCCL_ASYNC_ERROR_HANDLING``       added as ``"3"`` when neither it nor the legacy
                                          ``NCCL_ASYNC_ERROR_HANDLING`` is set; a legacy-only
                                          setting of 1 or 3 is respected (the image may have
                                          torch < 2.2, which knows only that name). A literal value
                                          other than 1 or 3 (``0`` hangs, ``2`` lets the process live
                                          on) is corrected: the current name to ``"3"``, a
                                          legacy-only one to ``"1"``.
``PYTHONFAULTHANDLER``                    added as ``"1"``; an empty value becomes ``"1"``.
strict (adds to baseline)
----------------------------------------------------------------------------------------------------
timeouts and hang restarts                ``K8SDDP_PG_TIMEOUT_SECONDS`` 1800,
                                          ``K8SDDP_WATCHDOG_TIMEOUT_SECONDS`` 300,
                                          ``K8SDDP_MAX_HANG_RESTARTS`` 3, when absent and the
                                          container has no ``envFrom`` (a ConfigMap may set them,
                                          and an ``env`` entry would silently override it).
                                          A present but invalid value is left for a person.
``K8SDDP_ARTIFACT_DIR``,                  only where a PersistentVolumeClaim volume is mounted
``TORCH_FR_DUMP_TEMP_FILE``               writable in the container: ``<mountPath>/k8sddp`` and
                                          ``<artifact dir>/fr/rank-``. Fix never invents storage.
``/dev/shm``                              a ``dshm`` emptyDir volume with ``medium: Memory`` and its
                                          mount, when nothing is mounted at ``/dev/shm``.
safety nets switched off                  ``TORCH_NCCL_ENABLE_MONITORING`` / ``..._DUMP_ON_TIMEOUT``
                                          ``0`` -> ``"1"``; ``TORCH_FR_BUFFER_SIZE`` /
                                          ``TORCH_NCCL_TRACE_BUFFER_SIZE`` ``0`` -> ``"2000"``
                                          (the library defaults, NOTES.md "Flight recorder").
``runPolicy.activeDeadlineSeconds``       only with ``--active-deadline-seconds N``: no bound is
                                          right for every job, and a wrong one kills a healthy run.
========================================  ===========================================================

``env:`` written with no value (null, which the API server treats as absent) gets the list.
A value that comes from ``valueFrom`` is never changed. A guard variable written as a YAML number
(``value: 3``, which the API server rejects) is rewritten as the string ``"3"``.
Everything fix cannot decide is returned as a :class:`Note` so the command can say so; a note
with ``unresolved`` marks a rule the file still breaks (``k8sddp fix`` exits 1).

Anchors, aliases, tags and merge keys: a node reached from several places through an alias is
edited only when fix plans the same edit for every place (:mod:`k8sddp.fixplan`); otherwise the
change is left, naming the other place. A mapping with a YAML merge key (``<<: *base``) on the way
to the pytorch container, in it, or in its env entries is left alone: what it merges in is not
written there, and a key added beside it would silently override the merged one.

Safety: a file is edited only when every document parses (PyYAML, YAML 1.1) with no duplicate
keys; edits are text splices (:mod:`k8sddp.yamledit`), and the result is re-parsed and compared
with the expected data before anything is written; a second run finds nothing to do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import unicodedata
from collections.abc import Iterator
from typing import Any

import yaml

from . import guardvars as gv
from .findings import Finding
from .fixplan import Note, Plan, predict
from .yamledit import (
    AddKey,
    AppendItems,
    FillNull,
    ReplaceScalar,
    Style,
    apply_edits,
    detect_style,
    is_plain_null,
)
from .yamlgraph import Unparseable, compose, construct, load_all

__all__ = ["FixResult", "Note", "fix_text"]

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


@dataclasses.dataclass
class FixResult:
    """The outcome of fixing one file's text.

    Attributes:
        file: the input name.
        original: the text read.
        fixed: the new text (equal to ``original`` when nothing changed or on error).
        notes: changes made and things left, in document order.
        error: a finding when the file could not be parsed (then nothing changed).
        jobs: PyTorchJobs seen.
    """

    file: str
    original: str
    fixed: str
    notes: list[Note] = dataclasses.field(default_factory=list)
    error: Finding | None = None
    jobs: int = 0

    @property
    def changed(self) -> bool:
        """True when the fixed text differs from the original."""
        return self.fixed != self.original


class _AnyNonEmpty(tuple):  # type: ignore[type-arg]
    """``x in _NON_EMPTY`` for every non-empty string (PYTHONFAULTHANDLER accepts any)."""

    def __contains__(self, item: object) -> bool:
        return isinstance(item, str) and item != ""


_NON_EMPTY: tuple[str, ...] = _AnyNonEmpty()


# -- node helpers ---------------------------------------------------------------------------------


def _get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def _str(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _merge_line(*nodes: yaml.Node | None) -> int | None:
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
            name = _str(_get(entry, "name"))
            if name is not None:
                out[name] = (i, entry, _get(entry, "value"))
    return out


def _fix_container(
    job_ref: str, replica: str, container: yaml.MappingNode, pod: yaml.MappingNode,
    cpath: tuple[Any, ...], ppath: tuple[Any, ...], profile: str, plan: Plan,
) -> None:
    where = f"{job_ref} {replica}"
    cline = container.start_mark.line + 1
    env = _get(container, "env")
    entries = _env_entries(env)
    adds: list[dict[str, str]] = []

    def note(text: str, rule: str, line: int = cline, changed: bool = True, unresolved: bool = False,
             changes: tuple[int, ...] = ()) -> None:
        plan.note(Note(where, text, rule, line, changed, unresolved), changes)

    merged = _merge_line(container, pod, *(e for _, e, _ in entries.values()))
    if merged is None and isinstance(env, yaml.SequenceNode):
        merged = _merge_line(*env.value)
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
        if _get(entry, "valueFrom") is not None:
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
        text = _str(value)
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
        has_env_from = _get(container, "envFrom") is not None
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
            if net in entries and _str(entries[net][2]) == "0":
                set_value(net, net_default, "KDP306")
        # persistent artifact dir and flight-recorder dumps
        volumes = _get(pod, "volumes")
        vol_list = volumes.value if isinstance(volumes, yaml.SequenceNode) else []
        # A claim mounted readOnly (persistentVolumeClaim.readOnly) cannot hold the artifacts either.
        pvcs = {
            _str(_get(v, "name")) for v in vol_list
            if _get(v, "persistentVolumeClaim") is not None
            and _str(_get(_get(v, "persistentVolumeClaim"), "readOnly")) not in ("true", "True")
        }
        mounts = _get(container, "volumeMounts")
        mount_list = mounts.value if isinstance(mounts, yaml.SequenceNode) else []
        pvc_mount = next(
            (_str(_get(m, "mountPath")) for m in mount_list
             if _str(_get(m, "name")) in pvcs and _str(_get(m, "readOnly")) not in ("true", "True")
             and _str(_get(m, "mountPath"))),
            None,
        )
        artifact = _str(entries[gv.ARTIFACT_DIR][2]) if gv.ARTIFACT_DIR in entries else None
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
        if not any(_str(_get(m, "mountPath")) in (DSHM_PATH, DSHM_PATH + "/") for m in mount_list):
            taken = {_str(_get(v, "name")) for v in vol_list}
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
        cm = _add_list(container, "volumeMounts", _get(container, "volumeMounts"), mounts_add, cpath, plan)
        cv = _add_list(pod, "volumes", _get(pod, "volumes"), volumes_add, ppath, plan) if cm is not None else None
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


def _looks_like_pytorch(name: str) -> bool:
    """A near miss of ``pytorch``: other case, spaces, invisible or compatibility characters."""
    folded = unicodedata.normalize("NFKC", name)
    folded = "".join(ch for ch in folded if unicodedata.category(ch) not in ("Cf", "Zs", "Cc"))
    return name != "pytorch" and folded.strip().casefold() == "pytorch"


def _plan_job(doc: yaml.MappingNode, di: int, profile: str, deadline: int | None, plan: Plan) -> bool:
    if _str(_get(doc, "kind")) != "PyTorchJob" or not (_str(_get(doc, "apiVersion")) or "").startswith(
            "kubeflow.org/"):
        return False
    meta = _get(doc, "metadata")
    ref = f"PyTorchJob/{_str(_get(meta, 'namespace')) or 'default'}/{_str(_get(meta, 'name')) or '?'}"
    spec = _get(doc, "spec")
    replicas = _get(spec, "pytorchReplicaSpecs")
    if not isinstance(replicas, yaml.MappingNode):
        plan.note(Note(ref, "no spec.pytorchReplicaSpecs mapping; nothing to fix", "KDP105",
                       doc.start_mark.line + 1, False, True))
        return True
    for rk, rv in replicas.value:
        rname = _str(rk) or "?"
        template = _get(rv, "template")
        pod = _get(template, "spec")
        merged = _merge_line(doc, spec, replicas, rv, template, pod)
        if merged is not None:
            plan.note(Note(f"{ref} {rname}", f"a YAML merge key (<<) at line {merged} hides part of "
                           "this replica; add the guard variables by hand (`k8sddp validate` lists them)",
                           "KDP201", merged, False, True))
            continue
        ppath = (di, "spec", "pytorchReplicaSpecs", rname, "template", "spec")
        containers = _get(pod, "containers")
        pytorch = [
            (i, c) for i, c in enumerate(containers.value if isinstance(containers, yaml.SequenceNode) else [])
            if _str(_get(c, "name")) == "pytorch"
        ]
        if not pytorch or not isinstance(pod, yaml.MappingNode):
            names = [_str(_get(c, "name")) or "" for c in
                     (containers.value if isinstance(containers, yaml.SequenceNode) else [])]
            near = [n for n in names if _looks_like_pytorch(n)]
            hint = f" (is {ascii(near[0])} meant to be it? rename it to exactly pytorch)" if near else ""
            plan.note(Note(f"{ref} {rname}", f"no container named pytorch{hint}; fix adds nothing here",
                           "KDP104", rv.start_mark.line + 1, False, True))
            continue
        idx, container = pytorch[0]
        if not isinstance(container, yaml.MappingNode) or not container.value:
            continue
        # An aliased template (`template: *tpl`) is planned once per replica; the same edits of one
        # node are applied once (fixplan.Plan.resolve).
        _fix_container(ref, rname, container, pod, ppath + ("containers", idx), ppath, profile, plan)
    run_policy = _get(spec, "runPolicy")
    if profile == "strict" and _get(run_policy, "activeDeadlineSeconds") is None:
        line = (run_policy or spec or doc).start_mark.line + 1
        if deadline is None:
            plan.note(Note(ref, "spec.runPolicy.activeDeadlineSeconds not added: choose a bound for "
                           "this job (fix --active-deadline-seconds N)", "KDP308", line, False, True))
            return True
        value = {"activeDeadlineSeconds": deadline}
        at = (di, "spec", "runPolicy")
        c: int | None = None
        if isinstance(run_policy, yaml.MappingNode) and run_policy.value:
            c = plan.add(AddKey(run_policy, "activeDeadlineSeconds", deadline), at,
                         (at, "addkey", ("activeDeadlineSeconds", deadline)))
        elif run_policy is None and isinstance(spec, yaml.MappingNode):
            c = plan.add(AddKey(spec, "runPolicy", value), at[:-1], (at[:-1], "addkey", ("runPolicy", value)))
        elif is_plain_null(run_policy) and isinstance(spec, yaml.MappingNode):
            c = plan.add(FillNull(spec, "runPolicy", run_policy, value),  # type: ignore[arg-type]
                         at, (at[:-1], "addkey", ("runPolicy", value)))
        if c is None:
            plan.note(Note(ref, f"set spec.runPolicy.activeDeadlineSeconds={deadline} by hand "
                           "(runPolicy is not a mapping fix can extend)", "KDP308", line, False, True))
        else:
            plan.note(Note(ref, f"set spec.runPolicy.activeDeadlineSeconds={deadline}", "KDP308", line, True),
                      (c,))
    return True


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: composing a large file makes hundreds of thousands of
    objects, and the collector's full passes over them made fix quadratic (800 kB: 10 s -> 2 s;
    bench/fix_speed.py). Nothing made here needs it; it is switched back on, as it was, after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def fix_text(
    text: str, *, file: str = "<input>", profile: str = "baseline",
    active_deadline_seconds: int | None = None,
) -> FixResult:
    """Plan and apply the fixes for one file's text (nothing is written).

    Args:
        text: the file's content (a leading BOM is kept; ``\\r\\n`` line ends are kept).
        file: its name, for findings and notes.
        profile: ``baseline`` or ``strict`` (see the module docstring for what each adds).
        active_deadline_seconds: with ``strict``, the ``runPolicy.activeDeadlineSeconds`` to set
            where it is absent (seconds, > 0); ``None`` leaves it for a person.

    Returns:
        A :class:`FixResult`; when the text cannot be parsed, ``error`` is a KDP001/KDP002 finding
        and ``fixed`` is the original text.

    Raises:
        ValueError: ``profile`` unknown.
        RuntimeError: the spliced text would not parse, or would hold other data than planned (a
            bug in the splicer; the message says which, without the file name); never written.
    """
    if profile not in ("baseline", "strict"):
        raise ValueError(f"unknown profile {profile!r}; expected baseline or strict")
    with _gc_paused():
        return _fix_text(text, file, profile, active_deadline_seconds)


def _fix_text(text: str, file: str, profile: str, active_deadline_seconds: int | None) -> FixResult:
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    body = text[len(bom):]
    result = FixResult(file=file, original=text, fixed=text)
    try:
        composed = compose(body, file)
    except Unparseable as exc:
        result.error = exc.finding
        return result
    docs = composed.docs
    plan = Plan()
    styles: list[Style] = []
    for di, doc in enumerate(docs):
        if isinstance(doc, yaml.MappingNode) and _plan_job(doc, di, profile, active_deadline_seconds, plan):
            result.jobs += 1
        styles.append(detect_style(doc))
    edits, ops = plan.resolve(composed)
    result.notes = plan.notes
    if not edits:
        return result
    # One style per document: each edit takes the style of the document holding its node.
    starts = [d.start_mark.index for d in docs]
    new = body
    try:
        for di in reversed(range(len(docs))):
            lo, hi = starts[di], starts[di + 1] if di + 1 < len(docs) else len(body) + 1
            mine = [e for e in edits if lo <= e.node.start_mark.index < hi]
            if mine:
                new = apply_edits(new, mine, styles[di], alias_end=composed.alias_end)
    except ValueError as exc:  # an edit the splicer cannot express: never guess
        raise RuntimeError(f"fix cannot place an edit ({exc}); file left unchanged") from exc
    try:
        got = load_all(new)
    except yaml.YAMLError as exc:  # a splicer bug; never write it
        raise RuntimeError(f"fix produced YAML that does not parse ({exc}); file left unchanged") from exc
    expected = predict(construct(docs), ops)  # last use of the nodes (merge keys get flattened)
    if got != expected:  # a splicer bug; never write it (tested by faking one)
        raise RuntimeError("fix produced unexpected data; file left unchanged")
    result.fixed = bom + new
    return result
