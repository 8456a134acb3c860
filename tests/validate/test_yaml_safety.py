"""Reading manifests safely: every bad input is a located finding, never a traceback, hang or
runaway memory; ordinary YAML features keep working."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from k8sddp.findings import Report
from k8sddp.validate import validate_paths, validate_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GUARDED_JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: safe-read
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/acme/train:1
            env:
            - name: TORCH_NCCL_ASYNC_ERROR_HANDLING
              value: "3"
            - name: PYTHONFAULTHANDLER
              value: "1"
"""
UNGUARDED_JOB = GUARDED_JOB.replace('            - name: PYTHONFAULTHANDLER\n              value: "1"\n', "")


def _rules(report: Report) -> list[tuple[str, int]]:
    return [(f.rule_id, f.line) for f in report.failing()]


def _validate_bytes(tmp_path: Path, data: bytes, name: str = "m.yaml") -> Report:
    path = tmp_path / name
    path.write_bytes(data)
    return validate_paths([str(path)], jobs=1)


# -- duplicate keys ------------------------------------------------------------------------------


def test_duplicate_key_located_with_both_lines_in_message() -> None:
    text = GUARDED_JOB.replace("      replicas: 2\n", "      replicas: 2\n      replicas: 3\n")
    report = validate_text(text, file="dup.yaml")
    assert _rules(report) == [("KDP002", 9)]
    (finding,) = report.failing()
    assert finding.file == "dup.yaml" and finding.column == 7 and "replicas" in finding.message


def test_duplicate_key_in_later_document_keeps_earlier_documents() -> None:
    text = UNGUARDED_JOB + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  K: '1'\n  K: '2'\n"
    report = validate_text(text)
    # The job before the bad document is still checked, with its own line.
    assert ("KDP202", 15) in _rules(report)
    assert ("KDP002", 24) in _rules(report)


def test_json_duplicate_key_is_located(tmp_path: Path) -> None:
    doc = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, indent=2)
    doc = doc.replace('"name": "x"', '"name": "x",\n    "name": "y"')
    report = _validate_bytes(tmp_path, doc.encode(), "cm.json")
    assert _rules(report) == [("KDP002", 6)]


# -- alias bombs and recursion -----------------------------------------------------------------

LAUGHS = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
)


