"""Validate manifests: files, folders, text or objects, on every core.

One file is the unit of work. ConfigMaps anywhere in the input resolve the PyTorchJobs' ``envFrom``
and ``valueFrom`` (as ``kubectl apply -f DIR`` would create them all), so files that mention
``ConfigMap`` are read first, in this process, and their ConfigMaps are handed to the workers.
"""

from __future__ import annotations

import contextlib
import gc
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from .. import kinds
from ..catalogue import PROFILES, RULES
from ..errors import UsageError
from ..findings import Finding, Report
from .envresolve import ConfigMapIndex
from .exemptions import Config, annotation_exemptions
from .fromcluster import ReferenceReader, resolve_from_cluster
from .objindex import ObjectIndex
from .rawfinding import RawFinding, json_path
from .templates import GO_ACTION, go_action_line, helm_message, template_findings
from .yamlio import MAX_INPUT_BYTES, Document, Locator, alias_problem, decode, load_documents

if TYPE_CHECKING:
    from ..kinds.base import Inner

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
#: Below this many files the process pool costs more than it saves.
PARALLEL_MIN_FILES = 64


def _object_ref(obj: Mapping[str, Any]) -> str:
    meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name") or meta.get("generateName") or "?"
    ns = meta.get("namespace")
    # Any of these may be a non-string in a broken manifest: format, never concatenate.
    return f"{obj.get('kind')}/{f'{ns}/' if ns else ''}{name}"


def _is_list(data: Any) -> bool:
    """``kind: List`` or a typed list (``PyTorchJobList``, ``ConfigMapList``) with ``items``:
    kubectl applies their items, nested lists flattened."""
    kind = data.get("kind") if isinstance(data, Mapping) else None
    return isinstance(kind, str) and kind.endswith("List") and isinstance(data.get("items"), list)


def _flatten(index: int, prefix: tuple[Any, ...], data: Any, depth: int = 0) -> Iterable[tuple[int, tuple[Any, ...], Any]]:
    if _is_list(data) and depth < 16:
        for i, item in enumerate(data["items"]):
            yield from _flatten(index, (*prefix, "items", i), item, depth + 1)
    elif data is not None:
        yield index, prefix, data


def _objects(docs: Iterable[Any]) -> Iterable[tuple[int, tuple[Any, ...], Any]]:
    """(document index, path prefix, object) for every object, list items (``kind: List`` and
    typed ``*List`` kinds, nested ones too) expanded."""
    for doc in docs:
        yield from _flatten(doc.index, (), doc.data)


def new_index(default_namespace: str | None = None) -> ObjectIndex:
    """An empty index of the input's ConfigMaps and of the objects registered kinds refer to."""
    return ObjectIndex(kinds.referenced_kinds(), default_namespace=default_namespace)


def _index_hints() -> tuple[bytes, ...]:
    """Kind names whose mention makes a file worth reading before the checks (ConfigMaps and the
    objects registered kinds refer to)."""
    return (b"ConfigMap", *sorted({k.encode() for _, k in kinds.referenced_kinds()}))


def collect_configmaps(text: str, cms: ObjectIndex, *, is_json: bool = False) -> None:
    """Add the ConfigMaps of a manifest text, and the objects of the kinds ``cms`` keeps, to ``cms``
    (unreadable documents are skipped here; they are reported when the file itself is checked)."""
    docs, _ = load_documents(text, is_json=is_json)
    for _, _, obj in _objects(docs):
        if cms.wants(obj):
            cms.add(obj)


