"""``k8sddp migrate``: Kubeflow PyTorchJobs (kubeflow.org/v1) into Trainer v2.3.0 TrainJobs.

Public API::

    migrate_text(text, file, *, runtime_name, stock, include_runtime, runtime_options) -> MigrateResult
        .text (the manifest, or None), .notices (located notes), .exit_code (0 or 1)
    convert_job(doc, *, first_line, runtime_name, stock, runtime_options) -> Migrated   one job (ruamel nodes)

Where each field goes and why: :mod:`k8sddp.migrate.fields` and docs/migrate.md.
"""

from .convert import STOCK_RUNTIME, CannotMigrate, Migrated, Note, convert_job
from .document import MigrateResult, Notice, migrate_text, stock_runtime

__all__ = [
    "CannotMigrate",
    "MigrateResult",
    "Migrated",
    "Note",
    "Notice",
    "STOCK_RUNTIME",
    "convert_job",
    "migrate_text",
    "stock_runtime",
]
