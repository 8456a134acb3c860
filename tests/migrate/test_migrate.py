"""k8sddp migrate: real Kubeflow examples, k8sddp's own manifests and minimal reductions; the output
is checked with validate (in-process and the CLI) and against the v2.3.0 CRD structure schemas."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

pytest.importorskip("ruamel.yaml")

from k8sddp.migrate import STOCK_RUNTIME, migrate_text, stock_runtime  # noqa: E402
from k8sddp.migrate.fields import PATCH_CONTAINER_FIELDS, PATCH_POD_FIELDS  # noqa: E402
from k8sddp.render import load_spec, render_spec, to_yaml  # noqa: E402
from k8sddp.validate import validate_objects, validate_text  # noqa: E402

from ..conftest import REPO  # noqa: E402

EXAMPLE = REPO / "examples" / "unguarded-pytorchjob.yaml"

JOB = """\
# Team header: keep me
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: tiny  # the job's name
  namespace: ml
spec:
  runPolicy:
    activeDeadlineSeconds: 3600  # one hour
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: ExitCode
      template:
        metadata:
          labels: {team: vision}
        spec:
          nodeSelector: {pool: gpu}
          tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
          containers:
            - name: pytorch
              image: registry.example.com/tiny:1.0
              command: [torchrun, train.py]  # entry point
              env:
                # the NCCL knobs
                - name: NCCL_DEBUG  # debug level
                  value: WARN
                - name: MASTER_ADDR
                  value: tiny-master-0
                - name: PET_NNODES
                  value: "2"
              resources:
                limits: {nvidia.com/gpu: 1}
              volumeMounts: [{name: data, mountPath: /data}]
          volumes:
            - name: data
              persistentVolumeClaim: {claimName: data}
    Worker:
      replicas: 1
      restartPolicy: ExitCode
      template:
        metadata:
          labels: {team: vision}
        spec:
          nodeSelector: {pool: gpu}
          tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
          containers:
            - name: pytorch
              image: registry.example.com/tiny:1.0
              command: [torchrun, train.py]
              env:
                - name: NCCL_DEBUG
                  value: WARN
                - name: MASTER_ADDR
                  value: tiny-master-0
                - name: PET_NNODES
                  value: "2"
              resources:
                limits: {nvidia.com/gpu: 1}
              volumeMounts: [{name: data, mountPath: /data}]
          volumes:
            - name: data
              persistentVolumeClaim: {claimName: data}
"""


def _schema(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((REPO / "schemas" / name).read_text()))


def _objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _by_kind(text: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in _objects(text) if o.get("kind") == kind]


def _check_crds(text: str) -> None:
    """Every TrainJob and runtime of ``text`` matches the v2.3.0 CRD structure schemas."""
    for obj in _objects(text):
        name = {"TrainJob": "trainjob.structure.json", "ClusterTrainingRuntime": "trainingruntime.structure.json",
                "TrainingRuntime": "trainingruntime.structure.json"}.get(obj["kind"])
        if name:
            assert [e.message for e in _schema(name).iter_errors(obj)] == [], obj["kind"]


def test_minimal_job_fields_comments_and_notes() -> None:
    result = migrate_text(JOB, "job.yaml")
    assert result.exit_code == 0 and result.jobs == 1
    text = result.text
    assert text is not None
    (job,) = _by_kind(text, "TrainJob")
    (runtime,) = _by_kind(text, "ClusterTrainingRuntime")
    assert job["metadata"] == {"name": "tiny", "namespace": "ml"}
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "k8sddp-torch"}
    assert runtime["metadata"]["name"] == "k8sddp-torch"
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == "registry.example.com/tiny:1.0"
    assert trainer["command"] == ["torchrun", "train.py"]
    assert trainer["numNodes"] == 2 and "numProcPerNode" not in trainer  # v2's default: auto
    assert trainer["env"] == [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "PYTHONUNBUFFERED", "value": "1"}]
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 1}}
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == "k8sddp.dev/migrate"
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = rjob["template"]["spec"]["template"]
    assert pod["metadata"] == {"labels": {"team": "vision"}}
    assert pod["spec"]["containers"] == [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert pod["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    # Comments move with their values.
    for comment in ("# Team header: keep me", "# the job's name", "# one hour", "# entry point", "# the NCCL knobs", "# debug level"):
        assert comment in text, comment
    # Notes: located, the operator's variables dropped.
    lines = [n.format("job.yaml") for n in result.notices]
    assert any(line.startswith("job.yaml:28: info: PyTorchJob tiny:") and "MASTER_ADDR dropped" in line for line in lines), lines
    assert any("PET_NNODES dropped" in line and "KDP133" in line for line in lines)
    assert any("numNodes 2" in line for line in lines)
    assert any("PersistentVolumeClaim k8sddp-artifacts" in line and "exist in ml" in line for line in lines)
    # validate: baseline with the runtime of the same output, and the CRDs.
    assert validate_text(text, file="out.yaml").failing() == []
    _check_crds(text)


def test_the_repos_rendered_pytorchjob_stays_strict() -> None:
    """k8sddp's own PyTorchJob render passes strict, so its migration must too."""
    (pj,) = render_spec(load_spec(str(REPO / "examples" / "ddpjob.yaml"))).objects
    source = to_yaml([pj])
    assert validate_text(source, profile="strict").failing() == []
    result = migrate_text(source, "pj.yaml")
    assert result.text is not None
    assert validate_text(result.text, profile="strict").failing() == []
    _check_crds(result.text)
    (job,) = _by_kind(result.text, "TrainJob")
    command = job["spec"]["trainer"]["command"]
    assert not any("$(MASTER_ADDR)" in a or "$(MASTER_PORT)" in a for a in command)  # unset in v2
    assert job["spec"]["trainer"]["numProcPerNode"] == 2
    assert job["spec"]["trainer"]["numNodes"] == pj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] + 1
    # cleanPodPolicy Running has no v2 setting: said, and exit 1.
    assert result.exit_code == 1
    assert [n.note.path for n in result.notices if n.note.level == "lost"] == ["spec.runPolicy.cleanPodPolicy"]
    assert "# k8sddp migrate: lost: spec.runPolicy.cleanPodPolicy" in result.text


