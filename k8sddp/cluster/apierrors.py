"""Turn what the API server (or the network) said into a :class:`k8sddp.errors.ClusterError`.

The API server answers every failure with a ``Status`` object (``kind: Status``): ``code`` (HTTP
status), ``reason`` (``AlreadyExists``, ``NotFound``, ``Forbidden``, ``Invalid``, ``BadRequest``,
``TooManyRequests``, ...), ``message`` and ``details`` (``name``, ``group``, ``kind``, ``causes``
of ``{reason, message, field}``). Source: k8s.io/apimachinery/pkg/apis/meta/v1 types.go (Status,
StatusReason) and pkg/api/errors/errors.go. Every message here names the verb, the resource and the
namespace, and keeps the server's own words.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..errors import ClusterError
from .retry import is_transport_error

__all__ = ["ApiStatus", "Call", "parse_status", "translate"]


@dataclasses.dataclass(frozen=True)
class Call:
    """What was asked of the server, for messages.

    Attributes:
        verb: the RBAC verb (``create``, ``get``, ``list``, ``watch``, ``delete``).
        resource: plural resource with its group (``pytorchjobs.kubeflow.org``, ``configmaps``,
            ``pods/log``).
        namespace: the namespace; empty for a cluster-scoped resource (``clustertrainingruntimes``).
        name: the object's name, empty for collection calls.
        server: the API server's URL.
    """

    verb: str
    resource: str
    namespace: str
    name: str = ""
    server: str = ""

    def what(self) -> str:
        """``create pytorchjobs.kubeflow.org "demo" in namespace "ml"``."""
        target = f' "{self.name}"' if self.name else ""
        return f"{self.verb} {self.resource}{target}{self.where()}"

    def where(self) -> str:
        """`` in namespace "ml"``; empty for a cluster-scoped resource."""
        return f' in namespace "{self.namespace}"' if self.namespace else ""


@dataclasses.dataclass(frozen=True)
class ApiStatus:
    """The parts of a ``Status`` object k8sddp uses.

    Attributes:
        code: HTTP status code (0 when unknown).
        reason: ``Status.reason`` (may be empty for non-Status bodies).
        message: ``Status.message`` (or the raw body's first 500 characters).
        causes: ``details.causes`` as ``"field: message"`` strings.
        details: the raw ``details`` mapping.
    """

    code: int
    reason: str
    message: str
    causes: tuple[str, ...] = ()
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


def _admission_denial(message: str) -> bool:
    """True when a 403's message is an admission denial, not RBAC: the API server words them
    ``admission webhook "NAME" denied the request: ...`` (apiserver webhookerrors.ToStatusErr)
    and ``ValidatingAdmissionPolicy 'NAME' with binding 'NAME' denied request: ...``
    (validating policy dispatcher); RBAC's is ``... is forbidden: User "..." cannot ...``."""
    return ("admission webhook" in message and "denied the request" in message) or (
        "ValidatingAdmissionPolicy" in message and "denied request" in message)


def parse_status(exc: BaseException) -> ApiStatus:
    """Read the ``Status`` from a kubernetes ``ApiException`` (body JSON), tolerating non-JSON
    bodies (a proxy's HTML page), which become the message."""
    code = getattr(exc, "status", 0) or 0
    body = getattr(exc, "body", None)
    reason = str(getattr(exc, "reason", "") or "")
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    data: Any = None
    if body:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
    if isinstance(data, dict) and data.get("kind") == "Status":
        details = data.get("details") or {}
        causes = []
        for cause in details.get("causes") or []:
            field = cause.get("field", "")
            msg = cause.get("message", "") or cause.get("reason", "")
            causes.append(f"{field}: {msg}" if field else msg)
        return ApiStatus(
            code=int(data.get("code") or code),
            reason=str(data.get("reason") or ""),
            message=str(data.get("message") or ""),
            causes=tuple(causes),
            details=details if isinstance(details, dict) else {},
        )
    text = (body or "").strip()[:500]
    return ApiStatus(code=int(code), reason=reason if not text else "", message=text or reason)


def translate(exc: BaseException, call: Call, *, attempts: int = 1) -> ClusterError:
    """Map a failed call to a :class:`ClusterError` with a message a person can act on.

    Args:
        exc: an ``ApiException`` or a transport error (urllib3 / OSError).
        call: what was asked.
        attempts: how many attempts were made (named when more than one).

    Returns:
        The error (not raised) carrying ``status``, ``reason`` and ``causes``.
    """
    tried = f" (after {attempts} attempts)" if attempts > 1 else ""
    if is_transport_error(exc) or (getattr(exc, "status", None) in (None, 0)):
        where = call.server or "the API server"
        detail = _transport_detail(exc)
        return ClusterError(
            f"cannot reach the API server at {where} to {call.what()}{tried}: {detail}",
            status=None,
            reason="Unreachable",
        )
    st = parse_status(exc)
    server_says = f": {st.message}" if st.message else ""
    if st.code == 409 and st.reason == "AlreadyExists":
        msg = (
            f'{call.resource} "{call.name}" already exists{call.where()}; '
            "pass --replace to delete it and create it again, or choose a new name"
        )
    elif st.code == 409:
        msg = f"conflict: cannot {call.what()}{server_says}"
    elif st.code == 403 and _admission_denial(st.message):
        # an admission webhook or policy refused the object: RBAC allowed the request
        msg = f"refused at admission: cannot {call.what()}{server_says}"
        if st.causes:
            msg += "\n" + "\n".join(f"  - {c}" for c in st.causes)
    elif st.code == 403:
        msg = (
            f"forbidden: your credentials may not {call.verb} {call.resource}{call.where()} "
            f'(ask for an RBAC {"Role" if call.namespace else "ClusterRole"} granting "{call.verb}" on '
            f'"{call.resource}"){server_says}'
        )
    elif st.code == 401:
        msg = f"unauthorized: the API server rejected the credentials to {call.what()}{server_says}"
    elif st.code == 422 or st.reason == "Invalid":
        msg = f"the API server rejected the object as invalid ({call.what()}){server_says}"
        if st.causes:
            msg += "\n" + "\n".join(f"  - {c}" for c in st.causes)
    elif st.code == 400:
        msg = f"the API server refused the request ({call.what()}){server_says}"
        if st.causes:
            msg += "\n" + "\n".join(f"  - {c}" for c in st.causes)
    elif st.code == 404 and st.details.get("kind") == "namespaces" and call.namespace:
        # a create in a namespace that does not exist: the namespace is what is missing
        msg = f'namespace "{st.details.get("name") or call.namespace}" not found: cannot {call.what()}'
    elif st.code == 404:
        msg = f'{call.resource} "{call.name}" not found{call.where()}'
        if not call.name:
            msg = f"not found: cannot {call.what()}{server_says}"
    elif st.code == 429 or st.code >= 500:
        msg = f"the API server kept failing to {call.what()}{tried}: HTTP {st.code} {st.reason}{server_says}"
    else:
        msg = f"cannot {call.what()}: HTTP {st.code} {st.reason}{server_says}"
    return ClusterError(msg, status=st.code, reason=st.reason, causes=list(st.causes))


def _transport_detail(exc: BaseException) -> str:
    """A one-line description of a transport failure (the innermost cause)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        nxt = getattr(cur, "reason", None)
        cur = nxt if isinstance(nxt, BaseException) else (cur.__cause__ or cur.__context__)
    inner = seen[-1]
    text = str(inner) or type(inner).__name__
    if "Connection refused" in text or isinstance(inner, ConnectionRefusedError):
        return "connection refused (is the cluster running and the kubeconfig's server right?)"
    if isinstance(inner, (ConnectionResetError,)) or "reset" in text.lower():
        return "connection reset by the server"
    return f"{type(inner).__name__}: {text}"[:300]
