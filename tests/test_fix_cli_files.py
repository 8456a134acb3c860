"""``k8sddp fix`` and the files it reads and writes (review of issue 5, items 3, 4, 6, 7, 11, 12).

Permission cases run as the unprivileged user ``nobody`` (effective ids, in this process) when the
suite runs as root, since root passes every permission check; a real file system either way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import k8sddp.validate.yamlio  # noqa: F401  imported before dropping privileges (site-packages under /root)
from k8sddp.cli import build_parser, main
from k8sddp.commands.fix import max_input_bytes
from k8sddp.fix import fix_text

JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: j}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: img
              env:
                - name: A
                  value: "1"
"""
NOBODY = 65534


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder under /tmp that ``nobody`` can enter (pytest's tmp_path is root's, mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix="k8sddp-fix-"))
    d.chmod(0o777)
    try:
        yield d
    finally:
        for p in [d, *d.rglob("*")]:
            with contextlib.suppress(OSError):
                p.chmod(0o777 if p.is_dir() else 0o666)
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Run the body as ``nobody`` when root (effective ids only, restored after)."""
    if os.geteuid() != 0:
        yield
        return
    build_parser()  # import every command module first: the interpreter's files are root's (0700)
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)


def test_a_file_that_cannot_be_written_does_not_stop_the_others(
        shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rodir = shared_dir / "rodir"
    rodir.mkdir()
    x, w = rodir / "x.yaml", shared_dir / "w.yaml"
    for f in (x, w):
        f.write_text(JOB, encoding="utf-8")
        _own(f)
    _own(rodir)
    _own(shared_dir)
    secret = shared_dir / "secret.yaml"
    secret.write_text(JOB, encoding="utf-8")
    _own(secret)
    secret.chmod(0o000)  # cannot even be read
    rodir.chmod(0o555)  # the file is writable, its folder is not: the atomic rename cannot happen
    with unprivileged():
        code = main(["fix", str(secret), str(x), str(w)])
    out, err = capsys.readouterr()
    assert code == 2
    assert f"{secret}: error cannot read: Permission denied" in err
    assert f"{x}: error cannot write: Permission denied; file left unchanged" in err
    assert str(x) not in out  # no "fixed" line for a file that was not written
    assert f"{w}:11: fixed KDP201" in out
    assert "3 file(s), 1 PyTorchJob(s); 1 file(s) changed; 0 not parsed (left unchanged); " \
           "2 could not be read or written (left unchanged)" in out
    assert x.read_text(encoding="utf-8") == JOB
    assert "PYTHONFAULTHANDLER" in w.read_text(encoding="utf-8")


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_read_only_file_is_refused_even_for_root(
        shared_dir: Path, capsys: pytest.CaptureFixture[str], user: str) -> None:
    if user == "root" and os.geteuid() != 0:
        pytest.skip("needs root")
    ro, ok = shared_dir / "ro.yaml", shared_dir / "ok.yaml"
    for f in (ro, ok):
        f.write_text(JOB, encoding="utf-8")
        _own(f)
    ro.chmod(0o444)
    ctx = unprivileged() if user == "nobody" else contextlib.nullcontext()
    with ctx:
        assert main(["fix", str(ro), str(ok)]) == 2
        assert main(["fix", "--check", str(ro)]) == 1  # --check writes nothing: it only reports
    _, err = capsys.readouterr()
    assert f"{ro}: error read-only (mode 0444); make it writable to let fix edit it; file left unchanged" in err
    assert ro.read_text(encoding="utf-8") == JOB and stat.S_IMODE(ro.stat().st_mode) == 0o444
    assert "PYTHONFAULTHANDLER" in ok.read_text(encoding="utf-8")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_owner_and_group_are_kept(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = shared_dir / "j.yaml"
    f.write_text(JOB, encoding="utf-8")
    os.chown(f, NOBODY, NOBODY)
    f.chmod(0o640)
    assert main(["fix", str(f)]) == 0
    st = f.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o640)
    assert "PYTHONFAULTHANDLER" in f.read_text(encoding="utf-8")
    assert "owner or group could not be kept" not in capsys.readouterr().err


def test_group_that_cannot_be_kept_is_reported(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """nobody replaces its own file whose group it is not in: the new file's group changes; say so."""
    if os.geteuid() != 0:
        pytest.skip("needs root to set up a file owned by nobody with group root")
    f = shared_dir / "j.yaml"
    f.write_text(JOB, encoding="utf-8")
    os.chown(f, NOBODY, 0)
    os.chown(shared_dir, NOBODY, NOBODY)
    with unprivileged():
        assert main(["fix", str(f)]) == 0
    assert "owner or group could not be kept" in capsys.readouterr().err
    assert "PYTHONFAULTHANDLER" in f.read_text(encoding="utf-8")


