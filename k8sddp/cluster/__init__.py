"""Talking to a cluster: the client for every job kind, waiting on a job, pods and logs.

Needs the optional extra ``k8sddp[cluster]`` (the official ``kubernetes`` client). Modules:
``client`` (connection; create/get/apply/delete/replace/watch of any registered kind with retries),
``resources`` (a kind's REST coordinates), ``coreapi`` (ConfigMaps, pods, logs), ``locate`` (which
kind a named job is), ``apierrors`` (API ``Status`` -> :class:`k8sddp.errors.ClusterError`),
``retry`` (bounded backoff), ``wait`` (follow a job's conditions), ``pods`` (a job's pods by its
controller's labels), ``output`` (kubectl-like ``-o name|yaml|json``).
"""