def test_repo_example(cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "trainjob.yaml"
    r = cli("migrate", str(EXAMPLE), "--out", str(out))
    assert r.code == 0 and r.out == ""
    assert "info: PyTorchJob resnet-ddp" in r.err
    v = cli("validate", str(out))
    assert v.code == 0, v.out
    (job,) = _by_kind(out.read_text(), "TrainJob")
    assert job["spec"]["trainer"]["numNodes"] == 4 and job["spec"]["trainer"]["numProcPerNode"] == 8
    assert "# A PyTorchJob as many teams write it" in out.read_text()


def _reference_jobs() -> list[Path]:
    folder = REPO.parent / "shared" / "reference" / "kubeflow" / "examples"
    return sorted(p for p in folder.glob("*.yaml") if "kind: PyTorchJob" in p.read_text()) if folder.is_dir() else []


@pytest.mark.parametrize("path", _reference_jobs(), ids=lambda p: p.name)
def test_kubeflow_examples(path: Path, cli: Any, tmp_path: Path) -> None:
    source = _by_kind(path.read_text(), "PyTorchJob")
    result = migrate_text(path.read_text(), path.name)
    assert result.text is not None, [n.format(path.name) for n in result.notices]
    assert validate_text(result.text).failing() == []
    _check_crds(result.text)
    jobs = _by_kind(result.text, "TrainJob")
    assert [j["metadata"]["name"] for j in jobs] == [s["metadata"]["name"] for s in source]
    for job, pj in zip(jobs, source, strict=True):
        specs = pj["spec"]["pytorchReplicaSpecs"]
        assert job["spec"]["trainer"]["numNodes"] == sum(r.get("replicas", 1) for r in specs.values())
        main = specs.get("Master") or specs["Worker"]
        (container,) = [c for c in main["template"]["spec"]["containers"] if c["name"] == "pytorch"]
        assert job["spec"]["trainer"]["image"] == container["image"]
        names = [e["name"] for e in job["spec"]["trainer"]["env"]]
        assert not {"PET_NNODES", "PET_NODE_RANK", "MASTER_ADDR"} & set(names)
    lost = {n.note.path.rsplit(".", 1)[-1] for n in result.notices if n.note.level == "lost"}
    # What the examples lose: elasticity, an entrypoint that expects the v1 operator's variables.
    assert lost <= {"elasticPolicy", "command"}
    assert result.exit_code == (1 if lost else 0)
    if "elasticPolicy" in path.read_text():
        assert "elasticPolicy" in lost
    out = tmp_path / "out.yaml"
    r = cli("migrate", str(path), "--out", str(out))
    assert r.code == result.exit_code and out.read_text() == result.text
    assert cli("validate", str(out)).code == 0


def test_python_command_is_started_by_torchrun() -> None:
    text = JOB.replace("command: [torchrun, train.py]  # entry point", "command: [python3, -u, train.py]")
    text = text.replace("command: [torchrun, train.py]", "command: [python3, -u, train.py]")
    result = migrate_text(text.replace("restartPolicy: ExitCode", "restartPolicy: OnFailure"))
    assert result.text is not None and result.exit_code == 0
    (job,) = _by_kind(result.text, "TrainJob")
    assert job["spec"]["trainer"]["command"] == ["torchrun", "--no-python", "python3", "-u", "train.py"]
    assert job["spec"]["trainer"]["numProcPerNode"] == 1


def test_wrapping_in_torchrun_loses_exit_codes_and_nproc() -> None:
    """torchrun exits 1 whatever its worker did: under ExitCode the script's own retryable codes
    (>= 128) that v1 restarted become final; and an nprocPerNode N > 1 that v1 gave a script that
    starts its own processes (WORLD_SIZE = replicas x N) cannot hold under one process per node."""
    text = JOB.replace("command: [torchrun, train.py]  # entry point", "command: [python3, train.py]")
    text = text.replace("command: [torchrun, train.py]", "command: [python3, train.py]")
    result = migrate_text(text)
    assert result.text is not None and result.exit_code == 1
    lost = {n.note.path: n.note.message for n in result.notices if n.note.level == "lost"}
    assert "torchrun, which exits 1" in lost["spec.pytorchReplicaSpecs.Master.restartPolicy"]
    text = text.replace("restartPolicy: ExitCode", "restartPolicy: OnFailure").replace("spec:\n  runPolicy:", "spec:\n  nprocPerNode: '4'\n  runPolicy:")
    result = migrate_text(text)
    assert result.exit_code == 1
    (note,) = [n.note for n in result.notices if n.note.level == "lost"]
    assert note.path == "spec.nprocPerNode" and "--nproc-per-node=4" in note.message
    (job,) = _by_kind(result.text or "", "TrainJob")
    assert job["spec"]["trainer"]["numProcPerNode"] == 1


def test_what_only_a_runtime_can_carry() -> None:
    text = JOB.replace("          containers:\n            - name: pytorch\n",
                       "          hostNetwork: true\n          priorityClassName: high\n          containers:\n"
                       "            - name: sidecar\n              image: busybox:1.36\n"
                       "            - name: pytorch\n              envFrom: [{configMapRef: {name: cfg}}]\n", 1)
    result = migrate_text(text, "job.yaml")
    assert result.text is not None
    (runtime,) = _by_kind(result.text, "TrainingRuntime")
    assert not _by_kind(result.text, "ClusterTrainingRuntime")
    assert runtime["metadata"]["name"] == "k8sddp-torch-tiny" and runtime["metadata"]["namespace"] == "ml"
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["priorityClassName"] == "high"
    assert [c["name"] for c in pod["containers"]] == ["node", "sidecar"]
    assert pod["containers"][0]["envFrom"] == [{"configMapRef": {"name": "cfg"}}]
    assert pod["restartPolicy"] == "Never"  # the guarded runtime's failure policy stays
    (job,) = _by_kind(result.text, "TrainJob")
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "k8sddp-torch-tiny"}
    # The Worker's template differs now: said as lost.
    assert any(n.note.path == "spec.pytorchReplicaSpecs.Worker.template" and n.note.level == "lost" for n in result.notices)
    cfg = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: ml}\ndata: {A: b}\n"
    assert validate_text(cfg + "---\n" + result.text).failing() == []
    _check_crds(result.text)
    # The runtime comes before the TrainJob that refers to it (kubectl apply order).
    kinds = [o["kind"] for o in _objects(result.text)]
    assert kinds == ["TrainingRuntime", "TrainJob"]


