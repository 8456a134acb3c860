"""``k8sddp diagnose``: name the rank and the phase that diverged, across nodes and restarts.

The core (:mod:`.load`, :mod:`.stacks`, :mod:`.flightrec`, :mod:`.torchrun`, :mod:`.analyze`,
:mod:`.model`, :mod:`.text`) imports only the standard library and the rule catalogue, so the
launcher (``k8sddp launch``, torch-free) uses the same analysis for its one-line summary and run
record. The timeline picture (:mod:`.plot`, matplotlib), incident records (:mod:`.incident`,
PyYAML and jsonschema) and the cluster reader (:mod:`.remote`, the kubernetes client) are imported
only by the commands that need them.

Public API::

    diagnose_dir(path, restart=0) -> Diagnosis    read a volume and analyse one restart
    analyse(generation, ...) -> Diagnosis         the analysis of already-read attempts
    Diagnosis, Culprit, RankState                 the result (.model)
"""

from __future__ import annotations

from pathlib import Path

from .analyze import analyse
from .load import Generation, load
from .model import Culprit, Diagnosis, RankState

__all__ = ["Culprit", "Diagnosis", "Generation", "RankState", "analyse", "diagnose_dir"]


def diagnose_dir(path: Path, restart: int = 0) -> Diagnosis:
    """Diagnose restart ``restart`` (0: the newest) of the artifact volume at ``path``.

    Raises:
        FileNotFoundError: ``path`` is not a folder or holds no attempt folder.
        IndexError: no such restart.
    """
    gen, count = load(Path(path), generation=restart)
    return analyse(gen, restarts=count, root=str(path))
