"""Cluster admission: the validating webhook server and the native policy exports.

Modules, one job each::

    review       AdmissionReview v1: parse a request, decide, build the response (pure)
    selector     Kubernetes label selectors (the namespace exemption)
    lookup       read-only cluster lookups: ConfigMaps named by env, namespace labels
    tlsreload    an SSLContext that is rebuilt when the certificate or key file changes
    server       the HTTPS server (stdlib ThreadingHTTPServer + ssl), health, logs, size limit
    cel          the CEL expressions that enforce the ``baseline`` profile, from the catalogue
    policy       ValidatingAdmissionPolicy (+ binding) and Kyverno ClusterPolicy objects

The webhook and the CLI share one validator (:func:`k8sddp.validate.validate_objects`) and one
rule catalogue (:mod:`k8sddp.catalogue`), so the verdict in the cluster is the verdict in CI.
Design notes and the ``failurePolicy``/``timeoutSeconds``/``matchConditions`` choices:
``docs/admission.md``.
"""

from __future__ import annotations

from .review import AdmissionDecider, MalformedReview, Verdict

__all__ = ["AdmissionDecider", "MalformedReview", "Verdict"]
