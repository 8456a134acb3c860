"""Imports of project code when one file of a project is linted alone (what the pre-commit hook
does): the folders up to the lint root are tried, then the installable project root above it (a
folder with ``setup.py``/``setup.cfg``/``pyproject.toml``, what ``pip install -e .`` makes
importable)."""

from __future__ import annotations

import shutil
from pathlib import Path

from k8sddp.lint import lint_paths

from .expect import expected_in_file

CASE = Path(__file__).parent / "fixtures" / "KDP512" / "fail" / "zero3_gather_after_rank0_save"
SCRIPT = Path("training") / "finetune" / "main.py"


def _found(path: Path) -> set[tuple[str, int, str]]:
    report = lint_paths([str(path)]).report
    return {(f.file, f.line, f.rule_id) for f in report.findings if not f.exempted_by}


def test_helper_found_in_the_installed_package_above() -> None:
    script = CASE / SCRIPT
    expected = expected_in_file(script, str(script))
    assert expected and _found(script) == expected


def test_without_a_project_marker_the_folders_above_are_tried(tmp_path: Path) -> None:
    """A repository that is not packaged is run from its top (``python training/main.py``): its
    packages one or two folders up are project code (StyleGAN2-ADA's ``torch_utils``)."""
    copy = tmp_path / "proj"
    shutil.copytree(CASE, copy)
    (copy / "setup.py").unlink()
    (copy / ".git").mkdir()
    script = copy / SCRIPT
    assert _found(script) == expected_in_file(script, str(script))


def test_a_package_outside_the_checkout_is_not_project_code(tmp_path: Path) -> None:
    """The search stops at the folder holding ``.git``: the helper package sits above the
    checkout, so it is not read, and the save it does is not seen."""
    shutil.copytree(CASE, tmp_path, dirs_exist_ok=True)
    (tmp_path / "setup.py").unlink()
    (tmp_path / "training" / ".git").mkdir()
    got = _found(tmp_path / SCRIPT)
    assert not any(rule == "KDP512" for _, _, rule in got), got


INIT_PATHS = Path(__file__).parent / "fixtures" / "KDP512" / "fail" / "init_paths_puts_lib_on_sys_path"


def test_a_script_linted_alone_follows_the_folder_its_init_paths_adds(tmp_path: Path) -> None:
    """``tools/train.py`` linted by itself in a checkout: ``import _init_paths`` puts ``../lib``
    on ``sys.path``, so ``utils.checkpoint`` there is read and its rank-0 save is seen."""
    shutil.copytree(INIT_PATHS, tmp_path / "repo")
    (tmp_path / "repo" / ".git").mkdir()
    script = tmp_path / "repo" / "tools" / "train.py"
    assert _found(script) == expected_in_file(script, str(script))


def test_without_the_init_paths_import_lib_is_not_project_code(tmp_path: Path) -> None:
    shutil.copytree(INIT_PATHS, tmp_path / "repo")
    (tmp_path / "repo" / ".git").mkdir()
    script = tmp_path / "repo" / "tools" / "train.py"
    script.write_text(script.read_text().replace("import _init_paths  # noqa: F401\n", ""))
    assert not any(rule == "KDP512" for _, _, rule in _found(script))


def test_sys_path_forms_read_statically(tmp_path: Path) -> None:
    """``Path(__file__).resolve().parents[1]``, a relative folder (from the checkout's top) and
    ``os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))`` are followed; a folder from
    an environment variable, or one outside the checkout, adds nothing."""
    import ast

    from k8sddp.lint.project import Project, build_module

    repo = tmp_path / "repo"
    for d in ("scripts", "third_party/net", "src"):
        (repo / d).mkdir(parents=True)
    (repo / ".git").mkdir()
    src = (
        "import os, sys\nfrom pathlib import Path\n"
        "sys.path.append(str(Path(__file__).resolve().parents[1] / 'src'))\n"
        "sys.path.insert(0, 'third_party/net')\n"
        "sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), '..')))\n"
        "sys.path.append(os.environ.get('EXTRA', '.'))\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
    )
    script = repo / "scripts" / "train.py"
    script.write_text(src)
    proj = Project(repo / "scripts")
    proj.add(build_module(str(script), src, ast.parse(src)))
    assert proj.syspath_anchors() == [str((repo / "src").resolve()), str((repo / "third_party" / "net").resolve()),
                                      str(repo.resolve())]


def test_a_package_named_by_the_scripts_own_folder() -> None:
    """``from training.checkpoint import ...`` in ``src/clap/training/main.py`` linted alone (CLAP's
    layout): the package is the folder the script sits in, found from the folder above it, which
    neither the lint root nor the installable root (with ``pyproject.toml``) is."""
    script = (Path(__file__).parent / "fixtures" / "KDP512" / "fail" / "package_named_by_its_own_folder"
              / "src" / "clap" / "training" / "main.py")
    expected = expected_in_file(script, str(script))
    assert expected and _found(script) == expected


def test_a_relative_sys_path_is_also_taken_from_the_scripts_folder(tmp_path: Path) -> None:
    """A script run from its own folder (``cd tools; python train.py``, MagFace's ``run/``) names
    folders relative to it: ``sys.path.insert(0, "../lib")`` makes ``lib/ckpt.py`` importable as
    ``ckpt``, so linting the script alone sees the rank-0 save its ``save_checkpoint`` makes."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "lib").mkdir()
    (repo / "lib" / "ckpt.py").write_text(
        "import torch\n\n\ndef save_checkpoint(state, filename):\n    torch.save(state, filename)\n")
    (repo / "tools").mkdir()
    script = repo / "tools" / "train.py"
    body = (
        "import datetime\nimport sys\n\nsys.path.insert(0, '../lib')\nimport torch\nimport torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\nimport ckpt\n\n\n"
        "def main_worker(gpu, args, loader):\n"
        "    dist.init_process_group('nccl', timeout=datetime.timedelta(minutes=30), rank=args.rank)\n"
        "    model = DDP(torch.nn.Linear(2, 2).cuda(gpu), device_ids=[gpu])\n"
        "    for epoch in range(args.epochs):\n"
        "        for x in loader:\n"
        "            model(x).sum().backward()\n"
        "        if args.rank == 0:\n"
        "            ckpt.save_checkpoint(model.state_dict(), f'{epoch}.pth')\n"
    )
    script.write_text(body)
    assert _found(script) == {(str(script), 19, "KDP512")}
    script.write_text(body.replace("sys.path.insert(0, '../lib')\n", ""))  # without it: no helper in sight
    assert _found(script) == set()
