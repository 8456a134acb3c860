"""The rule catalogue: the single source of every rule id, severity, text and source.

The JSON Schemas in ``schemas/`` (``python -m k8sddp.schemagen``), the validator's and linter's
messages, the admission policy exports, and the rules table in ``docs/rules.md``
(``python -m k8sddp.docgen``) are all generated from, or look up, this table.

Id ranges:
    KDP0xx  input: a document that cannot be read as a Kubernetes object
    KDP1xx  structure: what the API server and the Kubeflow operator accept
    KDP2xx  guardrails, profile ``baseline``
    KDP3xx  guardrails, profile ``strict`` (adds to baseline)
    KDP5xx  lint: hang-prone patterns in training scripts
    KDP6xx  runtime guards: what ``k8sddp launch``/``train`` do while a job runs (not checked by
            validate or lint; named by the decision table, :data:`DECISIONS`, ``k8sddp rules``)
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from .decisions import DECISIONS, Decision, match_decision  # (re-exported: the table's old home)
from .findings import Severity

__all__ = ["CATALOGUE_VERSION", "DECISIONS", "Decision", "LAYERS", "PROFILES", "RULES", "Rule", "VALIDATOR_LAYERS",
           "get_rule", "match_decision", "rules_for"]

#: Bumped whenever a rule is added, removed or changes meaning; reported by the webhook.
CATALOGUE_VERSION = "2026.12.1"

Layer = Literal["input", "structure", "baseline", "strict", "lint", "runtime"]
LAYERS: tuple[Layer, ...] = ("input", "structure", "baseline", "strict", "lint", "runtime")
#: Layers whose rules the manifest validator checks (and SARIF/JUnit list for ``validate``).
VALIDATOR_LAYERS: tuple[Layer, ...] = ("input", "structure", "baseline", "strict")
#: Guardrail profiles, in the manner of Pod Security Standards: each includes the ones before it.
PROFILES: dict[str, tuple[Layer, ...]] = {
    "baseline": ("input", "structure", "baseline"),
    "strict": ("input", "structure", "baseline", "strict"),
}

#: Primary sources the rules cite.
KDP_CONTRACT = "k8sddp interface contract (guard variables, exemptions; README)"
TORCH_PG_NCCL = "PyTorch ProcessGroupNCCL.hpp (TORCH_NCCL_ASYNC_ERROR_HANDLING modes; alias list)"
TORCHRUN_AGENT = "torch/distributed/elastic/agent/server/local_elastic_agent.py (torchrun sets 1 when unset)"
KUBEFLOW_RESTART = "Kubeflow trainer v1.9.4 pkg/util/train/train_util.go and pkg/controller.v1/common/pod.go (ExitCode restarts)"
FLIGHT_RECORDER = "PyTorch flight recorder (TORCH_FR_DUMP_TEMP_FILE, TORCH_FR_BUFFER_SIZE; torch.distributed.flight_recorder)"
CRD = "Kubeflow PyTorchJob CRD kubeflow.org_pytorchjobs.yaml (kubeflow/trainer v1.9.4)"
RUNTIME_DOC = "k8sddp docs/runtime.md (measured with torch 2.13.0 CPU, gloo, 2 ranks under torchrun)"
GLOO_PAIR = "gloo third_party/gloo/gloo/transport/tcp/pair.cc (size check: 'Received data size doesn't match expected size')"
OPERATOR_WEBHOOK = "Kubeflow training-operator pkg/webhooks/pytorch/pytorchjob_webhook.go (v1.9.4)"
OPERATOR_ENV = (
    "Kubeflow trainer v1.9 pkg/controller.v1/pytorch/envvar.go, master.go, elastic.go (the env the operator adds to the pytorch container); "
    "Trainer v2.3.0 pkg/runtime/framework/plugins/torch/torch.go EnforceMLPolicy (PET_* upserted into the node container); "
    "Ray 2.60 ray/train/torch/config.py _set_torch_distributed_env_vars, _setup_torch_process_group"
)
BLOCKING_WAIT = (
    "torch 2.13 torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp:60-62 (TORCH_NCCL_BLOCKING_WAIT = {TORCH_NCCL_BLOCKING_WAIT, NCCL_BLOCKING_WAIT}); "
    "c10d/Utils.hpp:151-189 getCvarBool (y/yes/1/t/true, n/no/0/f/false, any case; the first name wins); "
    "ProcessGroupNCCL.cpp constructor: `if (!blockingWait_) { watchdog_->start(); }`"
)
TRAINER_CRDS = "Kubeflow Trainer v2.3.0 CRDs manifests/base/crds/trainer.kubeflow.org_{trainjobs,trainingruntimes,clustertrainingruntimes}.yaml"
TRAINER_BUILDER = "Kubeflow Trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go (Builder.Trainer) and pkg/runtime/core/trainingruntime.go (newRuntimeInfo)"
TRAINER_WEBHOOK = "Kubeflow Trainer v2.3.0 pkg/runtime/framework/plugins/jobset/jobset.go (Validate) and plugins/torch/torch.go (Validate)"
KUBERAY_CRD = "KubeRay v1.7.0 CRDs ray.io_{rayjobs,rayclusters,rayservices,raycronjobs}.yaml (ray-project/kuberay ray-operator/config/crd/bases)"
KUBERAY_POD = "ray-project/kuberay v1.7.0 ray-operator/controllers/ray/common/pod.go (the Ray container is containers[RayContainerIndex = 0]; /dev/shm memory emptyDir)"
RAY_RUNTIME_ENV = "Ray 2.60 runtime environments: env_vars (dict of str to str) reach every worker and win over the node's env (measured: pod 3, runtime env 1 gave 1); InteractiveMode ignores runtimeEnvYAML (KubeRay RayJob docs)"
RAY_TRAIN = "ray-project/ray python/ray/train/torch/config.py (TorchConfig.timeout_s = 1800; TORCH_NCCL_ASYNC_ERROR_HANDLING set only when unset) and ray.train v2 RAY_TRAIN_COLLECTIVE_TIMEOUT_S"


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule.

    Attributes:
        id: stable id (``KDP201``), used in messages, exemptions, ``# noqa`` and the docs.
        name: short slug (``nccl-async-error-handling``).
        severity: default severity of its findings.
        layer: which layer or profile owns it (see :data:`PROFILES`).
        title: one line saying what it checks.
        why: why it matters: the failure it prevents.
        source: where the fact behind it comes from (doc, code path, measurement).
    """

    id: str
    name: str
    severity: Severity
    layer: Layer
    title: str
    why: str
    source: str