def test_billion_laughs_is_fast_and_bounded() -> None:
    """Nine levels of nine aliases: 9^9 = 387 million strings if expanded."""
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lol\ndata:\n" + "\n".join("  " + line for line in LAUGHS.splitlines()) + "\n"
    tracemalloc.start()
    started = time.perf_counter()
    try:
        report = validate_text(text, file="lol.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    assert _rules(report) == [("KDP003", 1)]
    assert "alias bomb" in report.failing()[0].message
    assert elapsed < 5.0, f"alias bomb took {elapsed:.1f} s"  # measured: about 2 ms
    assert peak < 50 * 2**20, f"alias bomb peaked at {peak / 2**20:.0f} MiB"  # measured: well under 1 MiB


def test_alias_bomb_in_one_document_leaves_the_others_checked() -> None:
    text = UNGUARDED_JOB + "---\n" + LAUGHS + "\n"
    assert sorted(_rules(validate_text(text))) == [("KDP003", 19), ("KDP202", 15)]


@pytest.mark.parametrize(
    "text",
    [
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: &d\n  self: [*d]\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: &m\n  name: x\n  again: *m\n",
        "&top [*top]\n",
    ],
    ids=["sequence", "mapping", "root"],
)
def test_recursive_alias_is_kdp003(text: str) -> None:
    report = validate_text(text)
    assert [f.rule_id for f in report.failing()] == ["KDP003"]
    assert "recursive" in report.failing()[0].message


def test_ordinary_anchors_aliases_and_merge_keys_work() -> None:
    text = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: anchors
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - &c
            name: pytorch
            image: ghcr.io/acme/train:1
            env: &guards
            - {name: TORCH_NCCL_ASYNC_ERROR_HANDLING, value: "3"}
            - {name: PYTHONFAULTHANDLER, value: "1"}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - <<: *c
            image: ghcr.io/acme/train:2
"""
    assert _rules(validate_text(text)) == []
    # The merged Worker container really carries the anchored env: drop it from the anchor and
    # both replicas fail.
    broken = text.replace('            - {name: PYTHONFAULTHANDLER, value: "1"}\n', "")
    assert [f.path for f in validate_text(broken).failing()] == [
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env",
    ]


# -- syntax, documents, kinds ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("apiVersion: v1\nkind: [ConfigMap\nmetadata: {}\n", 3, 9),
        ("apiVersion: v1\nkind: ConfigMap\n  metadata: x\n", 3, 11),
        ('apiVersion: v1\nkind: "ConfigMap\n', 2, 17),
        ("a: b: c\n", 1, 5),
    ],
    ids=["unclosed-flow", "bad-indent", "unterminated-quote-at-eof", "colon-in-plain"],
)
def test_unparseable_yaml_is_located(text: str, line: int, column: int) -> None:
    report = validate_text(text, file="bad.yaml")
    assert [(f.rule_id, f.line, f.column) for f in report.failing()] == [("KDP001", line, column)]
    assert report.exit_code() == 1


@pytest.mark.parametrize(
    ("text", "what"),
    [("- a\n- b\n", "list"), ("just text\n", "str"), ("42\n", "int"), ("metadata: {name: x}\n", "a mapping"), ("kind: ConfigMap\n", "a mapping")],
)
def test_non_object_documents_are_kdp004(text: str, what: str) -> None:
    report = validate_text(GUARDED_JOB + "---\n" + text)
    assert [(f.rule_id, f.line, f.document) for f in report.failing()] == [("KDP004", 21, 1)]
    assert what in report.failing()[0].message


def test_kind_list_items_are_checked_with_their_paths() -> None:
    item = "\n".join("  " + line for line in UNGUARDED_JOB.splitlines())
    text = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: s}\n-" + item[1:] + "\n- 7\n"
    report = validate_text(text)
    assert [(f.rule_id, f.path) for f in report.failing()] == [
        ("KDP202", "items[1].spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env"),
        ("KDP004", "items[2]"),
    ]
    assert report.checked == 1 and report.skipped == {"Service": 1}


def test_helm_comment_only_documents_are_ignored() -> None:
    text = "---\n# Source: chart/templates/sa.yaml\n---\n# Source: chart/templates/job.yaml\n" + GUARDED_JOB + "---\n---\n# trailing\n"
    report = validate_text(text)
    assert report.failing() == [] and report.documents == 1 and report.checked == 1


def test_multi_document_file_counts_and_indexes() -> None:
    svc = "apiVersion: v1\nkind: Service\nmetadata: {name: tb}\nspec: {ports: [{port: 6006}]}\n"
    text = "\n---\n".join([svc, UNGUARDED_JOB, svc, UNGUARDED_JOB.replace("safe-read", "second")])
    report = validate_text(text)
    assert report.documents == 4 and report.checked == 2 and report.skipped == {"Service": 2}
    assert [(f.document, f.object_ref) for f in report.failing()] == [(1, "PyTorchJob/safe-read"), (3, "PyTorchJob/second")]
    first, second = report.failing()
    assert second.line - first.line == (UNGUARDED_JOB + "\n---\n" + svc + "\n---\n").count("\n")


# -- JSON ----------------------------------------------------------------------------------------


def test_json_file_is_validated(tmp_path: Path) -> None:
    import yaml

    doc = yaml.safe_load(UNGUARDED_JOB)
    text = json.dumps(doc, indent=2)
    env_line = next(i for i, line in enumerate(text.splitlines(), 1) if '"env"' in line)
    report = _validate_bytes(tmp_path, text.encode(), "job.json")
    assert [(f.rule_id, f.line) for f in report.failing()] == [("KDP202", env_line)]


@pytest.mark.parametrize(
    ("data", "rule", "line"),
    [
        (b'{"apiVersion": "v1",\n "kind": }', "KDP001", 2),
        (b'{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": NaN}}', "KDP001", 1),
        (b"", "KDP001", 1),
        (b"\xef\xbb\xbf" + json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}).encode(), None, 0),
    ],
    ids=["syntax", "nan", "empty", "utf8-bom"],
)
def test_json_edge_cases(tmp_path: Path, data: bytes, rule: str | None, line: int) -> None:
    report = _validate_bytes(tmp_path, data, "x.json")
    assert [(f.rule_id, f.line) for f in report.failing()] == ([(rule, line)] if rule else [])


# -- bytes that are not text ---------------------------------------------------------------------


def test_non_utf8_is_located(tmp_path: Path) -> None:
    data = GUARDED_JOB.replace("name: safe-read", "name: safe-read\n  labels: {owner: REN}").encode().replace(b"REN", b"ren\xe9")
    report = _validate_bytes(tmp_path, data)
    assert [(f.rule_id, f.line, f.column) for f in report.failing()] == [("KDP001", 5, 22)]
    assert "UTF-8" in report.failing()[0].message


def test_utf16_with_bom_is_read(tmp_path: Path) -> None:
    report = _validate_bytes(tmp_path, UNGUARDED_JOB.encode("utf-16"))
    assert _rules(report) == [("KDP202", 15)]


@pytest.mark.parametrize("seed", range(8))
def test_binary_garbage_never_raises(tmp_path: Path, seed: int) -> None:
    import random

    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(4096))
    report = _validate_bytes(tmp_path, data)
    assert report.exit_code() == 1
    assert {f.rule_id for f in report.failing()} <= {"KDP001", "KDP002", "KDP004"}


def test_nul_byte_is_located(tmp_path: Path) -> None:
    report = _validate_bytes(tmp_path, GUARDED_JOB.encode().replace(b"ghcr.io", b"ghcr\x00io"))
    assert [(f.rule_id, f.line, f.column) for f in report.failing()] == [("KDP001", 14, 24)]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "x.yaml"),
        ("- " * 100_000 + "x\n", "x.yaml"),
        ("[" * 100_000, "x.yaml"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "x.json"),
    ],
    ids=["flow", "block-same-line", "unclosed", "json"],
)
def test_deep_nesting_is_a_finding_not_a_crash(text: str, name: str) -> None:
    """libyaml's composer recurses in C: about 30,000 levels killed the process (SIGSEGV)."""
    report = validate_text(text, file=name)
    assert [f.rule_id for f in report.failing()] == ["KDP001"]
    # Our own depth check says "nested"; PyYAML >= 6.0.4 stops first with "nesting depth".
    assert "nest" in report.failing()[0].message


def test_nesting_under_the_limit_is_read_or_refused_by_python() -> None:
    """900 levels pass the depth check; whether Python's recursion limit (which other code in the
    process may raise) lets the builder through decides between KDP001 and a read document."""
    report = validate_text("a: " + "[" * 900 + "]" * 900 + "\n")
    assert {f.rule_id for f in report.failing()} in ({"KDP001"}, {"KDP004"})
    assert not any("levels deep" in f.message for f in report.findings)


def test_deep_nesting_in_a_worker_process(tmp_path: Path) -> None:
    for i in range(70):
        (tmp_path / f"{i:02d}.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n" if i else "- " * 100_000 + "x\n")
    report = validate_paths([str(tmp_path)], jobs=2)
    assert report.files == 70 and [f.rule_id for f in report.failing()] == ["KDP001"]


def test_oversized_input_is_a_finding_read_no_further(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from k8sddp.validate import yamlio

    monkeypatch.setattr(yamlio, "MAX_INPUT_BYTES", 1000)
    monkeypatch.setattr("k8sddp.validate.engine.MAX_INPUT_BYTES", 1000)
    big = GUARDED_JOB + "\n".join(f"# padding {i}" for i in range(100)) + "\n"
    report = _validate_bytes(tmp_path, big.encode())
    assert [(f.rule_id, f.line) for f in report.failing()] == [("KDP001", 0)]
    assert "larger than" in report.failing()[0].message and report.documents == 0
    assert [f.rule_id for f in validate_text(big).failing()] == ["KDP001"]
    assert validate_text(GUARDED_JOB).failing() == []
