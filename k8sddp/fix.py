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

import yaml

from .findings import Finding
from .fixcontainer import child, fix_container, merge_key_line, scalar_text
from .fixplan import Note, Plan, predict
from .yamledit import (
    AddKey,
    FillNull,
    Style,
    apply_edits,
    detect_style,
    is_plain_null,
)
from .yamlgraph import Unparseable, compose, construct, load_all

__all__ = ["FixResult", "Note", "fix_text"]

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


def _looks_like_pytorch(name: str) -> bool:
    """A near miss of ``pytorch``: other case, spaces, invisible or compatibility characters."""
    folded = unicodedata.normalize("NFKC", name)
    folded = "".join(ch for ch in folded if unicodedata.category(ch) not in ("Cf", "Zs", "Cc"))
    return name != "pytorch" and folded.strip().casefold() == "pytorch"


def _plan_job(doc: yaml.MappingNode, di: int, profile: str, deadline: int | None, plan: Plan) -> bool:
    if scalar_text(child(doc, "kind")) != "PyTorchJob" or not (scalar_text(child(doc, "apiVersion")) or "").startswith(
            "kubeflow.org/"):
        return False
    meta = child(doc, "metadata")
    ref = f"PyTorchJob/{scalar_text(child(meta, 'namespace')) or 'default'}/{scalar_text(child(meta, 'name')) or '?'}"
    spec = child(doc, "spec")
    replicas = child(spec, "pytorchReplicaSpecs")
    if not isinstance(replicas, yaml.MappingNode):
        plan.note(Note(ref, "no spec.pytorchReplicaSpecs mapping; nothing to fix", "KDP105",
                       doc.start_mark.line + 1, False, True))
        return True
    for rk, rv in replicas.value:
        rname = scalar_text(rk) or "?"
        template = child(rv, "template")
        pod = child(template, "spec")
        merged = merge_key_line(doc, spec, replicas, rv, template, pod)
        if merged is not None:
            plan.note(Note(f"{ref} {rname}", f"a YAML merge key (<<) at line {merged} hides part of "
                           "this replica; add the guard variables by hand (`k8sddp validate` lists them)",
                           "KDP201", merged, False, True))
            continue
        ppath = (di, "spec", "pytorchReplicaSpecs", rname, "template", "spec")
        containers = child(pod, "containers")
        pytorch = [
            (i, c) for i, c in enumerate(containers.value if isinstance(containers, yaml.SequenceNode) else [])
            if scalar_text(child(c, "name")) == "pytorch"
        ]
        if not pytorch or not isinstance(pod, yaml.MappingNode):
            names = [scalar_text(child(c, "name")) or "" for c in
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
        fix_container(ref, rname, container, pod, ppath + ("containers", idx), ppath, profile, plan)
    run_policy = child(spec, "runPolicy")
    if profile == "strict" and child(run_policy, "activeDeadlineSeconds") is None:
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