def check_text(
    text: str,
    *,
    file: str,
    profile: str = "baseline",
    configmaps: ObjectIndex | None = None,
    config: Config | None = None,
    is_json: bool | None = None,
) -> Report:
    """Validate one file's content.

    Args:
        text: YAML (one or more documents) or JSON.
        file: the name reported in findings.
        profile: ``baseline`` or ``strict`` (:data:`k8sddp.catalogue.PROFILES`).
        configmaps: the whole input's ConfigMaps and referenced objects (:func:`new_index`);
            ``None``: those of this text only.
        config: repository configuration (path exemptions), if any.
        is_json: parse as JSON; default: by the file's suffix.

    Returns:
        The file's :class:`Report`.
    """
    if is_json is None:
        is_json = file.endswith(".json")
    report = Report(files=1)
    docs, problems = load_documents(text, is_json=is_json)
    # YAML documents carry their nodes; JSON (and a file whose reading stopped early) composes later.
    nodes = [d.node for d in docs]
    locator = Locator(text, nodes if nodes and all(n is not None for n in nodes) else None)
    action = go_action_line(text) if any(p.rule_id == "KDP001" for p in problems) else None
    if action is not None:
        # An unrendered Helm template: one finding that says so, not the parser's complaint.
        line, col, what = action
        more = sum(len(GO_ACTION.findall(t)) for t in text.splitlines() if not t.lstrip().startswith("#")) - 1
        report.findings.append(Finding("KDP010", RULES["KDP010"].severity, helm_message(what, more), file, line, col))
        problems = [p for p in problems if p.rule_id != "KDP001"]
    for p in problems:
        # Alias bombs are found after parsing, without a mark: point at their document's start.
        line, col = (p.line, p.column) if p.line else locator.locate(p.index, ())
        report.findings.append(Finding(p.rule_id, RULES[p.rule_id].severity, p.message, file, line, col, "", p.index))
    if configmaps is None:
        configmaps = new_index()
        collect_configmaps(text, configmaps, is_json=is_json)
    report.documents += sum(1 for d in docs if d.data is not None)
    _Checker(report, file, profile, configmaps, config, locator, None, text_messages=True).run(_objects(docs))
    return report


class _Checker:
    """Checks objects by asking the kinds registry, and places their findings in ``report``.

    Args:
        report: where findings and counts go.
        file: the name findings carry.
        profile: ``baseline`` or ``strict``.
        objects: the input's ConfigMaps (and referenced objects).
        config: repository configuration (path exemptions), or ``None``.
        locator: finds lines in the file's text; ``None``: objects without text (line 0).
        namespace: the namespace objects without one are applied to.
        text_messages: KDP004 says what the document is (a file) rather than what it lacks.
    """

    #: Wrappers inside wrappers are unwrapped this deep at most (a cycle cannot be built from
    #: parsed YAML without aliases, which are bounded; this bounds pathological nesting).
    MAX_DEPTH = 8

    def __init__(
        self,
        report: Report,
        file: str,
        profile: str,
        objects: ObjectIndex,
        config: Config | None,
        locator: Locator | None,
        namespace: str | None,
        *,
        text_messages: bool = False,
    ) -> None:
        self.report, self.file, self.profile, self.objects = report, file, profile, objects
        self.config, self.locator, self.namespace, self.text_messages = config, locator, namespace, text_messages

    def run(self, flat: Iterable[tuple[int, tuple[Any, ...], Any]]) -> None:
        """Check every ``(document index, path prefix, object)``."""
        for index, prefix, obj in flat:
            self._one(index, prefix, obj, "", {}, None, 0)

    def _place(self, index: int, path: tuple[Any, ...]) -> tuple[int, int]:
        return self.locator.locate(index, path) if self.locator is not None else (0, 0)

    def _emit(self, index: int, prefix: tuple[Any, ...], raw: list[RawFinding], ref: str, granted: Mapping[str, str]) -> None:
        for rf in raw:
            exempted = granted.get(rf.rule_id, "") or (self.config.exempted(self.file, rf.rule_id) if self.config else "")
            line, col = self._place(index, prefix + rf.path)
            self.report.findings.append(
                Finding(rf.rule_id, RULES[rf.rule_id].severity, rf.message, self.file, line, col, json_path(prefix + rf.path), index, ref, exempted)
            )

    def _one(self, index: int, prefix: tuple[Any, ...], obj: Any, outer_ref: str, outer_granted: Mapping[str, str], inner: Inner | None, depth: int) -> None:
        if not isinstance(obj, Mapping) or not obj.get("apiVersion") or not obj.get("kind"):
            line, col = self._place(index, prefix)
            if self.text_messages:
                what = "a mapping" if isinstance(obj, Mapping) else type(obj).__name__
                message = f"not a Kubernetes object: {what} without apiVersion and kind"
            else:
                message = "not a Kubernetes object: no apiVersion and kind"
            self.report.findings.append(Finding("KDP004", RULES["KDP004"].severity, message, self.file, line, col, json_path(prefix), index, outer_ref))
            return
        api, kind_name = obj.get("apiVersion"), obj.get("kind")
        kind = kinds.lookup(api, kind_name)
        wrapper = None if kind is not None or depth >= self.MAX_DEPTH else kinds.lookup_wrapper(api, kind_name)
        if kind is None and wrapper is None:
            self.report.skipped[kinds.skip_label(api, kind_name)] += 1
            return
        meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) and meta.get("namespace") else self.namespace
        ctx = kinds.CheckContext(self.profile, self.objects, ns)
        ref = f"{outer_ref}:{_object_ref(obj)}" if outer_ref else _object_ref(obj)
        granted, problems = annotation_exemptions(obj)
        granted = {**outer_granted, **granted}
        if kind is not None:
            self.report.checked += 1
            raw = kind.check(obj, ctx)
            if inner is not None:
                raw = kinds.placeholder_filter(inner, raw)
            raw = template_findings(obj, raw)
            self._emit(index, prefix, problems + raw, ref, granted)
            return
        assert wrapper is not None
        unwrapped = wrapper.unwrap(obj, ctx)
        self._emit(index, prefix, problems + unwrapped.findings, ref, granted)
        for held in unwrapped.inner:
            self._one(index, prefix + held.path, held.obj, ref, granted, held, depth + 1)


