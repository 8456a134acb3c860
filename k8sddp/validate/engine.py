"""Validate manifests: files, folders, text or objects, on every core.

One file is the unit of work. ConfigMaps anywhere in the input resolve the PyTorchJobs' ``envFrom``
and ``valueFrom`` (as ``kubectl apply -f DIR`` would create them all), so files that mention
``ConfigMap`` are read first, in this process, and their ConfigMaps are handed to the workers.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from ..catalogue import PROFILES, RULES
from ..errors import UsageError
from ..findings import Finding, Report
from .checks import check_guardrails, check_structure
from .envresolve import ConfigMapIndex
from .exemptions import Config, annotation_exemptions
from .rawfinding import RawFinding, json_path
from .yamlio import Locator, load_documents

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
PYTORCHJOB_API = "kubeflow.org/v1"
#: Below this many files the process pool costs more than it saves.
PARALLEL_MIN_FILES = 64
_CONFIGMAP_HINT = re.compile(r"ConfigMap")


def _object_ref(obj: Mapping[str, Any]) -> str:
    meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name") or meta.get("generateName") or "?"
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{ns + '/' if ns else ''}{name}"


def _objects(docs: Iterable[Any]) -> Iterable[tuple[int, tuple[Any, ...], Any]]:
    """(document index, path prefix, object) for every object, ``kind: List`` items expanded."""
    for doc in docs:
        data = doc.data
        if isinstance(data, Mapping) and data.get("kind") == "List" and isinstance(data.get("items"), list):
            for i, item in enumerate(data["items"]):
                yield doc.index, ("items", i), item
        elif data is not None:
            yield doc.index, (), data


def collect_configmaps(text: str, cms: ConfigMapIndex, *, is_json: bool = False) -> None:
    """Add the ConfigMaps of a manifest text to ``cms`` (unreadable documents are skipped here;
    they are reported when the file itself is checked)."""
    docs, _ = load_documents(text, is_json=is_json)
    for _, _, obj in _objects(docs):
        if isinstance(obj, Mapping) and obj.get("kind") == "ConfigMap" and obj.get("apiVersion") == "v1":
            cms.add(obj)


def check_text(
    text: str,
    *,
    file: str,
    profile: str = "baseline",
    configmaps: ConfigMapIndex | None = None,
    config: Config | None = None,
    is_json: bool | None = None,
) -> Report:
    """Validate one file's content.

    Args:
        text: YAML (one or more documents) or JSON.
        file: the name reported in findings.
        profile: ``baseline`` or ``strict`` (:data:`k8sddp.catalogue.PROFILES`).
        configmaps: ConfigMaps of the whole input; ``None``: the ConfigMaps of this text only.
        config: repository configuration (path exemptions), if any.
        is_json: parse as JSON; default: by the file's suffix.

    Returns:
        The file's :class:`Report`.
    """
    if is_json is None:
        is_json = file.endswith(".json")
    report = Report(files=1)
    docs, problems = load_documents(text, is_json=is_json)
    locator = Locator(text)
    for p in problems:
        report.findings.append(Finding(p.rule_id, RULES[p.rule_id].severity, p.message, file, p.line, p.column, "", p.index))
    if configmaps is None:
        configmaps = ConfigMapIndex()
        collect_configmaps(text, configmaps, is_json=is_json)
    report.documents += sum(1 for d in docs if d.data is not None)
    for index, prefix, obj in _objects(docs):
        if not isinstance(obj, Mapping) or not obj.get("apiVersion") or not obj.get("kind"):
            line, col = locator.locate(index, prefix)
            what = "a mapping" if isinstance(obj, Mapping) else type(obj).__name__
            report.findings.append(
                Finding("KDP004", RULES["KDP004"].severity, f"not a Kubernetes object: {what} without apiVersion and kind", file, line, col, json_path(prefix), index)
            )
            continue
        kind = str(obj.get("kind"))
        if kind != "PyTorchJob":
            report.skipped[kind] += 1
            continue
        report.checked += 1
        raw = _check_job(obj, profile, configmaps)
        granted, problems_ = annotation_exemptions(obj)
        raw = problems_ + raw
        ref = _object_ref(obj)
        for rf in raw:
            rule = RULES[rf.rule_id]
            exempted = granted.get(rf.rule_id, "") or (config.exempted(file, rf.rule_id) if config else "")
            line, col = locator.locate(index, prefix + rf.path)
            report.findings.append(
                Finding(rf.rule_id, rule.severity, rf.message, file, line, col, json_path(prefix + rf.path), index, ref, exempted)
            )
    return report


def _check_job(obj: Mapping[str, Any], profile: str, cms: ConfigMapIndex) -> list[RawFinding]:
    if obj.get("apiVersion") != PYTORCHJOB_API:
        return [RawFinding("KDP101", ("apiVersion",), f"apiVersion {obj.get('apiVersion')!r} is not served for PyTorchJob; expected {PYTORCHJOB_API!r}")]
    meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    return check_structure(obj) + check_guardrails(obj, profile, cms, namespace)


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
    (sorted, hidden folders skipped), ``-`` for standard input.

    Raises:
        UsageError: a path that does not exist.
    """
    out: list[str] = []
    for path in paths:
        if path == "-":
            out.append(path)
        elif os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [os.path.join(root, f) for f in files if f.endswith(MANIFEST_SUFFIXES)]
            out += sorted(found)
        elif os.path.exists(path):
            out.append(path)
        else:
            raise UsageError(f"{path}: no such file or directory")
    return out


