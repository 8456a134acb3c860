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

A value that comes from ``valueFrom`` is never changed. A guard variable written as a YAML number
(``value: 3``, which the API server rejects) is rewritten as the string ``"3"``.
Everything fix cannot decide is returned as a :class:`Note` so the command can say so.

Safety: a file is edited only when every document parses (PyYAML, YAML 1.1) with no duplicate
keys; edits are text splices (:mod:`k8sddp.yamledit`), and the result is re-parsed and compared
with the expected data before anything is written; a second run finds nothing to do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from . import guardvars as gv
from .findings import Finding, Severity
from .yamledit import AddKey, AppendItems, Edit, ReplaceScalar, Style, apply_edits

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


@dataclasses.dataclass(frozen=True)
class Note:
    """One thing fix did (``changed``) or left for a person (not ``changed``).

    Attributes:
        where: ``Kind/namespace/name Replica`` (``PyTorchJob/ml/train Worker``) or the object.
        text: what was done, or what needs doing and why fix did not.
        rule_id: the catalogue rule it concerns.
        line: 1-based line in the original file of the place concerned.
        changed: True for a change, False for something left as is.
    """

    where: str
    text: str
    rule_id: str
    line: int
    changed: bool


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


class _Unparseable(Exception):
    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


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


def _is_null(node: yaml.Node | None) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _check_duplicates(node: yaml.Node, file: str, seen: set[int]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                if k.value in keys:
                    raise _Unparseable(Finding(
                        "KDP002", Severity.ERROR,
                        f"duplicate key {k.value!r}: parsers disagree on which one wins; file left unchanged",
                        file=file, line=k.start_mark.line + 1, column=k.start_mark.column + 1))
                keys.add(k.value)
            _check_duplicates(v, file, seen)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _check_duplicates(v, file, seen)


def _compose(text: str, file: str) -> list[yaml.Node]:
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=yaml.SafeLoader) if n is not None]
        for _ in yaml.safe_load_all(text):  # constructs too: `{{ x }}` composes but cannot load
            pass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise _Unparseable(Finding(
            "KDP001", Severity.ERROR,
            f"cannot parse YAML: {exc.problem or exc.context}; file left unchanged", file=file,
            line=mark.line + 1 if mark else 0, column=mark.column + 1 if mark else 0)) from exc
    except yaml.YAMLError as exc:
        raise _Unparseable(Finding("KDP001", Severity.ERROR,
                                   f"cannot parse YAML: {exc}; file left unchanged", file=file)) from exc
    seen: set[int] = set()
    for n in nodes:
        _check_duplicates(n, file, seen)
    return nodes


def _style(text: str, doc: yaml.Node) -> Style:
    """Indentation of new blocks, taken from the document's own ``containers:`` and mappings."""
    map_step, seq_offset = 2, 2
    stack = [doc]
    found_map = found_seq = False
    while stack and not (found_map and found_seq):
        node = stack.pop()
        if isinstance(node, yaml.MappingNode) and not node.flow_style:
            for k, v in node.value:
                if isinstance(v, yaml.MappingNode) and not v.flow_style and v.value and not found_map:
                    step = v.value[0][0].start_mark.column - k.start_mark.column
                    if step > 0 and v.start_mark.line > k.start_mark.line:
                        map_step, found_map = step, True
                if (isinstance(v, yaml.SequenceNode) and not v.flow_style and v.value and not found_seq
                        and v.start_mark.line > k.start_mark.line):
                    seq_offset, found_seq = v.start_mark.column - k.start_mark.column, True
                stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return Style(map_step=map_step, seq_offset=max(seq_offset, 0))


# -- planning -------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Plan:
    edits: list[Edit]
    #: (path, op, payload) applied to the loaded data to predict the result.
    data_ops: list[tuple[tuple[Any, ...], str, Any]]
    notes: list[Note]


def _env_entries(env: yaml.Node | None) -> dict[str, tuple[yaml.Node, yaml.Node | None]]:
    """name -> (entry node, value node or None when valueFrom / absent)."""
    out: dict[str, tuple[yaml.Node, yaml.Node | None]] = {}
    if isinstance(env, yaml.SequenceNode):
        for entry in env.value:
            name = _str(_get(entry, "name"))
            if name is not None:
                out[name] = (entry, _get(entry, "value"))
    return out


