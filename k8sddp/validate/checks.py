"""The checks of one PyTorchJob: structure (layer 1) and the guardrail profiles (layer 2).

Schema-expressible rules live in the generated JSON Schemas (``schemas/``, tagged with
``x-k8sddp-rule``); the few that JSON Schema cannot express (cross-field and list-map checks)
are code here, under the same rule ids. Messages are written here, from the catalogue's rule and
the object's actual values, so they name the variable, the value found and the value expected.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema_rs

from .. import guardvars as gv
from ..resources import load_schema
from ..schemabase import RULE_KEY, SAFETY_NET_OFF, UNRESOLVED_KEY
from ..schemagen import container_rules
from .envchecks import hide_credential_values
from .envresolve import ConfigMapIndex, EnvValue, effective_env
from .jobparts import MAPPING as _MAPPING
from .jobparts import get as _get
from .jobparts import pytorch_container as _pytorch_container
from .jobparts import replicas as _replicas
from .rawfinding import RawFinding, json_path
from .strictchecks import check_host_access, check_sizes, check_volumes

__all__ = ["check_guardrails", "check_structure", "container_guard_findings", "env_entries", "schema_findings"]

#: Kubernetes object names (Services included) are at most 63 characters (DNS-1035 label).
SERVICE_NAME_MAX = 63


@functools.cache
def _validator(name: str) -> Any:
    return jsonschema_rs.validator_for(load_schema(name))


def _rule_of(schema: Any, schema_path: list[Any]) -> str:
    """The innermost ``x-k8sddp-rule`` along ``schema_path``."""
    rule = ""
    node = schema
    for part in schema_path:
        if isinstance(node, _MAPPING):
            rule = node.get(RULE_KEY, rule)
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            break
    if isinstance(node, _MAPPING):
        rule = node.get(RULE_KEY, rule)
    return rule


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- structure ------------------------------------------------------------------------------------


def _container_names(instance: Any) -> str:
    """For KDP104: the names of the containers in ``instance`` (a containers list, or an object holding one)."""
    containers = instance.get("containers") if isinstance(instance, _MAPPING) else instance
    if not isinstance(containers, list):
        return "no containers list"
    names = [repr(c.get("name")) for c in containers if isinstance(c, _MAPPING) and c.get("name") is not None]
    return f"found {', '.join(names)}" if names else "found no named container"


def _structure_message(rule_id: str, path: tuple[Any, ...], raw: str, instance: Any = None) -> str:
    if rule_id == "KDP101":
        hint = ""
        if "Additional properties" in raw:
            hint = " (the API server prunes unknown fields silently, so the setting would be lost)"
        elif "is not of type \"string\"" in raw and (raw.split(" ", 1)[0] in ("true", "false") or raw[:1].isdigit()):
            hint = " (YAML 1.1 reads yes/no/on/off/true and bare numbers as non-strings: quote the value)"
        return f"not accepted by the PyTorchJob CRD: {_short(raw)}{hint}"
    if rule_id == "KDP102":
        return f"metadata the API server refuses: {_short(raw)}"
    if rule_id == "KDP103":
        return f"job name must be a DNS-1035 label (lower-case letters, digits, '-', starting with a letter): {_short(raw)}"
    if rule_id == "KDP104":
        if path and (path[-1] == "image" or '"image" is a required property' in raw):
            # The webhook wants an image in every container, sidecars included.
            return (
                f"container {json_path(path)} has no image; every container needs a non-empty image (the operator's webhook "
                "rejects the job). If it came out of kustomize: a strategic-merge patch "
                "replaces a PyTorchJob's whole containers list (dropping image, command and env); add `k8sddp kustomize openapi` output to the "
                "kustomization's openapi: field so containers and env merge by name"
            )
        return (
            f"no container named \"pytorch\" ({_container_names(instance)}): the operator injects its env into, and reads the exit "
            "code of, the container named pytorch only, and its webhook rejects a replica without one; rename the training container to pytorch"
        )
    if rule_id == "KDP105":
        return (
            "replica specs the operator's webhook rejects (only Master and Worker; Master replicas exactly 1; "
            f"Worker replicas at least 1; elasticPolicy needs Worker; not both nprocPerNode fields): {_short(raw)}"
        )
    if rule_id == "KDP107":
        return f"unknown value: {_short(raw)}"
    return _short(raw)


def _offending_key(err: Any) -> tuple[str, ...]:
    """For errors about a key rather than a value (an unknown field, a bad label key), the key:
    so that the finding points at the misspelt line, not at the start of the enclosing object."""
    kind = err.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties) and kind.unexpected:
        return (str(kind.unexpected[0]),)
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.PropertyNames) and isinstance(kind.error.instance, str):
        return (kind.error.instance,)
    return ()


def prune_nulls(value: Any) -> Any:
    """``value`` without the ``null`` members of its objects, recursively.

    The API server prunes ``null`` fields of a custom resource whose schema does not say
    ``nullable`` before it validates (Kubernetes docs, CustomResourceDefinitions: Defaulting and
    Nullable), and decodes ``null`` metadata fields to their zero values; so ``value:`` with nothing
    after it is an absent value, not a type error. Only called for documents that fail as written.
    """
    if isinstance(value, _MAPPING):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value


def schema_findings(
    schema_name: str, obj: Mapping[str, Any], message: Callable[[str, tuple[Any, ...], str, Any], str], default_rule: str
) -> list[RawFinding]:
    """The findings of one object against a generated structure schema of ``schemas/``.

    Args:
        schema_name: the schema's file name (``pytorchjob.structure.json``).
        obj: the object (``null`` members are pruned first, as the API server does, when it fails as written).
        message: ``(rule id, path, validator message, offending value) -> finding message``; a
            credential-named env var's literal value is then hidden (KDP217).
        default_rule: the rule of an error under no ``x-k8sddp-rule``.

    Returns:
        One finding per rule and path (an unknown key is reported at the key itself).
    """
    findings: list[RawFinding] = []
    validator = _validator(schema_name)
    if validator.is_valid(obj) or validator.is_valid(pruned := prune_nulls(obj)):
        return findings
    schema = load_schema(schema_name)
    seen: set[tuple[str, tuple[Any, ...]]] = set()
    for err in validator.iter_errors(pruned):
        rule_id = _rule_of(schema, list(err.schema_path)) or default_rule
        path = tuple(err.instance_path) + _offending_key(err)
        if (rule_id, path) in seen:
            continue
        seen.add((rule_id, path))
        findings.append(RawFinding(rule_id, path, hide_credential_values(obj, path, message(rule_id, path, err.message, err.instance))))
    return findings


def check_structure(job: Mapping[str, Any]) -> list[RawFinding]:
    """Layer 1 for one PyTorchJob object.

    Returns:
        Findings of rules KDP101-KDP107, one per rule and path.
    """
    findings = schema_findings("pytorchjob.structure.json", job, _structure_message, "KDP101")
    findings += _check_service_names(job)
    findings += _check_list_maps(job)
    return findings


def _check_service_names(job: Mapping[str, Any]) -> list[RawFinding]:
    name = _get(job, "metadata", "name")
    if not isinstance(name, str) or not name or len(name) > SERVICE_NAME_MAX:
        return []  # (a name over 63 characters is already KDP103 in the schema)
    longest = ""
    # An elastic job's Workers scale up to elasticPolicy.maxReplicas: the last Service index too.
    max_replicas = _get(job, "spec", "elasticPolicy", "maxReplicas")
    for rtype, replica in _replicas(job):
        count = replica.get("replicas", 1)
        count = count if isinstance(count, int) else 1
        if rtype == "Worker" and isinstance(max_replicas, int):
            count = max(count, max_replicas)
        last = max(count - 1, 0)
        service = f"{name}-{rtype.lower()}-{last}"
        if len(service) > len(longest):
            longest = service
    if len(longest) > SERVICE_NAME_MAX:
        return [
            RawFinding(
                "KDP103",
                ("metadata", "name"),
                f"job name {name!r} is too long: the operator's Service {longest!r} would have {len(longest)} "
                f"characters, more than {SERVICE_NAME_MAX}; shorten the name by {len(longest) - SERVICE_NAME_MAX}",
            )
        ]
    return []


def _duplicates(items: Any, key: str) -> list[tuple[int, str]]:
    if not isinstance(items, list):
        return []
    seen: set[str] = set()
    dups = []
    for i, item in enumerate(items):
        value = item.get(key) if isinstance(item, _MAPPING) else None
        if isinstance(value, str):
            if value in seen:
                dups.append((i, value))
            seen.add(value)
    return dups


def _check_list_maps(job: Mapping[str, Any]) -> list[RawFinding]:
    """KDP106: the CRD's list-maps keyed by name (containers, initContainers, env, ports...)."""
    findings = []
    for rtype, replica in _replicas(job):
        pod = _get(replica, "template", "spec")
        if not isinstance(pod, _MAPPING):
            continue
        base = ("spec", "pytorchReplicaSpecs", rtype, "template", "spec")
        for field in ("containers", "initContainers"):
            containers = pod.get(field)
            for i, name in _duplicates(containers, "name"):
                findings.append(RawFinding("KDP106", (*base, field, i), f"two {field} are named {name!r}; the API server refuses duplicate names in this list-map"))
            for ci, container in enumerate(containers if isinstance(containers, list) else []):
                if not isinstance(container, _MAPPING):
                    continue
                for sub in ("env", "ports", "volumeMounts"):
                    key = "mountPath" if sub == "volumeMounts" else ("containerPort" if sub == "ports" else "name")
                    if sub == "ports":
                        continue  # keyed by (containerPort, protocol): checked by the API server, not a guard concern
                    for i, value in _duplicates(container.get(sub), key):
                        findings.append(
                            RawFinding(
                                "KDP106",
                                (*base, field, ci, sub, i),
                                f"{sub} of container {container.get('name')!r} has {key} {value!r} twice; "
                                "the API server refuses duplicates in this list-map",
                            )
                        )
        for i, name in _duplicates(pod.get("volumes"), "name"):
            findings.append(RawFinding("KDP106", (*base, "volumes", i), f"two volumes are named {name!r}"))
    return findings


