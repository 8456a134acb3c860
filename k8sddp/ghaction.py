"""Helpers for the GitHub Action (``action.yml``): which files to check, and annotations from SARIF.

The Action runs ``k8sddp validate --format sarif`` once. This module, run as
``python -m k8sddp.ghaction``, does the rest without running validate again:

``files [--exclude REGEX] PATH...``
    Prints the files to check, NUL-separated: a named file as given; in a named folder, every
    regular ``*.yaml``/``*.yml``/``*.json`` file (any letter case) whose path relative to the
    current directory (``/``-separated) does not match ``REGEX`` (Python ``re.search``, the same
    test pre-commit applies to ``exclude``). Default: :data:`DEFAULT_EXCLUDE`, which is also the
    pre-commit hook's default (a test keeps them equal). A path that does not exist is printed as
    given, for validate to report (exit 2).
``annotate SARIF``
    Prints one GitHub workflow command per SARIF result (``::error file=F,line=L,col=C,title=RULE::
    message``; suppressed results as ``::notice``) and a summary line; exit 0.
``failed-sarif SARIF MESSAGE``
    Replaces an empty or unreadable SARIF file (validate exits 2 before reporting: a usage error,
    an unreadable path) with a valid SARIF run whose invocation says ``executionSuccessful: false``
    and carries ``MESSAGE`` (:func:`k8sddp.reporters.sarif.render_failed`).

Workflow commands: https://docs.github.com/actions/reference/workflow-commands-for-github-actions
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .reporters.github import _escape_data, _escape_prop
from .reporters.sarif import render_failed

__all__ = ["DEFAULT_EXCLUDE", "SUFFIXES", "annotation_lines", "list_files", "main"]

#: Files in folders that are YAML or JSON but not Kubernetes manifests: CI and tool configuration,
#: Helm charts (templates need ``helm template`` first; values and Chart.yaml are not objects),
#: kustomize's own files, compose files, package manifests, k8sddp's own config file.
DEFAULT_EXCLUDE = (
    r"(^|/)("
    r"\.github/|\.gitlab-ci\.ya?ml$|\.pre-commit-(config|hooks)\.ya?ml$|\.vscode/|\.devcontainer/|"
    r"templates/|Chart\.ya?ml$|values[^/]*\.ya?ml$|"
    r"kustomization\.ya?ml$|"
    r"docker-compose[^/]*\.ya?ml$|compose(\.[^/]*)?\.ya?ml$|"
    r"renovate\.json5?$|\.renovaterc(\.json)?$|package(-lock)?\.json$|tsconfig[^/]*\.json$|"
    r"composer\.json$|\.eslintrc[^/]*$|\.prettierrc[^/]*$|"
    r"mkdocs\.ya?ml$|\.readthedocs\.ya?ml$|\.yamllint(\.ya?ml)?$|\.golangci\.ya?ml$|codecov\.ya?ml$|"
    r"environment\.ya?ml$|\.?k8sddp\.ya?ml$"
    r")"
)
#: File name endings searched in folders (compared in lower case).
SUFFIXES = (".yaml", ".yml", ".json")


def _walk(folder: Path) -> Iterator[Path]:
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            p = Path(root) / name
            if name.lower().endswith(SUFFIXES) and p.is_file():
                yield p


def list_files(paths: Sequence[str], exclude: str = DEFAULT_EXCLUDE) -> list[str]:
    """The files to pass to ``k8sddp validate`` (see the module docstring).

    Args:
        paths: files and folders, as the Action's ``paths`` input lists them.
        exclude: a Python regular expression searched in each folder-found file's relative path;
            empty: exclude nothing.

    Raises:
        re.error: ``exclude`` is not a valid regular expression.
    """
    rx = re.compile(exclude) if exclude else None
    out: list[str] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            out.append(raw)
            continue
        for f in _walk(p):
            rel = os.path.relpath(f).replace(os.sep, "/")
            if rx is None or not rx.search(rel):
                out.append(rel)
    return out


def annotation_lines(sarif: dict[str, Any]) -> list[str]:
    """Workflow-command lines for every result of a k8sddp SARIF log, then a summary line."""
    lines: list[str] = []
    counts = {"error": 0, "warning": 0, "note": 0, "suppressed": 0}
    for run in sarif.get("runs", []):
        for r in run.get("results", []):
            level = r.get("level", "warning")
            suppressed = bool(r.get("suppressions"))
            counts["suppressed" if suppressed else level if level in counts else "note"] += 1
            command = "notice" if suppressed or level not in ("error", "warning") else level
            loc = (r.get("locations") or [{}])[0].get("physicalLocation", {})
            props = [f"file={_escape_prop(unquote(loc.get('artifactLocation', {}).get('uri', '')))}"]
            region = loc.get("region", {})
            if region.get("startLine"):
                props.append(f"line={region['startLine']}")
            if region.get("startColumn"):
                props.append(f"col={region['startColumn']}")
            props.append(f"title={_escape_prop(str(r.get('ruleId', 'k8sddp')))}")
            msg = r.get("message", {}).get("text", "")
            if suppressed:
                why = r["suppressions"][0].get("justification", "")
                msg = f"exempted ({why}): {msg}" if why else f"exempted: {msg}"
            lines.append(f"::{command} {','.join(props)}::{_escape_data(msg)}")
    lines.append(f"k8sddp: {counts['error']} error(s), {counts['warning']} warning(s), "
                 f"{counts['note']} note(s), {counts['suppressed']} exempted")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Run a helper (module docstring); 0 on success, 2 on bad arguments or an unreadable SARIF."""
    parser = argparse.ArgumentParser(prog="python -m k8sddp.ghaction")
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("files")
    f.add_argument("--exclude", default=DEFAULT_EXCLUDE)
    f.add_argument("paths", nargs="+")
    a = sub.add_parser("annotate")
    a.add_argument("sarif")
    x = sub.add_parser("failed-sarif")
    x.add_argument("sarif")
    x.add_argument("message")
    args = parser.parse_args(argv)
    if args.cmd == "files":
        try:
            found = list_files(args.paths, args.exclude)
        except re.error as exc:
            print(f"k8sddp action: exclude is not a valid regular expression: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write("".join(p + "\0" for p in found))
        return 0
    if args.cmd == "annotate":
        try:
            data = json.loads(Path(args.sarif).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"k8sddp action: cannot read SARIF {args.sarif}: {exc}", file=sys.stderr)
            return 2
        print("\n".join(annotation_lines(data)))
        return 0
    path = Path(args.sarif)
    try:
        json.loads(path.read_text(encoding="utf-8"))
        return 0  # a report is there: keep it
    except (OSError, ValueError):
        path.write_text(render_failed(args.message, tool="validate"), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
