"""``k8sddp lint``: static guardrails for PyTorch distributed training scripts.

Finds the patterns that hang or quietly damage DDP/FSDP jobs (rules KDP500-KDP513 of
:mod:`k8sddp.catalogue`, described in ``docs/lint.md``): collectives only some ranks reach,
rank-dependent exits from loops that hold collectives, unpaired barriers, checkpoints written by
several ranks to one path, ``init_process_group`` without ``timeout=``, unsynchronised rank-0
writes, DataLoader and DistributedSampler settings, value-dependent ``forward`` code.

Rank dependence is data flow over the ``ast`` (:mod:`k8sddp.lint.flow`), followed into
functions of the same file and of the linted project (:mod:`k8sddp.lint.analyzer`).

Public API::

    lint_paths(paths, *, config_file=None, select=None, ignore=None, fix=False) -> LintResult
    collect_files(paths, config=None) -> list[str]
"""

from .config import LintConfig, find_config, load_config
from .engine import LintResult, collect_files, lint_paths

__all__ = ["LintConfig", "LintResult", "collect_files", "find_config", "lint_paths", "load_config"]
