"""``k8sddp fix`` on anchors, aliases, tags, merge keys and null values (review of issue 5, items 2, 12).

Each case is a real manifest; the checks are on the written text (what a reviewer sees in the
diff) and on the loaded data (what the API server gets).
"""

from __future__ import annotations

import itertools

import pytest
import yaml

from k8sddp.fix import fix_text
from k8sddp.yamlgraph import compose, paths_to

HEAD = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: anc}
spec:
  pytorchReplicaSpecs:
"""
GUARDS = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "PYTHONFAULTHANDLER": "1"}


def _envs(text: str) -> dict[str, list[dict[str, str]]]:
    """replica -> env of its pytorch container, for the first document."""
    doc = next(d for d in yaml.safe_load_all(text) if d)
    out = {}
    for name, rspec in doc["spec"]["pytorchReplicaSpecs"].items():
        c = next(c for c in rspec["template"]["spec"]["containers"] if c["name"] == "pytorch")
        out[name] = c.get("env")
    return out


def _as_dict(env: list[dict[str, str]]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in env}


# The review's repro (/tmp/r5f/anc2.yaml): one env list anchored in Master, aliased in Worker.
SHARED_ENV = HEAD + """\
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env: &env
                - name: A
                  value: "1"
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env: *env
"""


def test_anchored_env_shared_by_both_replicas_gets_the_items_once_at_the_dash_column() -> None:
    r = fix_text(SHARED_ENV, file="anc2.yaml")
    assert r.error is None and r.changed
    assert ('              env: &env\n                - name: A\n                  value: "1"\n'
            '                - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n                  value: "3"\n'
            '                - name: PYTHONFAULTHANDLER\n                  value: "1"\n    Worker:') in r.fixed
    assert "env: *env" in r.fixed and r.fixed.count("PYTHONFAULTHANDLER") == 1
    envs = _envs(r.fixed)
    assert _as_dict(envs["Master"]) == _as_dict(envs["Worker"]) == {"A": "1", **GUARDS}
    assert all(n.changed for n in r.notes) and {n.where.split()[-1] for n in r.notes} == {"Master", "Worker"}
    assert not fix_text(r.fixed).changed


def test_anchored_template_and_tagged_env() -> None:
    text = HEAD + """\
    Master:
      replicas: 1
      template: &tpl
        spec:
          containers:
            - name: pytorch
              image: img
              env: !!seq
                - {name: A, value: "1"}
    Worker:
      replicas: 2
      template: *tpl
"""
    r = fix_text(text)
    assert r.error is None
    assert "              env: !!seq\n                - {name: A, value: \"1\"}\n                - name: TORCH" in r.fixed
    envs = _envs(r.fixed)
    assert _as_dict(envs["Master"]) == _as_dict(envs["Worker"]) == {"A": "1", **GUARDS}
    assert not fix_text(r.fixed).changed


def test_env_shared_with_a_sidecar_is_left_and_says_where() -> None:
    text = HEAD + """\
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env: &env
                - name: A
                  value: "1"
            - name: sidecar
              image: busybox
              env: *env
