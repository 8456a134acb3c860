"""Build the tiny Helm-compatible renderer (render.go) once per session, or skip the chart tests.

Needs Debian's ``golang-1.19-go`` and ``golang-github-masterminds-sprig-dev`` (offline, GOPATH
mode): ``apt-get install -y golang-1.19-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
GOPATH_SYSTEM = Path("/usr/share/gocode")


def _go() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    for candidate in sorted(Path("/usr/lib").glob("go-1.*/bin/go"), reverse=True):
        return str(candidate)
    return None


class ChartRenderError(Exception):
    """The chart failed to render (``fail``/``required``/a template error); message from Go."""


Renderer = Callable[..., dict[str, Any]]


@pytest.fixture(scope="session")
def helm_render(tmp_path_factory: pytest.TempPathFactory) -> Renderer:
    """``helm_render(chart_dir, values: dict | None, name=, namespace=) -> {"values", "manifests"}``."""
    go = _go()
    if go is None or not (GOPATH_SYSTEM / "src/github.com/Masterminds/sprig").is_dir():
        pytest.skip("Go and sprig not installed (apt-get install golang-1.19-go golang-github-masterminds-sprig-dev)")
    root = tmp_path_factory.mktemp("gohelm")
    src = root / "src" / "k8sddphelmrender"
    src.mkdir(parents=True)
    shutil.copy(HERE / "render.go", src / "render.go")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "k8sddp-go-build"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        cache = root / "cache"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{root}:{GOPATH_SYSTEM}", "GOCACHE": str(cache),
           "GOFLAGS": "", "CGO_ENABLED": "0"}
    binary = root / "render"
    proc = subprocess.run([go, "build", "-o", str(binary), "."], cwd=src, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"building tests/helm/render.go failed:\n{proc.stderr}")

    def render(chart: Path, values: dict[str, Any] | None = None, *, name: str = "release",
               namespace: str = "default", files: tuple[Path, ...] = ()) -> dict[str, Any]:
        args = [str(binary), "-chart", str(chart), "-name", name, "-namespace", namespace]
        for f in files:
            args += ["-f", str(f)]
        if values is not None:
            vf = root / f"values-{os.getpid()}-{len(os.listdir(root))}.json"
            vf.write_text(json.dumps(values))
            args += ["-f", str(vf)]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise ChartRenderError(out.stderr.strip())
        result: dict[str, Any] = json.loads(out.stdout)
        return result

    return render
