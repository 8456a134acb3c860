"""Chart templates rendered with the real `helm template`, checked against k8sddp.

- ddpjob: the PyTorchJob equals `k8sddp render`'s for the same spec (parsed objects), the guard
  variables survive any `env` override, and an override of a guard value fails the render.
- k8sddp-webhook: every object matches its Kubernetes API model (no unknown fields, required
  fields present), the pieces fit together (Service -> pods, webhook -> Service, RBAC minimal,
  args accepted by `k8sddp webhook serve`), and the self-signed certificate really serves TLS.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from k8sddp import guardvars as gv
from k8sddp.admission.cel import MATCH_CONDITIONS
from k8sddp.catalogue import CATALOGUE_VERSION
from k8sddp.cli import build_parser
from k8sddp.errors import SpecError
from k8sddp.render import load_spec, render_spec
from k8sddp.render.model import DEFAULTS
from k8sddp.validate import validate_objects

from ..admission.helpers import client_context, get, running_webhook
from . import sync_ddpjob_schema
from .conftest import ChartRenderError, Renderer

REPO = Path(__file__).resolve().parents[2]
DDPJOB = REPO / "charts" / "ddpjob"
WEBHOOK = REPO / "charts" / "k8sddp-webhook"
EXAMPLE = REPO / "examples" / "ddpjob.yaml"
GPU_EXAMPLE = REPO / "examples" / "ddpjob-gpu.yaml"


def _objects(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name in sorted(result["manifests"]):
        out += [d for d in yaml.safe_load_all(result["manifests"][name]) if d]
    return out


def _values_from_spec(ddp: dict[str, Any]) -> dict[str, Any]:
    values = copy.deepcopy(ddp["spec"])
    for key in ("labels", "annotations"):
        if key in ddp["metadata"]:
            values[key] = ddp["metadata"][key]
    return values


def _render_ddp(ddp: dict[str, Any]) -> list[dict[str, Any]]:
    """`k8sddp render` of a DDPJob given as a dict (through a file, as the CLI reads it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ddpjob.yaml"
        path.write_text(yaml.safe_dump(ddp))
        return render_spec(load_spec(str(path))).objects


def _both(helm_render: Renderer, ddp: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ref = _render_ddp(ddp)
    meta = ddp["metadata"]
    chart = _objects(helm_render(DDPJOB, _values_from_spec(ddp), name=meta["name"],
                                 namespace=meta.get("namespace", "default")))
    return chart, ref


# -- ddpjob -------------------------------------------------------------------------------------

def test_ddpjob_chart_equals_render_for_the_bundled_example(helm_render: Renderer) -> None:
    ddp = yaml.safe_load(EXAMPLE.read_text())
    chart, ref = _both(helm_render, ddp)
    assert chart == ref
    # and the committed CI values file is that same spec
    from_file = _objects(helm_render(DDPJOB, None, name="demo", namespace="default",
                                     files=(DDPJOB / "ci" / "demo-values.yaml",)))
    assert from_file == ref


VARIANTS: dict[str, dict[str, Any]] = {
    "legacy-torch-gpus": {"torchVersion": "2.1.2+cu121", "gpusPerNode": 4, "nodes": 3,
                          "command": {"module": "mypkg.train"}, "gpuResource": "amd.com/gpu"},
    "elastic-script": {"elastic": {"minNodes": 1, "maxNodes": 4}, "command": {"script": "/app/train.py", "args": ["--lr", "0.1"]}},
    "single-node-defaults": {"command": {"task": "mypkg.tasks:run"}},
    "user-env-and-scheduling": {
        "command": {"task": "mypkg.tasks:run", "args": ["--steps", "10"]},
        "env": [{"name": "HF_HOME", "value": "/cache"}, {"name": "PYTHONFAULTHANDLER", "value": "1"},
                {"name": "TORCH_NCCL_ENABLE_MONITORING", "value": "1"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
        "scheduling": {"schedulerName": "volcano", "queue": "ml", "minAvailable": 2},
        "imagePullSecrets": ["regcred"], "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "serviceAccountName": "trainer", "priorityClassName": "high", "ttlSecondsAfterFinished": 3600,
        "restartPolicy": "OnFailure", "backoffLimit": 0, "cleanPodPolicy": "All", "cpu": 8, "memory": "32Gi",
        "checkpoint": {"claimName": "ckpt", "mountPath": "/mnt/ckpt"},
        "timeouts": {"processGroupSeconds": 600}, "maxHangRestarts": 0, "seed": 0,
    },
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ddpjob_chart_equals_render_for_variants(helm_render: Renderer, variant: str) -> None:
    ddp = yaml.safe_load(EXAMPLE.read_text())
    for key in ("command", "procsPerNode", "cpu", "memory", "shmSize", "nodes"):
        ddp["spec"].pop(key, None)
    ddp["spec"].update(copy.deepcopy(VARIANTS[variant]))
    ddp["metadata"]["annotations"] = {"owner": "ml-platform"}
    chart, ref = _both(helm_render, ddp)
    assert chart == ref
    assert validate_objects(chart, profile="strict").exit_code() == 0 or variant == "user-env-and-scheduling"
    assert validate_objects(chart, profile="baseline").exit_code() == 0


def test_ddpjob_chart_equals_render_for_the_gpu_example_and_pod_fields(helm_render: Renderer) -> None:
    ddp = yaml.safe_load(GPU_EXAMPLE.read_text())
    chart, ref = _both(helm_render, ddp)
    assert chart == ref
    # the remaining pass-through fields, and GPUs by default
    ddp["spec"].update({
        "hostNetwork": True, "podLabels": {"pool": "h100"}, "securityContext": {"fsGroup": 1000},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}],
        "sidecars": [{"name": "dcgm-exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5"}],
        "initContainers": [{"name": "warm-cache", "image": "busybox:1.36", "command": ["true"]}],
        "resources": {"requests": {"ephemeral-storage": "100Gi"}, "limits": {"ephemeral-storage": "200Gi", "rdma/ib": 1}},
    })
    chart, ref = _both(helm_render, ddp)
    assert chart == ref
    pod = chart[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet" and pod["initContainers"][0]["restartPolicy"] == "Always"
    assert pod["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"podTemplatePatch": {"spec": {"hostIPC": True}}}, "podTemplatePatch is not supported by the chart"),
        ({"volumes": [{"name": "dshm", "emptyDir": {}}]}, "volume name \"dshm\" is render's own"),
        ({"volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints/k8sddp"}]}, "inside the checkpoint mount"),
        ({"sidecars": [{"name": "pytorch", "image": "x"}]}, "training container's"),
        ({"resources": {"requests": {"rdma/ib": 1}, "limits": {"rdma/ib": 2}}}, "cannot be overcommitted"),
    ],
)
def test_chart_refuses_what_render_refuses(helm_render: Renderer, change: dict[str, Any], message: str) -> None:
    ddp = yaml.safe_load(EXAMPLE.read_text())
    ddp["spec"].update(change)
    if "podTemplatePatch" not in change:
        with pytest.raises(SpecError):
            _render_ddp(ddp)
    with pytest.raises(ChartRenderError, match=message):
        helm_render(DDPJOB, _values_from_spec(ddp), name="demo")


def test_guard_variables_survive_any_env_override(helm_render: Renderer) -> None:
    values = yaml.safe_load((DDPJOB / "ci" / "demo-values.yaml").read_text())
    values["env"] = [{"name": "ONLY_MINE", "value": "x"}]  # Helm replaces lists whole
    (job,) = _objects(helm_render(DDPJOB, values, name="demo"))
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        names = [e["name"] for e in replica["template"]["spec"]["containers"][0]["env"]]
        assert names[:2] == [gv.ASYNC_ERROR_HANDLING, gv.FAULTHANDLER] and names[-1] == "ONLY_MINE"
        assert set(names) >= {gv.PG_TIMEOUT, gv.WATCHDOG_TIMEOUT, gv.MAX_HANG_RESTARTS, gv.ARTIFACT_DIR, gv.FR_DUMP_TEMP_FILE}
    assert validate_objects([job], profile="strict").exit_code() == 0


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "0"},
        {"name": "PYTHONFAULTHANDLER", "value": ""},
        {"name": "NCCL_ASYNC_ERROR_HANDLING", "value": "1"},
        {"name": "K8SDDP_ARTIFACT_DIR", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "TORCH_FR_BUFFER_SIZE", "value": "0"},
    ],
)
def test_overriding_a_guard_fails_like_render(helm_render: Renderer, entry: dict[str, Any]) -> None:
    ddp = yaml.safe_load(EXAMPLE.read_text())
    ddp["spec"]["env"] = [{"name": "OK", "value": "1"}, entry]
    with pytest.raises(SpecError, match="mandatory guard variable"):
        _render_ddp(ddp)
    with pytest.raises(ChartRenderError, match=r"env\[1\]: .*would override a mandatory guard variable"):
        helm_render(DDPJOB, _values_from_spec(ddp), name="demo")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # Helm checks values.schema.json before any template runs, so these are the schema's words
        ({"image": None}, "at '/image': got null, want string"),
        ({"checkpoint": {"claimName": None}}, "at '/checkpoint/claimName': got null, want string"),
        ({"gpusPerNode": 2, "procsPerNode": 3}, "one process per GPU"),
        ({"command": {"task": "a.b:c", "module": "x"}}, "at '/command': 'oneOf' failed"),
    ],
)
def test_bad_values_fail_with_a_message(helm_render: Renderer, change: dict[str, Any], message: str) -> None:
    values = yaml.safe_load((DDPJOB / "ci" / "demo-values.yaml").read_text())
    values.update(change)
    with pytest.raises(ChartRenderError, match=message):
        helm_render(DDPJOB, values, name="demo")


