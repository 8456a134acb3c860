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
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from .findings import Severity

__all__ = ["CATALOGUE_VERSION", "LAYERS", "PROFILES", "RULES", "Rule", "get_rule", "rules_for"]

#: Bumped whenever a rule is added, removed or changes meaning; reported by the webhook.
CATALOGUE_VERSION = "2026.12.1"

Layer = Literal["input", "structure", "baseline", "strict", "lint"]
LAYERS: tuple[Layer, ...] = ("input", "structure", "baseline", "strict", "lint")
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
OPERATOR_WEBHOOK = "Kubeflow training-operator pkg/webhooks/pytorch/pytorchjob_webhook.go (v1.9.4)"
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
         "K8SDDP_PG_TIMEOUT_SECONDS is a positive whole number of seconds.",
         "The process-group timeout bounds each collective; the defaults (10 min NCCL, 30 min gloo) are implicit and differ.",
         KDP_CONTRACT + "; torch.distributed.constants (default timeouts)"),
    Rule("KDP302", "watchdog-timeout", _E, "strict",
         "K8SDDP_WATCHDOG_TIMEOUT_SECONDS is a positive whole number of seconds.",
         "The heartbeat watchdog turns a stall outside any collective (a rank-0-only branch) into a fast, retryable exit.",
         KDP_CONTRACT),
    Rule("KDP303", "max-hang-restarts", _E, "strict",
         "K8SDDP_MAX_HANG_RESTARTS is a whole number (0 or more).",
         "Under restartPolicy ExitCode the operator recreates pods without counting them against backoffLimit: a deterministic hang loops forever without this cap.",
         KDP_CONTRACT + "; " + KUBEFLOW_RESTART),
    Rule("KDP304", "flight-recorder-dump", _E, "strict",
         "TORCH_FR_DUMP_TEMP_FILE points into a persistent volume mounted in the pytorch container.",
         "The default dump path is under the home cache directory, which dies with the pod.",
         FLIGHT_RECORDER),
    Rule("KDP305", "artifact-dir", _E, "strict",
         "K8SDDP_ARTIFACT_DIR points into a persistent volume mounted in the pytorch container.",
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
         "nprocPerNode, torchrun's --nproc-per-node and the GPU limit of the pytorch container agree.",
         "A mismatch leaves GPUs idle, or puts two ranks on one GPU, or makes WORLD_SIZE disagree with the ranks that join: rendezvous waits forever.",
         "Kubeflow trainer v1.9.4 pkg/controller.v1/pytorch/envvar.go (WORLD_SIZE = pods x nprocPerNode)"),
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
