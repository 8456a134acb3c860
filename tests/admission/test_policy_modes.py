"""`policy export --mode`: the binding's validationActions (Kyverno: validationFailureAction)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from k8sddp.admission.policy import parse_mode, vap_objects
from k8sddp.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "actions"), [
    ("deny", ["Deny"]), ("warn", ["Warn"]), ("audit", ["Audit"]),
    ("warn,audit", ["Warn", "Audit"]), ("Audit, deny", ["Deny", "Audit"]), ("audit,audit", ["Audit"]),
])
def test_parse_mode(text: str, actions: list[str]) -> None:
    assert parse_mode(text) == actions


@pytest.mark.parametrize(("text", "why"), [
    ("deny,warn", "deny and warn together"), ("block", "unknown mode 'block'"), ("warn,", "expected deny"),
])
def test_parse_mode_refuses(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_mode(text)


@pytest.mark.parametrize(("mode", "actions"), [("warn", ["Warn"]), ("audit", ["Audit"]), ("deny", ["Deny"])])
def test_export_writes_the_binding_actions(mode: str, actions: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "export", "--format", "vap", "--mode", mode]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(bindings) == 2  # the PyTorchJob policy's and the TrainJob policy's
    assert all(b["spec"]["validationActions"] == actions for b in bindings)
    # the policies themselves do not change with the mode: only the bindings do
    defaults = vap_objects()
    assert [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"] == [o for o in defaults if o["kind"] == "ValidatingAdmissionPolicy"]


def test_default_is_deny_and_kyverno_modes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "export", "--format", "vap"]) == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out))[1]["spec"]["validationActions"] == ["Deny"]
    assert main(["policy", "export", "--format", "kyverno", "--mode", "audit"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["spec"]["validationFailureAction"] == "Audit"
    assert main(["policy", "export", "--format", "kyverno", "--mode", "warn"]) == 2
    assert "cannot be expressed by a Kyverno ClusterPolicy" in capsys.readouterr().err
    assert main(["policy", "export", "--format", "vap", "--mode", "deny,warn"]) == 2
    assert "refused by the API server" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [
    ["policy", "export", "--format", "vap", "--mode", "warn"],   # more than a buffer: write() fails
    ["validate", "examples/ddpjob.yaml"],                         # a few bytes: the flush fails
])
def test_unwritable_stdout_is_exit_2_without_a_traceback(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "k8sddp", *args], stdout=full, stderr=subprocess.PIPE,
                             text=True, cwd=REPO, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [f"k8sddp {args[0]}: cannot write output: standard output: No space left on device"]
