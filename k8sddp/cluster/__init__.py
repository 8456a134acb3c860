"""Talking to a cluster: the PyTorchJob client, waiting on a job, pods and logs.

Needs the optional extra ``k8sddp[cluster]`` (the official ``kubernetes`` client). Modules:
``client`` (connection, create/get/delete/replace with retries, ConfigMaps, pods, logs),
``apierrors`` (API ``Status`` -> :class:`k8sddp.errors.ClusterError`), ``retry`` (bounded backoff),
``wait`` (follow a job's conditions), ``configmaps`` (references a job makes), ``output``
(kubectl-like ``-o name|yaml|json``).
"""
