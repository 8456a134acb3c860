"""Precision and recall of ``k8sddp lint`` on real public training scripts, labelled by hand.

The labels live in ``bench/lint_corpus.tsv`` (written before the linter was run on the
scripts): one ``script`` row per script (repository, path, commit, and its split: ``tune``,
looked at while tuning the rules, ``held``, held back, or ``fresh``, held back in a later batch from
repositories new to the corpus), and one ``hazard`` row per expected
finding (line, rule, a one-line reason). The scripts themselves are not vendored: each
repository is read from a bare git mirror (``--mirror``, default ``$K8SDDP_MIRROR`` or
``/work/.mirror``, laid out as ``<owner>+<name>/repo``, what the ``fetch`` tool of this
workplace writes; ``git clone --bare https://github.com/<owner>/<name> <owner>+<name>/repo``
makes one anywhere) and exported at the labelled commit into a cache folder, so that imports
of the script's own project resolve as they would in a checkout. Repositories whose mirror or
commit is missing are skipped with a message.

Each script is linted as ``k8sddp lint PATH`` lints it; a finding counts when it is in that
script's file and not exempted by ``# noqa``. A finding whose (line, rule) is labelled is a true
positive, any other a false positive; a label without a finding is a false negative.

Usage: ``python bench/lint_real.py [--mirror DIR] [--cache DIR] [--json] [--list] [--skip SPLITS]``. Prints raw
counts and precision/recall per rule and per severity, for each split (tuned, held back, later
held-back batch) apart and for all together; ``--list`` also prints every false positive and negative. Exit status 0
(2 when the table cannot be read).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k8sddp.catalogue import RULES  # noqa: E402
from k8sddp.lint import lint_paths  # noqa: E402

TABLE = ROOT / "bench" / "lint_corpus.tsv"
Key = tuple[str, str, int, str]  # repo, path, line, rule
_EXPORTED = (b".py", b"/pyproject.toml", b"\tpyproject.toml", b"/setup.cfg", b"\tsetup.cfg")
_COMPLETE = ".complete-2"  # the export holds the _EXPORTED files (older exports: Python files only)


def read_table(path: Path = TABLE) -> tuple[list[dict[str, str]], dict[Key, str]]:
    """The script rows and the labels ``{(repo, path, line, rule): reason}`` of ``path``.

    Raises:
        OSError: the table cannot be read; ValueError: a row is malformed.
    """
    scripts: list[dict[str, str]] = []
    labels: dict[Key, str] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        rows = csv.DictReader((line for line in fh if not line.startswith("#")), delimiter="\t")
        for n, row in enumerate(rows, 2):
            if row["kind"] == "script":
                scripts.append(row)
            elif row["kind"] == "hazard":
                labels[(row["repo"], row["path"], int(row["line"]), row["rule"])] = row["reason"]
            else:
                raise ValueError(f"{path}: row {n}: kind must be script or hazard, got {row['kind']!r}")
    return scripts, labels


def checkout(mirror: Path, cache: Path, repo: str, commit: str) -> Path | str:
    """The folder holding ``repo`` at ``commit`` (exported once into ``cache``), or why not."""
    git_dir = mirror / repo.replace("/", "+") / "repo"
    if (git_dir / ".git").is_dir():  # a mirror fetched with a work tree: its repository is below
        git_dir = git_dir / ".git"
    if not git_dir.is_dir():
        return f"no mirror at {git_dir}"
    # inside a folder named like the repository, as `git clone` makes it: a repository that is
    # itself a package (mae_st's `import mae_st.util.misc` at its root) resolves from there
    # (under clones/: an export of the older layout, the repository's files straight in the
    # commit's folder, may hold a folder of that name, which is not a complete clone)
    dest = cache / "clones" / f"{repo.replace('/', '+')}@{commit[:12]}" / repo.split("/")[1]
    if (dest / _COMPLETE).exists():
        return dest
    # only the Python files and the files that mark a project root (the linter resolves imports
    # from there): a mirror may lack large blobs (data, images), which the linter never reads
    git = ["git", "--git-dir", str(git_dir)]
    try:
        listing = subprocess.run([*git, "ls-tree", "-r", "-z", commit], check=True, capture_output=True).stdout
        blobs = [(entry.split(b"\t", 1)[1].decode(), entry.split()[2].decode())
                 for entry in listing.split(b"\0") if entry.endswith(_EXPORTED) and b" blob " in entry]
        batch = subprocess.run([*git, "cat-file", "--batch"], input="".join(f"{sha}\n" for _, sha in blobs).encode(),
                               check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        return f"cannot read {commit[:12]} from {git_dir}: {err.decode(errors='replace').strip() or exc}"
    pos = 0
    for name, _sha in blobs:
        end = batch.index(b"\n", pos)
        header = batch[pos:end].split()
        pos = end + 1
        if header[-1] == b"missing":
            continue
        size = int(header[2])
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(batch[pos:pos + size])
        pos += size + 1
    (dest / _COMPLETE).write_text(commit)
    return dest


def _severity(rule: str) -> str:
    return str(RULES[rule].severity.value) if rule in RULES else "(no rule)"


def _lint_one(file: Path) -> dict[tuple[int, str], str]:
    """The findings (line, rule) -> message that ``k8sddp lint FILE`` reports in that file."""
    report = lint_paths([str(file)]).report
    return {(f.line, f.rule_id): f.message for f in report.findings
            if not f.exempted_by and Path(f.file).resolve() == file.resolve()}


def measure(mirror: Path, cache: Path, table: Path = TABLE,
            skip_splits: frozenset[str] = frozenset()) -> dict[str, object]:
    """Lint every script of the table (but those of ``skip_splits``, a held-back batch not to be
    looked at yet); return counts and mismatches.

    Returns:
        ``{"scripts": {split: n}, "skipped": [msg], "counts": {split: {"rule"|"severity": {name:
        {"tp", "fp", "fn"}}}}, "false_positives": [...], "false_negatives": [...]}``.
    """
    scripts, labels = read_table(table)
    counts: dict[str, dict[str, dict[str, Counter[str]]]] = defaultdict(
        lambda: {"rule": defaultdict(Counter), "severity": defaultdict(Counter)})
    n_scripts: Counter[str] = Counter()
    skipped: list[str] = []
    fps: list[str] = []
    fns: list[str] = []
    todo: list[tuple[dict[str, str], Path]] = []
    for row in scripts:  # checkouts first, one at a time (two scripts may share one)
        repo, path, commit, split = row["repo"], row["path"], row["commit"], row["split"]
        if split in skip_splits:
            continue
        where = checkout(mirror, cache, repo, commit)
        if isinstance(where, str):
            skipped.append(f"{repo} {path}: {where}")
            continue
        file = where / path
        if not file.is_file():
            skipped.append(f"{repo} {path}: not in {commit[:12]}")
            continue
        todo.append((row, file))
    # each script is linted alone (as the pre-commit hook does), on every CPU
    workers = max(1, min(len(todo), os.cpu_count() or 1))
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        found = list(pool.map(_lint_one, [f for _, f in todo], chunksize=4))
    for (row, _file), got in zip(todo, found, strict=True):
        repo, path, split = row["repo"], row["path"], row["split"]
        n_scripts[split] += 1
        expected = {(k[2], k[3]) for k in labels if k[0] == repo and k[1] == path}
        for (line, rule), msg in got.items():
            hit = "tp" if (line, rule) in expected else "fp"
            for split_key in (split, "all"):
                counts[split_key]["rule"][rule][hit] += 1
                counts[split_key]["severity"][_severity(rule)][hit] += 1
            if hit == "fp":
                fps.append(f"[{split}] {repo} {path}:{line} {rule} {msg}")
        for line, rule in sorted(expected - set(got)):
            for split_key in (split, "all"):
                counts[split_key]["rule"][rule]["fn"] += 1
                counts[split_key]["severity"][_severity(rule)]["fn"] += 1
            fns.append(f"[{split}] {repo} {path}:{line} {rule} ({labels[(repo, path, line, rule)]})")
    plain = {s: {k: {name: dict(c) for name, c in sorted(v.items())} for k, v in d.items()} for s, d in counts.items()}
    return {"scripts": dict(n_scripts), "labels": len(labels), "skipped": skipped, "counts": plain,
            "false_positives": fps, "false_negatives": fns}


def _pr(c: dict[str, int]) -> tuple[float, float]:
    tp, fp, fn = c.get("tp", 0), c.get("fp", 0), c.get("fn", 0)
    return (tp / (tp + fp) if tp + fp else 1.0), (tp / (tp + fn) if tp + fn else 1.0)


def _table(title: str, groups: dict[str, dict[str, int]]) -> list[str]:
    out = [f"  {title:<10} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>9} {'recall':>7}"]
    total: Counter[str] = Counter()
    for name, c in groups.items():
        p, r = _pr(c)
        out.append(f"  {name:<10} {c.get('tp', 0):>4} {c.get('fp', 0):>4} {c.get('fn', 0):>4} {p:>9.3f} {r:>7.3f}")
        total.update(c)
    if title == "severity":
        p, r = _pr(total)
        out.append(f"  {'total':<10} {total['tp']:>4} {total['fp']:>4} {total['fn']:>4} {p:>9.3f} {r:>7.3f}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirror", default=os.environ.get("K8SDDP_MIRROR", "/work/.mirror"))
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "k8sddp-lint-real"))
    parser.add_argument("--table", default=str(TABLE))
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--list", action="store_true", help="print every false positive and negative")
    parser.add_argument("--skip", default="", metavar="SPLITS",
                        help="comma-separated splits not to lint (a held-back batch kept unseen)")
    args = parser.parse_args()
    try:
        res = measure(Path(args.mirror), Path(args.cache), Path(args.table),
                      frozenset(s for s in args.skip.split(",") if s))
    except (OSError, ValueError, KeyError) as exc:
        print(f"lint_real: cannot read {args.table}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    for msg in res["skipped"]:  # type: ignore[union-attr]
        print("skipped:", msg)
    scripts: dict[str, int] = res["scripts"]  # type: ignore[assignment]
    counts: dict[str, dict[str, dict[str, dict[str, int]]]] = res["counts"]  # type: ignore[assignment]
    if not scripts:
        print("lint_real: no script could be read (no mirror); nothing measured")
        return 0
    titles = {"tune": "tuned on", "held": "held back", "fresh": "held back, later batch (new repositories)",
              "fresh3": "held back, third batch (new repositories, labelled by others)",
              "fresh4": "held back, fourth batch (new repositories, labelled by others)",
              "fresh5": "held back, fifth batch (new repositories, labelled by others, linted once at the end)",
              "fresh6": "held back, sixth batch (new repositories, labelled by others with the location brief)",
              "fresh7": "held back, seventh batch (new repositories, labelled by others, linted after the fresh6 fixes)",
              "fresh8": "held back, eighth batch (new repositories, labelled by others, linted once with the last linter)",
              "fresh9": "held back, ninth batch (repositories the labellers chose, labelled by them, linted once at the end)",
              "fresh10": "held back, tenth batch (four labellers, four domains, linted once at the end)",
              "fresh11": "held back, eleventh batch (four more labellers, labelled from the rules after this session's changes)",
              "fresh12": "held back, twelfth batch (four more labellers, four more domains, linted once at the end)",
              "fresh13": "held back, thirteenth batch (four more labellers, four more domains, linted first by fedf9b7)",
              "fresh14": "held back, fourteenth batch (four more labellers, four more domains, linted first by 2884d3f)",
              "fresh15": "held back, fifteenth batch (four more labellers, four more domains, linted first by fbbe934's linter)",
              "fresh16": "held back, sixteenth batch (four more labellers, four more domains, linted first by c85fd4c)",
              "fresh17": "held back, seventeenth batch (four more labellers, four more domains, linted first by 351404a)",
              "fresh18": "held back, eighteenth batch (four more labellers, four more domains, linted first by 1f48294)",
              "fresh19": "held back, nineteenth batch (four more labellers, four more domains, linted first by 6efd679)",
              "fresh20": "held back, twentieth batch (four more labellers, four more domains, linted first by f068699)",
              "fresh21": "held back, twenty-first batch (four more labellers, four more domains, linted first by its labels commit)",
              "fresh22": "held back, twenty-second batch (four more labellers, four more domains, linted first by its labels commit)",
              "fresh23": "held back, twenty-third batch (six more labellers, four more domains, linted first by its labels commit)",
              "fresh24": "held back, twenty-fourth batch (the fresh23 round's seventh labeller, linted first by its labels commit)"}
    splits = [s for s in titles if s in scripts] + sorted(set(scripts) - set(titles)) + ["all"]
    for split in splits:
        title = titles.get(split, split)
        if split == "all" and args.skip:
            title = f"all measured (splits {', '.join(sorted(s for s in scripts))}; skipped: {args.skip})"
        n = sum(scripts.values()) if split == "all" else scripts.get(split, 0)
        print(f"== {title}: {n} scripts")
        d = counts.get(split, {"rule": {}, "severity": {}})
        print("\n".join(_table("rule", d["rule"]) + _table("severity", d["severity"])))
    if args.list:
        for line in res["false_positives"]:  # type: ignore[union-attr]
            print("FP", line)
        for line in res["false_negatives"]:  # type: ignore[union-attr]
            print("FN", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
