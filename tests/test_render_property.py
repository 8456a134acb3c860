"""Property: whatever a DDPJob spec holds, ``render`` either refuses it (SpecError, naming a field)
or returns a PyTorchJob that passes ``validate --profile strict`` once written out as YAML.

Specs are drawn by hypothesis over the fields of ``schemas/ddpjob.schema.json`` that shape the pod,
including values that collide with what render adds and ``podTemplatePatch`` entries that try to
change the guard variables, /dev/shm, the checkpoint volume and the GPU count.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from k8sddp import bounds
from k8sddp import guardvars as gv
from k8sddp.errors import SpecError
from k8sddp.render import check_spec, render_spec, to_yaml
from k8sddp.validate import validate_text

from .conftest import REPO

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

BASE = yaml.safe_load((REPO / "examples" / "ddpjob.yaml").read_text())
GUARDS = [*gv.MANDATORY, *gv.SAFETY_NETS, "K8SDDP_SEED"]

names = st.from_regex(r"\A[a-z]([-a-z0-9]{0,10}[a-z0-9])?\Z")
# the hostile choices are one branch of several, so that most specs get as far as the patch
user_env_names = st.from_regex(r"\A[A-Z][A-Z0-9_]{0,12}\Z")
env_names = st.one_of(user_env_names, user_env_names, user_env_names, st.sampled_from(GUARDS))
env_values = st.one_of(st.sampled_from(["0", "1", "3", "", " 00", "/tmp/x", "604801", "-1"]), st.text(max_size=12))
safe_paths = st.from_regex(r"\A/[a-z]{1,8}(/[a-z]{1,8})?\Z").filter(lambda p: p != "/checkpoints" and not p.startswith("/checkpoints/"))
paths = st.one_of(safe_paths, safe_paths, safe_paths,
                  st.sampled_from(["/dev/shm", "/checkpoints", "/checkpoints/k8sddp", "/dev/shm/x", "/data", "/"]))
quantities = st.one_of(st.integers(min_value=0, max_value=64).map(str), st.sampled_from(["500m", "1Gi", "0", "2"]))
containers = st.fixed_dictionaries({"name": st.one_of(names, names, names, st.just("pytorch")), "image": st.just("busybox:1.36")},
                                   optional={"restartPolicy": st.sampled_from(["Always", "Always", "Always", "Never"]),
                                             "securityContext": st.fixed_dictionaries({"privileged": st.booleans()})})
env_entry = st.builds(lambda n, v: {"name": n, "value": v}, env_names, env_values)
patch_env = st.one_of(env_entry, st.builds(lambda n: {"name": n, "$patch": "delete"}, env_names))
patches = st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={"labels": st.dictionaries(names, names, max_size=2)}),
    "spec": st.fixed_dictionaries({}, optional={
        "containers": st.lists(st.fixed_dictionaries({"name": st.just("pytorch")}, optional={
            "env": st.lists(patch_env, max_size=3),
            "resources": st.fixed_dictionaries({"limits": st.fixed_dictionaries({"nvidia.com/gpu": quantities})}),
            "volumeMounts": st.lists(st.fixed_dictionaries({"mountPath": paths, "name": st.sampled_from(["dshm", "checkpoints"])}), max_size=2),
        }), max_size=1),
        "volumes": st.lists(st.one_of(
            st.just({"name": "dshm", "emptyDir": {"medium": None}}),
            st.just({"name": "checkpoints", "$patch": "delete"}),
            st.builds(lambda n: {"name": n, "emptyDir": {}}, names)), max_size=2),
        "hostIPC": st.booleans(),
    }),
})


HOSTILE = ("sizes", "env", "volumes", "mounts", "resources", "containers", "labels", "patch")


@st.composite
def specs(draw: Any) -> dict[str, Any]:
    """A DDPJob; at most two of :data:`HOSTILE` get values chosen to collide with render's own."""
    hostile = draw(st.sets(st.sampled_from(HOSTILE), max_size=2))
    ddp = copy.deepcopy(BASE)
    spec = ddp["spec"]
    procs = draw(st.integers(min_value=1, max_value=8))
    spec["procsPerNode"] = procs
    gpus = draw(st.sampled_from([None, 0, procs, procs + 1] if "sizes" in hostile else [None, 0, procs]))
    if gpus is None:
        spec.pop("gpusPerNode", None)
    else:
        spec["gpusPerNode"] = gpus
    if draw(st.booleans()):
        del spec["nodes"]
        low = draw(st.integers(min_value=1, max_value=4))
        spec["elastic"] = {"minNodes": low, "maxNodes": draw(st.integers(min_value=low, max_value=8))}
    else:
        spec["nodes"] = draw(st.integers(min_value=1, max_value=bounds.INT32_MAX))
    spec["timeouts"] = {"processGroupSeconds": draw(st.integers(1, bounds.MAX_DURATION_SECONDS)),
                        "watchdogSeconds": draw(st.integers(1, bounds.MAX_DURATION_SECONDS))}
    spec["seed"] = draw(st.integers(0, bounds.MAX_SEED))
    spec["torchVersion"] = draw(st.sampled_from(["2.1", "2.2", "2.13", "3.0"]))
    entry = env_entry if "env" in hostile else st.builds(lambda n, v: {"name": n, "value": v}, user_env_names, st.text(max_size=12))
    spec["env"] = draw(st.lists(entry, max_size=3, unique_by=lambda e: e["name"]))
    vol_names = st.one_of(names, st.sampled_from(["dshm", "checkpoints"])) if "volumes" in hostile else names
    vols = draw(st.lists(vol_names, max_size=3, unique="volumes" not in hostile))
    spec["volumes"] = [{"name": n, "emptyDir": {}} for n in vols]
    mount_names = st.sampled_from([*vols, "checkpoints", "missing"]) if "mounts" in hostile else st.sampled_from([*vols, "checkpoints"])
    spec["volumeMounts"] = draw(st.lists(st.builds(lambda n, p: {"name": n, "mountPath": p}, mount_names,
                                                   paths if "mounts" in hostile else safe_paths),
                                         max_size=3, unique_by=None if "mounts" in hostile else (lambda m: m["mountPath"])))
    spec["resources"] = draw(st.fixed_dictionaries({}, optional={
        "requests": st.dictionaries(st.sampled_from(["cpu", "nvidia.com/gpu"] if "resources" in hostile else ["ephemeral-storage", "rdma/ib"]),
                                    quantities, max_size=2),
        "limits": st.dictionaries(st.sampled_from(["ephemeral-storage", "rdma/ib", "hugepages-2Mi"]), quantities, max_size=2)}))
    if "resources" not in hostile:  # extended resources: one value for both, as the API server wants
        for name in set(spec["resources"].get("requests", {})) & set(spec["resources"].get("limits", {})):
            if name != "ephemeral-storage":
                spec["resources"]["requests"][name] = spec["resources"]["limits"][name]
            else:
                spec["resources"]["requests"][name] = "0"
    side = containers if "containers" in hostile else containers.map(lambda c: {**c, "name": "side-" + c["name"], "restartPolicy": "Always"})
    spec["sidecars"] = draw(st.lists(side, max_size=2, unique_by=None if "containers" in hostile else (lambda c: c["name"])))
    init = containers.map(lambda c: {k: v for k, v in c.items() if k != "restartPolicy" or "containers" in hostile})
    spec["initContainers"] = [{**c, "name": "init-" + c["name"]} for c in draw(st.lists(init, max_size=1))]
    label_keys = ["pool", "team", "training.kubeflow.org/job-name"] if "labels" in hostile else ["pool", "zone"]
    spec["podLabels"] = draw(st.dictionaries(st.sampled_from(label_keys), names, max_size=2))
    spec["podAnnotations"] = draw(st.dictionaries(st.sampled_from(["a.example.com/x", "note"]), st.text(max_size=8), max_size=2))
    spec["hostNetwork"] = draw(st.booleans())
    spec["containerSecurityContext"] = draw(st.fixed_dictionaries({}, optional={"privileged": st.booleans()}))
    if "patch" in hostile or draw(st.booleans()):
        spec["podTemplatePatch"] = draw(patches)
    return ddp


@hypothesis.settings(max_examples=120, deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(specs())
def test_render_refuses_or_passes_strict(ddp: dict[str, Any]) -> None:
    try:
        check_spec(ddp)
    except SpecError:
        return  # the schema refuses it (e.g. a field out of bounds)
    try:
        result = render_spec(ddp)
    except SpecError as exc:
        assert exc.path and exc.path.startswith("spec."), str(exc)
        return
    report = validate_text(to_yaml(result.objects), file="rendered.yaml", profile="strict")
    assert report.failing() == [], [f"{f.rule_id} {f.path} {f.message}" for f in report.failing()]
