"""Where each field of a Kubeflow PyTorchJob (kubeflow.org/v1, v1.9.4) goes in Trainer v2.3.0.

One table per place, each with its source. The TrainJob CRD (``trainer.kubeflow.org_trainjobs.yaml``,
v2.3.0, in ``../shared/reference/kubeflow-trainer/``) decides what a TrainJob can carry:

* ``spec.trainer`` has ``image``, ``command``, ``args``, ``env``, ``numNodes``, ``numProcPerNode``
  (an integer; "For the Torch runtime the value defaults to ``auto``") and ``resourcesPerNode``;
* ``spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template``
  is a pod *patch*: ``metadata`` (labels, annotations) and the pod fields of :data:`PATCH_POD_FIELDS`;
  its containers (and init containers) carry only :data:`PATCH_CONTAINER_FIELDS`, and the Trainer
  webhook rejects a patch's ``env`` for the ``node`` container and containers the runtime lacks
  (plugins/jobset/jobset.go ``Validate``, rule KDP135);
* ``spec.podTemplateOverrides`` (v2.1) is gone since v2.2 (rule KDP132), so nothing goes there.

Everything else of the pod template (sidecars, init containers, ``hostNetwork``,
``priorityClassName``, the container's ``envFrom``, ports, probes, ...) can only live in a runtime:
migrate then writes a job's own ``TrainingRuntime`` (namespaced, beside the TrainJob), built on the
guarded runtime of ``k8sddp runtime render``. A TrainingRuntime's ``spec.template.spec`` is a JobSet
spec (JobSet v0.12.0), so ``runPolicy.ttlSecondsAfterFinished`` has a place there too.
"""

from __future__ import annotations

from ..schemagen_trainer import RESERVED_ENV

__all__ = [
    "MANAGER",
    "OPERATOR_ENV",
    "PATCH_CONTAINER_FIELDS",
    "PATCH_POD_FIELDS",
    "RENDEZVOUS_FLAGS",
    "RESERVED_ENV",
    "RUNTIME_CONTAINER_FIELDS",
    "SERVER_METADATA",
    "TRAINER_CONTAINER_FIELDS",
]

#: The runtime patch's manager (a domain-prefixed path, as the TrainJob CRD and KDP135 require).
MANAGER = "k8sddp.dev/migrate"

#: Pod fields a runtime patch may set (v2.3.0 TrainJob CRD, ``runtimePatches`` ... ``template.spec``
#: properties, ``containers`` handled apart; tests/migrate checks this against the CRD).
PATCH_POD_FIELDS = (
    "affinity", "imagePullSecrets", "nodeSelector", "schedulingGates", "securityContext",
    "serviceAccountName", "terminationGracePeriodSeconds", "tolerations", "volumes",
)
#: Fields of a patch's container (same CRD, ``containers`` and ``initContainers`` items).
PATCH_CONTAINER_FIELDS = ("env", "name", "securityContext", "volumeMounts")
#: Fields of the ``pytorch`` container that ``spec.trainer`` carries (``env`` filtered, below).
TRAINER_CONTAINER_FIELDS = ("image", "command", "args", "env", "resources")
#: Fields of the ``pytorch`` container the patch's ``node`` container carries.
NODE_PATCH_FIELDS = ("volumeMounts", "securityContext")
#: The ``pytorch`` container's other fields go to the job's own runtime's ``node`` container
#: (any key not in the two tables above and not ``name``); listed here for the docs.
RUNTIME_CONTAINER_FIELDS = (
    "envFrom", "ports", "workingDir", "imagePullPolicy", "livenessProbe", "readinessProbe",
    "startupProbe", "lifecycle", "stdin", "tty", "volumeDevices", "resizePolicy",
    "terminationMessagePath", "terminationMessagePolicy", "restartPolicy",
)

#: Variables the v1 operator sets itself (kubeflow/trainer v1.9.4 pkg/controller.v1/pytorch
#: envvar.go, elastic.go; ../shared/reference/NOTES.md): in v2 the torch plugin injects only the
#: five ``PET_*`` names of :data:`RESERVED_ENV` (its webhook rejects them in ``spec.trainer.env``,
#: KDP133), and torchrun derives ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` for
#: every worker from them. The elastic rendezvous variables have no v2.3 counterpart (no elastic
#: policy). A user's own value of one of these names is dropped with a note.
OPERATOR_ENV = (
    *RESERVED_ENV, "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
    "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_RDZV_ID", "PET_RDZV_CONF", "PET_MAX_RESTARTS",
    "PET_STANDALONE",
)

#: torchrun flags that override the ``PET_*`` values v2 injects (torch/distributed/run.py: every
#: flag's default comes from ``PET_<FLAG>``, an explicit flag wins), both spellings.
RENDEZVOUS_FLAGS = tuple(
    f"--{name}{sep}" for name in ("nnodes", "node-rank", "node_rank", "master-addr", "master_addr", "master-port",
                                  "master_port", "rdzv-endpoint", "rdzv_endpoint", "rdzv-backend", "rdzv_backend")
    for sep in ("", "=")
)

#: metadata fields the API server sets: dropped (a new object gets its own).
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "managedFields", "selfLink", "ownerReferences", "finalizers")