def _fix_container(
    job_ref: str, replica: str, container: yaml.MappingNode, pod: yaml.MappingNode,
    cpath: tuple[Any, ...], ppath: tuple[Any, ...], profile: str, plan: _Plan,
) -> None:
    where = f"{job_ref} {replica}"
    cline = container.start_mark.line + 1
    env = _get(container, "env")
    entries = _env_entries(env)
    adds: list[dict[str, str]] = []

    def note(text: str, rule: str, line: int = cline, changed: bool = True) -> None:
        plan.notes.append(Note(where, text, rule, line, changed))

    def set_value(name: str, new: str, rule: str) -> None:
        entry, value = entries[name]
        idx = next(i for i, e in enumerate(env.value) if e is entry)  # type: ignore[union-attr]
        old = _str(value)
        plan.edits.append(ReplaceScalar(value, new))  # type: ignore[arg-type]
        plan.data_ops.append((cpath + ("env", idx, "value"), "set", new))
        note(f"set {name}={new} (was {old!r})", rule, value.start_mark.line + 1)  # type: ignore[union-attr]

    def check_literal(name: str, accepted: tuple[str, ...], target: str, rule: str) -> bool:
        """True when ``name`` is present (fixed or left); False when absent."""
        if name not in entries:
            return False
        entry, value = entries[name]
        if _get(entry, "valueFrom") is not None:
            note(f"{name} comes from valueFrom; not checked", rule, entry.start_mark.line + 1, False)
            return True
        if value is None:  # no value at all: the variable is set to the empty string
            idx = next(i for i, e in enumerate(env.value) if e is entry)  # type: ignore[union-attr]
            plan.edits.append(AddKey(entry, "value", target))  # type: ignore[arg-type]
            plan.data_ops.append((cpath + ("env", idx), "addkey", ("value", target)))
            note(f"set {name}={target} (was empty)", rule, entry.start_mark.line + 1)
            return True
        text = _str(value)
        if text is None:
            note(f"{name} has a non-scalar value; fix it by hand", rule, entry.start_mark.line + 1, False)
            return True
        if text in accepted and value.tag == _STR_TAG:
            return True
        if text in accepted:  # a YAML number or boolean: the API server wants a string
            set_value(name, text, rule)
        else:
            set_value(name, target, rule)
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
            if net in entries and _str(entries[net][1]) == "0":
                set_value(net, net_default, "KDP306")
        # persistent artifact dir and flight-recorder dumps
        volumes = _get(pod, "volumes")
        pvcs = {
            _str(_get(v, "name")) for v in (volumes.value if isinstance(volumes, yaml.SequenceNode) else [])
            if _get(v, "persistentVolumeClaim") is not None
        }
        mounts = _get(container, "volumeMounts")
        mount_list = mounts.value if isinstance(mounts, yaml.SequenceNode) else []
        pvc_mount = next(
            (_str(_get(m, "mountPath")) for m in mount_list
             if _str(_get(m, "name")) in pvcs and _str(_get(m, "readOnly")) not in ("true", "True")
             and _str(_get(m, "mountPath"))),
            None,
        )
        artifact = _str(entries[gv.ARTIFACT_DIR][1]) if gv.ARTIFACT_DIR in entries else None
        if artifact is None and gv.ARTIFACT_DIR not in entries:
            if pvc_mount:
                artifact = pvc_mount.rstrip("/") + "/" + ARTIFACT_SUBDIR
                adds.append({"name": gv.ARTIFACT_DIR, "value": artifact})
            else:
                note(f"{gv.ARTIFACT_DIR} not added: no PersistentVolumeClaim is mounted writable in the "
                     "pytorch container; mount the checkpoint volume and run fix again", "KDP305",
                     changed=False)
        if gv.FR_DUMP_TEMP_FILE not in entries and gv.LEGACY_FR_DUMP_TEMP_FILE not in entries:
            if artifact:
                adds.append({"name": gv.FR_DUMP_TEMP_FILE, "value": artifact.rstrip("/") + "/fr/rank-"})
            else:
                note(f"{gv.FR_DUMP_TEMP_FILE} not added: no artifact directory on a persistent volume",
                     "KDP304", changed=False)
        # /dev/shm
        if not any(_str(_get(m, "mountPath")) in (DSHM_PATH, DSHM_PATH + "/") for m in mount_list):
            taken = {_str(_get(v, "name")) for v in
                     (volumes.value if isinstance(volumes, yaml.SequenceNode) else [])}
            vname = "dshm"
            n = 1
            while vname in taken:
                vname, n = f"dshm-{n}", n + 1
            mounts_add.append({"name": vname, "mountPath": DSHM_PATH})
            volumes_add.append({"name": vname, "emptyDir": {"medium": "Memory"}})

    if adds:
        if not _add_list(container, "env", env, adds, cpath, plan):
            note("env is neither absent nor a list; add " + ", ".join(a["name"] for a in adds) +
                 " by hand", "KDP201", changed=False)
        else:
            for a in adds:
                note(f"added {a['name']}={a['value']}", _rule_of(a["name"]))
    if mounts_add:
        ok = _add_list(container, "volumeMounts", _get(container, "volumeMounts"), mounts_add, cpath, plan)
        ok = ok and _add_list(pod, "volumes", _get(pod, "volumes"), volumes_add, ppath, plan)
        if ok:
            note(f"added volume {volumes_add[0]['name']} (emptyDir, medium Memory) at {DSHM_PATH}", "KDP307")
        else:
            note(f"mount a memory-backed emptyDir at {DSHM_PATH} by hand", "KDP307", changed=False)