# -- guardrails -----------------------------------------------------------------------------------

_GUARD_NAMES = (
    gv.ASYNC_ERROR_HANDLING,
    gv.LEGACY_ASYNC_ERROR_HANDLING,
    gv.FAULTHANDLER,
    gv.PG_TIMEOUT,
    gv.WATCHDOG_TIMEOUT,
    gv.MAX_HANG_RESTARTS,
    gv.FR_DUMP_TEMP_FILE,
    gv.ARTIFACT_DIR,
    *gv.SAFETY_NETS,
)


#: Variables that must be present: one that an unreadable envFrom source might set is unresolved.
_REQUIRED_NAMES = tuple(n for n in _GUARD_NAMES if n not in gv.SAFETY_NETS)


def _safety_net_value(env: dict[str, EnvValue], name: str) -> EnvValue | None:
    """What the input says about a safety-net variable: an ``env`` entry or a readable ``envFrom``
    source (unresolved when that entry's ``valueFrom`` cannot be read: KDP306 fails then).

    An unreadable ``envFrom`` source (a Secret) that *might* switch a net off is not held against
    the job: otherwise every job with a Secret in ``envFrom`` would fail strict whatever it did.
    """
    return dict.get(env, name)


def env_entries(env: dict[str, EnvValue]) -> list[dict[str, Any]]:
    """The effective environment as the ``env`` list the guard schemas read: ``{name, value}``,
    or ``{name, x-k8sddp-unresolved}`` where the input cannot tell the value."""
    names = list(dict.keys(env)) + [n for n in _REQUIRED_NAMES if n not in dict.keys(env) and n in env]
    entries = []
    for name in names:
        value = _safety_net_value(env, name) if name in gv.SAFETY_NETS else env.get(name)
        if value is None:
            continue
        if value.value is None:
            entries.append({"name": name, UNRESOLVED_KEY: value.unresolved})
        else:
            entries.append({"name": name, "value": value.value})
    return entries