def test_no_command_keeps_the_entrypoint_and_says_so() -> None:
    text = JOB.replace("              command: [torchrun, train.py]  # entry point\n", "              args: [--lr, '0.1']\n")
    text = text.replace("              command: [torchrun, train.py]\n", "              args: [--lr, '0.1']\n")
    result = migrate_text(text)
    assert result.text is not None and result.exit_code == 1
    (runtime,) = _by_kind(result.text, "TrainingRuntime")
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert "command" not in node
    (job,) = _by_kind(result.text, "TrainJob")
    assert job["spec"]["trainer"]["args"] == ["--lr", "0.1"] and "command" not in job["spec"]["trainer"]


def test_multi_document_passes_other_objects_through() -> None:
    other = "# the service, exactly\napiVersion: v1\nkind: Service\nmetadata:   {name: svc}   # odd spacing\nspec: {ports: [{port: 80}]}\n"
    second = JOB.replace("name: tiny  # the job's name", "name: tiny2")
    text = other + "---\n" + JOB + "---\n" + second
    result = migrate_text(text)
    assert result.text is not None and result.jobs == 2
    assert result.text.startswith(other)
    kinds = [o["kind"] for o in _objects(result.text)]
    assert kinds == ["Service", "ClusterTrainingRuntime", "TrainJob", "TrainJob"]  # the shared runtime once
    assert validate_text(result.text).failing() == []