def read_input(path: str) -> str:
    """The text of ``path`` (``-``: standard input).

    Raises:
        UsageError: unreadable (permission, a folder, ...).
    """
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as fh:
                data = fh.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return data.decode("utf-8", errors="replace")


_WORKER: dict[str, Any] = {}


def _init_worker(profile: str, cms: ConfigMapIndex, config: Config | None) -> None:
    _WORKER.update(profile=profile, cms=cms, config=config)


def _check_file(path: str) -> Report | UsageError:
    try:
        text = read_input(path)
    except UsageError as exc:
        return exc
    name = "<stdin>" if path == "-" else path
    return check_text(text, file=name, profile=_WORKER["profile"], configmaps=_WORKER["cms"], config=_WORKER["config"], is_json=path.endswith(".json"))


def validate_paths(
    paths: Iterable[str],
    *,
    profile: str = "baseline",
    config: Config | None = None,
    jobs: int | None = None,
    stdin_text: str | None = None,
) -> Report:
    """Validate files, folders and standard input.

    Args:
        paths: files, folders (recursive) or ``-``.
        profile: ``baseline`` or ``strict``.
        config: repository configuration.
        jobs: worker processes; default: every core, when there are enough files.
        stdin_text: the text of ``-`` if already read (otherwise read from ``sys.stdin``).

    Raises:
        UsageError: a missing or unreadable path.
    """
    check_profile(profile)
    files = expand_paths(paths)
    texts: dict[str, str] = {}
    if "-" in files:
        texts["-"] = stdin_text if stdin_text is not None else read_input("-")
    cms = ConfigMapIndex()
    for path in files:
        text = texts.get(path)
        if text is None:
            # Only files that mention ConfigMap are parsed here; the rest only by their worker.
            text = read_input(path)
            if not _CONFIGMAP_HINT.search(text):
                continue
        elif not _CONFIGMAP_HINT.search(text):
            continue
        collect_configmaps(text, cms, is_json=path.endswith(".json"))
    jobs = jobs or os.cpu_count() or 1
    report = Report()
    disk_files = [f for f in files if f != "-"]
    if jobs > 1 and len(disk_files) >= PARALLEL_MIN_FILES:
        chunk = max(1, min(256, len(disk_files) // (jobs * 8)))
        with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(profile, cms, config)) as pool:
            results = dict(zip(disk_files, pool.map(_check_file, disk_files, chunksize=chunk), strict=True))
    else:
        _init_worker(profile, cms, config)
        results = {f: _check_file(f) for f in disk_files}
    for path in files:
        if path == "-":
            result: Report | UsageError = check_text(texts["-"], file="<stdin>", profile=profile, configmaps=cms, config=config)
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
) -> Report:
    """Validate already-parsed objects (``submit``, the admission webhook).

    Args:
        objects: Kubernetes objects; ConfigMaps among them resolve ``envFrom``/``valueFrom`` too.
        file: the name reported in findings (no line numbers: there is no text).
        profile: ``baseline`` or ``strict``.
        configmaps: extra ConfigMaps (read from the cluster, say).
        namespace: the namespace objects without one are applied to.
    """
    check_profile(profile)
    objects = list(objects)
    cms = ConfigMapIndex(default_namespace=namespace)
    for cm in list(configmaps) + [o for o in objects if isinstance(o, Mapping) and o.get("kind") == "ConfigMap"]:
        cms.add(cm)
    report = Report(files=1, documents=len(objects))
    for i, obj in enumerate(objects):
        if not isinstance(obj, Mapping) or not obj.get("apiVersion") or not obj.get("kind"):
            report.findings.append(Finding("KDP004", RULES["KDP004"].severity, "not a Kubernetes object: no apiVersion and kind", file, document=i))
            continue
        if obj.get("kind") != "PyTorchJob":
            report.skipped[str(obj.get("kind"))] += 1
            continue
        report.checked += 1
        meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
        ns = meta.get("namespace") or namespace
        raw = (
            [RawFinding("KDP101", ("apiVersion",), f"apiVersion {obj.get('apiVersion')!r} is not served for PyTorchJob; expected {PYTORCHJOB_API!r}")]
            if obj.get("apiVersion") != PYTORCHJOB_API
            else check_structure(obj) + check_guardrails(obj, profile, cms, ns)
        )
        granted, problems = annotation_exemptions(obj)
        for rf in problems + raw:
            report.findings.append(
                Finding(rf.rule_id, RULES[rf.rule_id].severity, rf.message, file, 0, 0, json_path(rf.path), i, _object_ref(obj), granted.get(rf.rule_id, ""))
            )
    return report