"""
    r = fix_text(text, file="side.yaml")
    assert r.error is None and not r.changed
    left = [n for n in r.notes if not n.changed]
    assert {n.rule_id for n in left} == {"KDP201", "KDP202"} and all(n.unresolved for n in left)
    assert "containers[1].env" in left[0].text and "anchor/alias" in left[0].text


def test_replicas_sharing_env_but_needing_different_items_are_left() -> None:
    """strict: only Master mounts a PVC, so only Master's artifact dir is known; never guess Worker's."""
    text = HEAD + """\
    Master:
      replicas: 1
      template:
        spec:
          volumes:
            - name: ckpt
              persistentVolumeClaim: {claimName: ckpt}
          containers:
            - name: pytorch
              image: img
              volumeMounts:
                - {name: ckpt, mountPath: /ckpt}
              env: &env
                - name: A
                  value: "1"
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env: *env
"""
    r = fix_text(text, profile="strict", active_deadline_seconds=60)
    assert r.error is None
    envs = _envs(r.fixed)
    assert envs["Master"] is envs["Worker"] or envs["Master"] == envs["Worker"]
    assert _as_dict(envs["Master"]) == {"A": "1"}  # the shared env is untouched
    left = [n for n in r.notes if not n.changed and n.unresolved]
    assert any("K8SDDP_ARTIFACT_DIR" in n.text and "anchor/alias" in n.text for n in left)
    # what is not shared still goes in: /dev/shm volumes and mounts, the deadline
    doc = yaml.safe_load(r.fixed)
    assert doc["spec"]["runPolicy"] == {"activeDeadlineSeconds": 60}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in (
        doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["volumeMounts"])


def test_aliased_scalar_is_replaced_keeping_its_anchor_and_dropping_a_tag() -> None:
    text = HEAD + """\
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env:
                - name: TORCH_NCCL_ASYNC_ERROR_HANDLING
                  value: &zero !!str "0"
                - name: PYTHONFAULTHANDLER
                  value: !!int 1
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env:
                - name: TORCH_NCCL_ASYNC_ERROR_HANDLING
                  value: *zero
                - name: PYTHONFAULTHANDLER
                  value: "1"
"""
    r = fix_text(text)
    assert 'value: &zero "3"' in r.fixed and "value: *zero" in r.fixed
    assert '                  value: "1"\n    Worker:' in r.fixed  # `!!int 1` -> the string "1"
    envs = _envs(r.fixed)
    assert _as_dict(envs["Master"]) == _as_dict(envs["Worker"]) == GUARDS
    # The same anchor also used by another variable: changing it would change that one too.
    other = text + '                - name: OTHER\n                  value: *zero\n'
    r2 = fix_text(other)
    left = [n for n in r2.notes if not n.changed]
    assert left and all("env[2].value" in n.text for n in left)
    assert _as_dict(_envs(r2.fixed)["Worker"])["OTHER"] == "0"


def test_alias_items_at_the_start_and_end_of_env() -> None:
    text = """\
x-a: &a {name: LOGLEVEL, value: DEBUG}
x-b: &b
  name: B
  value: "2"
""" + HEAD + """\
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env:
                - *a
                - name: C
                  value: "3"
                - *b
              command: [python]
