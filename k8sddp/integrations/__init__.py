"""Framework integrations of the guard (``docs/runtime.md``, "Frameworks").

Each module imports its framework, so import only the one you use:

    k8sddp.integrations.lightning     K8sddpCallback (a lightning Callback)     k8sddp[lightning]
    k8sddp.integrations.transformers  K8sddpTrainerCallback, guard_trainer     k8sddp[transformers]
    k8sddp.integrations.accelerate    guard_accelerator                          k8sddp[transformers]

Under ``k8sddp launch`` the zero-code guard already beats on every optimizer step and batch; the
integrations add the phases the frameworks know about (evaluation, checkpoint writes) so that
those get their own budgets, and start the guard when the script runs without the launcher.
"""
