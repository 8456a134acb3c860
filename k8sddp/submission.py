"""What ``submit`` hands to a cluster or to the local runner: inputs read, specs rendered,
everything validated with the same code as ``k8sddp validate``.

An input is a DDPJob spec (its ``apiVersion`` in the ``k8sddp`` group, or ``kind: DDPJob``),
rendered with :func:`k8sddp.render.render_spec`, or rendered manifests (YAML, multi-document,
``kind: List``, or JSON). Objects of the kinds whose ``submit_role`` is ``job`` (PyTorchJob,
TrainJob) are what gets submitted; those whose role is ``runtime`` (TrainingRuntime,
ClusterTrainingRuntime) are applied before them; other registered kinds are validated but not
created; ConfigMaps in the input (and, for a cluster, the ones read from it) resolve env during
validation; other kinds are ignored.
No flag skips validation: failing findings raise :class:`k8sddp.errors.ValidationError` (exit 1).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from .configrefs import is_configmap, is_workload
from .errors import UsageError, ValidationError
from .findings import Report

__all__ = ["Submission", "load_inputs", "validate_submission"]


@dataclasses.dataclass
class Submission:
    """The objects of one ``submit`` run.

    Attributes:
        jobs: the jobs (PyTorchJobs, TrainJobs), in input order.
        configmaps: ConfigMaps from the input.
        other: ignored objects' ``kind/name`` (reported, not submitted).
        sources: per job, the file it came from (``<stdin>`` for ``-``).
        report: the validation report, once validated.
        runtimes: training runtimes of the input (applied before the jobs), with their files.
        checked: other objects of registered kinds (validated with the jobs, not created), with their files.
    """

    jobs: list[dict[str, Any]]
    configmaps: list[dict[str, Any]]
    other: list[str]
    sources: list[str]
    report: Report | None = None
    runtimes: list[tuple[dict[str, Any], str]] = dataclasses.field(default_factory=list)
    checked: list[tuple[dict[str, Any], str]] = dataclasses.field(default_factory=list)


def _is_spec(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    api = str(doc.get("apiVersion", ""))
    return doc.get("kind") == "DDPJob" or api.split("/")[0].startswith("k8sddp")


def _read(path: str) -> str:
    if path == "-":
        text = sys.stdin.read()
        if not text.strip():
            raise UsageError("-: no input on standard input (did the command before the pipe fail?)")
        return text
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; give the manifest or spec files") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None


class _ApiServerLoader(yaml.SafeLoader):
    """SafeLoader that keeps a plain timestamp (2024-01-01) a string, as the API server's YAML
    decoder does (go-yaml v2 into interface{}); a date object would crash the schema validator."""


def _timestamp_as_str(loader: _ApiServerLoader, node: yaml.Node) -> str:
    return str(node.value)


_ApiServerLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_str)


def _documents(text: str) -> list[Any]:
    docs: list[Any] = []
    for doc in yaml.load_all(text, Loader=_ApiServerLoader):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            docs.extend(doc["items"])
        else:
            docs.append(doc)
    return docs


def load_inputs(paths: Sequence[str], *, sets: Sequence[str] = (), profile: str = "baseline") -> Submission:
    """Read every input, rendering specs.

    Args:
        paths: files, or ``-`` for standard input (once).
        sets: ``--set PATH=VALUE`` overrides for specs.
        profile: validation profile, used only to report an unparseable manifest as a finding.

    Raises:
        UsageError: a missing or unreadable file (exit 2).
        SpecError: a spec that cannot be rendered (exit 1).
        ValidationError: an input that is not YAML (exit 1, with the located finding).
    """
    from . import kinds

    jobs: list[dict[str, Any]] = []
    configmaps: list[dict[str, Any]] = []
    other: list[str] = []
    sources: list[str] = []
    runtimes: list[tuple[dict[str, Any], str]] = []
    checked: list[tuple[dict[str, Any], str]] = []
    for path in paths:
        text = _read(path)
        name = "<stdin>" if path == "-" else path
        try:
            docs = _documents(text)
        except yaml.YAMLError:
            from .validate import validate_text

            report = validate_text(text, file=name, profile=profile)
            raise ValidationError(f"{name} is not valid YAML", report.findings) from None
        if any(_is_spec(d) for d in docs):
            docs = _render(path, text, sets)
        elif sets:
            raise UsageError(f"{name}: --set applies to DDPJob specs, and this is a manifest")
        for doc in docs:
            kind = kinds.lookup(doc.get("apiVersion"), doc.get("kind")) if is_workload(doc) else None
            if kind is not None and kind.submit_role == "job":
                jobs.append(doc)
                sources.append(name)
            elif kind is not None and kind.submit_role == "runtime":
                runtimes.append((doc, name))
            elif kind is not None:
                checked.append((doc, name))
            elif is_configmap(doc):
                configmaps.append(doc)
            elif isinstance(doc, dict):
                other.append(f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}")
            else:
                from .validate import validate_text

                report = validate_text(text, file=name, profile=profile)
                raise ValidationError(f"{name} holds a document that is not a Kubernetes object", report.findings)
    if not jobs:
        names = " or ".join(k.kind for k in kinds.job_kinds().values())
        raise UsageError(f"no {names} in the input: give a DDPJob spec or a rendered {names} manifest")
    return Submission(jobs=jobs, configmaps=configmaps, other=other, sources=sources, runtimes=runtimes, checked=checked)


def _render(path: str, text: str, sets: Sequence[str]) -> list[Any]:
    """Render a DDPJob spec (from ``path``; standard input's text goes through a temporary file,
    since it has been read already).

    Raises:
        UsageError, SpecError: as :func:`k8sddp.render.load_spec` and ``render_spec``.
    """
    import os
    import tempfile

    from .render import load_spec, render_spec

    if path != "-":
        return [dict(o) for o in render_spec(load_spec(path, sets=tuple(sets))).objects]
    fd, tmp = tempfile.mkstemp(suffix=".yaml", prefix="k8sddp-spec-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return [dict(o) for o in render_spec(load_spec(tmp, sets=tuple(sets))).objects]
    finally:
        os.unlink(tmp)


Validator = Callable[..., Report]


def validate_submission(
    sub: Submission,
    *,
    profile: str,
    namespace: str,
    extra_configmaps: Sequence[dict[str, Any]] = (),
    validator: Validator | None = None,
    cluster_runtimes: Sequence[dict[str, Any]] = (),
) -> Report:
    """Validate every job, runtime and other object of a registered kind with the input's
    ConfigMaps plus ``extra_configmaps`` (and the runtimes read from the cluster).

    Args:
        sub: the loaded input.
        profile: ``baseline`` or ``strict``.
        namespace: the namespace objects without one will be applied to.
        extra_configmaps: ConfigMaps read from the cluster.
        validator: ``validate_objects`` (default: :func:`k8sddp.validate.validate_objects`).
        cluster_runtimes: training runtimes the jobs refer to, read from the cluster: they resolve
            the TrainJobs' trainer containers (a reference, not checked themselves).

    Returns:
        The merged report (also stored in ``sub.report``).

    Raises:
        ValidationError: the report has failing findings; nothing may be submitted (exit 1).
    """
    if validator is None:
        from .validate import validate_objects

        validator = validate_objects
    report = Report()
    cms = list(sub.configmaps) + list(extra_configmaps)
    by_file: dict[str, list[dict[str, Any]]] = {}
    for job, src in [*zip(sub.jobs, sub.sources, strict=True), *sub.runtimes, *sub.checked]:
        by_file.setdefault(src, []).append(job)
    # a job may refer to a runtime of another file: every file's check sees every runtime
    runtimes = [r for r, _ in sub.runtimes] + list(cluster_runtimes)
    for src, objs in by_file.items():
        refs = [r for r in runtimes if not any(r is o for o in objs)]
        kwargs: dict[str, Any] = {"references": refs} if refs else {}
        report.merge(validator(objs, file=src, profile=profile, configmaps=cms, namespace=namespace, **kwargs))
    sub.report = report
    failing = report.failing()
    if failing:
        exc = ValidationError(
            f"refused by the guardrails ({profile} profile): {len(failing)} finding(s); nothing was submitted",
            report.findings,
        )
        exc.report = report  # type: ignore[attr-defined]
        raise exc
    return report
