"""``submit --local``: run a PyTorchJob on this machine as the Kubeflow training operator would.

Modules: ``podspec`` (each pod's command, env and volume mapping), ``policy`` (the restart policy
and the operator's condition messages), ``runner`` (processes, conditions, logs, limits).
Semantics and deviations: docs/cluster.md.
"""
