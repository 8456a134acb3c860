"""AdmissionReview v1: parse a request, decide with the shared validator, build the response.

Pure logic with no sockets, so it is tested directly and reused by the HTTPS server. The wire
format is ``admission.k8s.io/v1`` ``AdmissionReview`` (Kubernetes API reference, "Dynamic
Admission Control": the response must echo ``request.uid``; ``warnings`` are shown to the
client; ``auditAnnotations`` are recorded in the audit log under ``<webhook name>/<key>``).

Decision order for one request (``docs/admission.md`` explains each):

1. not a kind the registry knows (:func:`k8sddp.kinds.lookup`: a PyTorchJob of ``kubeflow.org``): allowed, with a warning that the webhook is matching more
   than it should (a misconfigured ``rules`` list);
2. not CREATE or UPDATE: allowed;
3. the object is being deleted (``metadata.deletionTimestamp``): allowed, so finalizers can go;
4. UPDATE that leaves ``spec`` unchanged: allowed (labels, annotations, finalizers of a job
   created before the webhook must stay editable);
5. namespace exempted by the ``--exempt-namespace-selector`` label selector: allowed, with a
   warning that says so (exemptions are reported, never silent: ``../shared/CONTRACT.md``);
6. otherwise: :func:`k8sddp.validate.validate_objects` with the ConfigMaps that the job's env
   names, read from the job's namespace; denied when any finding fails at ``error``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import kinds
from .._version import __version__
from ..catalogue import CATALOGUE_VERSION, PROFILES
from ..findings import Finding, Report, Severity
from .runtimes import lookup_runtime
from .selector import LabelSelector
from .sources import ConfigMapSource, LookupFailed, NamespaceLabelSource, RuntimeSource

__all__ = [
    "AUDIT_CATALOGUE",
    "AUDIT_VERSION",
    "AdmissionDecider",
    "ConfigMapSource",
    "LookupFailed",
    "MalformedReview",
    "NamespaceLabelSource",
    "RuntimeSource",
    "Verdict",
    "configmap_names",
    "parse_review",
    "response_review",
]

#: Audit annotation keys (the API server stores them as ``<webhook name>/<key>``).
AUDIT_VERSION = "k8sddp-version"
AUDIT_CATALOGUE = "catalogue-version"
AUDIT_PROFILE = "profile"
AUDIT_RULES = "failed-rules"

#: The API server truncates a warning past 256 characters (``k8s.io/apiserver`` warning
#: recorder); we keep each one under that and send at most this many.
MAX_WARNING_CHARS = 256
MAX_WARNINGS = 20
#: Upper bound on ConfigMap look-ups for one request (each is one API call; bounds latency).
MAX_CONFIGMAP_LOOKUPS = 16

#: ``AdmissionRequest.operation`` values (``k8s.io/api/admission/v1``).
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")



class MalformedReview(Exception):
    """The body is not an ``admission.k8s.io/v1`` AdmissionReview with a ``request.uid``.

    The server answers HTTP 400 with this message; the API server then applies the webhook's
    ``failurePolicy`` (``Fail``: the request is rejected, naming the webhook).
    """


Validator = Callable[..., Report]


@dataclasses.dataclass
class Verdict:
    """The decision for one AdmissionReview request.

    Attributes:
        uid: ``request.uid``, echoed in the response.
        allowed: admit or deny.
        message: the denial message (findings, one per ``;``), empty when allowed.
        code: HTTP-like status code inside the response's ``status`` (403 deny, 400 bad object).
        warnings: AdmissionReview ``warnings`` (warning-level and exempted findings, notes).
        findings: the validator's findings (all of them, exempted ones included).
        reason: why this outcome, for the log (``checked``, ``exempt-namespace``, ...).
        operation, kind, namespace, name: from the request, for the log.
        profile: the guardrail profile used.
    """

    uid: str
    allowed: bool
    message: str = ""
    code: int = 200
    warnings: list[str] = dataclasses.field(default_factory=list)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    reason: str = "checked"
    operation: str = ""
    kind: str = ""
    namespace: str = ""
    name: str = ""
    profile: str = "baseline"

    def failed_rules(self) -> list[str]:
        """Sorted ids of the rules that failed (not exempted, error severity)."""
        return sorted({f.rule_id for f in self.findings if _fails(f)})


def _fails(f: Finding) -> bool:
    return not f.exempted_by and f.severity is Severity.ERROR


def parse_review(body: bytes) -> dict[str, Any]:
    """Parse an HTTP body as an AdmissionReview v1 and return its ``request``.

    Args:
        body: the raw request body (JSON, UTF-8).

    Raises:
        MalformedReview: not JSON, not ``admission.k8s.io/v1`` ``AdmissionReview``, or no
            ``request`` object with a non-empty string ``uid``, a ``kind`` object naming the
            kind, and an ``operation`` of :data:`OPERATIONS` (all always sent by the API server).
    """
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedReview(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise MalformedReview("body is not a JSON object")
    api = review.get("apiVersion")
    if api != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        raise MalformedReview(
            f"expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got apiVersion "
            f"{api!r} kind {review.get('kind')!r} (set admissionReviewVersions: [v1])"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("AdmissionReview request has no uid")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str) or not kind["kind"]:
        raise MalformedReview("AdmissionReview request has no kind {group, version, kind}")
    if not isinstance(kind.get("group", ""), str):
        raise MalformedReview("AdmissionReview request.kind.group is not a string")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise MalformedReview(f"AdmissionReview request.operation {operation!r} is not one of {', '.join(OPERATIONS)}")
    return request


def response_review(verdict: Verdict) -> dict[str, Any]:
    """Build the AdmissionReview v1 response object for ``verdict``.

    Every response carries the k8sddp version, the rule catalogue version and the profile as
    ``auditAnnotations`` (the API server writes them into the audit event of the request).
    """
    audit = {
        AUDIT_VERSION: __version__,
        AUDIT_CATALOGUE: CATALOGUE_VERSION,
        AUDIT_PROFILE: verdict.profile,
    }
    failed = verdict.failed_rules()
    if failed:
        audit[AUDIT_RULES] = ",".join(failed)
    response: dict[str, Any] = {
        "uid": verdict.uid,
        "allowed": verdict.allowed,
        "auditAnnotations": audit,
    }
    if not verdict.allowed:
        response["status"] = {
            "code": verdict.code,
            "reason": "Forbidden" if verdict.code == 403 else "BadRequest",
            "message": verdict.message,
        }
    if verdict.warnings:
        response["warnings"] = verdict.warnings[:MAX_WARNINGS]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _short(text: str) -> str:
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 3] + "..."


#: The validator's wording for a ConfigMap it was not given (``k8sddp.validate.envresolve``):
#: "ConfigMap 'x' is not in the input" (valueFrom) or "ConfigMap 'x' (envFrom), which is not in
#: the input". In the webhook the input is the cluster, so the reason is said instead.
_NOT_IN_INPUT = re.compile(r"ConfigMap '(?P<name>[^']*)'(?P<mid>(?: \(envFrom\))?,? (?:which )?)is not in the input")


def _webhook_wording(finding: Finding, missing: dict[str, str]) -> Finding:
    """``finding`` with "is not in the input" replaced by why the webhook lacks the ConfigMap
    (``missing``: name -> reason such as ``was not found in namespace team-a``)."""

    def _sub(m: re.Match[str]) -> str:
        why = missing.get(m.group("name"), "was not read")
        return f"ConfigMap '{m.group('name')}'{m.group('mid')}{why}"

    text = _NOT_IN_INPUT.sub(_sub, finding.message)
    return finding if text == finding.message else dataclasses.replace(finding, message=text)


def _templates(obj: dict[str, Any]) -> Iterable[dict[str, Any]]:
    spec = obj.get("spec")
    replicas = spec.get("pytorchReplicaSpecs") if isinstance(spec, dict) else None
    if not isinstance(replicas, dict):
        return
    for replica in replicas.values():
        tmpl = replica.get("template") if isinstance(replica, dict) else None
        pod = tmpl.get("spec") if isinstance(tmpl, dict) else None
        if isinstance(pod, dict):
            yield pod


def configmap_names(obj: dict[str, Any]) -> list[str]:
    """ConfigMap names that the containers of a PyTorchJob read env from, in first-seen order.

    Looks at ``envFrom[].configMapRef.name`` and ``env[].valueFrom.configMapKeyRef.name`` of
    every container and init container of every replica. Secrets are never read (the webhook
    has no RBAC for them): a guard variable from a Secret stays unverifiable.
    """
    if kinds.lookup(obj.get("apiVersion"), obj.get("kind")) not in (None, kinds.PYTORCHJOB):
        from ..configrefs import referenced_configmaps

        return referenced_configmaps(obj)  # (other kinds: through their pod templates)
    names: dict[str, None] = {}
    for pod in _templates(obj):
        for key in ("containers", "initContainers"):
            containers = pod.get(key)
            if not isinstance(containers, list):
                continue
            for c in containers:
                if not isinstance(c, dict):
                    continue
                for src in c.get("envFrom") or []:
                    ref = src.get("configMapRef") if isinstance(src, dict) else None
                    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                        names[ref["name"]] = None
                for e in c.get("env") or []:
                    vf = e.get("valueFrom") if isinstance(e, dict) else None
                    ref = vf.get("configMapKeyRef") if isinstance(vf, dict) else None
                    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                        names[ref["name"]] = None
    return list(names)


class AdmissionDecider:
    """Decides AdmissionReview requests for PyTorchJobs with the shared validator.

    Args:
        profile: guardrail profile, a key of :data:`k8sddp.catalogue.PROFILES`.
        validate: the validator, ``validate_objects(objects, *, file, profile, configmaps,
            namespace) -> Report``; ``None`` imports :func:`k8sddp.validate.validate_objects`.
        configmaps: where ConfigMaps are read from; ``None`` reads none (guard variables from
            ConfigMaps are then unverifiable and the validator reports them).
        namespaces: where namespace labels are read from; needed with ``exempt_selector``.
        exempt_selector: namespaces whose labels match it are not checked.
        lookup_timeout: seconds all cluster look-ups of one review may take together (the
            namespace labels and up to :data:`MAX_CONFIGMAP_LOOKUPS` ConfigMaps); what is not
            read in time is reported as a warning and stays unverifiable. Keep it well under
            the webhook's ``timeoutSeconds`` (chart: 2 s of 5 s).
        runtimes: where a TrainJob's training runtime is read from (``None``: not read; the
            TrainJob is then unverifiable, KDP230).

    Raises:
        ValueError: unknown profile, ``exempt_selector`` without ``namespaces``, or a
            ``lookup_timeout`` that is not positive.
    """

    def __init__(
        self,
        *,
        profile: str = "baseline",
        validate: Validator | None = None,
        configmaps: ConfigMapSource | None = None,
        namespaces: NamespaceLabelSource | None = None,
        exempt_selector: LabelSelector | None = None,
        lookup_timeout: float = 2.0,
        runtimes: RuntimeSource | None = None,
    ) -> None:
        if not lookup_timeout > 0:
            raise ValueError(f"lookup_timeout must be positive, got {lookup_timeout!r}")
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; expected one of {sorted(PROFILES)}")
        if exempt_selector is not None and namespaces is None:
            raise ValueError("a namespace exemption selector needs a namespace label source")
        if validate is None:
            from ..validate import validate_objects

            validate = validate_objects
        self.profile = profile
        self._validate = validate
        self._configmaps = configmaps
        self._namespaces = namespaces
        self._runtimes = runtimes
        self._exempt = exempt_selector
        self.lookup_timeout = lookup_timeout

    def decide(self, request: dict[str, Any]) -> Verdict:
        """Decide one ``AdmissionReview.request`` (as returned by :func:`parse_review`).

        Never raises for a bad object: a request without an object is denied with code 400.
        Look-up failures are reported as warnings and leave the variables unverifiable.
        """
        raw_kind = request.get("kind")
        kind: dict[str, Any] = raw_kind if isinstance(raw_kind, dict) else {}
        v = Verdict(
            uid=str(request["uid"]),
            allowed=True,
            operation=str(request.get("operation") or ""),
            kind=str(kind.get("kind") or ""),
            namespace=str(request.get("namespace") or ""),
            name=str(request.get("name") or ""),
            profile=self.profile,
        )
        group = kind.get("group") or ""
        if kinds.lookup(f"{group}/{kind.get('version') or ''}" if group else "", v.kind) is None:
            v.reason = "not-a-pytorchjob"
            served = ", ".join(f"{k.group} {k.status.plural}" for k in kinds.kinds())
            v.warnings.append(
                _short(f"k8sddp webhook: {v.kind} ({group or 'core'}/{kind.get('version') or '?'}) is not checked; "
                       f"its webhook rules should match only {served}")
            )
            return v
        if v.operation not in ("CREATE", "UPDATE"):
            v.reason = "operation"
            return v
        obj = request.get("object")
        if not isinstance(obj, dict):
            return self._deny_bad(v, f"{v.operation} request carries no object")
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return self._deny_bad(v, "object has no metadata")
        v.name = v.name or str(meta.get("name") or meta.get("generateName") or "")
        if meta.get("deletionTimestamp"):
            v.reason = "deleting"
            return v
        old = request.get("oldObject")
        if v.operation == "UPDATE" and isinstance(old, dict) and old.get("spec") == obj.get("spec"):
            v.reason = "unchanged-spec"
            return v
        deadline = time.monotonic() + self.lookup_timeout
        if self._exempt is not None and self._namespace_exempt(v, deadline):
            return v
        return self._check(v, obj, deadline)

    def _deny_bad(self, v: Verdict, message: str) -> Verdict:
        v.allowed, v.code, v.reason = False, 400, "malformed-object"
        v.message = f"k8sddp: malformed admission request: {message}"
        return v

    def _namespace_exempt(self, v: Verdict, deadline: float) -> bool:
        assert self._namespaces is not None and self._exempt is not None
        try:
            labels = self._namespaces.namespace_labels(v.namespace, timeout=deadline - time.monotonic())
        except LookupFailed as exc:
            # Fail towards checking: an unreadable namespace is not exempt.
            v.warnings.append(_short(f"k8sddp: namespace {v.namespace} labels unreadable ({exc}); checked"))
            return False
        if labels is not None and self._exempt.matches(labels):
            v.reason = "exempt-namespace"
            v.warnings.append(
                _short(f"k8sddp: namespace {v.namespace} is exempt from the guardrails "
                       f"(labels match {self._exempt}); job not checked")
            )
            return True
        return False

    def _lookup_configmaps(
        self, v: Verdict, obj: dict[str, Any], deadline: float
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The ConfigMaps found, and for each name not found why: ``not found in namespace N``,
        ``could not be read`` or ``was not read`` (see :func:`_webhook_wording`)."""
        names = configmap_names(obj)
        if self._configmaps is None:
            return [], {n: "was not read (the webhook runs with --no-configmap-lookup)" for n in names}
        found: list[dict[str, Any]] = []
        missing: dict[str, str] = {}
        if len(names) > MAX_CONFIGMAP_LOOKUPS:
            v.warnings.append(_short(f"k8sddp: only the first {MAX_CONFIGMAP_LOOKUPS} of "
                                     f"{len(names)} ConfigMaps were read"))
            for name in names[MAX_CONFIGMAP_LOOKUPS:]:
                missing[name] = f"was not read (over the limit of {MAX_CONFIGMAP_LOOKUPS} per job)"
            names = names[:MAX_CONFIGMAP_LOOKUPS]
        for i, name in enumerate(names):
            left = deadline - time.monotonic()
            if left <= 0:
                rest = names[i:]
                v.warnings.append(_short(
                    f"k8sddp: {len(rest)} ConfigMap(s) not read ({', '.join(rest)}): the look-up time "
                    f"limit of {self.lookup_timeout:g} s for this review was spent"))
                for n in rest:
                    missing[n] = f"was not read (look-up time limit of {self.lookup_timeout:g} s spent)"
                break
            try:
                cm = self._configmaps.get_configmap(v.namespace, name, timeout=left)
            except LookupFailed as exc:
                v.warnings.append(_short(f"k8sddp: ConfigMap {v.namespace}/{name} unreadable: {exc}"))
                missing[name] = f"could not be read ({exc})"
                continue
            if cm is None:
                v.warnings.append(_short(f"k8sddp: ConfigMap {name} not found in namespace {v.namespace}"))
                missing[name] = f"was not found in namespace {v.namespace}"
            else:
                found.append(cm)
        return found, missing

    def _lookup_runtime(self, v: Verdict, obj: dict[str, Any], deadline: float) -> list[dict[str, Any]]:
        """The training runtime a TrainJob refers to (``[]`` for other kinds, or when it cannot be
        read: a warning says why, and the validator reports KDP230)."""
        if self._runtimes is None:
            return []
        runtime, warning = lookup_runtime(self._runtimes, obj, v.namespace, deadline - time.monotonic())
        if warning:
            v.warnings.append(_short(warning))
        return [runtime] if runtime is not None else []

    def _check(self, v: Verdict, obj: dict[str, Any], deadline: float) -> Verdict:
        obj = dict(obj)
        meta = dict(obj["metadata"])
        if v.namespace and not meta.get("namespace"):
            meta["namespace"] = v.namespace  # CREATE bodies often leave it to the request path
        obj["metadata"] = meta
        configmaps, missing = self._lookup_configmaps(v, obj, deadline)
        companions = self._lookup_runtime(v, obj, deadline)
        report = self._validate(
            [*companions, obj],
            file=f"admission:{v.namespace}/{v.name}",
            profile=self.profile,
            configmaps=configmaps,
            namespace=v.namespace or None,
        )
        # Only the object under review is judged; its runtime is context (checked on its own admission).
        v.findings = [_webhook_wording(f, missing) for f in report.findings if f.document == len(companions)]
        failing = [f for f in v.findings if _fails(f)]
        for f in v.findings:
            if f.exempted_by:
                v.warnings.append(_short(f"{f.rule_id} exempted ({f.exempted_by}): {f.message}"))
            elif f.severity is Severity.WARNING:
                v.warnings.append(_short(f"{f.rule_id}: {f.message}"))
        if failing:
            v.allowed, v.code = False, 403
            what = f"{v.kind or 'object'} {v.namespace}/{v.name}" if v.namespace else f"{v.kind or 'object'} {v.name}"
            parts = [f"{f.rule_id}" + (f" [{f.path}]" if f.path else "") + f" {f.message}" for f in failing]
            v.message = (
                f"k8sddp {__version__} (profile {self.profile}, catalogue {CATALOGUE_VERSION}) "
                f"denied {what}: " + "; ".join(parts)
                + " (fix with `k8sddp fix`, or exempt with the k8sddp.dev/exempt and "
                "k8sddp.dev/exempt-reason annotations)"
            )
        return v
