"""``k8sddp fix FILE... [--check] [--profile baseline|strict]``: add missing guard variables in place.

What is added or corrected, and what is left for a person: :mod:`k8sddp.fix`.
Exit codes (``../shared/CONTRACT.md``): 0 done (or, with ``--check``, nothing to change);
1 with ``--check`` when a file would change, whenever a file cannot be parsed (not UTF-8, over
:func:`max_input_bytes`, a YAML error, a duplicate key: it is left untouched and reported as a
located KDP001/KDP002 finding), and when fix left a guard missing that it could not add (an
unresolved note, e.g. ``env`` that is not a list); 2 for a usage error, or a file that cannot be
read or written (a read-only file included: fix never replaces a file whose permission bits forbid
writing, even where root could). A file that fails never stops the others: every file is
processed, the summary printed, and the exit code is the worst one. With ``--check`` the unified
diff goes to standard output (``git apply``/``patch -p1`` take it) and the notes to standard
error; otherwise the notes go to standard output.
"""

from __future__ import annotations

import argparse
import difflib
import os
import stat
import sys
from pathlib import Path
from typing import Any, TextIO

from ..atomic import write_bytes_atomic
from ..errors import UsageError
from ..fix import FixResult, fix_text
from .argtypes import positive_int as _positive_int

#: Files fix reads inside a folder given on the command line (any letter case: ``X.YAML`` too).
SUFFIXES = (".yaml", ".yml", ".json")

#: Largest file fix reads when ``k8sddp.validate.yamlio`` does not say (16 MiB; the API server
#: stores objects up to about 1.5 MiB, etcd's default request limit). See :func:`max_input_bytes`.
DEFAULT_MAX_INPUT_BYTES = 16 * 1024 * 1024


def max_input_bytes() -> int:
    """The input limit in bytes: the validator's ``MAX_INPUT_BYTES``, so that both commands refuse
    the same files, else :data:`DEFAULT_MAX_INPUT_BYTES`. Imported late: the validator is heavy."""
    from ..validate import yamlio

    return int(getattr(yamlio, "MAX_INPUT_BYTES", DEFAULT_MAX_INPUT_BYTES))


def register(subparsers: Any) -> None:
    """Add the ``fix`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "fix",
        help="add the missing guard variables to PyTorchJob manifests, in place",
        description="Add the guard variables a profile demands to the pytorch container of every "
        "PyTorchJob in the given files, keeping comments, key order and formatting; "
        "idempotent; files are replaced atomically. A file that does not parse is never touched.",
    )
    p.add_argument("paths", nargs="+", metavar="FILE",
                   help="manifest files or folders (*.yaml, *.yml, *.json); not - (fix edits files in place)")
    p.add_argument("--check", action="store_true",
                   help="change nothing: print a unified diff and exit 1 when a file would change")
    p.add_argument("--profile", choices=("baseline", "strict"), default="baseline",
                   help="what to add (default: baseline)")
    p.add_argument("--active-deadline-seconds", type=_positive_int, default=None, metavar="N",
                   help="with --profile strict: set spec.runPolicy.activeDeadlineSeconds to N where absent")
    p.set_defaults(handler=run)


def collect(paths: list[str]) -> list[Path]:
    """The files named by ``paths`` (folders searched recursively for :data:`SUFFIXES`, sorted).

    Inside folders only regular files are taken (a FIFO named ``*.yaml`` would block the read).

    Raises:
        UsageError: ``-`` (fix edits files; it does not read standard input), a path that does not
            exist, or one that is not a regular file or folder.
    """
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if raw == "-":
            raise UsageError("fix edits files in place and does not read standard input; give file "
                             "names (to check a stream, use `k8sddp validate -`)")
        if p.is_dir():
            files += sorted(f for f in p.rglob("*")
                            if f.suffix.lower() in SUFFIXES and f.is_file())
        elif p.is_file():
            files.append(p)
        elif not p.exists():
            raise UsageError(f"{raw}: no such file or folder")
        else:
            raise UsageError(f"{raw}: not a regular file or folder")
    return files


class _Refused(Exception):
    """A file that is not fixed; ``message`` says why, ``code`` is 1 (finding) or 2 (unreadable)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def read_manifest(path: Path, name: str) -> str:
    """The file's text, read once, at most :func:`max_input_bytes`.

    Raises:
        _Refused: cannot be read (code 2); larger than the limit, or not UTF-8, with the line and
            column of the first bad byte (KDP001 findings, code 1).
    """
    limit = max_input_bytes()
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise _Refused(f"{name}: error cannot read: {exc.strerror or exc}", 2) from exc
    if len(data) > limit:
        raise _Refused(f"{name}: error KDP001 larger than {limit / (1024 * 1024):g} MiB, the "
                       "input limit (the API server stores objects up to about 1.5 MiB); file left "
                       "unchanged", 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _Refused(f"{name}:{line}:{col}: error KDP001 not UTF-8 text (byte 0x{data[exc.start]:02x} "
                       f"at offset {exc.start}); file left unchanged", 1) from exc


def _writable(real: str) -> str | None:
    """Why ``real`` must not be replaced, or None. Checks the mode bits too: root passes os.access."""
    try:
        st = os.stat(real)
    except OSError as exc:
        return f"cannot stat: {exc.strerror or exc}"
    if not stat.S_IMODE(st.st_mode) & 0o222:
        return f"read-only (mode {stat.S_IMODE(st.st_mode):04o}); make it writable to let fix edit it"
    effective = os.access in os.supports_effective_ids  # the ids a write is checked against
    if not os.access(real, os.W_OK, effective_ids=effective):
        return "permission denied (no write permission for you)"
    return None


def unified_diff(old: str, new: str, fromfile: str, tofile: str) -> str:
    """A unified diff as ``diff -u``/git print it, ``\\ No newline at end of file`` included."""
    out = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=fromfile, tofile=tofile):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