def test_elastic_and_scheduling_are_lost() -> None:
    text = JOB.replace("  runPolicy:\n", "  elasticPolicy: {minReplicas: 1, maxReplicas: 3}\n  runPolicy:\n"
                       "    schedulingPolicy: {minAvailable: 2}\n    ttlSecondsAfterFinished: 600\n")
    result = migrate_text(text)
    assert result.exit_code == 1 and result.text is not None
    lost = {n.note.path for n in result.notices if n.note.level == "lost"}
    assert lost == {"spec.elasticPolicy", "spec.runPolicy.schedulingPolicy"}
    (runtime,) = _by_kind(result.text, "TrainingRuntime")  # the TTL needs the job's own runtime
    assert runtime["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] == 600
    assert "# k8sddp migrate: lost: spec.elasticPolicy" in result.text


def test_stock_runtime(cli: Any, tmp_path: Path, reference: Path) -> None:
    src = tmp_path / "job.yaml"
    src.write_text(JOB)
    out = tmp_path / "out.yaml"
    r = cli("migrate", str(src), "--runtime", "stock", "--out", str(out))
    assert r.code == 1  # ExitCode has no equivalent in the stock runtime
    # The stock runtime sets no restartPolicy and no backoffLimit: JobSet defaults the pods to OnFailure
    # and the Job keeps Kubernetes' backoffLimit 6 (not "any failure fails the JobSet").
    assert "restart OnFailure (JobSet's default), whatever the exit code, until the Job's default backoffLimit (6)" in r.err
    assert "any failure fails" not in r.err
    (job,) = _by_kind(out.read_text(), "TrainJob")
    assert job["spec"]["runtimeRef"]["name"] == STOCK_RUNTIME
    assert not _by_kind(out.read_text(), "ClusterTrainingRuntime")
    names = {e["name"] for e in job["spec"]["trainer"]["env"]}
    assert {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONFAULTHANDLER"} <= names
    stock = reference / "kubeflow-trainer" / "runtimes" / "torch_distributed.yaml"
    assert yaml.safe_load(stock.read_text()) == stock_runtime()
    # The TrainJob passes with the stock runtime beside it; the stock runtime itself has no guards.
    report = validate_objects([yaml.safe_load(stock.read_text()), job])
    assert report.failing() and all(f.document == 0 for f in report.failing())
    # A job that needs its own runtime cannot use the stock one.
    src.write_text(JOB.replace("          containers:\n", "          hostNetwork: true\n          containers:\n", 1))
    r = cli("migrate", str(src), "--runtime", "stock", "--out", str(out))
    assert r.code == 1 and "cannot migrate" in r.err and "nothing written" in r.err


def test_runtime_name_and_no_runtime(cli: Any, tmp_path: Path) -> None:
    src = tmp_path / "job.yaml"
    src.write_text(JOB)
    r = cli("migrate", str(src), "--runtime-name", "team-torch")
    assert r.code == 0
    (job,) = _by_kind(r.out, "TrainJob")
    (runtime,) = _by_kind(r.out, "ClusterTrainingRuntime")
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"] == "team-torch"
    r = cli("migrate", str(src), "--runtime-name", "Team_Torch")
    assert r.code == 2 and "not a Kubernetes object name" in r.err
    r = cli("migrate", str(src), "--runtime", "stock", "--no-runtime")
    assert r.code == 2 and "--no-runtime" in r.err
    r = cli("migrate", str(src), "--no-runtime", "-q")
    assert r.code == 0 and r.err == ""
    assert [o["kind"] for o in _objects(r.out)] == ["TrainJob"]
    assert {f.rule_id for f in validate_text(r.out).failing()} == {"KDP230"}  # unverifiable alone, as documented


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", 2, "no PyTorchJob"),
        (yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(JOB)]}),
         2, "no PyTorchJob (kubeflow.org/v1) to migrate (its PyTorchJobs are items of a List"),
        ("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: x\nspec: {}\n", 1, ":4: error: not valid YAML"),
        (JOB.replace("name: pytorch", "name: trainer"), 1, "has no container named pytorch"),
        (JOB.replace("    Master:\n      replicas: 1\n", "    Master:\n      replicas: 2\n"), 1, "spec.pytorchReplicaSpecs.Master.replicas: cannot migrate: must be 1"),
        (JOB.replace("    Worker:\n", "    Chief:\n"), 1, "only Master and Worker"),
        (JOB.replace("apiVersion: kubeflow.org/v1", "apiVersion: kubeflow.org/v2"), 1, "only kubeflow.org/v1"),
        ("apiVersion: v1\nkind: ConfigMap\n---\n" + JOB + 'x: "\x00"\n', 1, "in.yaml:67: error: not valid YAML: unacceptable character"),
        (JOB.replace("    Worker:\n      replicas: 1\n", "    Worker:\n      replicas: {{ .Values.workers }}\n"),
         1, "in.yaml:39: error: Go/Helm template action {{ .Values.workers }}: this is an unrendered template, not a "
         "manifest; render it and migrate the output: `helm template RELEASE CHART | k8sddp migrate -`"),
    ],
    ids=["not-a-pytorchjob", "list", "broken-yaml", "no-pytorch-container", "two-masters", "chief", "api-version", "control-character",
         "helm-template"],
)
def test_bad_input(text: str, code: int, message: str, cli: Any, tmp_path: Path) -> None:
    src = tmp_path / "in.yaml"
    src.write_text(text)
    out = tmp_path / "out.yaml"
    r = cli("migrate", str(src), "--out", str(out))
    assert r.code == code and message in r.err, r.err
    assert not out.exists() and "Traceback" not in r.err