def _rule_of(name: str) -> str:
    return {
        gv.ASYNC_ERROR_HANDLING: "KDP201", gv.FAULTHANDLER: "KDP202", gv.PG_TIMEOUT: "KDP301",
        gv.WATCHDOG_TIMEOUT: "KDP302", gv.MAX_HANG_RESTARTS: "KDP303",
        gv.FR_DUMP_TEMP_FILE: "KDP304", gv.ARTIFACT_DIR: "KDP305",
    }.get(name, "KDP201")


def _add_list(
    parent: yaml.MappingNode, key: str, node: yaml.Node | None, items: list[Any],
    ppath: tuple[Any, ...], plan: _Plan,
) -> bool:
    """Append ``items`` to ``parent[key]``, creating the list when absent; False if impossible."""
    if node is None:
        if not parent.value:
            return False
        plan.edits.append(AddKey(parent, key, items))
        plan.data_ops.append((ppath, "addkey", (key, items)))
        return True
    if isinstance(node, yaml.SequenceNode) and (node.value or node.flow_style):
        plan.edits.append(AppendItems(node, items))
        plan.data_ops.append((ppath + (key,), "extend", items))
        return True
    return False


def _plan_job(doc: yaml.MappingNode, di: int, profile: str, deadline: int | None, plan: _Plan,
              seen: set[int]) -> bool:
    if _str(_get(doc, "kind")) != "PyTorchJob" or not (_str(_get(doc, "apiVersion")) or "").startswith(
            "kubeflow.org/"):
        return False
    meta = _get(doc, "metadata")
    ref = f"PyTorchJob/{_str(_get(meta, 'namespace')) or 'default'}/{_str(_get(meta, 'name')) or '?'}"
    spec = _get(doc, "spec")
    replicas = _get(spec, "pytorchReplicaSpecs")
    if not isinstance(replicas, yaml.MappingNode):
        plan.notes.append(Note(ref, "no spec.pytorchReplicaSpecs mapping; nothing to fix", "KDP105",
                               doc.start_mark.line + 1, False))
        return True
    for rk, rv in replicas.value:
        rname = _str(rk) or "?"
        pod = _get(_get(rv, "template"), "spec")
        ppath = (di, "spec", "pytorchReplicaSpecs", rname, "template", "spec")
        containers = _get(pod, "containers")
        pytorch = [
            (i, c) for i, c in enumerate(containers.value if isinstance(containers, yaml.SequenceNode) else [])
            if _str(_get(c, "name")) == "pytorch"
        ]
        if not pytorch or not isinstance(pod, yaml.MappingNode):
            plan.notes.append(Note(f"{ref} {rname}", "no container named pytorch; fix adds nothing here",
                                   "KDP104", rv.start_mark.line + 1, False))
            continue
        idx, container = pytorch[0]
        if id(container) in seen:  # a YAML alias of a template fixed already
            continue
        seen.add(id(container))
        if not isinstance(container, yaml.MappingNode) or not container.value:
            continue
        _fix_container(ref, rname, container, pod, ppath + ("containers", idx), ppath, profile, plan)
    run_policy = _get(spec, "runPolicy")
    if profile == "strict" and _get(run_policy, "activeDeadlineSeconds") is None:
        line = (run_policy or spec or doc).start_mark.line + 1
        if deadline is None:
            plan.notes.append(Note(ref, "spec.runPolicy.activeDeadlineSeconds not added: choose a bound for "
                                   "this job (fix --active-deadline-seconds N)", "KDP308", line, False))
        elif isinstance(run_policy, yaml.MappingNode) and run_policy.value:
            plan.edits.append(AddKey(run_policy, "activeDeadlineSeconds", deadline))
            plan.data_ops.append(((di, "spec", "runPolicy"), "addkey", ("activeDeadlineSeconds", deadline)))
            plan.notes.append(Note(ref, f"set spec.runPolicy.activeDeadlineSeconds={deadline}", "KDP308", line, True))
        elif run_policy is None and isinstance(spec, yaml.MappingNode):
            value = {"activeDeadlineSeconds": deadline}
            plan.edits.append(AddKey(spec, "runPolicy", value))
            plan.data_ops.append(((di, "spec"), "addkey", ("runPolicy", value)))
            plan.notes.append(Note(ref, f"set spec.runPolicy.activeDeadlineSeconds={deadline}", "KDP308", line, True))
    return True


