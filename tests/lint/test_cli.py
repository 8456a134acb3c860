"""``k8sddp lint`` driven in-process: exit codes, formats, --fail-on, noqa, configuration,
--fix (and that fixing twice changes nothing the second time), unreadable inputs."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
import yaml

from k8sddp.cli import main
from k8sddp.lint import lint_paths
from k8sddp.reporters import REPORTERS

BAD = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist


    def main():
        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            dist.barrier()
    """
)
WARN_ONLY = textwrap.dedent(
    """\
    from torch.utils.data import DataLoader

    loader = DataLoader(range(4), num_workers=2)
    """
)
CLEAN = "import torch\n\nx = torch.zeros(1)\n"
ENV_SECONDS = 'seconds=int(os.environ.get("K8SDDP_PG_TIMEOUT_SECONDS", "1800"))'


def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _lint(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["lint", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, "bad.py", BAD)
    clean = _write(tmp_path, "clean.py", CLEAN)
    warn = _write(tmp_path, "warn.py", WARN_ONLY)
    code, out, _ = _lint(capsys, str(clean))
    assert code == 0 and "0 error(s)" in out
    code, out, _ = _lint(capsys, str(bad))
    assert code == 1
    assert f"{bad}:6:5: error KDP505" in out and f"{bad}:8:9: error KDP503" in out
    code, out, _ = _lint(capsys, str(warn))
    assert code == 0 and "warning KDP508" in out
    code, _, _ = _lint(capsys, "--fail-on", "warning", str(warn))
    assert code == 1
    code, _, err = _lint(capsys, str(tmp_path / "missing.py"))
    assert code == 2 and "no such file" in err
    with pytest.raises(SystemExit) as exc:
        main(["lint", "--format", "nope", str(clean)])
    assert exc.value.code == 2


def test_folder_and_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "pkg/ok.py", CLEAN)
    broken = _write(tmp_path, "pkg/broken.py", "def f(:\n    pass\n")
    _write(tmp_path, "pkg/.hidden/skip.py", BAD)
    _write(tmp_path, "pkg/notes.txt", BAD)
    code, out, _ = _lint(capsys, "--format", "json", str(tmp_path / "pkg"))
    doc = json.loads(out)
    assert code == 1
    assert doc["summary"]["files"] == 2 and doc["summary"]["checked"] == 1
    [f] = doc["findings"]
    assert f["rule_id"] == "KDP500" and f["file"] == str(broken) and f["line"] == 1 and f["column"] >= 1


@pytest.mark.parametrize("fmt", sorted(REPORTERS))
def test_every_format(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, "bad.py", BAD)
    code, out, _ = _lint(capsys, "--format", fmt, str(bad))
    assert code == 1
    assert "KDP503" in out and "KDP505" in out


def test_github_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, "bad.py", BAD)
    _, out, _ = _lint(capsys, "--format", "github", str(bad))
    assert f"::error file={bad},line=8,col=9,title=KDP503::" in out


def test_noqa(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BAD.replace('dist.init_process_group("gloo")', 'dist.init_process_group("gloo")  # noqa: KDP505')
    text = text.replace("dist.barrier()", "dist.barrier()  # noqa")
    p = _write(tmp_path, "t.py", text)
    code, out, _ = _lint(capsys, "--format", "json", str(p))
    doc = json.loads(out)
    assert code == 0
    assert {f["rule_id"] for f in doc["findings"]} == {"KDP503", "KDP505"}
    assert all(f["exempted_by"] == "# noqa" and f["severity"] == "info" for f in doc["findings"])
    assert not {"path", "document", "object_ref"} & set(doc["findings"][0]) and "documents" not in doc["summary"]
    # text: counted in the summary, listed only with --show-exempted
    code, out, _ = _lint(capsys, str(p))
    assert code == 0 and "KDP503" not in out
    assert out.strip() == "lint: 1 file(s) checked; 0 error(s), 0 warning(s), 2 exempted (not listed; --show-exempted lists them)"
    code, out, _ = _lint(capsys, "--show-exempted", str(p))
    assert code == 0 and f"{p}:8:9: exempted (# noqa) KDP503" in out and out.count("exempted (# noqa)") == 2
    # a noqa for another rule does not silence this one; a noqa text inside a string does not count
    other = _write(tmp_path, "u.py", BAD.replace(
        'dist.init_process_group("gloo")', 'dist.init_process_group("gloo", "# noqa")  # noqa: KDP501'))
    code, out, _ = _lint(capsys, str(other))
    assert code == 1 and "error KDP505" in out


def test_config_walks_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "pyproject.toml", textwrap.dedent(
        """\
        [project]
        name = "x"

        [tool.k8sddp.lint]
        ignore = ["KDP505"]
        exclude = ["vendor/*"]

        [tool.k8sddp.lint.per-file-ignores]
        "scripts/*.py" = ["KDP503"]
        """))
    a = _write(tmp_path, "src/train/a.py", BAD)
    b = _write(tmp_path, "scripts/b.py", BAD)
    _write(tmp_path, "vendor/c.py", BAD)
    code, out, _ = _lint(capsys, "--format", "json", str(tmp_path))
    found = {(Path(f["file"]).name, f["rule_id"]) for f in json.loads(out)["findings"]}
    assert found == {("a.py", "KDP503")}
    assert code == 1
    code, out, _ = _lint(capsys, str(b))
    assert code == 0
    code, out, _ = _lint(capsys, "--select", "KDP505", "--ignore", "KDP503", str(a))
    assert code == 0  # config ignores KDP505, --ignore drops KDP503
    code, out, _ = _lint(capsys, "--config", str(tmp_path / "nowhere.toml"), str(a))
    assert code == 2