def _resolved_view(job: Mapping[str, Any], envs: dict[str, dict[str, EnvValue]]) -> Mapping[str, Any]:
    """A shallow copy of ``job`` whose pytorch containers' ``env`` is the effective environment."""
    if not envs:
        # No pytorch container found (so spec and pytorchReplicaSpecs may not even be objects):
        # nothing to resolve; layer 1 reports what is missing.
        return job
    view = dict(job)
    spec = dict(view["spec"])
    replicas = dict(spec["pytorchReplicaSpecs"])
    for rtype, replica in _replicas(job):
        found = _pytorch_container(replica)
        if found is None or rtype not in envs:
            continue
        _, container = found
        new_container = {k: v for k, v in container.items() if k != "envFrom"}
        new_container["env"] = env_entries(envs[rtype])
        rep = dict(replica)
        template = dict(rep.get("template") or {})
        pod = dict(template.get("spec") or {})
        # Only the pytorch container the checks read (the first one named so; a second one is
        # KDP106): the guard schemas look at no other, and a duplicate must not be judged by the
        # first one's environment.
        pod["containers"] = [new_container]
        template["spec"] = pod
        rep["template"] = template
        replicas[rtype] = rep
    spec["pytorchReplicaSpecs"] = replicas
    view["spec"] = spec
    return view