def _predict(data: list[Any], ops: list[tuple[tuple[Any, ...], str, Any]]) -> list[Any]:
    for path, op, payload in ops:
        target: Any = data
        for part in path:
            target = target[part]
        if op == "set":
            pass
        elif op == "extend":
            target.extend(payload)
        elif op == "addkey":
            target[payload[0]] = payload[1]
    for path, op, payload in ops:
        if op == "set":
            target = data
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = payload
    return data


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
    """
    if profile not in ("baseline", "strict"):
        raise ValueError(f"unknown profile {profile!r}; expected baseline or strict")
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    body = text[len(bom):]
    result = FixResult(file=file, original=text, fixed=text)
    try:
        docs = _compose(body, file)
    except _Unparseable as exc:
        result.error = exc.finding
        return result
    plan = _Plan([], [], [])
    seen: set[int] = set()
    styles: list[Style] = []
    for di, doc in enumerate(docs):
        if isinstance(doc, yaml.MappingNode) and _plan_job(
                doc, di, profile, active_deadline_seconds, plan, seen):
            result.jobs += 1
        styles.append(_style(body, doc))
    result.notes = plan.notes
    if not plan.edits:
        return result
    # One style per document: each edit takes the style of the document holding its node.
    starts = [d.start_mark.index for d in docs]
    new = body
    for di in reversed(range(len(docs))):
        lo, hi = starts[di], starts[di + 1] if di + 1 < len(docs) else len(body) + 1
        mine = [e for e in plan.edits if lo <= e.node.start_mark.index < hi]
        if mine:
            new = apply_edits(new, mine, styles[di])
    expected = _predict([yaml.safe_load(yaml.serialize(d)) for d in docs], plan.data_ops)
    try:
        got = [d for d in yaml.safe_load_all(new) if d is not None]
    except yaml.YAMLError as exc:  # pragma: no cover - a splicer bug; never write it
        raise RuntimeError(f"{file}: fix produced YAML that does not parse ({exc}); file left unchanged") from exc
    if got != expected:  # a splicer bug; never write it (tested by faking one)
        raise RuntimeError(f"{file}: fix produced unexpected data; file left unchanged")
    result.fixed = bom + new
    return result