def test_bad_config_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.k8sddp.lint]\nselekt = ['KDP501']\n")
    p = _write(tmp_path, "a.py", CLEAN)
    code, _, err = _lint(capsys, str(p))
    assert code == 2 and "selekt" in err and "pyproject.toml" in err
    _write(tmp_path, "pyproject.toml", "[tool.k8sddp.lint]\nignore = ['KDP999']\n")
    from k8sddp.lint import config as cfg

    cfg._FOUND.clear()
    from k8sddp.lint import engine

    engine._CONFIGS.clear()
    code, _, err = _lint(capsys, str(p))
    assert code == 2 and "KDP999" in err


def test_fix_is_atomic_and_idempotent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _write(tmp_path, "train.py", textwrap.dedent(
        '''\
        """Trainer."""
        from __future__ import annotations

        import torch.distributed as dist


        def main():
            dist.init_process_group(
                backend="nccl",  # the GPU backend
            )
            dist.init_process_group()
        '''))
    os.chmod(p, 0o750)
    code, _, err = _lint(capsys, "--fix", str(p))
    assert "fixed 2" in err
    fixed = p.read_text()
    compile(fixed, str(p), "exec")
    assert fixed.count(f"timeout=datetime.timedelta({ENV_SECONDS})") == 2
    assert fixed.splitlines()[3:5] == ["import datetime", "import os"]
    assert f'backend="nccl", timeout=datetime.timedelta({ENV_SECONDS}),  # the GPU backend' in fixed
    assert oct(p.stat().st_mode & 0o777) == oct(0o750)
    assert code == 0
    code, _, err = _lint(capsys, "--fix", str(p))
    assert "fixed 0" in err and p.read_text() == fixed and code == 0
    assert not [x for x in os.listdir(tmp_path) if x.endswith(".tmp")]


def test_fix_reuses_existing_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _write(tmp_path, "a.py", "from datetime import datetime\nimport torch.distributed as dist\n"
               "dist.init_process_group('gloo')\n")
    _lint(capsys, "--fix", str(p))
    text = p.read_text()
    assert "from datetime import timedelta\n" in text and f"timeout=timedelta({ENV_SECONDS})" in text
    q = _write(tmp_path, "b.py", "import datetime as dt\nfrom torch.distributed import init_process_group\n"
               "init_process_group('gloo', 'env://')\n")
    _lint(capsys, "--fix", str(q))
    assert q.read_text().endswith(f"init_process_group('gloo', 'env://', timeout=dt.timedelta({ENV_SECONDS}))\n")


SHADOWED = textwrap.dedent(
    """\
    import datetime
    import os
    import sys
    import tempfile

    import torch
    import torch.distributed as dist

    datetime = "a module-level name that is not the module"


    def setup(os=None):
        dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)


    setup()
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    print(backend.options._timeout.total_seconds())
    dist.destroy_process_group()
    """
)


