"""`policy export --format vap` applied to the real API server.

- the API server type-checks the policy against the PyTorchJob CRD's schema: no warnings in
  ``status.typeChecking``; it accepts the policy (its CEL cost estimate within the limits the
  API server enforces at creation) and evaluates it without cost or runtime errors;
- its verdict equals ``k8sddp validate --profile baseline``'s on the fixture corpus
  (tests/validate/fixtures, tests/admission/corpus, the Kubeflow examples), chosen as in
  tests/admission/test_policy_cel.py (one PyTorchJob that passes the structure layer, literal
  values: the two documented differences are ConfigMaps and ``$(VAR)`` references);
- ``--mode``: Deny refuses, Warn admits with the warning kubectl prints, Audit admits and the
  audit event carries ``validation.policy.admission.k8s.io/validation_failure``.

The exported binding excludes namespaces by the exemption label; to keep the other kube tests
out of reach, each binding here also requires a label only this module sets (one added
``matchExpressions`` entry, the policy itself is applied unchanged).
"""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8sddp.admission.policy import vap_objects
from k8sddp.catalogue import RULES
from k8sddp.cli import main
from k8sddp.validate import validate_objects, validate_paths

from ..admission.helpers import KUBEFLOW_EXAMPLES, remove_env, rendered_job
from .conftest import Kube

REPO = Path(__file__).resolve().parents[2]
LABEL = "k8sddp-test/vap"
VAP_LABEL_PREFIX = "ValidatingAdmissionPolicy"


def _exported(mode: str, name: str) -> list[dict[str, Any]]:
    """What `k8sddp policy export --format vap --mode MODE --name NAME -o json` prints."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["policy", "export", "--format", "vap", "--mode", mode, "--name", name, "-o", "json"]) == 0
    items: list[dict[str, Any]] = json.loads(buf.getvalue())["items"]
    return items


@pytest.fixture(scope="module")
def policies(kube: Kube) -> Iterator[dict[str, dict[str, str]]]:
    """One exported policy + binding per mode, each bound to its own labelled namespace."""
    out: dict[str, dict[str, str]] = {}
    tag = uuid.uuid4().hex[:6]
    for mode in ("deny", "warn", "audit"):
        name = f"k8sddp-t-{mode}-{tag}"
        policy, binding = _exported(mode, name)[:2]  # the PyTorchJob policy and its binding (the TrainJob pair follows)
        binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
            {"key": LABEL, "operator": "In", "values": [f"{mode}-{tag}"]})
        ns = f"vap-{mode}-{tag}"
        kube.kubectl("create", "namespace", ns)
        kube.kubectl("label", "namespace", ns, f"{LABEL}={mode}-{tag}")
        kube.apply(policy, binding)
        out[mode] = {"name": name, "namespace": ns}
    # the policy plugin picks up new policies and bindings from its informers: wait until the
    # deny binding refuses an unguarded job (server-side dry run)
    bare = remove_env(_job("probe", out["deny"]["namespace"]), "PYTHONFAULTHANDLER")
    kube.wait_until("the deny binding to take effect",
                    lambda: "KDP202" in _dry_run(kube, bare).stderr, timeout=60, interval=0.5)
    try:
        yield out
    finally:
        for entry in out.values():
            kube.kubectl("delete", "validatingadmissionpolicybinding", entry["name"], check=False)
            kube.kubectl("delete", "validatingadmissionpolicy", entry["name"], check=False)
            kube.kubectl("delete", "namespace", entry["namespace"], "--wait=false", check=False)


def _job(name: str, namespace: str) -> dict[str, Any]:
    job = copy.deepcopy(rendered_job())
    job["metadata"].update(name=name, namespace=namespace)
    return job


def _dry_run(kube: Kube, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kube.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(obj), check=False)


def test_type_checking_finds_nothing(kube: Kube, policies: dict[str, dict[str, str]]) -> None:
    for entry in policies.values():
        def checked(name: str = entry["name"]) -> dict[str, Any] | None:
            obj = kube.get("validatingadmissionpolicy", name) or {}
            st = obj.get("status") or {}
            return st if st.get("observedGeneration") == obj["metadata"]["generation"] else None

        status = kube.wait_until("the policy's type checking", checked, timeout=60)
        assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
        assert not [c for c in status.get("conditions") or [] if c.get("status") == "False"], status


def _corpus() -> list[Path]:
    paths = sorted((REPO / "tests" / "validate" / "fixtures").rglob("*.yaml"))
    paths += sorted((REPO / "tests" / "admission" / "corpus").rglob("*.yaml"))
    if KUBEFLOW_EXAMPLES.is_dir():
        paths += sorted(KUBEFLOW_EXAMPLES.glob("*.yaml"))
    return paths


def _comparable(path: Path) -> dict[str, Any] | None:
    """The file's one PyTorchJob when the two verdicts are meant to agree, else ``None``."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (yaml.YAMLError, UnicodeDecodeError):
        return None
    # kubeflow.org/v1 only: the one PyTorchJob CRD the API server serves (the corpus also holds
    # other groups' PyTorchJobs, e.g. KubeDL's training.kubedl.io/v1alpha1: no mapping there)
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "PyTorchJob"
            and d.get("apiVersion") == "kubeflow.org/v1"]
    if len(jobs) != 1 or len(docs) != 1:
        return None
    text = path.read_text()
    if "envFrom" in text or "valueFrom" in text or "$(" in text:
        return None  # the two documented differences
    report = validate_objects([jobs[0]])
    if any(RULES[f.rule_id].layer == "structure" or f.rule_id < "KDP100" for f in report.findings):
        return None
    if any(f.rule_id < "KDP100" for f in validate_paths([str(path)], jobs=1).findings):
        return None
    job: dict[str, Any] = jobs[0]
    return job