#: What a credential's literal value is replaced with in a diff.
HIDDEN = "<hidden: KDP217>"


def _credential_values(text: str) -> list[str]:
    """Literal values of env entries named like credentials (:func:`k8sddp.validate.envchecks.is_credential_name`)
    anywhere in ``text``'s documents, longest first; ``[]`` when it does not parse."""
    import yaml

    from ..validate.envchecks import credential_literals, is_credential_name
    from ..yamlgraph import load_all

    try:
        docs = load_all(text)
    except (yaml.YAMLError, RecursionError):
        return []
    found: set[str] = set()
    stack: list[tuple[Any, int]] = [(d, 0) for d in docs]
    seen: set[int] = set()
    while stack:  # iterative, each shared (aliased) object once: bounded by the distinct objects
        node, depth = stack.pop()
        if id(node) in seen or depth > 64:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            name, value = node.get("name"), node.get("value")
            if isinstance(name, str) and is_credential_name(name) and value not in (None, ""):
                found.update(credential_literals(value))
            stack += [(v, depth + 1) for v in node.values()]
        elif isinstance(node, list):
            stack += [(v, depth + 1) for v in node]
    return sorted(found, key=len, reverse=True)


def _credential_spans(text: str) -> list[tuple[int, int, int, int]]:
    """Where the literal values of credential-named env entries are written in ``text``: (first
    line, column, last line, end column), 0-based; a block or multi-line scalar spans lines, and
    its source form (escapes, folding) need not equal its value. ``[]`` when it does not parse."""
    import yaml

    from ..validate.envchecks import is_credential_name

    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError):
        return []
    lines = text.splitlines()
    spans: list[tuple[int, int, int, int]] = []
    stack: list[Any] = [d for d in docs if d is not None]
    seen: set[int] = set()
    while stack:  # the node graph: each (aliased) node once, never expanded
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
            name, value = keys.get("name"), keys.get("value")
            if (isinstance(name, yaml.ScalarNode) and is_credential_name(str(name.value)) and value is not None
                    and not (isinstance(value, yaml.ScalarNode) and value.value == "")):
                sl, sc, el, ec = value.start_mark.line, value.start_mark.column, value.end_mark.line, value.end_mark.column
                if el > sl and ec == 0:  # a block scalar ends at the start of the next line
                    el -= 1
                    ec = len(lines[el]) if el < len(lines) else 0
                spans.append((sl, sc, el, ec))
            stack += [v for kv in node.value for v in kv]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
    return spans


def _mask_line(line: str, lineno: int, spans: list[tuple[int, int, int, int]]) -> tuple[str, bool]:
    """``line`` (0-based ``lineno``) with the part inside any of ``spans`` replaced by :data:`HIDDEN`."""
    for sl, sc, el, ec in spans:
        if not sl <= lineno <= el:
            continue
        start = sc if lineno == sl else len(line) - len(line.lstrip())
        end = ec if lineno == el else len(line)
        if end > start:
            return line[:start] + HIDDEN + line[end:], True
    return line, False


