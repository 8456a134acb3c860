"""The k8sddp version (single source; hatch reads it for the wheel)."""

__version__ = "0.1.0"
