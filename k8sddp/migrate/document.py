"""A whole manifest file through migrate: split into documents, convert each PyTorchJob, pass the
rest through as written, put each runtime before the first TrainJob that refers to it, and check
the result with ``k8sddp validate`` (and the schemas behind it: the v2.3.0 CRDs).

Documents are split on their ``---`` / ``...`` marker lines (a marker at column 0 ends a block
scalar too, YAML 1.2 section 9.1.4), so an object that is not a PyTorchJob keeps its exact text.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import re
from typing import Any, cast

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from ..errors import UsageError
from ..render.trainer import DEFAULT_RUNTIME, RUNTIME_ARTIFACT_CLAIM
from ..schemagen_trainer import TRAINER_GROUP
from ..validate import validate_objects
from ..validate.templates import GO_ACTION, go_action_line, helm_message
from .convert import INFO, LOST, STOCK_RUNTIME, CannotMigrate, Note, convert_job, plain

__all__ = ["ERROR", "MigrateResult", "Notice", "migrate_text", "stock_runtime"]

ERROR = "error"
_MARKER = re.compile(r"(---|\.\.\.)(\s|$)")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclasses.dataclass(frozen=True)
class Notice:
    """One line of migrate's report: ``FILE:LINE: LEVEL: PATH: MESSAGE`` (:class:`Note` plus the job).

    Attributes:
        job: the PyTorchJob's name ('' for the file as a whole).
        note: the note (``level`` ``info``, ``lost`` or ``error``).
    """

    job: str
    note: Note

    def format(self, file: str) -> str:
        """The note as one located line."""
        where = f"{file}:{self.note.line}" if self.note.line else file
        job = f"PyTorchJob {self.job}: " if self.job else ""
        return f"{where}: {self.note.level}: {job}{self.note.path + ': ' if self.note.path else ''}{self.note.message}"


@dataclasses.dataclass
class MigrateResult:
    """What :func:`migrate_text` made of a file.

    Attributes:
        text: the migrated manifest, or None when a job could not be migrated (nothing to write).
        notices: every note, in input order per job.
        jobs: how many PyTorchJobs were migrated.
    """

    text: str | None
    notices: list[Notice]
    jobs: int

    @property
    def exit_code(self) -> int:
        """0 when every job was migrated faithfully; 1 when something was lost or failed (CONTRACT: findings)."""
        return 1 if self.text is None or any(n.note.level != INFO for n in self.notices) else 0


def stock_runtime() -> dict[str, Any]:
    """The shape of Trainer v2.3.0's stock ``torch-distributed`` ClusterTrainingRuntime
    (manifests/base/runtimes/torch_distributed.yaml: torch policy, one ``node`` container, no
    guards), written here to check a TrainJob that refers to it; tests compare it with the file."""
    node = {"name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}
    rjob = {"name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                         "spec": {"template": {"spec": {"containers": [node]}}}}}
    return {"apiVersion": f"{TRAINER_GROUP}/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": STOCK_RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [rjob]}}}}


@functools.lru_cache(maxsize=8)
def _rendered_runtime(name: str, options: tuple[tuple[str, Any], ...]) -> str:
    from ..render import render_runtime

    return json.dumps(render_runtime(name=name, **dict(options)).objects[0])


@functools.lru_cache(maxsize=8)
def _guarded_runtime_yaml(name: str, options: tuple[tuple[str, Any], ...]) -> str:
    return _dump(_to_rt(_guarded_runtime(name, options)))


def _guarded_runtime(name: str, options: tuple[tuple[str, Any], ...] = ()) -> dict[str, Any]:
    """The shared runtime of ``k8sddp runtime render --name NAME`` with ``options`` (rendered and checked once)."""
    return cast("dict[str, Any]", json.loads(_rendered_runtime(name, options)))


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def _chunks(text: str) -> list[tuple[int, str]]:
    """``(0-based first line, text)`` of each document, split at its marker lines."""
    lines = text.splitlines(keepends=True)
    chunks: list[tuple[int, str]] = []
    start = 0
    for i, line in enumerate(lines):
        if line.startswith("---") and _MARKER.match(line) and i > start:
            chunks.append((start, "".join(lines[start:i])))
            start = i
    chunks.append((start, "".join(lines[start:])))
    return chunks


def _to_rt(value: Any) -> Any:
    """Plain data as round-trip nodes; an all-integer list (exit codes) in flow style."""
    if isinstance(value, dict):
        return CommentedMap((k, _to_rt(v)) for k, v in value.items())
    if isinstance(value, list):
        seq = CommentedSeq(_to_rt(v) for v in value)
        if value and all(isinstance(v, int) for v in value):
            seq.fa.set_flow_style()
        return seq
    return value


def _dump(node: Any) -> str:
    out = io.StringIO()
    _yaml().dump(node, out)
    return out.getvalue()


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _comment(text: str) -> str:
    """``text`` as one YAML comment line: no line break (or other control character) from a value
    of the input can end the comment and add YAML of its own."""
    return "# " + _CONTROL.sub(" ", text) + "\n"


def _is_pytorchjob(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == "PyTorchJob"


def _passes(mine: list[dict[str, Any]], companions: list[dict[str, Any]], profile: str) -> list[str]:
    """The failing findings of ``mine`` (validated with ``companions`` in the input), one line each."""
    report = validate_objects([*companions, *mine], file="<migrated>", profile=profile)
    return [f"{f.rule_id} {f.path}: {f.message}" for f in report.failing() if f.document >= len(companions)]


def migrate_text(text: str, file: str = "<stdin>", *, runtime_name: str = DEFAULT_RUNTIME, stock: bool = False,
                 include_runtime: bool = True, runtime_options: dict[str, Any] | None = None) -> MigrateResult:
    """Migrate every ``kubeflow.org/v1`` PyTorchJob of a manifest text.

    Args:
        text: YAML documents.
        file: the name used in notes.
        runtime_name: the guarded ClusterTrainingRuntime the TrainJobs refer to (and the prefix of a
            job's own TrainingRuntime).
        stock: refer to Trainer's stock ``torch-distributed`` runtime (no guards) instead.
        include_runtime: write the shared guarded runtime into the output (once, before the first
            TrainJob); without it the output relies on the one installed in the cluster.
        runtime_options: options of the guarded runtimes (:func:`k8sddp.render.trainer.runtime_context`:
            ``artifact_claim``, ``artifact_mount``, ``shm_size``, ``max_restarts``, ``torch_version``).

    Returns:
        the result; its ``exit_code`` is 1 when a job could not be migrated, something has no v2
        equivalent, or the output fails ``validate`` (baseline; strict when the job passed strict).

    Raises:
        UsageError: the text has no PyTorchJob at all.
        SpecError: an unusable runtime option (a relative mount path, ``max_restarts`` < 1).
    """
    options = tuple(sorted((runtime_options or {}).items()))
    loaded: list[tuple[int, str, Any]] = []
    as_read: list[Any] = []  # each document as validate and the API server read it (YAML 1.1, PyYAML)
    for first, chunk in _chunks(text):
        try:
            loaded.append((first, chunk, _yaml().load(chunk)))
            as_read.append(yaml.load(chunk, Loader=_LOADER))  # noqa: S506 (a safe loader)
        except (YAMLError, yaml.YAMLError) as exc:
            action = go_action_line(text)
            if action is not None:  # an unrendered Helm chart template: said as validate says it (KDP010)
                more = sum(len(GO_ACTION.findall(t)) for t in text.splitlines() if not t.lstrip().startswith("#")) - 1
                message = helm_message(action[2], more).replace("check the output: `helm template RELEASE CHART | k8sddp "
                                                                "validate -`", "migrate the output: `helm template "
                                                                "RELEASE CHART | k8sddp migrate -`")
                return MigrateResult(None, [Notice("", Note(action[0], "", message, ERROR))], 0)
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            position = getattr(exc, "position", None)  # a ReaderError (a control character) has an offset, no mark
            if mark is not None:
                line = first + mark.line + 1
            elif isinstance(position, int):
                line = first + chunk.count("\n", 0, position) + 1
            else:
                line = first + 1
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            return MigrateResult(None, [Notice("", Note(line, "", f"not valid YAML: {problem}", ERROR))], 0)
    if not any(_is_pytorchjob(data) for _, _, data in loaded):
        listed = any(isinstance(d, dict) and d.get("kind") == "List" and isinstance(d.get("items"), list)
                     and any(_is_pytorchjob(i) for i in d["items"]) for d in as_read)
        hint = (" (its PyTorchJobs are items of a List, as `kubectl get pytorchjobs -o yaml` writes: export each job "
                "alone, `kubectl get pytorchjob NAME -o yaml`, or put each item in a document of its own)") if listed else ""
        raise UsageError(f"{file}: no PyTorchJob (kubeflow.org/v1) to migrate{hint}")
    others = [d for (_, _, rt), d in zip(loaded, as_read, strict=True) if isinstance(d, dict) and not _is_pytorchjob(rt)]
    shared = None if stock else _guarded_runtime(runtime_name, options)
    # The input's own ClusterTrainingRuntime of that name (a platform team's, `runtime render` output):
    # used as it is; a second copy after it would replace it on `kubectl apply`.
    given = next((d for d in others if d.get("kind") == "ClusterTrainingRuntime" and d.get("apiVersion") == f"{TRAINER_GROUP}/v1alpha1"
                  and isinstance(d.get("metadata"), dict) and d["metadata"].get("name") == runtime_name), None)
    if shared is not None and given is not None:
        shared, include_runtime = given, False
    pieces: list[str] = []
    notices: list[Notice] = []
    shared_written, failed, jobs = False, False, 0
    for (first, chunk, data), source in zip(loaded, as_read, strict=True):
        if not _is_pytorchjob(data):
            pieces.append(chunk)
            continue
        name = str(data.get("metadata", {}).get("name", "")) if isinstance(data.get("metadata"), dict) else ""
        if data.get("apiVersion") != "kubeflow.org/v1":
            notices.append(Notice(name, Note(first + 1, "apiVersion", f"{data.get('apiVersion')!r}: only kubeflow.org/v1 PyTorchJobs can be migrated", ERROR)))
            failed = True
            continue
        strict = not _passes([source], others, "strict")
        try:
            migrated = convert_job(data, first_line=first, runtime_name=runtime_name, stock=stock, runtime_options=dict(options))
        except CannotMigrate as exc:
            notices.append(Notice(name, Note(exc.line, exc.path, f"cannot migrate: {exc.message}", ERROR)))
            failed = True
            continue
        jobs += 1
        job_notes = [Notice(name, n) for n in migrated.notes]
        if not stock:
            claim = dict(options).get("artifact_claim", RUNTIME_ARTIFACT_CLAIM)
            where = data["metadata"].get("namespace") or "the job's namespace"
            job_notes.append(Notice(name, Note(None, "", f"the guarded runtime {migrated.runtime_ref[1]} adds a memory-backed "
                                               f"/dev/shm and mounts the PersistentVolumeClaim {claim} (artifacts: traces, "
                                               f"flight-recorder dumps): it must exist in {where} (--artifact-claim)")))
        texts: list[str] = []
        runtime = migrated.runtime or (stock_runtime() if stock else shared)
        if migrated.runtime is not None:
            texts.append(_dump(_to_rt(migrated.runtime)))
        elif shared is not None and include_runtime and not shared_written:
            texts.append(_guarded_runtime_yaml(runtime_name, options))
            shared_written = True
        body = _dump(migrated.trainjob)
        body += "" if body.endswith("\n") else "\n"
        profile = "strict" if strict else "baseline"
        for problem in _passes([yaml.safe_load(body)], [*others, plain(runtime)], profile):
            job_notes.append(Notice(name, Note(None, "", f"the TrainJob fails validate ({profile}): {problem}", LOST)))
        lost = [n for n in job_notes if n.note.level == LOST]
        header = _comment(f"Migrated by `k8sddp migrate` from the PyTorchJob {name} (kubeflow.org/v1).")
        header += "".join(_comment(f"k8sddp migrate: lost: {n.note.path}: {n.note.message}") for n in lost)
        texts.append(header + body)
        if pieces and not pieces[-1].endswith("\n"):
            pieces[-1] += "\n"
        pieces.extend(("" if not pieces and i == 0 and not chunk.startswith("---") else "---\n") + t for i, t in enumerate(texts))
        notices.extend(job_notes)
    return MigrateResult(None if failed else "".join(pieces), notices, jobs)