def check_profile(profile: str) -> str:
    """Return ``profile`` if known.

    Raises:
        UsageError: unknown profile.
    """
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
    return profile


# -- files and folders ----------------------------------------------------------------------------


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files to read: each file as given, each folder's ``*.yaml``/``*.yml``/``*.json`` recursively
    (suffixes in any case, sorted, hidden folders skipped, only regular files: a FIFO or device in
    a folder is never opened), ``-`` for standard input.

    Raises:
        UsageError: paths that do not exist (all of them named), or a folder that cannot be listed.
    """
    out: list[str] = []
    missing: list[str] = []

    def unreadable(exc: OSError) -> None:
        raise UsageError(f"{exc.filename}: cannot list folder: {exc.strerror or exc}")

    for path in paths:
        if path == "-":
            out.append(path)
        elif os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path, onerror=unreadable):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in files:
                    full = os.path.join(root, name)
                    if name.lower().endswith(MANIFEST_SUFFIXES) and os.path.isfile(full):
                        found.append(full)
            out += sorted(found)
        elif os.path.exists(path):
            out.append(path)
        else:
            missing.append(path)
    if missing:
        raise UsageError("; ".join(f"{p}: no such file or directory" for p in missing))
    return out


class InputTooLarge(Exception):
    """A file or standard input larger than :data:`MAX_INPUT_BYTES`."""


def _read_bytes(path: str) -> bytes:
    """The bytes of file ``path`` (``-``: standard input), reading at most the limit.

    Raises:
        UsageError: unreadable (permission, a folder, ...).
        InputTooLarge: larger than :data:`MAX_INPUT_BYTES`.
    """
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as fh:
                # The size first: read(n) allocates n bytes up front, and 16 MiB per file cost a
                # fifth of the run. (A file that grows meanwhile is caught by the length check.)
                st = os.fstat(fh.fileno())
                if st.st_size > MAX_INPUT_BYTES:
                    raise InputTooLarge(path)
                # A pipe or device (/dev/stdin, /dev/zero) has no size: read at most the limit.
                data = fh.read() if stat.S_ISREG(st.st_mode) else fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_INPUT_BYTES:
        raise InputTooLarge(path)
    return data


def read_input(path: str) -> str:
    """The text of ``path`` (``-``: standard input), decoded by :func:`.yamlio.decode`.

    Raises:
        UsageError: unreadable (permission, a folder, ...).
        InputTooLarge: larger than :data:`MAX_INPUT_BYTES`.
    """
    return decode(_read_bytes(path))


def _too_large(file: str) -> Report:
    message = f"larger than {MAX_INPUT_BYTES // 2**20} MiB: not read (the API server refuses requests over 3 MiB)"
    return Report(files=1, findings=[Finding("KDP001", RULES["KDP001"].severity, message, file)])


_WORKER: dict[str, Any] = {}


#: Generation-0 threshold while validating. Each manifest allocates tens of thousands of
#: short-lived objects without cycles; at Python's default (700) the collector ran gen-2 passes
#: over every module and schema 35 times per 10,000 manifests for nothing: 18% of the CPU time.
GC_THRESHOLD = (10_000, 20, 20)


@contextlib.contextmanager
def _gc_tuned() -> Iterator[None]:
    """Raise the collector's thresholds for the block, and restore them (the caller's process)."""
    old = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _cores() -> int:
    """Cores this process may run on (a container's CPU set, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _init_worker(profile: str, cms: ObjectIndex, config: Config | None) -> None:
    _WORKER.update(profile=profile, cms=cms, config=config)
    gc.set_threshold(*GC_THRESHOLD)  # a worker process only validates: no need to restore


def _check_file(path: str) -> Report | UsageError:
    name = "<stdin>" if path == "-" else path
    try:
        text = read_input(path)
    except UsageError as exc:
        return exc
    except InputTooLarge:
        return _too_large(name)
    return check_text(text, file=name, profile=_WORKER["profile"], configmaps=_WORKER["cms"], config=_WORKER["config"], is_json=path.endswith(".json"))


def validate_paths(
    paths: Iterable[str],
    *,
    profile: str = "baseline",
    config: Config | None = None,
    jobs: int | None = None,
    stdin_text: str | None = None,
    cluster: ReferenceReader | None = None,
    namespace: str | None = None,
) -> Report:
    """Validate files, folders and standard input.

    Args:
        paths: files, folders (recursive) or ``-``.
        profile: ``baseline`` or ``strict``.
        config: repository configuration.
        jobs: worker processes; default: every core, when there are enough files.
        stdin_text: the text of ``-`` if already read (otherwise read from ``sys.stdin``).
        cluster: read the references the input lacks (runtimes, ConfigMaps) from it
            (``validate --cluster``, :mod:`.fromcluster`); ``None``: the input alone.
        namespace: the namespace objects without one are applied to (with ``cluster``: the
            context's or ``-n``); ``None``: unknown.

    Raises:
        UsageError: a missing or unreadable path.
        ClusterError: with ``cluster``, a read failed (forbidden, unreachable).
    """
    check_profile(profile)
    files = expand_paths(paths)
    if config is not None:
        files = [f for f in files if f == "-" or not config.excluded(f)]
    files = list(dict.fromkeys(files))  # `validate - -` or a file named twice is read once
    texts: dict[str, str] = {}
    stdin_too_large = False
    if "-" in files:
        try:
            texts["-"] = stdin_text if stdin_text is not None else read_input("-")
        except InputTooLarge:
            texts["-"] = ""
            stdin_too_large = True
        if not stdin_too_large and not texts["-"].strip():
            # A pre-commit hook piping a failed `kubectl kustomize` must fail, not pass an empty check.
            raise UsageError("-: no input on standard input (did the command before the pipe fail?)")
    cms = new_index(default_namespace=namespace)
    hints = _index_hints()
    # With a cluster every file is parsed here too: the references of every workload are needed.
    everything: list[Any] = []
    for path in files:
        if cluster is not None:
            try:
                text = texts["-"] if path == "-" else read_input(path)
            except InputTooLarge:
                continue  # reported when the file itself is checked
            docs, _ = load_documents(text, is_json=path.endswith(".json"))
            everything.extend(d.data for d in docs)
            collect_configmaps(text, cms, is_json=path.endswith(".json"))
            continue
        if path == "-":
            if any(h.decode() in texts["-"] for h in hints):
                collect_configmaps(texts["-"], cms)
            continue
        # Only files that mention ConfigMap are decoded and parsed here; the rest only by their
        # worker. (Looking at the bytes: decoding every file twice cost a tenth of the run.)
        try:
            data = _read_bytes(path)
        except InputTooLarge:
            continue  # reported when the file itself is checked
        if any(h in data for h in hints) or data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # or UTF-16: look after decoding
            collect_configmaps(decode(data), cms, is_json=path.endswith(".json"))
    if cluster is not None:
        resolve_from_cluster(cluster, everything, cms, namespace or "default")
    jobs = jobs or _cores()
    report = Report()
    disk_files = [f for f in files if f != "-"]
    if jobs > 1 and len(disk_files) >= PARALLEL_MIN_FILES:
        chunk = max(1, min(256, len(disk_files) // (jobs * 8)))
        with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(profile, cms, config)) as pool:
            results = dict(zip(disk_files, pool.map(_check_file, disk_files, chunksize=chunk), strict=True))
    else:
        with _gc_tuned():
            _WORKER.update(profile=profile, cms=cms, config=config)
            results = {f: _check_file(f) for f in disk_files}
    for path in files:
        if path == "-" and stdin_too_large:
            result: Report | UsageError = _too_large("<stdin>")
        elif path == "-":
            result = check_text(texts["-"], file="<stdin>", profile=profile, configmaps=cms, config=config)
        else:
            result = results[path]
        if isinstance(result, UsageError):
            raise result
        report.merge(result)
    return report


def validate_objects(
    objects: Iterable[Mapping[str, Any]],
    *,
    file: str = "<input>",
    profile: str = "baseline",
    configmaps: Iterable[Mapping[str, Any]] = (),
    namespace: str | None = None,
    references: Iterable[Mapping[str, Any]] = (),
) -> Report:
    """Validate already-parsed objects (``submit``, the admission webhook).

    Args:
        objects: Kubernetes objects; ConfigMaps among them resolve ``envFrom``/``valueFrom`` too.
        file: the name reported in findings (no line numbers: there is no text).
        profile: ``baseline`` or ``strict``.
        configmaps: extra ConfigMaps (read from the cluster, say).
        namespace: the namespace objects without one are applied to.
        references: objects the checked ones refer to (training runtimes read from a cluster, or
            in another file of the same ``submit``): indexed for resolution, not checked themselves.
    """
    check_profile(profile)
    objs: list[Any] = list(objects)
    report = Report(files=1, documents=sum(1 for o in objs if o is not None))
    # Objects parsed by the caller (PyYAML shares aliased nodes) may be alias bombs or cycles:
    # walking one would never end, so they are refused before any check (KDP003).
    for i, obj in enumerate(objs):
        problem = alias_problem(obj)
        if problem:
            report.findings.append(Finding("KDP003", RULES["KDP003"].severity, problem, file, document=i))
            objs[i] = None
    # kind: List items are objects of their own, as in files (``_objects``).
    flat = list(_objects(Document(i, obj) for i, obj in enumerate(objs)))
    index = new_index(default_namespace=namespace)
    for cm in configmaps:
        ConfigMapIndex.add(index, cm)  # the caller's ConfigMaps (read from a cluster) may lack apiVersion and kind
    for o in [*references, *(o for _, _, o in flat)]:
        if index.wants(o):
            index.add(o)
    _Checker(report, file, profile, index, None, None, namespace).run(flat)
    return report