def test_fix_avoids_shadowed_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review 7 item 11: `datetime` rebound at module level, `os` a parameter of the function."""
    p = _write(tmp_path, "shadow.py", SHADOWED)
    code, _, err = _lint(capsys, "--fix", str(p))
    text = p.read_text()
    assert "fixed 1" in err and code == 0
    assert "from datetime import timedelta\nimport os as _k8sddp_os\nimport datetime\n" in text
    assert 'timeout=timedelta(seconds=int(_k8sddp_os.environ.get("K8SDDP_PG_TIMEOUT_SECONDS", "1800")))' in text
    # every name bound: private aliases
    q = _write(tmp_path, "all.py", "import torch.distributed as dist\n\n\ndef f(datetime, timedelta):\n"
               "    dist.init_process_group('gloo')\n")
    _lint(capsys, "--fix", str(q))
    assert q.read_text().startswith("from datetime import timedelta as _k8sddp_timedelta\nimport os\n")


@pytest.mark.slow
def test_fixed_script_reads_the_timeout_at_run_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fixed script really runs (torch, gloo, one rank) with the manifest's timeout."""
    import subprocess
    import sys

    p = _write(tmp_path, "shadow.py", SHADOWED)
    _lint(capsys, "--fix", str(p))
    env = {**os.environ, "K8SDDP_PG_TIMEOUT_SECONDS": "77"}
    run = subprocess.run([sys.executable, str(p)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "77.0"


def test_fix_keeps_crlf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review 7 item 12: the inserted import lines end in CRLF like the rest of the file."""
    p = tmp_path / "crlf.py"
    p.write_bytes(b"import torch.distributed as dist\r\ndist.init_process_group('nccl')\r\n")
    _lint(capsys, "--fix", str(p))
    data = p.read_bytes()
    assert data.startswith(b"import datetime\r\nimport os\r\nimport torch")
    assert data.count(b"\r\n") == data.count(b"\n") == 4


def test_fix_refuses_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _lint(capsys, "--fix", "-")
    assert code == 2 and "standard input" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _write(tmp_path, "secret.py", CLEAN)
    os.chmod(p, 0)
    try:
        code, _, err = _lint(capsys, str(p))
    finally:
        os.chmod(p, 0o644)
    assert code == 2 and "permission denied" in err


def test_pre_commit_hook() -> None:
    hooks = yaml.safe_load((Path(__file__).parents[2] / ".pre-commit-hooks.yaml").read_text())
    [hook] = [h for h in hooks if h["id"] == "k8sddp-lint"]
    assert hook["entry"] == "k8sddp lint" and hook["types"] == ["python"] and hook["language"] == "python"


def test_docs_describe_every_lint_rule() -> None:
    from k8sddp.catalogue import rules_for

    doc = (Path(__file__).parents[2] / "docs" / "lint.md").read_text()
    for rule in rules_for(["lint"]):
        assert f"### {rule.id} `{rule.name}` ({rule.severity.value}" in doc, rule.id


def test_deeply_nested_expression_does_not_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    terms = " + ".join(["dist.get_rank()"] * 2500)
    p = _write(tmp_path, "deep.py", f"import torch.distributed as dist\n\ndef f():\n    y = {terms}\n    if y:\n        dist.barrier()\n")
    code, out, _ = _lint(capsys, str(p))
    assert code == 1 and "KDP503" in out
    # deeper still: the parser may refuse it (a located KDP500) or the walk may skip the function
    # (counted as skipped); which one depends on the interpreter's limits, a traceback never
    too_deep = _write(tmp_path, "deeper.py", "x = " + " + ".join(["1"] * 6000) + "\n")
    code, out, err = _lint(capsys, str(too_deep))
    assert code in (0, 1) and "Traceback" not in out + err
    assert code == 0 or ("KDP500" in out and "recursion" in out)


FIXTURES = Path(__file__).parent / "fixtures"


def test_helper_write_reported_at_call_site_when_one_file_is_linted(capsys: pytest.CaptureFixture[str]) -> None:
    """Review 7 item 5: the pre-commit hook lints only the staged train.py; the helpers it imports
    from mylib/ are still read, and the finding is at the bad call, naming helper and writer."""
    proj = FIXTURES / "KDP504" / "fail" / "helper_cross_module"
    code, out, _ = _lint(capsys, "--format", "json", str(proj / "train.py"))
    found = [(f["line"], f["message"]) for f in json.loads(out)["findings"] if f["rule_id"] == "KDP504"]
    assert code == 1 and [line for line, _ in found] == [18, 25]
    msg = dict(found)[25]
    assert msg.startswith("write_ckpt() to `'/ckpt/final.pt'` (it runs torch.save() at ")
    assert "dist_utils.py:10) runs on every rank" in msg
    assert "start_logging() (it runs wandb.init() at " in dict(found)[18]
    # the helper module alone: write_ckpt's path is its callers', nothing to report there
    _, out, _ = _lint(capsys, str(proj / "mylib" / "dist_utils.py"))
    assert "torch.save" not in out


def test_kdp504_messages_name_the_multi_rank_guard_and_tracker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review 7 items 7 and 17: nanoGPT's `master_process = ddp_local_rank == 0` is the guard
    named (not the loss test nested in it); trackers are named with their library."""
    p = _write(tmp_path, "ng.py", textwrap.dedent(
        """\
        import datetime
        import os

        import torch
        import torch.distributed as dist
        import wandb
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5))
        ddp_local_rank = int(os.environ["LOCAL_RANK"])
        master_process = ddp_local_rank == 0
        model = DDP(torch.nn.Linear(2, 2))
        best = 1e9
        wandb.init(project="x")
        for it in range(10):
            loss = model(torch.randn(2, 2)).sum()
            if master_process:
                if loss.item() < best:
                    torch.save(model.state_dict(), "/ckpt/ckpt.pt")
        """))
    code, out, _ = _lint(capsys, str(p))
    assert "wandb.init() runs on every rank" in out
    assert ("torch.save() to `'/ckpt/ckpt.pt'` runs under `master_process` (line 17), "
            "true on local rank 0 of every node") in out


def test_kdp504_message_says_a_local_rank_option_is_every_rank_under_torchrun(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--local_rank` with a default of -1 keeps it under torchrun (which sets LOCAL_RANK and
    passes no option): `args.local_rank in [-1, 0]` is then true on every rank, not only on each
    node's local rank 0. An option defaulting to LOCAL_RANK keeps the plain message."""
    src = textwrap.dedent("""\
        import argparse
        import datetime
        import os

        import torch
        import torch.distributed as dist

        p = argparse.ArgumentParser()
        p.add_argument("--local_rank", type=int, default=DEFAULT)
        args = p.parse_args()
        dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5))
        if args.local_rank in [-1, 0]:
            torch.save({}, "/ckpt/model.pt")
        """)
    p = _write(tmp_path, "legacy.py", src.replace("DEFAULT", "-1"))
    code, out, _ = _lint(capsys, str(p))
    assert code == 1
    assert "and on every rank under torchrun (it passes none: `args.local_rank` keeps its default)" in out
    p = _write(tmp_path, "env.py", src.replace("DEFAULT", 'int(os.environ.get("LOCAL_RANK", -1))'))
    _, out, _ = _lint(capsys, str(p))
    assert "true on local rank 0 of every node:" in out and "torchrun" not in out


def test_kdp504_message_reads_local_rank_minus_one_as_the_single_process_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LLaVA's `trainer.args.local_rank == 0 or trainer.args.local_rank == -1`: transformers
    reads LOCAL_RANK, so -1 is the single-process run, not "every rank under torchrun"."""
    p = _write(tmp_path, "hf.py", textwrap.dedent("""\
        import datetime

        import torch
        import torch.distributed as dist


        def save(trainer, weights):
            dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5))
            if trainer.args.local_rank == 0 or trainer.args.local_rank == -1:
                torch.save(weights, "/ckpt/mm_projector.bin")
        """))
    code, out, _ = _lint(capsys, str(p))
    assert code == 1
    assert "true on local rank 0 of every node:" in out and "torchrun" not in out


def test_empty_or_closed_stdin_is_no_input_exit_2() -> None:
    """The contract: nothing on stdin for `-` is exit 2 ("no input"), so a pre-commit pipe whose
    producer failed does not pass as a clean lint."""
    import subprocess
    import sys

    for stdin in (subprocess.DEVNULL, None):
        kwargs = {"stdin": stdin} if stdin is not None else {"input": b""}
        res = subprocess.run([sys.executable, "-m", "k8sddp", "lint", "-"], capture_output=True, timeout=120, **kwargs)
        assert res.returncode == 2, res
        assert b"no input on standard input" in res.stderr and b"Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "k8sddp", "lint", "-"], input=b"import os\n", capture_output=True,
                         timeout=120)
    assert res.returncode == 0, res


@pytest.mark.parametrize("toml", ['[tool.k8sddp]\nlint.ignore = ["KDP505"]\n', 'tool.k8sddp.lint.ignore = ["KDP505"]\n'])
def test_dotted_key_spellings_of_the_lint_table_are_read(tmp_path: Path, toml: str) -> None:
    """`[tool.k8sddp]` with `lint.ignore = ...`, and a top-level `tool.k8sddp.lint.ignore`, are the
    same TOML table as `[tool.k8sddp.lint]`: the configuration is found, not silently skipped."""
    (tmp_path / "pyproject.toml").write_text(toml)
    script = tmp_path / "t.py"
    script.write_text('import torch.distributed as dist\ndist.init_process_group("nccl")\n')
    report = lint_paths([str(script)]).report
    assert not any(f.rule_id == "KDP505" for f in report.findings)