def _with_legacy_names(env: dict[str, EnvValue]) -> dict[str, EnvValue]:
    """``env`` with the legacy flight-recorder name standing in for the current one when only it
    is set: torch reads ``getCvarString({TORCH_FR_DUMP_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE})``,
    the first name set winning (torch 2.13 FlightRecorder / ProcessGroupNCCL.hpp)."""
    legacy = env.get(gv.LEGACY_FR_DUMP_TEMP_FILE)
    if gv.FR_DUMP_TEMP_FILE not in env and legacy is not None:
        env[gv.FR_DUMP_TEMP_FILE] = EnvValue(legacy.value, f"the legacy name {gv.LEGACY_FR_DUMP_TEMP_FILE}", legacy.unresolved)
    return env


def _describe(name: str, value: EnvValue | None) -> str:
    if value is None:
        return f"{name} is not set"
    if value.value is None:
        return f"{name} cannot be verified: {value.unresolved}"
    where = "" if value.source == "env" else f" (from {value.source})"
    return f"{name} is {value.value!r}{where}"


def _env_message(rule_id: str, who: str, env: dict[str, EnvValue]) -> str:
    if rule_id == "KDP201":
        current = env.get(gv.ASYNC_ERROR_HANDLING)
        legacy = env.get(gv.LEGACY_ASYNC_ERROR_HANDLING)
        if current is None and legacy is not None:
            state = _describe(gv.LEGACY_ASYNC_ERROR_HANDLING, legacy) + f" and {gv.ASYNC_ERROR_HANDLING} is not set"
        else:
            state = _describe(gv.ASYNC_ERROR_HANDLING, current)
        return (
            f"{who}{state}; expected {gv.ASYNC_ERROR_HANDLING}=\"{gv.ASYNC_ERROR_HANDLING_VALUE}\" (\"1\" accepted; "
            f"{gv.LEGACY_ASYNC_ERROR_HANDLING}=\"1\" only for torch < 2.2)"
        )
    if rule_id == "KDP202":
        return f"{who}{_describe(gv.FAULTHANDLER, env.get(gv.FAULTHANDLER))}; expected {gv.FAULTHANDLER}=\"1\" (any non-empty value)"
    expect = {
        "KDP301": (gv.PG_TIMEOUT, f"a positive number of seconds, e.g. \"{gv.DEFAULT_PG_TIMEOUT_SECONDS}\""),
        "KDP302": (gv.WATCHDOG_TIMEOUT, f"a positive number of seconds, e.g. \"{gv.DEFAULT_WATCHDOG_TIMEOUT_SECONDS}\""),
        "KDP303": (gv.MAX_HANG_RESTARTS, f"a whole number, e.g. \"{gv.DEFAULT_MAX_HANG_RESTARTS}\""),
        "KDP304": (gv.FR_DUMP_TEMP_FILE, "an absolute path on the checkpoint volume, e.g. \"/ckpt/k8sddp/fr/rank-\""),
        "KDP305": (gv.ARTIFACT_DIR, "an absolute path on the checkpoint volume, e.g. \"/ckpt/k8sddp\""),
    }
    if rule_id in expect:
        name, what = expect[rule_id]
        return f"{who}{_describe(name, env.get(name))}; expected {what}"
    if rule_id == "KDP306":
        off, unknown = [], []
        for n in gv.SAFETY_NETS:
            v = _safety_net_value(env, n)
            if v is not None and v.value is None:
                unknown.append(f"{n} cannot be verified: {v.unresolved}")
            elif v is not None and v.value is not None and re.search(SAFETY_NET_OFF[n], v.value):
                off.append(f"{n}={v.value!r}")
        said = "; ".join([*(f"{o} switches a safety net off" for o in off), *unknown]) or "a safety net is switched off"
        return f"{who}{said}; remove the variable or leave its default"
    if rule_id == "KDP307":
        return f"{who}no volume mounted at /dev/shm; mount an emptyDir with medium: Memory there (DataLoader workers die with bus errors on the 64 MiB default)"
    return ""


