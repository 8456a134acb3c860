"""The Kubeflow operator's own examples (../shared/reference/kubeflow/examples/): every PyTorchJob
passes the structure layer and fails baseline naming the missing variables; other kinds are
skipped. Skipped where the reference folder is absent."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k8sddp.validate import validate_paths

# tests/validate/test_reference.py -> the repository root is parents[2]; ../shared sits beside it.
EXAMPLES = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "kubeflow" / "examples"


def _kinds(path: Path) -> list[str]:
    return [doc.get("kind") for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]


def _examples(pytorchjobs: bool) -> list[Path]:
    if not EXAMPLES.is_dir():
        return []
    return [p for p in sorted(EXAMPLES.glob("*.y*ml")) if ("PyTorchJob" in _kinds(p)) == pytorchjobs]


def _skip_without_reference() -> None:
    if not EXAMPLES.is_dir():
        pytest.skip(f"{EXAMPLES} is not present")


def test_reference_folder_holds_pytorchjobs() -> None:
    _skip_without_reference()
    assert len(_examples(pytorchjobs=True)) >= 5


@pytest.mark.parametrize("path", _examples(pytorchjobs=True), ids=lambda p: p.name)
def test_pytorchjob_example_passes_structure_and_fails_baseline(path: Path) -> None:
    report = validate_paths([str(path)], profile="baseline", jobs=1)
    failing = report.failing()
    assert [f for f in failing if f.rule_id < "KDP200"] == [], "structure (or input) findings on an operator example"
    assert report.checked >= 1

    jobs = [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict) and doc.get("kind") == "PyTorchJob"]
    replicas = {(f"PyTorchJob/{j['metadata'].get('namespace') + '/' if j['metadata'].get('namespace') else ''}{j['metadata']['name']}", r)
                for j in jobs for r in j["spec"]["pytorchReplicaSpecs"]}
    for rule, variable in (("KDP201", "TORCH_NCCL_ASYNC_ERROR_HANDLING"), ("KDP202", "PYTHONFAULTHANDLER")):
        found = [f for f in failing if f.rule_id == rule]
        # one finding per replica type of every job, each naming the variable and located
        assert {(f.object_ref, f.path.split(".")[2]) for f in found} == replicas
        assert all(variable in f.message and "is not set" in f.message and f.line > 0 for f in found)
    assert {f.rule_id for f in failing} == {"KDP201", "KDP202"}


@pytest.mark.parametrize("path", _examples(pytorchjobs=False), ids=lambda p: p.name)
def test_other_examples_are_skipped(path: Path) -> None:
    report = validate_paths([str(path)], profile="strict", jobs=1)
    assert report.findings == [] and report.checked == 0
    assert sum(report.skipped.values()) == len(_kinds(path)) >= 1


def test_etcd_objects_are_skipped_and_counted() -> None:
    _skip_without_reference()
    report = validate_paths([str(EXAMPLES / "etcd.yaml")], jobs=1)
    assert report.findings == [] and report.checked == 0
    assert report.skipped == {"Service": 2, "Pod": 1}  # Services etcd-client and etcd-server, Pod etcd-server


def test_whole_folder_at_once() -> None:
    _skip_without_reference()
    report = validate_paths([str(EXAMPLES)], jobs=1)
    assert report.exit_code() == 1
    assert report.checked == sum(_kinds(p).count("PyTorchJob") for p in _examples(pytorchjobs=True))
    assert {f.rule_id for f in report.failing()} == {"KDP201", "KDP202"}
