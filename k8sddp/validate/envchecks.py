"""Settings in a training container's environment that void or override the guards (KDP213-KDP217).

One function, :func:`check_env_settings`, for every kind: a kind hands it the training
container's effective environment (:meth:`k8sddp.kinds.Kind.effective_env`), the container, its
path from the object's root, and the names its controller sets itself. The pod-template
``restartPolicy`` check (KDP214) is :func:`check_template_restart_policy`, for kinds whose
controller overrides it. Messages never contain the value of a variable named like a credential.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import guardvars as gv
from .envresolve import EnvValue
from .jobparts import MAPPING, as_list
from .rawfinding import RawFinding

__all__ = [
    "BLOCKING_WAIT_NAMES",
    "FOLKLORE",
    "check_env_settings",
    "check_template_restart_policy",
    "credential_literals",
    "hide_credential_values",
    "is_credential_name",
    "torch_bool",
]

#: torch 2.13 ProcessGroupNCCL.hpp:60-62: the current name first (it wins), then the legacy one.
BLOCKING_WAIT_NAMES: tuple[str, ...] = ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT")

#: Names that nothing reads, with what does what their users meant. (No torch 2.13 Python file or
#: header names them; NCCL's documented variables do not include them.)
FOLKLORE: dict[str, str] = {
    "NCCL_TIMEOUT": "the collective timeout is init_process_group(timeout=...): k8sddp's runtime reads "
    f"{gv.PG_TIMEOUT}; TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC bounds a stuck watchdog",
    "TORCH_NCCL_TIMEOUT": f"the collective timeout is init_process_group(timeout=...): k8sddp's runtime reads {gv.PG_TIMEOUT}",
    "TORCH_DISTRIBUTED_TIMEOUT": f"the collective timeout is init_process_group(timeout=...): k8sddp's runtime reads {gv.PG_TIMEOUT}",
}

#: Names a near-miss is measured against: the guards a misspelling leaves unset.
_GUARDS: tuple[str, ...] = (
    gv.ASYNC_ERROR_HANDLING,
    gv.LEGACY_ASYNC_ERROR_HANDLING,
    gv.FAULTHANDLER,
    gv.PG_TIMEOUT,
    gv.WATCHDOG_TIMEOUT,
    gv.MAX_HANG_RESTARTS,
    gv.FR_DUMP_TEMP_FILE,
    gv.LEGACY_FR_DUMP_TEMP_FILE,
    gv.ARTIFACT_DIR,
    *gv.SAFETY_NETS,
    *BLOCKING_WAIT_NAMES,
)

#: A ``_``-separated segment that names a credential, or a suffix that does (KDP217).
_CREDENTIAL_SEGMENTS = frozenset({"TOKEN", "SECRET", "PASSWORD"})
_CREDENTIAL_SUFFIXES = ("API_KEY", "ACCESS_KEY", "PRIVATE_KEY")


def torch_bool(value: str) -> bool | None:
    """``value`` read as torch reads a boolean environment variable (c10d ``getCvarBool``):
    ``True`` for y/yes/1/t/true, ``False`` for n/no/0/f/false (any case), ``None`` otherwise
    (torch then raises "Invalid value for environment variable")."""
    low = value.lower()
    if low in ("y", "yes", "1", "t", "true"):
        return True
    if low in ("n", "no", "0", "f", "false"):
        return False
    return None


def is_credential_name(name: str) -> bool:
    """Whether ``name`` names a credential: a ``_``-separated segment TOKEN, SECRET or PASSWORD
    (any case), or a name ending in API_KEY, ACCESS_KEY or PRIVATE_KEY. ``TOKENIZERS_PARALLELISM``,
    ``*_KEY_PATH`` and ``*_KEY_FILE`` are not."""
    upper = name.upper()
    return bool(_CREDENTIAL_SEGMENTS.intersection(upper.split("_"))) or upper.endswith(_CREDENTIAL_SUFFIXES)


def credential_literals(value: object) -> list[str]:
    """The texts under which a credential's literal ``value`` may appear in a message: its scalars
    (a number too: ``value: 12345678``) and, for a list or an object, its JSON form; longest first."""
    import json

    found: set[str] = set()
    stack: list[object] = [value]
    while stack and len(found) < 1000:
        node = stack.pop()
        if isinstance(node, dict):
            stack += list(node.values())
        elif isinstance(node, list):
            stack += node
        elif node is not None and node != "":
            found.add(str(node))
            found.add(json.dumps(node, default=str))  # default: YAML 1.1 reads 2024-01-01 as a date
    if isinstance(value, (dict, list)):
        found.add(json.dumps(value, default=str))
    return sorted((f for f in found if f), key=len, reverse=True)


def hide_credential_values(obj: Any, path: Sequence[Any], message: str) -> str:
    """``message`` without the literal value of a credential-named env entry that ``path`` (in
    ``obj``) goes through: a credential is never printed, not even in a schema error such as
    ``12345678 is not of type "string"`` (KDP101, KDP012, render's refusal)."""
    for k in range(len(path) - 1):
        if path[k] != "env" or not isinstance(path[k + 1], int):
            continue
        entry: Any = obj
        for part in path[: k + 2]:
            if isinstance(entry, Mapping):
                entry = entry.get(part)
            elif isinstance(entry, list) and isinstance(part, int) and 0 <= part < len(entry):
                entry = entry[part]
            else:
                entry = None
                break
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(entry, Mapping) and isinstance(name, str) and is_credential_name(name) and "value" in entry:
            for text in credential_literals(entry["value"]):
                message = message.replace(text, "<hidden: KDP217>")
    return message


def _distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment edit distance of ``a`` and ``b`` (a transposition costs 1), or
    ``limit + 1`` as soon as it exceeds ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


def near_miss(name: str) -> str | None:
    """The guard name ``name`` misspells (same letters in another case, or at most 2 edits away
    for names of 10 or more characters, 1 below), or ``None``."""
    if name in _GUARDS:
        return None
    upper = name.upper()
    best: tuple[int, str] | None = None
    for guard in _GUARDS:
        limit = 2 if len(guard) >= 10 else 1
        d = _distance(upper, guard, limit)
        if d <= limit and (best is None or d < best[0]):
            best = (d, guard)
    return best[1] if best else None


def _env_entries(container: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    return [(i, e) for i, e in enumerate(as_list(container.get("env"))) if isinstance(e, MAPPING) and isinstance(e.get("name"), str)]


def _operator_sets(name: str, operator_env: Mapping[str, str]) -> str | None:
    if name in operator_env:
        return operator_env[name]
    for key, why in operator_env.items():
        if key.endswith("*") and name.startswith(key[:-1]):
            return why
    return None


def check_env_settings(
    env: Mapping[str, EnvValue],
    container: Mapping[str, Any],
    container_path: tuple[Any, ...],
    who: str,
    *,
    operator_env: Mapping[str, str] | None = None,
) -> list[RawFinding]:
    """KDP213, KDP215, KDP216 and KDP217 for one training container.

    Args:
        env: the container's effective environment (name -> :class:`EnvValue`), as the kind
            resolves it (:meth:`k8sddp.kinds.Kind.effective_env`).
        container: the container as written (its ``env`` list locates findings).
        container_path: keys and indices from the object's root to the container.
        who: how messages name it (``replica Worker, container pytorch``).
        operator_env: names the kind's controller sets in this container itself, each with the
            reason (``"the operator sets it when the job has a Master"``); a key ending in ``*``
            is a prefix (``PET_RDZV_*``). ``None``: the controller sets none.

    Returns:
        Findings with paths from the object's root; none of them contains a credential's value.
    """
    findings: list[RawFinding] = []
    entries = _env_entries(container)
    at = {e["name"]: i for i, e in reversed(entries)}  # the first entry of a name

    def path(name: str) -> tuple[Any, ...]:
        if name in at:
            return (*container_path, "env", at[name])
        return (*container_path, "envFrom") if "envFrom" in container else container_path

    # KDP213: blocking wait; the first name torch finds set wins (getCvarBool reads them in reverse).
    for name in BLOCKING_WAIT_NAMES:
        value = env.get(name)
        if value is None or value.value is None:
            continue
        if torch_bool(value.value):
            other = [n for n in BLOCKING_WAIT_NAMES if n != name][0]
            where = "" if value.source == "env" else f" (from {value.source})"
            findings.append(
                RawFinding(
                    "KDP213",
                    path(name),
                    f"{who}: {name}={value.value!r}{where} turns on blocking wait ({BLOCKING_WAIT_NAMES[0]}, legacy {BLOCKING_WAIT_NAMES[1]}"
                    f"{'' if name == BLOCKING_WAIT_NAMES[0] else '; ' + other + ' is not set'}): ProcessGroupNCCL then starts no watchdog "
                    "thread (ProcessGroupNCCL.cpp: `if (!blockingWait_) watchdog_->start()`), so there is no async error handling and "
                    "no flight-recorder dump on timeout, and a rank stuck outside wait() hangs; remove it",
                )
            )
        break  # the first name set decides, whatever its value

    for i, entry in entries:
        name = entry["name"]
        here = (*container_path, "env", i)
        why = _operator_sets(name, operator_env or {})
        if why is not None:
            findings.append(RawFinding("KDP215", here, f"{who}: {name} is set here, but {why}, and that value wins over this one; remove it"))
        if name in FOLKLORE:
            findings.append(RawFinding("KDP216", here, f"{who}: nothing reads {name}; {FOLKLORE[name]}"))
        else:
            guess = near_miss(name)
            if guess is not None:
                findings.append(
                    RawFinding("KDP216", here, f"{who}: nothing reads {name}; did you mean {guess}? (a misspelt guard is a missing guard)")
                )
        if is_credential_name(name) and "value" in entry and entry.get("value") not in (None, ""):
            # The value is never put in a message: it may be the credential itself.
            findings.append(
                RawFinding(
                    "KDP217",
                    here,
                    f"{who}: {name} is named like a credential and has a literal value (not shown); take it from a Secret "
                    "(env[].valueFrom.secretKeyRef, or envFrom.secretRef)",
                )
            )
    return findings


def check_template_restart_policy(template: Mapping[str, Any], template_path: tuple[Any, ...], who: str, owner: str) -> list[RawFinding]:
    """KDP214: ``restartPolicy`` in a pod template whose controller overwrites it.

    Args:
        template: the pod template (``metadata`` and ``spec``).
        template_path: its path from the object's root.
        who: how the message names it (``replica Worker``).
        owner: the field that decides instead (``spec.pytorchReplicaSpecs.Worker.restartPolicy``).
    """
    spec = template.get("spec")
    if not isinstance(spec, MAPPING) or "restartPolicy" not in spec:
        return []
    return [
        RawFinding(
            "KDP214",
            (*template_path, "spec", "restartPolicy"),
            f"{who}: restartPolicy {spec.get('restartPolicy')!r} in the pod template is overwritten by the operator with {owner}; "
            f"set it there (and remove it here)",
        )
    ]