def test_bad_release_name_fails(helm_render: Renderer) -> None:
    # Helm refuses what is not a DNS-1123 subdomain itself; the chart refuses the rest of what is
    # not a DNS-1035 label (the PyTorchJob's name becomes its Services' names)
    with pytest.raises(ChartRenderError, match='release name "Demo_1": invalid release name'):
        helm_render(DDPJOB, None, name="Demo_1", files=(DDPJOB / "ci" / "demo-values.yaml",))
    with pytest.raises(ChartRenderError, match="not a DNS-1035 label"):
        helm_render(DDPJOB, None, name="demo.v2", files=(DDPJOB / "ci" / "demo-values.yaml",))


def test_ddpjob_defaults_are_renders_defaults() -> None:
    values = yaml.safe_load((DDPJOB / "values.yaml").read_text())
    flat = {
        "imagePullPolicy": values["imagePullPolicy"], "nodes": values["nodes"],
        "gpuResource": values["gpuResource"], "shmSize": values["shmSize"],
        "checkpointMountPath": values["checkpoint"]["mountPath"],
        "processGroupSeconds": values["timeouts"]["processGroupSeconds"],
        "watchdogSeconds": values["timeouts"]["watchdogSeconds"], "maxHangRestarts": values["maxHangRestarts"],
        "seed": values["seed"], "restartPolicy": values["restartPolicy"], "backoffLimit": values["backoffLimit"],
        "activeDeadlineSeconds": values["activeDeadlineSeconds"], "cleanPodPolicy": values["cleanPodPolicy"],
        "terminationGracePeriodSeconds": values["terminationGracePeriodSeconds"],
    }
    assert flat == {k: DEFAULTS[k] for k in flat}
    assert set(DEFAULTS) - set(flat) == {"elasticMaxRestarts", "rdzvBackend"}  # template defaults (elastic)
    assert "gpusPerNode" not in values  # its default is procsPerNode, as in render