def test_verdicts_equal_validate_on_the_corpus(kube: Kube, policies: dict[str, dict[str, str]]) -> None:
    deny = policies["deny"]
    compared, allowed_n, denied_n = 0, 0, 0
    mismatches: list[str] = []
    for path in _corpus():
        job = _comparable(path)
        if job is None:
            continue
        expected = validate_paths([str(path)], profile="baseline", jobs=1).exit_code() == 0
        job = copy.deepcopy(job)
        job["metadata"]["namespace"] = deny["namespace"]
        job["metadata"]["name"] = f"c-{compared}"
        res = _dry_run(kube, job)
        by_policy = f"{VAP_LABEL_PREFIX} '{deny['name']}'" in res.stderr
        if res.returncode != 0 and not by_policy:
            mismatches.append(f"{path.relative_to(REPO.parent)}: refused by something else: {res.stderr.strip()}")
        elif (res.returncode == 0) is not expected:
            mismatches.append(f"{path.relative_to(REPO.parent)}: validate {'allows' if expected else 'denies'}, "
                              f"the API server's policy {'allows' if res.returncode == 0 else 'denies'}: "
                              f"{res.stderr.strip()}")
        assert "cost" not in res.stderr.lower(), res.stderr  # no runtime cost budget exceeded
        compared += 1
        allowed_n += res.returncode == 0
        denied_n += res.returncode != 0
    assert not mismatches, "\n".join(mismatches)
    assert compared >= 30 and allowed_n >= 5 and denied_n >= 5, (compared, allowed_n, denied_n)


def test_deny_message_carries_the_rule(kube: Kube, policies: dict[str, dict[str, str]]) -> None:
    deny = policies["deny"]
    res = kube.kubectl("create", "-f", "-", check=False, input=json.dumps(
        remove_env(_job("denied", deny["namespace"]), "TORCH_NCCL_ASYNC_ERROR_HANDLING")))
    assert res.returncode != 0
    assert (f"ValidatingAdmissionPolicy '{deny['name']}' with binding '{deny['name']}' denied request: "
            f"k8sddp KDP201 ({RULES['KDP201'].name})") in res.stderr
    assert kube.get("pytorchjob", "denied", deny["namespace"]) is None


def test_warn_mode_reaches_kubectl_and_admits(kube: Kube, policies: dict[str, dict[str, str]]) -> None:
    warn = policies["warn"]
    res = kube.kubectl("create", "-f", "-", input=json.dumps(
        remove_env(_job("warned", warn["namespace"]), "PYTHONFAULTHANDLER")))
    assert res.returncode == 0
    assert (f"Warning: Validation failed for ValidatingAdmissionPolicy '{warn['name']}' with binding "
            f"'{warn['name']}': k8sddp KDP202") in res.stderr
    assert kube.get("pytorchjob", "warned", warn["namespace"]) is not None
    res = kube.kubectl("create", "-f", "-", input=json.dumps(_job("clean", warn["namespace"])))
    assert "Warning" not in res.stderr


def test_audit_mode_sets_the_audit_annotation(kube: Kube, policies: dict[str, dict[str, str]]) -> None:
    audit = policies["audit"]
    res = kube.kubectl("create", "-f", "-", input=json.dumps(
        remove_env(_job("audited", audit["namespace"]), "TORCH_NCCL_ASYNC_ERROR_HANDLING")))
    assert res.returncode == 0 and "Warning" not in res.stderr
    log = Path(kube.env["K8SDDP_KUBE_AUDIT_LOG"])

    def event() -> dict[str, Any] | None:
        for line in log.read_text().splitlines():
            ev = json.loads(line)
            ref = ev.get("objectRef") or {}
            if (ref.get("name") == "audited" and ref.get("namespace") == audit["namespace"]
                    and ev.get("verb") == "create" and ev.get("stage") == "ResponseComplete"):
                return ev
        return None

    ev = kube.wait_until("the audit event", event, timeout=30)
    failures = json.loads(ev["annotations"]["validation.policy.admission.k8s.io/validation_failure"])
    assert failures[0]["policy"] == audit["name"] and failures[0]["binding"] == audit["name"]
    assert failures[0]["validationActions"] == ["Audit"]
    assert failures[0]["message"].startswith("k8sddp KDP201")
    # the policy's own auditAnnotations go into the same event
    assert ev["annotations"][f"{audit['name']}/catalogue-version"]


def test_exported_policy_is_unchanged_by_mode() -> None:
    assert _exported("warn", "x")[0] == vap_objects(name="x")[0]
