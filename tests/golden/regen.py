"""Regenerate the golden renders after an intended change (then review the diff and commit)::

    python tests/golden/regen.py

Each golden file is ``k8sddp render`` of one spec (:data:`GOLDEN`); tests/test_render.py and
tests/test_render_podfields.py compare against them.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: golden file (tests/golden/) -> the spec it renders (repository-relative).
GOLDEN = {
    "demo.pytorchjob.yaml": "examples/ddpjob.yaml",
    "gpu.pytorchjob.yaml": "examples/ddpjob-gpu.yaml",
    "podfields.pytorchjob.yaml": "tests/golden/ddpjob-podfields.yaml",
}


def render(spec: str) -> str:
    """``k8sddp render`` of the spec at ``spec`` (repository-relative), as the CLI writes it."""
    from k8sddp.render import load_spec, render_spec, to_yaml

    return to_yaml(render_spec(load_spec(str(REPO / spec))).objects)


if __name__ == "__main__":
    for golden, spec in GOLDEN.items():
        (REPO / "tests" / "golden" / golden).write_text(render(spec))
        sys.stdout.write(f"wrote tests/golden/{golden} from {spec}\n")
