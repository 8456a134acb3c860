"""Render the charts with the real ``helm template`` (helm.sh/helm/v3), or skip the chart tests.

``helm`` comes from ``tests/kube/cluster.sh build`` (into ``${K8SDDP_KUBE_CACHE:-~/.cache/k8sddp-kube}/bin``,
built from the Go module proxy with the rest of the kube tier) or from ``PATH``. Without it the
tests are skipped with that reason; with ``K8SDDP_REQUIRE_KUBE=1`` (``.ci/run``) they fail.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

CACHE = Path(os.environ.get("K8SDDP_KUBE_CACHE") or Path.home() / ".cache" / "k8sddp-kube")


def helm_binary() -> str | None:
    """The helm to use: the kube tier's cache first, then ``PATH``."""
    built = CACHE / "bin" / "helm"
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    return shutil.which("helm")


class ChartRenderError(Exception):
    """``helm template`` failed (``fail``/``required``/a schema or template error); helm's message."""


Renderer = Callable[..., dict[str, Any]]

_SOURCE = re.compile(r"^# Source: (\S+)\s*$", re.MULTILINE)


def coalesce(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Helm's value merge (pkg/chart/v2/util/coalesce.go): maps merge key by key, lists and
    scalars replace, a ``null`` deletes the key. Returns a new dict."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def split_manifests(text: str) -> dict[str, str]:
    """``helm template`` output -> ``{"<chart>/templates/x.yaml": its documents}``."""
    out: dict[str, str] = {}
    for doc in re.split(r"^---\s*$", text, flags=re.MULTILINE):
        m = _SOURCE.search(doc)
        if m:
            out[m.group(1)] = out.get(m.group(1), "") + "---\n" + doc
    return out


@pytest.fixture(scope="session")
def helm() -> str:
    """Path of the helm binary (skip, or fail under ``K8SDDP_REQUIRE_KUBE=1``, without one)."""
    found = helm_binary()
    if found is None:
        why = f"helm not built ({CACHE}/bin/helm: run `bash tests/kube/cluster.sh build`) and not on PATH"
        if os.environ.get("K8SDDP_REQUIRE_KUBE") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return found


@pytest.fixture(scope="session")
def helm_render(helm: str, tmp_path_factory: pytest.TempPathFactory) -> Renderer:
    """``helm_render(chart_dir, values: dict | None, name=, namespace=, files=) -> {"values", "manifests"}``.

    ``manifests`` is ``helm template``'s output by source template; ``values`` the merged values
    (values.yaml, each ``files`` entry, then ``values``) as Helm merges them.
    """
    root = tmp_path_factory.mktemp("helm")
    env = {**os.environ, "HELM_CACHE_HOME": str(root / "cache"), "HELM_CONFIG_HOME": str(root / "config"),
           "HELM_DATA_HOME": str(root / "data")}

    def render(chart: Path, values: dict[str, Any] | None = None, *, name: str = "release",
               namespace: str = "default", files: tuple[Path, ...] = ()) -> dict[str, Any]:
        args = [helm, "template", name, str(chart), "--namespace", namespace]
        merged = yaml.safe_load((chart / "values.yaml").read_text()) or {}
        for f in files:
            args += ["--values", str(f)]
            merged = coalesce(merged, yaml.safe_load(Path(f).read_text()) or {})
        if values is not None:
            vf = root / f"values-{len(os.listdir(root))}.json"
            vf.write_text(json.dumps(values))
            args += ["--values", str(vf)]
            merged = coalesce(merged, values)
        out = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
        if out.returncode != 0:
            raise ChartRenderError(out.stderr.strip())
        return {"values": merged, "manifests": split_manifests(out.stdout)}

    return render