def test_non_utf8_finding_has_the_line_of_the_first_bad_byte(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "inv.yaml"
    data = JOB.replace("name: A", "name: \xff").encode("utf-8").replace(b"\xc3\xbf", b"\xff")
    f.write_bytes(data)
    assert main(["fix", str(f)]) == 1
    err = capsys.readouterr().err
    assert f"{f}:14:25: error KDP001 not UTF-8 text (byte 0xff at offset " in err
    assert f.read_bytes() == data


def test_input_over_the_limit_is_refused_quickly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    limit = max_input_bytes()
    assert limit == 16 * 1024 * 1024
    f = tmp_path / "huge.yaml"
    pad = "# " + "x" * 1000 + "\n"
    f.write_text(JOB + pad * (limit // len(pad) + 1), encoding="utf-8")
    t0 = time.monotonic()
    assert main(["fix", "--check", str(f)]) == 1
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert f"{f}: error KDP001 larger than 16 MiB, the input limit" in err and "left unchanged" in err
    assert elapsed < 30  # refused before parsing (about 0.1 s; generous bound for a loaded machine)


def test_stdin_dash_is_a_clear_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fix", "-"]) == 2
    err = capsys.readouterr().err
    assert "does not read standard input" in err and "no such file" not in err


def test_upper_case_suffixes_and_fifos_in_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "X.YAML").write_text(JOB, encoding="utf-8")
    os.mkfifo(tmp_path / "p.yaml")  # would block a read; never opened
    assert main(["fix", str(tmp_path)]) == 0
    assert "PYTHONFAULTHANDLER" in (tmp_path / "X.YAML").read_text(encoding="utf-8")
    assert "1 file(s), 1 PyTorchJob(s); 1 file(s) changed" in capsys.readouterr().out


def test_env_not_a_list_is_unresolved_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = JOB.replace('              env:\n                - name: A\n                  value: "1"\n',
                       "              env: &e\n")
    f = tmp_path / "n.yaml"
    f.write_text(text, encoding="utf-8")
    assert main(["fix", str(f)]) == 1
    out, _ = capsys.readouterr()
    assert "left KDP201" in out and "by hand" in out and "1 of them still breaking a rule" in out
    assert f.read_text(encoding="utf-8") == text
    # a valueFrom that fix does not check is not a failure
    f.write_text(JOB.replace('                - name: A\n                  value: "1"\n',
                             "                - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n"
                             "                  valueFrom: {configMapKeyRef: {name: c, key: k}}\n"
                             "                - {name: PYTHONFAULTHANDLER, value: \"1\"}\n"), encoding="utf-8")
    assert main(["fix", str(f)]) == 0
    assert [n.unresolved for n in fix_text(f.read_text(encoding="utf-8")).notes] == [False]


def test_parse_errors_match_validate_and_hint_at_helm() -> None:
    """Review item 13: same rule, location and text as validate; a Helm template is KDP010 (render it first)."""
    from k8sddp.validate import validate_text

    for text, helm in [("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.name }}\n"
                        "data: {a: [1, 2}\n", True),
                       ("a: [1, 2\nb: 1\n", False)]:
        err = fix_text(text, file="t.yaml").error
        [found] = validate_text(text, file="t.yaml").findings
        assert err is not None and (err.rule_id, err.line, err.column) == (found.rule_id, found.line, found.column)
        assert err.message.startswith(found.message)
        assert ("helm template" in err.message) is helm


def test_near_miss_container_name_is_shown() -> None:
    text = JOB.replace("- name: pytorch", '- name: "pytorch\\u200b"')
    r = fix_text(text)
    [n] = r.notes
    assert n.rule_id == "KDP104" and n.unresolved and "'pytorch\\u200b' meant to be it" in n.text
