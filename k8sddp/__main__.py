"""``python -m k8sddp`` runs the CLI (torchrun uses this: ``torchrun -m k8sddp train ...``)."""

from .cli import main

main()