def test_unreadable_input(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = cli("migrate", str(tmp_path / "missing.yaml"))
    assert r.code == 2 and "missing.yaml: cannot read" in r.err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"  \n")))
    r = cli("migrate", "-")
    assert r.code == 2 and "nothing on standard input" in r.err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(JOB.encode())))
    r = cli("migrate", "-")
    assert r.code == 0 and "<stdin>:28: info" in r.err
    r = cli("migrate", str(EXAMPLE), "--out", str(tmp_path / "no" / "such" / "dir.yaml"))
    assert r.code == 2 and "cannot write" in r.err


def test_patch_field_tables_match_the_crd(reference: Path) -> None:
    crd = yaml.safe_load((reference / "kubeflow-trainer" / "trainer.kubeflow.org_trainjobs.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    rjob = spec["runtimePatches"]["items"]["properties"]["trainingRuntimeSpec"]["properties"]["template"]["properties"]["spec"]["properties"]["replicatedJobs"]["items"]
    pod = rjob["properties"]["template"]["properties"]["spec"]["properties"]["template"]["properties"]["spec"]["properties"]
    assert set(pod) == {*PATCH_POD_FIELDS, "containers", "initContainers"}
    assert set(pod["containers"]["items"]["properties"]) == set(PATCH_CONTAINER_FIELDS)
    assert "podTemplateOverrides" not in spec  # removed in v2.2 (KDP132): nothing goes there


ODD_VALUES = (None, "x", [1], {}, True)
ODD_PATHS = (
    ("metadata",), ("metadata", "name"), ("spec",), ("spec", "runPolicy"), ("spec", "pytorchReplicaSpecs"),
    ("spec", "pytorchReplicaSpecs", "Master"), ("spec", "pytorchReplicaSpecs", "Master", "replicas"),
    ("spec", "pytorchReplicaSpecs", "Master", "template"), ("spec", "pytorchReplicaSpecs", "Master", "template", "spec"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0, "command"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0, "env"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0, "env", 0),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "metadata"),
)


@pytest.mark.parametrize("path", ODD_PATHS, ids=lambda p: ".".join(map(str, p)))
def test_odd_values_never_crash(path: tuple[Any, ...], cli: Any, tmp_path: Path) -> None:
    """Any value in a structural place: exit 0, 1 or 2 with a message, never a traceback; what is
    written passes baseline validate unless migrate said it does not (a lost note)."""
    for value in ODD_VALUES:
        data = yaml.safe_load(JOB)
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        src = tmp_path / "in.yaml"
        src.write_text(yaml.safe_dump(data))
        r = cli("migrate", str(src))
        assert r.code in (0, 1, 2) and "Traceback" not in r.err and r.err, (path, value)
        if r.out and "fails validate" not in r.err:
            assert validate_text(r.out).failing() == [], (path, value)


def test_yaml_is_read_as_the_api_server_reads_it(cli: Any, tmp_path: Path) -> None:
    """An env value `yes` is a boolean in YAML 1.1 (the API server; NOTES.md): kept as written, and
    the TrainJob's check says so, as validate does for the PyTorchJob; 0644 stays 0644."""
    src = tmp_path / "in.yaml"
    src.write_text(JOB.replace("value: WARN", "value: yes").replace(
        "persistentVolumeClaim: {claimName: data}", "configMap: {name: c, defaultMode: 0644}"))
    r = cli("migrate", str(src))
    assert r.code == 1 and "value: yes" in r.out and "defaultMode: 0644" in r.out
    assert "fails validate (baseline)" in r.err
    # Structure, both times: the PyTorchJob's schema (KDP101) and the TrainJob's (KDP130).
    assert "KDP101" in {f.rule_id for f in validate_text(src.read_text()).failing()}
    assert "KDP130" in {f.rule_id for f in validate_text(r.out).failing()}
    src.write_text(JOB.replace("  namespace: ml\n", "  namespace: ml\n  namespace: other\n"))
    r = cli("migrate", str(src))
    assert r.code == 1 and "in.yaml:7: error: not valid YAML" in r.err and r.out == ""


def test_runtime_options_and_nproc(cli: Any, tmp_path: Path) -> None:
    src = tmp_path / "job.yaml"
    src.write_text(JOB.replace("spec:\n  runPolicy:", "spec:\n  nprocPerNode: \"4\"\n  runPolicy:", 1)
                   .replace("[torchrun, train.py]", "[torchrun, --nproc-per-node=2, train.py]"))
    r = cli("migrate", str(src), "--artifact-claim", "team-artifacts", "--max-restarts", "5", "--shm-size", "1Gi")
    assert r.code == 0, r.err
    (job,) = _by_kind(r.out, "TrainJob")
    assert job["spec"]["trainer"]["numProcPerNode"] == 2 and "--nproc-per-node=2 wins" in r.err
    (runtime,) = _by_kind(r.out, "ClusterTrainingRuntime")
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"]["maxRestarts"] == 5
    volumes = {v["name"]: v for v in jobset["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["artifacts"]["persistentVolumeClaim"]["claimName"] == "team-artifacts"
    assert volumes["dshm"]["emptyDir"]["sizeLimit"] == "1Gi"
    assert validate_text(r.out).failing() == []
    r = cli("migrate", str(src), "--max-restarts", "0")
    assert r.code == 2


def test_a_volume_named_like_the_runtimes() -> None:
    clash = JOB.replace("            - name: data\n              persistentVolumeClaim: {claimName: data}", "            - name: artifacts\n              emptyDir: {}")
    result = migrate_text(clash.replace("volumeMounts: [{name: data,", "volumeMounts: [{name: artifacts,"))
    assert [n.note.path for n in result.notices if n.note.level == "lost"] == ["spec.pytorchReplicaSpecs.Master.template.spec.volumes[0]"]
    shm = JOB.replace("            - name: data\n              persistentVolumeClaim: {claimName: data}",
                      "            - name: dshm\n              emptyDir: {medium: Memory, sizeLimit: 1Gi}")
    result = migrate_text(shm.replace("volumeMounts: [{name: data, mountPath: /data}]", "volumeMounts: [{name: dshm, mountPath: /dev/shm}]"))
    assert result.exit_code == 0  # the same kind: merged on purpose (the job's /dev/shm size wins)
    assert result.text is not None and validate_text(result.text).failing() == []


def test_values_in_comments_cannot_add_yaml() -> None:
    """The lost notes are written as comments; a value with line breaks stays inside its comment."""
    text = JOB.replace("    activeDeadlineSeconds: 3600  # one hour\n",
                       '    activeDeadlineSeconds: 3600\n    cleanPodPolicy: "All\\nkind: Secret\\u2028x"\n')
    result = migrate_text(text)
    assert result.text is not None and result.exit_code == 1
    assert [o["kind"] for o in _objects(result.text)] == ["ClusterTrainingRuntime", "TrainJob"]
    assert "\nkind: Secret" not in result.text


def test_generate_name() -> None:
    text = JOB.replace("  name: tiny  # the job's name\n", "  generateName: tiny-\n").replace(
        "          containers:\n", "          hostNetwork: true\n          containers:\n")
    result = migrate_text(text)
    assert result.text is not None
    (job,) = _by_kind(result.text, "TrainJob")
    (runtime,) = _by_kind(result.text, "TrainingRuntime")
    assert job["metadata"]["generateName"] == "tiny-" and runtime["metadata"]["name"] == "k8sddp-torch-tiny"
    assert job["spec"]["runtimeRef"]["name"] == "k8sddp-torch-tiny"
    assert validate_text(result.text).failing() == []


@pytest.mark.parametrize("command", ["[bash, -c, 'torchrun train.py']", "[python, -m, torch.distributed.launch, train.py]"])
def test_launchers_migrate_cannot_read_are_kept(command: str) -> None:
    result = migrate_text(JOB.replace("[torchrun, train.py]", command))
    assert result.text is not None and result.exit_code == 1
    (job,) = _by_kind(result.text, "TrainJob")
    assert job["spec"]["trainer"]["command"] == yaml.safe_load(command)  # not wrapped in a second torchrun


def test_a_name_too_long_for_the_jobsets_pods() -> None:
    """JobSet's webhook refuses a JobSet whose pod names `NAME-node-0-INDEX-xxxxx` exceed 63
    characters (a PyTorchJob name that v1 accepted can be too long): nothing is written."""
    ok = migrate_text(JOB.replace("name: tiny  # the job's name", "name: " + "a" * 48))  # 48 + len("-node-0-1-abcde") = 63
    assert ok.text is not None
    result = migrate_text(JOB.replace("name: tiny  # the job's name", "name: " + "a" * 49), "job.yaml")
    assert result.text is None and result.exit_code == 1
    (notice,) = result.notices
    assert notice.format("job.yaml").startswith(f"job.yaml:5: error: PyTorchJob {'a' * 49}: metadata.name: cannot migrate: too long")
    assert "-node-0-1-xxxxx (64 characters, more than 63)" in notice.note.message


def test_cpu_auto_process_count_is_said() -> None:
    """v1 passed `auto` to torchrun (one process per CPU of the node without an accelerator);
    Trainer v2.3 resolves `auto` without a GPU to the CPU request (torch.go): the count may change."""
    text = JOB.replace("limits: {nvidia.com/gpu: 1}", "requests: {cpu: 4}")
    result = migrate_text(text)
    notes = [n.note for n in result.notices if n.note.path == "spec.nprocPerNode"]
    assert len(notes) == 1 and "the CPU request (else limit) of the node" in notes[0].message
    assert not [n for n in migrate_text(JOB).notices if n.note.path == "spec.nprocPerNode"]  # a GPU: auto is the same
    elastic = text.replace("spec:\n  runPolicy:", "spec:\n  elasticPolicy: {nProcPerNode: 2}\n  runPolicy:", 1)
    elastic = elastic.replace("command: [torchrun, train.py]", "command: [torchrun, --nproc-per-node=4, train.py]")
    (note,) = [n.note for n in migrate_text(elastic).notices if "nProcPerNode" in n.note.path or "nprocPerNode" in n.note.path]
    assert note.path == "spec.elasticPolicy.nProcPerNode" and "--nproc-per-node=4 wins" in note.message


def test_on_failure_with_torchrun_says_failures_become_final() -> None:
    """torchrun exits 1 whenever a worker fails: under the guarded runtime's policy that is final,
    where v1's OnFailure restarted it; the note says so (not for `k8sddp launch -- torchrun`)."""
    result = migrate_text(JOB.replace("restartPolicy: ExitCode", "restartPolicy: OnFailure"))
    notes = [n.note.message for n in result.notices if n.note.path.endswith(".restartPolicy")]
    assert len(notes) == 2 and all("torchrun, which exits 1 whenever a worker fails" in m for m in notes)
    launched = JOB.replace("restartPolicy: ExitCode", "restartPolicy: OnFailure").replace(
        "command: [torchrun, train.py]", "command: [k8sddp, launch, --, torchrun, train.py]")
    notes = [n.note.message for n in migrate_text(launched).notices if n.note.path.endswith(".restartPolicy")]
    assert len(notes) == 2 and not any("exits 1 whenever" in m for m in notes)


def test_a_reference_to_the_v1_operators_pod_labels_is_lost() -> None:
    """Selectors and fieldRefs on labels only the v1 operator set match nothing in v2 (JobSet's labels)."""
    text = JOB.replace(
        "                - name: NCCL_DEBUG  # debug level\n",
        "                - name: REPLICA\n                  valueFrom:\n                    fieldRef: {fieldPath: \"metadata.labels['training.kubeflow.org/replica-index']\"}\n"
        "                - name: NCCL_DEBUG  # debug level\n")
    result = migrate_text(text)
    assert result.exit_code == 1 and result.text is not None
    (note,) = [n.note for n in result.notices if "training.kubeflow.org/" in n.note.message]
    assert note.level == "lost" and note.path == "spec.pytorchReplicaSpecs.Master.template"
    assert "training.kubeflow.org/replica-index: batch.kubernetes.io/job-completion-index" in note.message
    assert not [n for n in migrate_text(JOB).notices if "training.kubeflow.org/" in n.note.message]


def test_v1_variables_in_args_and_env_values_are_lost() -> None:
    """The kubelet expands $(VAR) from the container's env at its start; a v2 container has only
    PET_*, so $(MASTER_ADDR), $(WORLD_SIZE), ... stay as written ($$(VAR) is the kubelet's escape)."""
    text = JOB.replace("command: [torchrun, train.py]  # entry point",
                       "command: [python3, train.py]\n              args: ['--url=tcp://$(MASTER_ADDR):$(MASTER_PORT)', '$$(RANK)']")
    text = text.replace("                  value: WARN\n", "                  value: $(WORLD_SIZE)\n", 1)
    result = migrate_text(text.replace("restartPolicy: ExitCode", "restartPolicy: OnFailure"))
    lost = {n.note.path: n.note.message for n in result.notices if n.note.level == "lost"}
    base = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"
    assert "$(MASTER_ADDR), $(MASTER_PORT): set by the v1 operator" in lost[f"{base}.args"]
    assert "$(MASTER_ADDR) -> $(PET_MASTER_ADDR)" in lost[f"{base}.args"] and "RANK" not in lost[f"{base}.args"]
    assert lost[f"{base}.env[NCCL_DEBUG]"].startswith("$(WORLD_SIZE): set by the v1 operator")
    assert not [n for n in migrate_text(JOB).notices if "a Trainer v2 container has only" in n.note.message]


def test_out_through_a_symlink_or_a_fifo_never_replaces_it(cli: Any, tmp_path: Path) -> None:
    """`--out` to a symbolic link writes the file it points to (the link stays); to a FIFO or a
    device (`--out /dev/stdout`) it writes through it: a rename would have put a regular file
    where the device node was (as root: /dev/full, /dev/stdout)."""
    import os

    target = tmp_path / "real.yaml"
    target.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    assert cli("migrate", str(EXAMPLE), "--out", str(link)).code == 0
    assert link.is_symlink() and "kind: TrainJob" in target.read_text()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert cli("migrate", str(EXAMPLE), "--out", str(fifo)).code == 0
        assert fifo.is_fifo()
        assert b"kind: TrainJob" in os.read(reader, 1 << 16)
    finally:
        os.close(reader)


def test_the_inputs_own_runtime_of_that_name_is_not_written_again() -> None:
    """A file that holds the guarded runtime already (`runtime render` output, another option):
    a second copy after it would replace it on `kubectl apply`."""
    from k8sddp.render import render_runtime

    mine = to_yaml(render_runtime(max_restarts=5).objects)
    result = migrate_text(mine + "---\n" + JOB)
    assert result.text is not None and result.text.startswith(mine)
    runtimes = _by_kind(result.text, "ClusterTrainingRuntime")
    assert len(runtimes) == 1 and runtimes[0]["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 5
    assert validate_text(result.text).failing() == []