_E, _W = Severity.ERROR, Severity.WARNING

_RULES: tuple[Rule, ...] = (
    # -- input -----------------------------------------------------------------------------
    Rule("KDP001", "yaml-syntax", _E, "input", "The document is valid YAML or JSON.",
         "A manifest that does not parse is never applied, or is applied by a more lenient tool differently.",
         "YAML 1.1 as read by the API server"),
    Rule("KDP002", "duplicate-key", _E, "input", "No mapping has the same key twice.",
         "YAML parsers disagree on which duplicate wins; kubectl rejects them, others keep the last.",
         "YAML 1.2 spec 3.2.1.1 (keys are unique); kubectl strict decoding"),
    Rule("KDP003", "alias-bomb", _E, "input", "Aliases expand to a bounded document with no cycles.",
         "A billion-laughs document exhausts the memory of every tool that expands it.",
         "CVE-2019-11253 (Kubernetes API server YAML alias bomb)"),
    Rule("KDP004", "not-an-object", _E, "input", "Every non-empty document is a Kubernetes object with apiVersion and kind.",
         "A stray document is either ignored or rejected by kubectl apply; both hide mistakes.",
         "Kubernetes API conventions (TypeMeta)"),
    Rule("KDP005", "exemption", _E, "input", "Exemptions name known rules and give a reason.",
         "An exemption without a reason, or for a rule that does not exist, is a silent hole.",
         KDP_CONTRACT + " (exemptions)"),
    Rule("KDP010", "go-template", _E, "input", "The input is a manifest, not an unrendered Go/Helm template.",
         "A `{{ ... }}` action is not YAML: the file does not parse, or parses into strings where the CRD wants numbers, names or objects; what the cluster gets is what `helm template` renders.",
         "Go text/template actions; Helm `helm template` renders a chart without a cluster"),
    Rule("KDP011", "shell-placeholder", _E, "input", "No unsubstituted shell placeholder ($VAR, ${VAR}) where the CRD wants a number, a name or an object.",
         "An envsubst template applied as it is fails at the API server; validate checks what will be applied, so substitute first (`envsubst < job.yaml | k8sddp validate -`).",
         "GNU gettext envsubst; Kubernetes expands only $(VAR) in command, args and env values (API reference, EnvVar.value)"),
    Rule("KDP012", "ddpjob-spec", _E, "input", "A DDPJob spec (k8sddp.dev/v1alpha1) matches schemas/ddpjob.schema.json and renders.",
         "`k8sddp render` and `submit` refuse a spec that does not; validate reports the same problems, located, before a pipeline reaches them.",
         "schemas/ddpjob.schema.json; k8sddp.render (build_model)"),
    # -- structure -------------------------------------------------------------------------
    Rule("KDP101", "crd-schema", _E, "structure", "The PyTorchJob matches the CRD's openAPIV3Schema.",
         "The API server rejects it, or prunes unknown fields silently so a setting is lost.",
         CRD),
    Rule("KDP102", "object-metadata", _E, "structure", "metadata is what the API server accepts (name, namespace, labels, annotations).",
         "The API server rejects invalid names, label keys and values, and non-string annotations.",
         "Kubernetes apimachinery validation (IsDNS1123Subdomain, IsQualifiedName, IsValidLabelValue)"),
    Rule("KDP103", "job-name", _E, "structure", "The job name is a DNS-1035 label, short enough for the operator's per-replica Services.",
         "The operator creates a Service `<name>-<replica-type>-<index>`; a name that makes it longer than 63 characters fails at run time.",
         OPERATOR_WEBHOOK + "; Kubernetes Service names are DNS-1035 labels (63 characters)"),
    Rule("KDP104", "pytorch-container", _E, "structure", "Every replica has a container named `pytorch` with a non-empty image.",
         "The operator reads the exit code and injects its env only into the container named pytorch; its webhook rejects a replica without one.",
         OPERATOR_WEBHOOK),
    Rule("KDP105", "replica-specs", _E, "structure", "Only Master and Worker replicas; Master exactly 1; Worker at least 1; elastic jobs need Worker; one nprocPerNode field.",
         "The operator's webhook rejects the job.",
         OPERATOR_WEBHOOK),
    Rule("KDP106", "list-map-keys", _E, "structure", "No two containers, and no two env entries of one container, share a name.",
         "The CRD declares these lists as list-maps keyed by name: the API server refuses duplicates (a Pod would only warn).",
         CRD + " (x-kubernetes-list-type: map)"),
    Rule("KDP107", "enum-values", _E, "structure", "restartPolicy and cleanPodPolicy hold values the operator knows.",
         "The CRD has no enums: a typo passes the API server and the operator falls back to a default.",
         "Kubeflow common v1 types RestartPolicy and CleanPodPolicy"),
    Rule("KDP110", "wrapped-template-unverifiable", _E, "structure",
         "A Katib Experiment's trialTemplate.configMap names a ConfigMap the input holds, with the templatePath key, holding YAML.",
         "Katib reads the trial's job from that ConfigMap at run time: when the input lacks it, the job inside is never checked, so its guards cannot be verified.",
         "kubeflow/katib pkg/apis/controller/experiments/v1beta1/experiment_types.go (TrialTemplate.ConfigMap: configMapName, configMapNamespace, templatePath)"),
    Rule("KDP115", "nonnegative-quantities", _E, "structure", "Container resource requests and limits are non-negative quantities.",
         "The CRD's quantity pattern allows a sign, but pod validation refuses a negative request or limit: the operator's pods are never created.",
         "Kubernetes pkg/apis/core/validation ValidateResourceQuantityValue (must be greater than or equal to 0)"),
    Rule("KDP130", "trainer-crd-schema", _E, "structure", "A TrainJob, TrainingRuntime or ClusterTrainingRuntime matches its Kubeflow Trainer v2.3.0 CRD (served version, schema, the CRD's CEL rules).",
         "The API server rejects it, or prunes unknown fields silently so a setting is lost.",
         TRAINER_CRDS),
    Rule("KDP131", "trainer-api-group", _E, "structure", "TrainJob, TrainingRuntime and ClusterTrainingRuntime are in the API group trainer.kubeflow.org.",
         "`kubeflow.org/v1alpha1` is not served for these kinds: kubectl fails with 'no matches for kind', or, where another CRD of that group exists, the object is never reconciled.",
         TRAINER_CRDS + " (spec.group)"),
    Rule("KDP132", "trainer-removed-field", _E, "structure", "A TrainJob uses no field removed in Trainer v2.2 (podSpecOverrides, podTemplateOverrides, labels, annotations): runtimePatches replaced them.",
         "The v2.2+ API server prunes them silently: the volumes, node selectors or labels they carried never reach the pods.",
         "kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go at v2.0.0, v2.1.0 and v2.2.0 (TrainJobSpec)"),
    Rule("KDP133", "trainer-reserved-env", _E, "structure", "spec.trainer.env sets none of PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT.",
         "The torch plugin injects these itself; the Trainer webhook rejects a TrainJob that sets them.",
         "Kubeflow Trainer v2.3.0 pkg/runtime/framework/plugins/torch/torch.go (Validate) and pkg/constants (TorchRunReservedEnvNames)"),
    Rule("KDP134", "trainer-node-container", _E, "structure", "A training runtime has a replicatedJob labelled trainer.kubeflow.org/trainjob-ancestor-step: trainer with a container named node.",
         "The controller applies the TrainJob's image, command, args, env and resourcesPerNode (and the PET_* rendezvous env) only to that container: without it they are dropped silently.",
         TRAINER_BUILDER + "; plugins/torch/torch.go (EnforceMLPolicy)"),
    Rule("KDP135", "runtime-patch-rejected", _E, "structure", "runtimePatches name replicatedJobs and containers the runtime has, set no env of the node and initializer containers, and have a domain-prefixed manager.",
         "The Trainer webhook rejects the TrainJob.",
         TRAINER_WEBHOOK),
    Rule("KDP136", "runtime-ref", _E, "structure", "spec.runtimeRef names apiGroup trainer.kubeflow.org and kind TrainingRuntime or ClusterTrainingRuntime.",
         "The controller resolves no other runtime: the TrainJob never starts.",
         "Kubeflow Trainer v2.3.0 pkg/runtime/runtime.go (RuntimeRefToRuntimeRegistryKey), pkg/webhooks/trainjob_webhook.go"),
    Rule("KDP150", "ray-crd-schema", _E, "structure", "A RayJob, RayCluster, RayService or RayCronJob matches its KubeRay v1.7.0 CRD's openAPIV3Schema.",
         "The API server rejects it, or prunes unknown fields silently so a setting is lost.",
         KUBERAY_CRD),
    Rule("KDP151", "ray-container", _E, "structure", "containers[0] of the head group and of every worker group has a non-empty image.",
         "KubeRay runs ray start in containers[0] of each group's pods (a sidecar listed first would become the Ray node); a pod without an image is refused when the operator creates it.",
         KUBERAY_POD),
    Rule("KDP152", "ray-runtime-env", _E, "structure", "runtimeEnvYAML (and serveConfigV2) is YAML; a runtime env is a mapping whose env_vars map names to strings.",
         "KubeRay unmarshals runtimeEnvYAML before it submits the job and Ray refuses env_vars that are not strings: the job fails at submission, after the cluster started.",
         "ray-project/kuberay v1.7.0 ray-operator/controllers/ray/utils/validation.go (runtimeEnvYAML); " + RAY_RUNTIME_ENV),
    # -- baseline --------------------------------------------------------------------------
    Rule("KDP201", "nccl-async-error-handling", _E, "baseline",
         "The pytorch container's effective TORCH_NCCL_ASYNC_ERROR_HANDLING (or, where absent, NCCL_ASYNC_ERROR_HANDLING) is 1 or 3.",
         "Without it a communicator error or a desynchronised collective hangs the job until someone notices; "
         "torchrun sets 1 when unset, which can kill rank 0 before the flight recorder dumps; 3 kills the process without that race.",
         TORCH_PG_NCCL + "; " + TORCHRUN_AGENT + "; pytorch/pytorch#121055"),
    Rule("KDP202", "python-faulthandler", _E, "baseline",
         "The pytorch container's effective PYTHONFAULTHANDLER is non-empty.",
         "Without it a crash in C code (SIGSEGV, SIGABRT from NCCL) leaves no Python stack to diagnose.",
         "Python docs: faulthandler and PYTHONFAULTHANDLER (fatal signals only)"),
    Rule("KDP213", "nccl-blocking-wait", _E, "baseline",
         "TORCH_NCCL_BLOCKING_WAIT (or the legacy NCCL_BLOCKING_WAIT) is not true in the pytorch container.",
         "With blocking wait ProcessGroupNCCL starts no watchdog thread: no async error handling (TORCH_NCCL_ASYNC_ERROR_HANDLING is void), "
         "no flight-recorder dump on timeout; a timed-out wait() raises in the caller, and a rank stuck outside wait() hangs.",
         BLOCKING_WAIT),
    Rule("KDP214", "pod-restart-policy", _W, "baseline",
         "restartPolicy is set on the replica spec, not in the pod template.",
         "The operator overwrites the pod template's restartPolicy with the replica's (ExitCode becomes Never): the value written there never takes effect.",
         "Kubeflow trainer v1.9 pkg/controller.v1/common/pod.go (setRestartPolicy)"),
    Rule("KDP215", "operator-set-env", _W, "baseline",
         "The training container does not set variables the operator or framework sets itself (PyTorchJob: MASTER_ADDR, WORLD_SIZE, RANK, PET_*; "
         "training runtime: PET_*; Ray: MASTER_ADDR, RANK, WORLD_SIZE, LOCAL_RANK as Ray Train sets them in each worker).",
         "The operator's entry, appended later, or the framework's assignment in the worker wins: the user's value is silently ignored.",
         OPERATOR_ENV),
    Rule("KDP216", "unread-env", _W, "baseline",
         "Environment variable names are ones something reads: no folklore (NCCL_TIMEOUT) and no near-miss of a guard name.",
         "A variable nothing reads changes nothing; a misspelt guard (PYTHONFAULTHANDLR) is a missing guard that looks present.",
         "NCCL environment variables (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html); torch ProcessGroupNCCL.hpp; " + KDP_CONTRACT),
    Rule("KDP217", "literal-secret", _W, "baseline",
         "Variables named like credentials (a TOKEN, SECRET or PASSWORD segment; *API_KEY, *ACCESS_KEY, *PRIVATE_KEY) take their value from a Secret.",
         "A literal value sits in Git, in `kubectl get -o yaml` and in every log that prints the manifest.",
         "Kubernetes docs: Secrets, 'Using Secrets as environment variables' (env[].valueFrom.secretKeyRef)"),
    Rule("KDP230", "trainer-runtime-unresolved", _E, "baseline", "The training runtime a TrainJob refers to is in the input (or, on a cluster, readable), so its effective trainer container can be checked.",
         "The guards of a TrainJob live mostly in its runtime's node container: without the runtime they cannot be verified, and an unchecked job is not a passing one.",
         TRAINER_BUILDER),
    Rule("KDP250", "ray-runtime-env-weakens-guard", _W, "baseline",
         "A Ray runtime env does not set TORCH_NCCL_ASYNC_ERROR_HANDLING (or NCCL_ASYNC_ERROR_HANDLING) to 1 where the pod env sets 3.",
         "The runtime env's env_vars win over the pod's: mode 1 aborts the communicator before the process dies, which can kill rank 0 before the flight recorder dumps (the race mode 3 closes).",
         RAY_RUNTIME_ENV + "; pytorch/pytorch#121055"),
    Rule("KDP251", "ray-selected-cluster-unverifiable", _E, "baseline",
         "A RayJob with clusterSelector names (ray.io/cluster) a RayCluster that the input holds.",
         "The job has no pods of its own: its training runs with the selected cluster's env, so its guards can only be checked there.",
         "ray-project/kuberay v1.7.0 ray-operator/controllers/ray/rayjob_controller.go (clusterSelector key ray.io/cluster)"),
    # -- strict ----------------------------------------------------------------------------
    Rule("KDP301", "process-group-timeout", _E, "strict",
         "K8SDDP_PG_TIMEOUT_SECONDS is a positive whole number of seconds, at most 7 days (604800).",
         "The process-group timeout bounds each collective; the defaults (10 min NCCL, 30 min gloo) are implicit and differ.",
         KDP_CONTRACT + "; torch.distributed.constants (default timeouts)"),
    Rule("KDP302", "watchdog-timeout", _E, "strict",
         "K8SDDP_WATCHDOG_TIMEOUT_SECONDS is a positive whole number of seconds, at most 7 days (604800).",
         "The heartbeat watchdog turns a stall outside any collective (a rank-0-only branch) into a fast, retryable exit.",
         KDP_CONTRACT),
    Rule("KDP303", "max-hang-restarts", _E, "strict",
         "K8SDDP_MAX_HANG_RESTARTS is a whole number from 0 to 2147483647 (int32).",
         "Under restartPolicy ExitCode the operator recreates pods without counting them against backoffLimit: a deterministic hang loops forever without this cap.",
         KDP_CONTRACT + "; " + KUBEFLOW_RESTART),
    Rule("KDP304", "flight-recorder-dump", _E, "strict",
         "TORCH_FR_DUMP_TEMP_FILE (or the legacy TORCH_NCCL_DEBUG_INFO_TEMP_FILE) points into a writable persistent volume mounted in the pytorch container.",
         "The default dump path is under the home cache directory, which dies with the pod.",
         FLIGHT_RECORDER),
    Rule("KDP305", "artifact-dir", _E, "strict",
         "K8SDDP_ARTIFACT_DIR points into a writable persistent volume mounted in the pytorch container.",
         "Heartbeat traces, failure records and run records must survive the pod being recreated.",
         KDP_CONTRACT),
    Rule("KDP306", "safety-net-off", _E, "strict",
         "No safety net is switched off: TORCH_NCCL_ENABLE_MONITORING, TORCH_NCCL_DUMP_ON_TIMEOUT, TORCH_FR_BUFFER_SIZE, TORCH_NCCL_TRACE_BUFFER_SIZE are not 0.",
         "These disable NCCL's heartbeat monitor, the dump on timeout, and the flight recorder itself.",
         KDP_CONTRACT + "; " + FLIGHT_RECORDER + "; TORCH_NCCL_ENABLE_MONITORING (ProcessGroupNCCL heartbeat monitor)"),
    Rule("KDP307", "dev-shm", _E, "strict",
         "/dev/shm in the pytorch container is a memory-backed emptyDir.",
         "The container runtime's 64 MiB /dev/shm makes DataLoader workers die with bus errors.",
         "PyTorch docs: torch.utils.data multiprocessing; Kubernetes emptyDir medium Memory"),
    Rule("KDP308", "active-deadline", _E, "strict",
         "runPolicy.activeDeadlineSeconds is set.",
         "Under ExitCode the operator recreates pods without counting them against backoffLimit; a deadline is the only bound.",
         KUBEFLOW_RESTART),
    Rule("KDP309", "consistent-sizes", _E, "strict",
         "nprocPerNode (a TrainJob's spec.trainer.numProcPerNode), torchrun's --nproc-per-node and the GPU limit of the training container agree.",
         "A mismatch leaves GPUs idle, or puts two ranks on one GPU, or makes WORLD_SIZE disagree with the ranks that join: rendezvous waits forever.",
         "Kubeflow trainer v1.9.4 pkg/controller.v1/pytorch/envvar.go (WORLD_SIZE = pods x nprocPerNode); "
         "Trainer v2.3.0 pkg/runtime/framework/plugins/torch/torch.go EnforceMLPolicy (PET_NPROC_PER_NODE = numProcPerNode, else auto)"),
    Rule("KDP320", "privileged-container", _W, "strict",
         "No container, init container or sidecar of a replica runs privileged.",
         "A privileged container has every device and capability of the node; GPUs and RDMA need only their device plugin's "
         "resources (and IPC_LOCK). k8sddp render never adds one: a spec that asks gets it, with this warning.",
         "Kubernetes Pod Security Standards, baseline profile (privileged containers disallowed); NVIDIA device plugin docs"),
    Rule("KDP321", "host-path-volume", _W, "strict",
         "No replica mounts a hostPath volume.",
         "A hostPath ties the pod to one node's files: checkpoints or data written there are lost when the pod is recreated elsewhere, "
         "and the pod can read the node. k8sddp render never adds one: a spec that asks gets it, with this warning.",
         "Kubernetes docs, Volumes: hostPath (security risks; Pod Security Standards baseline disallows it)"),
    Rule("KDP340", "trainer-failure-policy", _E, "strict", "A training runtime's trainer Job fails for good on exit codes 1-127 of container node (podFailurePolicy FailJob, JobSet failurePolicy FailJobSet on PodFailurePolicy) and retries the rest (backoffLimit 0, maxRestarts).",
         "Trainer v2 has no ExitCode restart policy: without this a deterministic error (exit 1) restarts the whole JobSet up to maxRestarts, or a retryable one (a hang exit >= 128) fails it at once.",
         "k8sddp docs/trainer.md (failure policy); JobSet v0.12.0 api/jobset/v1alpha2/jobset_types.go (FailurePolicyRule); Kubernetes Job podFailurePolicy"),
    Rule("KDP360", "ray-active-deadline", _E, "strict",
         "A RayJob (a RayCronJob's jobTemplate) sets activeDeadlineSeconds.",
         "A hung collective is not detected by Ray (the train loop runs in a thread while the actor answers health checks): a hung job stays RUNNING until a deadline stops it.",
         KUBERAY_CRD + " (RayJobSpec.activeDeadlineSeconds); measured with Ray 2.60"),
    Rule("KDP361", "ray-backoff-limit", _E, "strict",
         "A RayJob sets backoffLimit explicitly.",
         "How often a failed job is retried (with a new cluster) is then a decision, not the default 0 that nobody read.",
         KUBERAY_CRD + " (RayJobSpec.backoffLimit, default 0)"),
    Rule("KDP362", "ray-cluster-cleanup", _E, "strict",
         "A RayJob that creates its cluster sets shutdownAfterJobFinishes: true or a deletionStrategy.",
         "Otherwise the RayCluster and its GPUs stay after the job ends.",
         KUBERAY_CRD + " (shutdownAfterJobFinishes, deletionStrategy)"),
    Rule("KDP363", "ray-version", _E, "strict",
         "The RayClusterSpec sets rayVersion.",
         "KubeRay selects version-dependent behaviour (autoscaler, features) by it; without it the cluster's Ray version is whatever the image holds, unrecorded.",
         KUBERAY_CRD + " (RayClusterSpec.rayVersion)"),
    Rule("KDP364", "ray-collective-timeout", _E, "strict",
         "RAY_TRAIN_COLLECTIVE_TIMEOUT_S in every group's Ray container (or the runtime env) is a positive number of seconds.",
         "Ray Train's own collectives (a ray.train.report reached by some ranks only) wait forever by default.",
         RAY_TRAIN),
    Rule("KDP365", "ray-dev-shm", _E, "strict",
         "/dev/shm in every group's Ray container is KubeRay's memory emptyDir (nothing else mounted there) or a memory-backed emptyDir of the pod.",
         "The container runtime's 64 MiB /dev/shm makes DataLoader workers and Ray's object store fail; mounting another volume there replaces KubeRay's.",
         KUBERAY_POD),
    # -- lint ------------------------------------------------------------------------------
    Rule("KDP500", "python-syntax", _E, "lint", "The training script parses as Python.",
         "A file the linter cannot parse is not checked at all; the job would fail at import anyway.",
         "Python language reference (ast.parse)"),
    Rule("KDP501", "rank-conditional-collective", _E, "lint",
         "Every collective (explicit, or implicit: a forward/backward through a DDP/FSDP-wrapped model, a distributed checkpoint save, a framework save that ends in a barrier) is reached by every rank.",
         "A collective that only some ranks call waits for the others until the process-group timeout (10-30 min), then kills the job; "
         "rank-0-only evaluation through the DDP wrapper and rank-0-only dcp.save hang this way.",
         "PyTorch torch/distributed/distributed_c10d.py (every rank of the group calls each collective); DistributedDataParallel.forward (_sync_buffers), FSDP parameter all-gathers, torch.distributed.checkpoint.save (collective planning); measured with torch 2.13, gloo, 2 ranks: rank-0-only evaluation through DDP and rank-0-only dcp.save both time out"),
    Rule("KDP502", "rank-dependent-exit", _E, "lint",
         "No rank-dependent return/break/continue/raise/sys.exit leaves a loop or function that still runs collectives on the other ranks.",
         "The ranks that stay run one more collective than the ranks that left; they wait for a partner that never comes (uneven batch counts hang the same way).",
         "PyTorch DDP notes on uneven inputs (DistributedDataParallel.join); measured with torch 2.13, gloo: 3 vs 5 batches time out"),
    Rule("KDP503", "unpaired-barrier", _E, "lint",
         "Barriers pair up across the arms of a rank branch.",
         "A barrier only rank 0 reaches (after saving, say) blocks rank 0 forever while the other ranks run ahead into the next collective.",
         "PyTorch torch.distributed.barrier docstring (all ranks of the group must enter)"),
    Rule("KDP504", "multi-rank-write", _E, "lint",
         "Checkpoints, logs and tracker runs are written by one rank (global rank 0) or under per-rank names.",
         "Every rank writing one path interleaves or truncates the file; LOCAL_RANK == 0 is true once per node, so on a shared volume the nodes overwrite each other; "
         "trackers open one run per rank.",
         "PyTorch DDP tutorial (save on rank 0 only); torchvision references utils.save_on_master"),
    Rule("KDP505", "process-group-timeout", _E, "lint",
         "init_process_group is given an explicit timeout=.",
         "The default timeout differs by backend (NCCL 10 min, gloo 30 min) and is invisible in the script; k8sddp's manifests set K8SDDP_PG_TIMEOUT_SECONDS (default 1800) for it to read.",
         "PyTorch torch/distributed/constants.py (default_pg_timeout 30 min, NCCL 10 min); " + KDP_CONTRACT),
    Rule("KDP506", "unsynchronized-rank0-write", _W, "lint",
         "A file one rank writes is read by the other ranks only after a barrier.",
         "Without a barrier the other ranks read a missing or half-written file (the DDP tutorial's checkpoint example has the barrier for this reason).",
         "PyTorch DDP tutorial, 'Save and Load Checkpoints'"),
    Rule("KDP507", "dataloader-pin-memory", _W, "lint",
         "A DataLoader feeding GPU training uses pin_memory=True.",
         "Pageable host memory makes every host-to-device copy synchronous and slower; ranks that copy slower stall the others at each gradient all-reduce.",
         "PyTorch docs: torch.utils.data memory pinning"),
    Rule("KDP508", "dataloader-persistent-workers", _W, "lint",
         "A DataLoader with workers keeps them alive across epochs (persistent_workers=True).",
         "Without it every epoch kills and re-forks the workers (and re-imports the dataset): a stall at each epoch start, longer on the slowest rank.",
         "PyTorch docs: torch.utils.data.DataLoader persistent_workers"),
    Rule("KDP509", "sampler-set-epoch", _W, "lint",
         "A shuffling DistributedSampler gets set_epoch(epoch) in the epoch loop.",
         "Without it the sampler's seed never changes: every epoch visits the data in the same order.",
         "torch.utils.data.distributed.DistributedSampler docstring"),
    Rule("KDP510", "value-dependent-forward", _W, "lint",
         "forward code does not branch on, or size tensors by, tensor values.",
         "A value-dependent branch syncs device to host and lets ranks take different paths (DDP unused-parameter errors, FSDP mismatched all-gathers); value-dependent shapes break static graphs.",
         "PyTorch docs: DDP find_unused_parameters; torch.compile graph breaks on data-dependent control flow"),
    Rule("KDP511", "device-from-global-rank", _E, "lint",
         "The CUDA device index comes from the local rank (LOCAL_RANK), not the global rank.",
         "RANK counts processes across nodes: on the second node of 8-GPU machines rank 8 asks for cuda:8, which does not exist (invalid device ordinal), or two processes share one GPU; rank % torch.cuda.device_count() is a local index.",
         "PyTorch torchrun docs (LOCAL_RANK is the per-node index to pass to torch.cuda.set_device); torch/distributed/run.py environment variables"),
    Rule("KDP512", "rank0-write-then-collective", _W, "lint",
         "A checkpoint written on rank 0 only is fenced by a barrier before the next collective.",
         "The other ranks run ahead into the next all-reduce and wait there while rank 0 writes; a write slower than the process-group timeout (10 min NCCL) kills the job with a timeout that names the all-reduce, not the write.",
         "PyTorch DDP tutorial, 'Save and Load Checkpoints' (dist.barrier() after rank 0 saves); torch/distributed/constants.py default_pg_timeout; k8sddp.runtime.ioguard (Rank0IO)"),
    Rule("KDP513", "framework-pg-timeout", _W, "lint",
         "deepspeed.init_distributed() and Lightning/Fabric strategies are given timeout=.",
         "The framework's default (1800 s) is explicit in its source but invisible in the script, and does not follow K8SDDP_PG_TIMEOUT_SECONDS; a warning, since unlike a bare init_process_group the bound is known.",
         "DeepSpeed deepspeed/comm/comm.py init_distributed(timeout=default_pg_timeout, 30 min); Lightning lightning/fabric/plugins/collectives/torch_collective.py default_pg_timeout = timedelta(seconds=1800); DDPStrategy/FSDPStrategy timeout parameter"),
    # -- runtime guards -------------------------------------------------------------------
    Rule("KDP601", "heartbeat-watchdog", _E, "runtime",
         "Every rank beats a phase-aware heartbeat; a rank without a beat within its phase's budget dumps stacks and flight recorder and exits 142.",
         "A rank stuck outside a collective (a rank-0-only branch, a stalled data loader, the task's own code) otherwise holds its peers until the process-group timeout.",
         RUNTIME_DOC + ", 'The watchdog'"),
    Rule("KDP602", "hard-stop", _E, "runtime",
         "A C-level timer (faulthandler.dump_traceback_later plus setitimer) ends a rank whose watchdog thread starves: SIGALRM, 142.",
         "A C call that holds the GIL starves every Python thread, the watchdog's too.",
         RUNTIME_DOC + ", 'Hard stop'; CPython Modules/faulthandler.c"),
    Rule("KDP603", "rank0-io-guard", _E, "runtime",
         "Rank-0-only IO runs under the rank-0 IO guard: the other ranks wait on the store with the long budget, and learn of rank 0's failure at once.",
         "A rank-0-only save or evaluation while the others enter the next collective is the classic DDP deadlock.",
         RUNTIME_DOC + ", 'Rank-0 IO guard'"),
    Rule("KDP604", "collective-mismatch-final", _E, "runtime",
         "A collective mismatch (gloo's size-mismatch abort, differing flight-recorder entries at one sequence number) ends the job for good (exit 1), the mismatch named.",
         "The same code issues the same mismatched collective after every restart: retrying only burns the restart budget.",
         GLOO_PAIR + "; " + FLIGHT_RECORDER),
    Rule("KDP605", "preemption-checkpoint", _E, "runtime",
         "SIGTERM makes the ranks agree on a step, rank 0 write a final checkpoint, and every rank exit 143.",
         "A preempted pod that exits 0 marks the job Succeeded; one that exits without a checkpoint loses the work since the last one.",
         RUNTIME_DOC + ", 'SIGTERM'; " + KUBEFLOW_RESTART),
    Rule("KDP606", "hang-streak", _E, "runtime",
         "More than K8SDDP_MAX_HANG_RESTARTS retryable exits in a row without training progress make the exit final (10).",
         "ExitCode restarts never exhaust backoffLimit: a deterministic hang would restart forever.",
         RUNTIME_DOC + ", 'The hang streak'; " + KUBEFLOW_RESTART),
    Rule("KDP607", "task-error-final", _E, "runtime",
         "An exception in the task is final (exit 1) with its traceback in the run record; the peers' collective errors that follow are not causes.",
         "A bug raises again after every restart.",
         RUNTIME_DOC + ", 'Exit codes'"),
    Rule("KDP608", "lost-worker-retry", _E, "runtime",
         "A rank that died by a signal without a record (SIGKILL of the OOM killer or an eviction, a native crash) is retryable (137), its signal named.",
         "Memory pressure and node loss are often transient; the peers' errors that follow are not the cause.",
         RUNTIME_DOC + ", 'Exit codes'; torch/distributed/elastic/multiprocessing/errors (torchrun's failure summary)"),
    Rule("KDP609", "nccl-async-teardown", _E, "runtime",
         "NCCL's asynchronous error handling tears a rank down (SIGABRT) after a failed or timed-out collective; the launcher keeps that retryable (142).",
         "Without it a failed NCCL collective blocks the rank forever; the abort is the safety net, not a bug.",
         TORCH_PG_NCCL),
)

RULES: dict[str, Rule] = {r.id: r for r in _RULES}


def get_rule(rule_id: str) -> Rule:
    """Return the rule with id ``rule_id``.

    Raises:
        KeyError: no such rule.
    """
    return RULES[rule_id]


def rules_for(layers: tuple[Layer, ...] | list[Layer]) -> list[Rule]:
    """The rules of the given layers, in id order."""
    wanted = set(layers)
    return [r for r in _RULES if r.layer in wanted]
