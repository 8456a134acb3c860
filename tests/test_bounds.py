"""One source of bounds (k8sddp/bounds.py): every bound at its limit passes and one past it is
refused, in the DDPJob spec (render), in validate (structure and strict) and in the runtime."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from k8sddp import bounds
from k8sddp import guardvars as gv
from k8sddp.errors import SpecError, UsageError
from k8sddp.render import check_spec, render_spec
from k8sddp.resources import load_schema
from k8sddp.runtime.config import MAX_SECONDS, RuntimeConfig, check_guard_env
from k8sddp.validate import validate_objects

from .conftest import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "ddpjob.yaml").read_text())
I32, I64, WEEK = bounds.INT32_MAX, bounds.INT64_MAX, bounds.MAX_DURATION_SECONDS

#: spec path -> (lowest accepted, highest accepted)
SPEC_BOUNDS: dict[str, tuple[int, int]] = {
    "nodes": (1, I32),
    "procsPerNode": (1, I32),
    "gpusPerNode": (0, I32),
    "maxHangRestarts": (0, I32),
    "seed": (0, bounds.MAX_SEED),
    "backoffLimit": (0, I32),
    "activeDeadlineSeconds": (1, I64),
    "ttlSecondsAfterFinished": (0, I32),
    "terminationGracePeriodSeconds": (1, I64),
    "timeouts.processGroupSeconds": (1, WEEK),
    "timeouts.watchdogSeconds": (1, WEEK),
    "scheduling.minAvailable": (1, I32),
    "scheduling.scheduleTimeoutSeconds": (1, I32),
    "elastic.maxNodes": (1, I32),
    "elastic.maxRestarts": (0, I32),
}


def _with(path: str, value: Any) -> dict[str, Any]:
    ddp = copy.deepcopy(EXAMPLE)
    spec = ddp["spec"]
    if path.startswith("elastic."):
        del spec["nodes"]
        spec["elastic"] = {"minNodes": 1, "maxNodes": 2}
    if path in ("procsPerNode", "gpusPerNode"):
        spec["procsPerNode"] = spec["gpusPerNode"] = value if value else 1
        if path == "gpusPerNode" and value == 0:
            spec["gpusPerNode"] = 0
    node = spec
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return ddp


@pytest.mark.parametrize("path", sorted(SPEC_BOUNDS))
def test_spec_bounds_at_the_limit_and_one_past(path: str) -> None:
    low, high = SPEC_BOUNDS[path]
    for ok in (low, high):
        spec = _with(path, ok)
        check_spec(spec)
        job = render_spec(spec).objects[0]
        assert validate_objects([job], profile="strict").failing() == []
    for bad in (low - 1, high + 1):
        with pytest.raises(SpecError, match=re.escape(path.split(".")[-1])):
            check_spec(_with(path, bad))


@pytest.mark.parametrize("field", ["cpu", "memory", "shmSize"])
def test_spec_quantities_are_non_negative(field: str) -> None:
    check_spec(_with(field, "0"))
    for bad in ("-1", "-0.5Gi", -1):
        with pytest.raises(SpecError, match=field):
            check_spec(_with(field, bad))
    with pytest.raises(SpecError, match="resources"):
        check_spec(_with("resources", {"limits": {"rdma/ib": "-1"}}))


def test_the_schema_maxima_are_the_shared_constants() -> None:
    props = load_schema("ddpjob.schema.json")["properties"]["spec"]["properties"]
    assert props["timeouts"]["properties"]["watchdogSeconds"]["maximum"] == WEEK == MAX_SECONDS
    assert props["nodes"]["maximum"] == I32 and props["activeDeadlineSeconds"]["maximum"] == I64
    strict = (REPO / "schemas" / "pytorchjob.strict.json").read_text()
    assert bounds.decimal_range_pattern(1, WEEK).replace("\\", "\\\\") in strict


def _rendered() -> dict[str, Any]:
    return render_spec(copy.deepcopy(EXAMPLE)).objects[0]


def _set_env(job: dict[str, Any], name: str, value: str) -> dict[str, Any]:
    job = copy.deepcopy(job)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for e in replica["template"]["spec"]["containers"][0]["env"]:
            if e["name"] == name:
                e["value"] = value
    return job


@pytest.mark.parametrize(
    ("name", "rule", "high"),
    [(gv.PG_TIMEOUT, "KDP301", WEEK), (gv.WATCHDOG_TIMEOUT, "KDP302", WEEK), (gv.MAX_HANG_RESTARTS, "KDP303", I32)],
)
def test_strict_env_bounds_are_the_runtimes(name: str, rule: str, high: int) -> None:
    job = _rendered()
    assert validate_objects([_set_env(job, name, str(high))], profile="strict").failing() == []
    failing = validate_objects([_set_env(job, name, str(high + 1))], profile="strict").failing()
    assert {f.rule_id for f in failing} == {rule}
    # the runtime agrees on both sides of the limit
    env = {e["name"]: e["value"] for e in _set_env(job, name, str(high))["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]}
    assert check_guard_env(env) == []
    env[name] = str(high + 1)
    assert check_guard_env(env) != []


@pytest.mark.parametrize(
    ("path", "high"),
    [(("spec", "pytorchReplicaSpecs", "Worker", "replicas"), I32), (("spec", "runPolicy", "backoffLimit"), I32),
     (("spec", "runPolicy", "activeDeadlineSeconds"), I64),
     (("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "terminationGracePeriodSeconds"), I64)],
)
def test_structure_checks_the_api_servers_integer_types(path: tuple[str, ...], high: int) -> None:
    def with_value(v: int) -> dict[str, Any]:
        job = _rendered()
        node = job
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = v
        return job

    assert validate_objects([with_value(high)], profile="strict").failing() == []
    assert {f.rule_id for f in validate_objects([with_value(high + 1)], profile="strict").failing()} == {"KDP101"}


def test_structure_refuses_negative_resource_quantities() -> None:
    job = _rendered()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "-4"
    assert "KDP115" in {f.rule_id for f in validate_objects([job], profile="baseline").failing()}


@pytest.mark.parametrize(
    ("name", "high"),
    [(gv.PG_TIMEOUT, WEEK), (gv.WATCHDOG_TIMEOUT, WEEK), ("K8SDDP_STOP_GRACE_SECONDS", WEEK),
     ("K8SDDP_TRACE_INTERVAL_SECONDS", WEEK), (gv.MAX_HANG_RESTARTS, I32), ("K8SDDP_SEED", bounds.MAX_SEED),
     ("K8SDDP_CHECKPOINT_KEEP", I32)],
)
def test_runtime_bounds_at_the_limit_and_one_past(name: str, high: int) -> None:
    RuntimeConfig.from_env({name: str(high)})
    with pytest.raises(UsageError, match=name):
        RuntimeConfig.from_env({name: str(high + 1)})


def test_decimal_range_pattern_is_exact() -> None:
    for lo, hi in [(0, 0), (1, 9), (1, WEEK), (0, I32), (5, 123)]:
        pattern = re.compile(bounds.decimal_range_pattern(lo, hi))
        probes = {lo, hi, lo - 1, hi + 1, 0, 1, 9, 10, 99, 100, (lo + hi) // 2, hi * 10}
        for n in probes:
            if n >= 0:
                assert bool(pattern.match(str(n))) == (lo <= n <= hi), (lo, hi, n)
        assert not pattern.match("0" + str(hi)) and not pattern.match("") and not pattern.match(f"{hi}.0")
    with pytest.raises(ValueError):
        bounds.decimal_range_pattern(3, 2)


def test_quantity_values() -> None:
    q = bounds.quantity_value
    assert q("500m") == q("0.5") and q("1Gi") == 2**30 and q("1k") == 1000 and q("1e3") == 1000 and q("1E") == 10**18
    assert q("x") is None and q(True) is None and q("") is None and q("1e9999999") is None
    assert bounds.is_nonnegative_quantity("0") and not bounds.is_nonnegative_quantity("-1m")