def hide_credentials(diff: str, original: str, fixed: str | None = None) -> tuple[str, int]:
    """``diff`` with every literal value of a credential-named env variable of ``original``
    (and ``fixed``) replaced by :data:`HIDDEN` (fix never prints a credential), and how many
    values were hidden: by where each value is written, then by its text anywhere else."""
    import re

    old_spans, new_spans = _credential_spans(original), _credential_spans(fixed if fixed is not None else original)
    out: list[str] = []
    old_ln = new_ln = 0
    masked: set[tuple[str, int, int]] = set()
    for line in diff.splitlines(keepends=True):
        m = re.match(r"@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@", line)
        if m:
            old_ln, new_ln = int(m.group(1)) - 1, int(m.group(2)) - 1
            out.append(line)
            continue
        if line.startswith(("---", "+++")) or line[:1] not in (" ", "-", "+"):
            out.append(line)
            continue
        body, end = (line[1:-1], line[-1]) if line.endswith("\n") else (line[1:], "")
        if line[0] == "+":
            body, hit = _mask_line(body, new_ln, new_spans)
            key = ("+", new_ln, 0)
            new_ln += 1
        else:
            body, hit = _mask_line(body, old_ln, old_spans)
            key = ("-", old_ln, 0)
            old_ln += 1
            if line[0] == " ":
                new_ln += 1
        if hit:
            masked.add(key)
        out.append(line[0] + body + end)
    diff = "".join(out)
    spans_hit = sum(1 for sl, _, el, _ in old_spans if any(k[0] == "-" and sl <= k[1] <= el for k in masked))
    spans_hit += sum(1 for sl, _, el, _ in new_spans if any(k[0] == "+" and sl <= k[1] <= el for k in masked))
    values = [v for v in _credential_values(original) if v in diff]
    for v in values:
        diff = diff.replace(v, HIDDEN)
    return diff, max(spans_hit, len(values))


def _print_notes(result: FixResult, out: TextIO, check: bool) -> None:
    for n in result.notes:
        mark = ("would fix" if check else "fixed") if n.changed else "left"
        print(f"{result.file}:{n.line}: {mark} {n.rule_id} {n.where}: {n.text}", file=out)


def run(args: argparse.Namespace) -> int:
    """Fix (or with ``--check`` diff) every file; see the module docstring for exit codes."""
    if args.active_deadline_seconds is not None and args.profile != "strict":
        raise UsageError("--active-deadline-seconds needs --profile strict")
    files = collect(args.paths)
    notes_out = sys.stderr if args.check else sys.stdout
    changed = broken = failed = jobs = left = unresolved = 0
    for path in files:
        name = str(path)
        try:
            text = read_manifest(path, name)
        except _Refused as exc:
            print(exc, file=sys.stderr)
            failed += exc.code == 2
            broken += exc.code == 1
            continue
        try:
            result = fix_text(text, file=name, profile=args.profile,
                              active_deadline_seconds=args.active_deadline_seconds)
        except RuntimeError as exc:  # the self-check refused the result: never write it
            print(f"{name}: error {exc}", file=sys.stderr)
            broken += 1
            continue
        if result.error is not None:
            e = result.error
            print(f"{e.location()}: error {e.rule_id} {e.message}", file=sys.stderr)
            broken += 1
            continue
        if result.changed and not args.check:
            real = os.path.realpath(path)
            why = _writable(real)
            if why is None:
                try:
                    kept = write_bytes_atomic(real, result.fixed.encode("utf-8"))
                except OSError as exc:
                    why = f"cannot write: {exc.strerror or exc}"
                else:
                    if not kept:
                        print(f"{name}: warning the file's owner or group could not be kept (the "
                              "new file is owned by you); chown it back if that matters", file=sys.stderr)
            if why is not None:  # nothing was written: no "fixed" lines for it
                print(f"{name}: error {why}; file left unchanged", file=sys.stderr)
                failed += 1
                continue
        jobs += result.jobs
        left += sum(1 for n in result.notes if not n.changed)
        unresolved += sum(1 for n in result.notes if n.unresolved)
        _print_notes(result, notes_out, args.check)
        if not result.changed:
            continue
        changed += 1
        if args.check:
            rel = path.as_posix().lstrip("/")
            diff, hidden = hide_credentials(unified_diff(result.original, result.fixed, f"a/{rel}", f"b/{rel}"),
                                            result.original, result.fixed)
            sys.stdout.write(diff)
            if hidden:
                print(f"{result.file}: the diff hides {hidden} literal value(s) of credential-named variables (KDP217), so it "
                      "will not apply with git apply; run `k8sddp fix` to change the file", file=notes_out)
    verb = "would change" if args.check else "changed"
    summary = (f"fix: {len(files)} file(s), {jobs} PyTorchJob(s); {changed} file(s) {verb}; "
               f"{broken} not parsed (left unchanged)")
    if failed:
        summary += f"; {failed} could not be read or written (left unchanged)"
    summary += f"; {left} item(s) left for you"
    if unresolved:
        summary += f", {unresolved} of them still breaking a rule"
    if left:
        summary += f" (check with `k8sddp validate --profile {args.profile}`)"
    print(summary, file=notes_out)
    if failed:
        return 2
    if broken or unresolved or (args.check and changed):
        return 1
    return 0