"""
    r = fix_text(text)
    assert r.error is None
    assert "                - *b\n                - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n" in r.fixed
    assert _as_dict(_envs(r.fixed)["Worker"]) == {"LOGLEVEL": "DEBUG", "B": "2", "C": "3", **GUARDS}
    flow = text.replace("              env:\n                - *a\n                - name: C\n"
                        "                  value: \"3\"\n                - *b\n", "              env: [*a, *b]\n")
    r = fix_text(flow)
    assert "env: [*a, *b, {\"name\": \"TORCH_NCCL_ASYNC_ERROR_HANDLING\"" in r.fixed
    assert _as_dict(_envs(r.fixed)["Worker"]) == {"LOGLEVEL": "DEBUG", "B": "2", **GUARDS}


@pytest.mark.parametrize("where", ["container", "entry"])
def test_merge_keys_are_left_alone(where: str) -> None:
    if where == "container":
        body = ('            - <<: {env: [{name: A, value: "1"}]}\n'
                "              name: pytorch\n              image: img\n")
    else:
        body = ("            - name: pytorch\n              image: img\n              env:\n"
                "                - <<: {name: PYTHONFAULTHANDLER, value: \"1\"}\n")
    text = HEAD + "    Worker:\n      replicas: 1\n      template:\n        spec:\n          containers:\n" + body
    r = fix_text(text)
    assert not r.changed
    [n] = r.notes
    assert n.unresolved and "merge key (<<)" in n.text


@pytest.mark.parametrize("null", ["", " null", " ~", "   # none yet"])
def test_env_null_is_treated_as_absent(null: str) -> None:
    text = HEAD + ("    Worker:\n      replicas: 1\n      template:\n        spec:\n          containers:\n"
                   f"            - name: pytorch\n              image: img\n              env:{null}\n"
                   "              command: [python]\n")
    r = fix_text(text)
    assert r.error is None and all(n.changed for n in r.notes)
    assert _as_dict(_envs(r.fixed)["Worker"]) == GUARDS
    assert "              env:" + ("   # none yet" if "#" in null else "") + "\n                - name: TORCH" in r.fixed
    assert not fix_text(r.fixed).changed


def test_empty_documents_and_alias_cycles() -> None:
    text = "---\n---\n" + SHARED_ENV + "---\n~\n"
    r = fix_text(text)
    assert r.error is None and r.changed and r.fixed.startswith("---\n---\n") and r.fixed.endswith("---\n~\n")
    loop = compose("a: &x [1, *x]\n", "loop.yaml")
    seq = loop.docs[0].value[0][1]
    assert paths_to(seq, loop) is None  # a node inside itself is never edited
    assert paths_to(seq.value[0], loop) is None


# -- combinations: every valid mix of anchors, aliases and tags in Master's and Worker's env ------

_MASTER_ENVS = [
    '              env: &env\n                - name: A\n                  value: "1"',
    '              env: &env   # shared\n                - name: A\n                  value: "1"',
    '              env: &env !!seq\n                - name: A\n                  value: "1"',
    '              env: !!seq &env\n              - name: A\n                value: "1"',
    '              env: &env\n              - &a {name: A, value: "1"}',
    '              env: &env [{name: A, value: "1"}]',
    "              env: &env []",
    '              env: &env\n                - &a\n                  name: A\n                  value: "1"',
    "              env:\n                - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n                  value: &z !!int 0\n"
    '                - name: X\n                  value: &env "q"',
    '              env: &env\n                - name: PYTHONFAULTHANDLER\n                  value: &z ""',
    "              env: &env\n                - name: PYTHONFAULTHANDLER",
    "              env: &env\n                - {name: PYTHONFAULTHANDLER, value: }",
]
_WORKER_ENVS = [
    "              env: *env",
    '              env:\n                - *a\n                - name: B\n                  value: "2"',
    '              env:\n                - name: B\n                  value: "2"\n                - *a',
    "              env: [*a]",
    "              env:\n                - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n                  value: *z",
    "              env:\n                - name: Y\n                  value: *z",
    "              env:",
    '              env: !!seq\n              - {name: B, value: "2"}',
    "",
]


def _combo(master_env: str, worker_env: str, shared_template: bool) -> str:
    head = HEAD + ("    Master:\n      replicas: 1\n      template:" + (" &tpl" if shared_template else "") +
                   "\n        spec:\n          containers:\n            - name: pytorch\n              image: img\n"
                   + master_env + "\n    Worker:\n      replicas: 2\n      template:")
    if shared_template:
        return head + " *tpl\n"
    return head + ("\n        spec:\n          containers:\n            - name: pytorch\n              image: img\n"
                   + worker_env + "\n")


def test_anchor_alias_tag_combinations_never_break_the_file() -> None:
    """Every combination that parses: no self-check failure, idempotent, and what fix does not
    leave unresolved passes validate (140 files that parse, CRLF included; about 1 s)."""
    validate = pytest.importorskip("k8sddp.validate")
    checked = 0
    for m, w, shared in itertools.product(_MASTER_ENVS, _WORKER_ENVS, (False, True)):
        if shared and w != _WORKER_ENVS[0]:
            continue
        for nl in ("\n", "\r\n"):
            text = _combo(m, w, shared).replace("\n", nl)
            try:
                list(yaml.safe_load_all(text))
            except yaml.YAMLError:
                continue  # e.g. *a without &a
            checked += 1
            r = fix_text(text, file="c.yaml")  # raises RuntimeError on a bad splice
            assert r.error is None, text
            assert not fix_text(r.fixed).changed, r.fixed
            if not any(n.unresolved for n in r.notes):
                found = {f.rule_id for f in validate.validate_text(r.fixed, file="c.yaml").findings}
                assert not found & {"KDP201", "KDP202"}, r.fixed
    assert checked > 120