def test_ddpjob_values_schema_is_in_sync_and_accepts_the_example() -> None:
    path = DDPJOB / "values.schema.json"
    assert path.read_text() == sync_ddpjob_schema.render(), "run: python tests/helm/sync_ddpjob_schema.py"
    schema = json.loads(path.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    merged = yaml.safe_load((DDPJOB / "values.yaml").read_text())
    demo = yaml.safe_load((DDPJOB / "ci" / "demo-values.yaml").read_text())
    merged.update({k: v for k, v in demo.items() if k != "checkpoint"})
    merged["checkpoint"].update(demo["checkpoint"])
    assert not list(jsonschema.Draft7Validator(schema).iter_errors(merged))
    merged["nodes"] = 0
    assert list(jsonschema.Draft7Validator(schema).iter_errors(merged))


def test_ddpjob_managed_names_are_guardvars() -> None:
    text = (DDPJOB / "templates" / "_helpers.tpl").read_text()
    block = text.split('{{- define "ddpjob.managedNames" -}}')[1].split("{{- end -}}")[0]
    assert set(block.split()) == set(gv.MANDATORY) | set(gv.SAFETY_NETS) | {"K8SDDP_SEED"}
    nets = text.split('{{- define "ddpjob.safetyNets" -}}')[1].split("{{- end -}}")[0]
    assert tuple(nets.split()) == gv.SAFETY_NETS


# -- k8sddp-webhook -----------------------------------------------------------------------------

_MODELS = {
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "Service"): "V1Service",
    ("v1", "Secret"): "V1Secret",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): "V1ValidatingWebhookConfiguration",
}


