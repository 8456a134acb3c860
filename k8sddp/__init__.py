"""k8sddp: guardrails that turn PyTorch distributed hangs on Kubernetes into fast failures.

Public API (imported lazily so that ``import k8sddp`` stays cheap)::

    k8sddp.render        DDPJob spec -> PyTorchJob manifest
    k8sddp.validate      manifests -> findings (structure + guardrail profiles)
    k8sddp.runtime       the watchdog-guarded training entrypoint (needs the ``train`` extra)
    k8sddp.guard         the explicit guard API for training scripts (torch)
    k8sddp.integrations  Lightning, Transformers and Accelerate integrations
"""

from ._version import __version__
from .errors import (
    ClusterError,
    JobFailedError,
    K8sddpError,
    SpecError,
    UsageError,
    ValidationError,
    WaitTimeoutError,
)
from .findings import Finding, Report, Severity

__all__ = [
    "ClusterError",
    "Finding",
    "JobFailedError",
    "K8sddpError",
    "Report",
    "Severity",
    "SpecError",
    "UsageError",
    "ValidationError",
    "WaitTimeoutError",
    "__version__",
]
