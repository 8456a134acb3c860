"""The k8sddp exception tree.

Every error k8sddp raises on purpose derives from :class:`K8sddpError`; the CLI maps each branch
to an exit code of ``../shared/CONTRACT.md`` and prints its message, never a traceback::

    K8sddpError                 base class; exit_code 2 unless a subclass says otherwise
    ├── UsageError              bad flags or unreadable input (missing file, permission)   -> 2
    ├── SpecError               a DDPJob spec that cannot be rendered (located)             -> 1
    ├── ValidationError         findings at or above the failing severity                  -> 1
    ├── ClusterError            API server unreachable, forbidden, conflict, invalid        -> 3
    │   └── (carries the server's HTTP status, reason and message)
    ├── JobFailedError          ``--wait``: the job ended Failed                            -> 4
    ├── WaitTimeoutError        ``--wait``: the wait timed out                              -> 5
    └── StoppedError            ``--local``: SIGINT / SIGTERM to k8sddp                -> 130 / 143
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ClusterError",
    "JobFailedError",
    "K8sddpError",
    "SpecError",
    "StoppedError",
    "UsageError",
    "ValidationError",
    "WaitTimeoutError",
]


class K8sddpError(Exception):
    """Base of every deliberate k8sddp error.

    Attributes:
        exit_code: the CLI exit code for this error (``../shared/CONTRACT.md``).
    """

    exit_code: int = 2


class UsageError(K8sddpError):
    """A usage error: bad flags, or an input that cannot be read (missing file, permission)."""

    exit_code = 2


class SpecError(K8sddpError):
    """A DDPJob spec that cannot be rendered.

    Args:
        message: what is wrong and what was expected.
        file: the spec's file name (``<stdin>`` for standard input), if known.
        line: 1-based line of the offending value, if known.
        path: JSON path of the offending value (``spec.nodes``), if known.
    """

    exit_code = 1

    def __init__(
        self, message: str, *, file: str | None = None, line: int | None = None, path: str = ""
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.path = path
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        at = f"{self.path}: " if self.path else ""
        return f"{where}{at}{self.message}"


class ValidationError(K8sddpError):
    """Raised where a caller needs an exception for findings (render refuses its own output).

    Args:
        message: a summary line.
        findings: the :class:`k8sddp.findings.Finding` objects behind it.
    """

    exit_code = 1

    def __init__(self, message: str, findings: list[Any] | None = None) -> None:
        super().__init__(message)
        self.findings = list(findings or [])


class ClusterError(K8sddpError):
    """The API server refused or could not be reached.

    Args:
        message: a human sentence naming what failed (verb, resource, namespace).
        status: the HTTP status code, or ``None`` when the server was unreachable.
        reason: the Kubernetes ``Status.reason`` (``AlreadyExists``, ``Forbidden``, ``Invalid``, ...).
        causes: ``Status.details.causes`` as ``"field: message"`` strings.
    """

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        causes: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.causes = list(causes or [])


class JobFailedError(K8sddpError):
    """``--wait`` saw the job end with the ``Failed`` condition."""

    exit_code = 4


class StoppedError(K8sddpError):
    """A local run was stopped by a signal to k8sddp: exit 128 + the signal number (130 for SIGINT
    / Ctrl-C, 143 for SIGTERM), as a shell reports a process killed by it."""

    exit_code = 130

    def __init__(self, message: str, *, signum: int = 2) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class WaitTimeoutError(K8sddpError):
    """``--wait`` gave up after ``--timeout`` seconds without a final condition."""

    exit_code = 5
