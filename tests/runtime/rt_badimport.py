"""A task module that raises while it is imported (review of issue 3, item 3): every restart
would fail the same way, so ``k8sddp launch`` must exit 2 (final) with the traceback recorded."""

raise RuntimeError("rt_badimport: a module-level bug")
