"""The findings model every checker (validate, lint, webhook) returns and every reporter prints.

A :class:`Finding` is one violation of one catalogue rule at one place; a :class:`Report` is the
outcome of one run over many inputs, with counts of what was checked and skipped. A
:class:`RawFinding` is a finding inside one object before the engine places it in a file (what
the workload kinds' checks return).
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from typing import Any

__all__ = ["Finding", "RawFinding", "Report", "Severity", "json_path"]


class Severity(str, enum.Enum):
    """How bad a finding is. ``error`` fails a run by default; ``warning`` only with
    ``--fail-on warning``; ``info`` never (exemptions are reported as ``info``)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Ordering key: error 2, warning 1, info 0."""
        return {"error": 2, "warning": 1, "info": 0}[self.value]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One violation of one rule.

    Attributes:
        rule_id: catalogue id (``KDP201``); see :mod:`k8sddp.catalogue`.
        severity: the rule's severity (or ``info`` when exempted).
        message: names what is missing or wrong and the value expected.
        file: input name as given (``<stdin>`` for standard input).
        line: 1-based line, 0 when unknown.
        column: 1-based column, 0 when unknown.
        path: JSON path inside the document (``spec.pytorchReplicaSpecs.Worker.template``);
            empty for file-level findings.
        document: 0-based index of the YAML document in its file (-1 for file-level findings).
        object_ref: ``Kind/namespace/name`` of the object, empty if not an object; an object inside a
            wrapper is named after it: ``AppWrapper/ml/aw:PyTorchJob/ml/train``.
        exempted_by: the exemption that silenced it (annotation or config), empty if none.
    """

    rule_id: str
    severity: Severity
    message: str
    file: str = ""
    line: int = 0
    column: int = 0
    path: str = ""
    document: int = -1
    object_ref: str = ""
    exempted_by: str = ""

    def location(self) -> str:
        """``file:line:column`` (parts left out when unknown)."""
        out = self.file or "<input>"
        if self.line:
            out += f":{self.line}"
            if self.column:
                out += f":{self.column}"
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (severity as its string value)."""
        data = dataclasses.asdict(self)
        data["severity"] = self.severity.value
        return data


@dataclasses.dataclass
class Report:
    """The outcome of checking many inputs.

    Attributes:
        findings: every finding, exempted ones included (as ``info``), in input order.
        files: number of files (or streams) read.
        documents: number of non-empty YAML/JSON documents read.
        checked: objects fully checked (PyTorchJobs for validate, Python files for lint).
        skipped: objects skipped, by kind (``{"Service": 3}``).
    """

    findings: list[Finding] = dataclasses.field(default_factory=list)
    files: int = 0
    documents: int = 0
    checked: int = 0
    skipped: Counter[str] = dataclasses.field(default_factory=Counter)

    def merge(self, other: Report) -> None:
        """Add ``other``'s findings and counts to this report (in place)."""
        self.findings.extend(other.findings)
        self.files += other.files
        self.documents += other.documents
        self.checked += other.checked
        self.skipped.update(other.skipped)

    def failing(self, fail_on: Severity = Severity.ERROR) -> list[Finding]:
        """Findings at or above ``fail_on`` that are not exempted."""
        return [
            f
            for f in self.findings
            if not f.exempted_by and f.severity.rank >= fail_on.rank and f.severity is not Severity.INFO
        ]

    def exit_code(self, fail_on: Severity = Severity.ERROR) -> int:
        """0 when nothing fails at ``fail_on``, else 1 (``../shared/CONTRACT.md``)."""
        return 1 if self.failing(fail_on) else 0


@dataclasses.dataclass(frozen=True)
class RawFinding:
    """One rule violation inside one object.

    Attributes:
        rule_id: catalogue id.
        path: keys and list indices from the object's root (``("spec", "runPolicy")``).
        message: names what is missing or wrong and the value expected.
    """

    rule_id: str
    path: tuple[Any, ...]
    message: str


def json_path(path: tuple[Any, ...] | list[Any]) -> str:
    """``("spec", "containers", 0, "env")`` -> ``spec.containers[0].env`` (kubectl's JSONPath style)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