def _check_model(value: Any, type_name: str, path: str, errors: list[str]) -> None:
    """Check ``value`` against a kubernetes-client model type (``V1PodSpec``, ``list[V1Container]``,
    ``dict(str, str)``, ``str``, ...): unknown fields, wrong shapes and missing required fields."""
    import kubernetes.client.models as models

    if value is None:
        return
    if type_name.startswith(("list[", "List[")):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _check_model(item, type_name[5:-1], f"{path}[{i}]", errors)
        return
    if type_name.startswith(("dict(", "Dict[")):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map")
            return
        inner = type_name[5:-1].split(", ", 1)[1]
        for k, item in value.items():
            _check_model(item, inner, f"{path}.{k}", errors)
        return
    scalar = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str, "object": object,
              "bytes": str}
    if type_name in scalar:
        ok = isinstance(value, scalar[type_name]) and not (type_name == "int" and isinstance(value, bool))
        if not ok:
            errors.append(f"{path}: expected {type_name}, got {type(value).__name__}")
        return
    cls = getattr(models, type_name)
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object ({type_name})")
        return
    by_json = {v: k for k, v in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json:
            errors.append(f"{path}.{key}: unknown field for {type_name}")
            continue
        _check_model(item, cls.openapi_types[by_json[key]], f"{path}.{key}", errors)
    # required fields: the model's constructor raises when one is None
    try:
        cls(**{by_json[k]: v for k, v in value.items() if k in by_json})
    except ValueError as exc:
        errors.append(f"{path}: {exc}")


def _structure_errors(obj: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    model = _MODELS.get((obj.get("apiVersion"), obj.get("kind")))
    if model is None:
        return []  # CRDs of other projects (cert-manager) are checked by shape below
    _check_model(obj, model, obj["kind"], errors)
    return errors


def _render_webhook(helm_render: Renderer, *files: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    result = helm_render(WEBHOOK, values, name="k8sddp", namespace="k8sddp-system",
                         files=tuple(WEBHOOK / "ci" / f for f in files))
    schema = json.loads((WEBHOOK / "values.schema.json").read_text())
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(result["values"])]
    assert not errors, errors
    return _objects(result)


def _by_kind(objs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        out.setdefault(o["kind"], []).append(o)
    return out


@pytest.mark.parametrize("files", [(), ("cert-manager-values.yaml",), ("namespaced-values.yaml",), ("secret-values.yaml",)])
def test_webhook_chart_objects_pass_structure_checks(helm_render: Renderer, files: tuple[str, ...]) -> None:
    objs = _render_webhook(helm_render, *files)
    for obj in objs:
        assert _structure_errors(obj) == [], obj["kind"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "k8sddp-webhook"
    kinds = _by_kind(objs)
    (deploy,) = kinds["Deployment"]
    (svc,) = kinds["Service"]
    (vwc,) = kinds["ValidatingWebhookConfiguration"]
    pod = deploy["spec"]["template"]
    # Service -> pods -> port
    assert all(pod["metadata"]["labels"][k] == v for k, v in svc["spec"]["selector"].items())
    assert deploy["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    (container,) = pod["spec"]["containers"]
    assert svc["spec"]["ports"][0]["targetPort"] in [p["name"] for p in container["ports"]]
    # the container's flags are ones `k8sddp webhook serve` accepts
    args = build_parser().parse_args(container["args"])
    assert args.handler.__module__ == "k8sddp.commands.webhook"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # webhook -> Service; AdmissionReview v1; the same matchConditions as the exported VAP
    (hook,) = vwc["webhooks"]
    ref = hook["clientConfig"]["service"]
    assert (ref["name"], ref["namespace"], ref["port"]) == (svc["metadata"]["name"], "k8sddp-system", svc["spec"]["ports"][0]["port"])
    assert ref["path"] == args.path
    assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"
    # One rule per API group of the registered kinds, with every kind's resource: the webhook serves them all.
    from k8sddp import kinds as registry

    # (kinds that serve no version, such as a TrainJob under the wrong group, are only recognised to be refused)
    groups: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    for k in registry.kinds():
        if k.versions:
            groups.setdefault((k.group, k.versions), set()).add(k.status.plural)
    got = {(r["apiGroups"][0], tuple(r["apiVersions"])): set(r["resources"]) for r in hook["rules"]}
    assert got == groups
    for r in hook["rules"]:
        assert r["operations"] == ["CREATE", "UPDATE"]
        # ClusterTrainingRuntime is cluster-scoped: the Trainer rule matches both scopes
        assert r["scope"] == ("*" if r["apiGroups"] == ["trainer.kubeflow.org"] else "Namespaced")
    assert [(c["name"], c["expression"]) for c in hook["matchConditions"]] == list(MATCH_CONDITIONS)
    assert 1 <= hook["timeoutSeconds"] <= 30
    assert vwc["metadata"]["annotations"]["k8sddp.dev/catalogue-version"] == CATALOGUE_VERSION
    # least privilege: only get, only configmaps/namespaces and the training runtimes a TrainJob names, never secrets
    for role in kinds.get("ClusterRole", []) + kinds.get("Role", []):
        for rule in role["rules"]:
            assert rule["verbs"] == ["get"] and set(rule["resources"]) <= {"configmaps", "namespaces", "trainingruntimes", "clustertrainingruntimes"}
    # the pod mounts the certificate Secret the webhook serves
    secret_name = pod["spec"]["volumes"][0]["secret"]["secretName"]
    if "Certificate" in kinds:
        assert kinds["Certificate"][0]["spec"]["secretName"] == secret_name
        assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "k8sddp-system/" + kinds["Certificate"][0]["metadata"]["name"]
        assert "caBundle" not in hook["clientConfig"]
    elif "Secret" in kinds:
        assert kinds["Secret"][0]["metadata"]["name"] == secret_name
    else:
        assert secret_name == "my-webhook-tls" and hook["clientConfig"]["caBundle"]


def test_webhook_rbac_follows_the_values(helm_render: Renderer) -> None:
    default = _by_kind(_render_webhook(helm_render))
    assert [r["resources"] for r in default["ClusterRole"][0]["rules"]] == [["configmaps"], ["clustertrainingruntimes", "trainingruntimes"]]  # runtimes: a TrainJob's runtimeRef
    assert "Role" not in default
    scoped = _by_kind(_render_webhook(helm_render, "namespaced-values.yaml"))
    assert [r["resources"] for r in scoped["ClusterRole"][0]["rules"]] == [["clustertrainingruntimes", "trainingruntimes"], ["namespaces"]]
    assert sorted(r["metadata"]["namespace"] for r in scoped["Role"]) == ["ml-team-a", "ml-team-b"]
    assert sorted(b["metadata"]["namespace"] for b in scoped["RoleBinding"]) == ["ml-team-a", "ml-team-b"]
    args = scoped["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--exempt-namespace-selector=k8sddp.dev/guardrails=disabled" in args and "--profile=strict" in args
    off = _by_kind(_render_webhook(helm_render, "secret-values.yaml"))
    assert "ClusterRole" not in off and "Role" not in off
    assert off["ServiceAccount"][0]["automountServiceAccountToken"] is False


def test_webhook_bad_values_fail(helm_render: Renderer) -> None:
    with pytest.raises(ChartRenderError, match="certificates.secret.name is required"):
        _render_webhook(helm_render, values={"certificates": {"mode": "secret"}})
    with pytest.raises(ChartRenderError, match="at '/certificates/mode': value must be one of 'selfSigned', 'certManager', 'secret'"):
        helm_render(WEBHOOK, {"certificates": {"mode": "vault"}}, name="k8sddp")
    # Review 6 item 2: the look-up budget must end before the API server gives up on the call.
    with pytest.raises(ChartRenderError, match="must stay at least 1 s under webhook.timeoutSeconds"):
        helm_render(WEBHOOK, {"configMapLookup": {"timeoutSeconds": 4.5}}, name="k8sddp")
    helm_render(WEBHOOK, {"configMapLookup": {"timeoutSeconds": 4}}, name="k8sddp")
    helm_render(WEBHOOK, {"configMapLookup": {"enabled": False, "timeoutSeconds": 9}}, name="k8sddp")


def test_webhook_defaults_keep_lookups_inside_the_webhook_timeout() -> None:
    values = yaml.safe_load((WEBHOOK / "values.yaml").read_text())
    assert values["configMapLookup"]["timeoutSeconds"] + 1 <= values["webhook"]["timeoutSeconds"]


def test_self_signed_certificate_serves_the_webhook(helm_render: Renderer, tmp_path: Path) -> None:
    kinds = _by_kind(_render_webhook(helm_render))
    secret = kinds["Secret"][0]
    (hook,) = kinds["ValidatingWebhookConfiguration"][0]["webhooks"]
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    key.write_bytes(base64.b64decode(secret["data"]["tls.key"]))
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(hook["clientConfig"]["caBundle"]))
    assert ca.read_bytes() == base64.b64decode(secret["data"]["ca.crt"])
    ctx = client_context(ca)
    ctx.check_hostname = False  # connecting to 127.0.0.1; the name is checked below
    with running_webhook(crt, key) as srv:
        assert get(srv, ctx, "/healthz")[0] == 200
    cert = ssl._ssl._test_decode_cert(str(crt))  # type: ignore[attr-defined]
    sans = {v for k, v in cert["subjectAltName"] if k == "DNS"}
    assert "k8sddp-k8sddp-webhook.k8sddp-system.svc" in sans