def check_guardrails(
    job: Mapping[str, Any], profile: str, cms: ConfigMapIndex, namespace: str | None = None
) -> list[RawFinding]:
    """Layer 2 for one PyTorchJob object under ``profile`` (``baseline`` or ``strict``).

    Args:
        job: the PyTorchJob (it should pass layer 1; missing parts are skipped, not crashed on).
        profile: ``baseline`` or ``strict``.
        cms: the ConfigMaps the input holds, for ``envFrom`` / ``valueFrom``.
        namespace: the job's namespace (``None``: the one it will be applied to).

    Returns:
        Findings of KDP2xx (and KDP3xx under strict).
    """
    envs: dict[str, dict[str, EnvValue]] = {}
    container_index: dict[str, int] = {}
    for rtype, replica in _replicas(job):
        found = _pytorch_container(replica)
        if found is not None:
            container_index[rtype] = found[0]
            envs[rtype] = _with_legacy_names(effective_env(found[1], namespace, cms))
    view = _resolved_view(job, envs)
    name = f"pytorchjob.{profile}.json"
    validator = _validator(name)
    findings: list[RawFinding] = []
    if not validator.is_valid(view):
        schema = load_schema(name)
        seen: set[tuple[str, str]] = set()
        for err in validator.iter_errors(view):
            rule_id = _rule_of(schema, list(err.schema_path))
            ipath = list(err.instance_path)
            if len(ipath) >= 7 and ipath[:2] == ["spec", "pytorchReplicaSpecs"] and ipath[5] == "containers":
                rtype = str(ipath[2])
                if (rule_id, rtype) in seen:
                    continue
                seen.add((rule_id, rtype))
                base = ("spec", "pytorchReplicaSpecs", rtype, "template", "spec", "containers", container_index[rtype])
                container = _get(job, *base)
                field = "volumeMounts" if rule_id == "KDP307" else "env"
                path = (*base, field) if isinstance(container, _MAPPING) and field in container else base
                findings.append(RawFinding(rule_id, path, _env_message(rule_id, f"replica {rtype}, container pytorch: ", envs[rtype])))
            elif rule_id == "KDP308":
                if (rule_id, "") in seen:
                    continue
                seen.add((rule_id, ""))
                findings.append(
                    RawFinding(
                        "KDP308",
                        ("spec", "runPolicy") if _get(job, "spec", "runPolicy") is not None else ("spec",),
                        "spec.runPolicy.activeDeadlineSeconds is not set (or not a positive integer); under "
                        "restartPolicy ExitCode a deadline is the only bound on recreated pods",
                    )
                )
    if profile == "strict":
        findings += check_volumes(job, envs, container_index, seen={(f.rule_id, str(f.path[2])) for f in findings if len(f.path) > 2})
        findings += check_sizes(job, container_index)
        findings += check_host_access(job)
    return findings


@functools.cache
def _container_validator(profile: str) -> tuple[dict[str, Any], Any]:
    schema = {"allOf": container_rules(profile)}
    return schema, jsonschema_rs.validator_for(schema)


def container_guard_findings(container: Mapping[str, Any], env: dict[str, EnvValue], profile: str, who: str) -> list[tuple[str, str]]:
    """The guard rules one training container fails, for kinds other than PyTorchJob.

    The same container rules as the PyTorchJob profiles (:func:`k8sddp.schemagen.container_rules`:
    KDP201, KDP202, and under strict KDP301-KDP307's schema part), applied to ``container`` with
    its ``env`` replaced by the effective environment ``env``.

    Args:
        container: the training container as the kind resolves it (a merged one, say).
        env: its effective environment (:func:`.envresolve.effective_env`).
        profile: ``baseline`` or ``strict``.
        who: how messages name the container, ending in ``": "`` (``"TrainJob trainer (runtime
            torch-distributed, container node): "``).

    Returns:
        ``(rule id, message)`` once per failing rule, in rule order.
    """
    schema, validator = _container_validator(profile)
    view = {k: v for k, v in container.items() if k != "envFrom"}
    view["env"] = env_entries(env)
    if validator.is_valid(view):
        return []
    failed = sorted({_rule_of(schema, list(err.schema_path)) for err in validator.iter_errors(view)} - {""})
    return [(rule_id, _env_message(rule_id, who, env)) for rule_id in failed]
