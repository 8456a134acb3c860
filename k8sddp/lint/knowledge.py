"""What the linter knows about PyTorch, Accelerate, Lightning and friends: the name tables.

Every table names its source. "Collective" means every rank of the group must call it, in the
same order, or the job hangs until the process-group timeout (measured with torch 2.13, gloo,
2 ranks: a rank-0-only collective, evaluation through DDP, dcp.save all time out). Calls are matched on their resolved dotted name (imports followed, see
:mod:`k8sddp.lint.names`) or, for framework objects whose type cannot be known statically, on the
method name plus what the receiver was built from (``Accelerator()``, ``Fabric()``, ...).
"""

from __future__ import annotations

#: torch.distributed collectives (torch/distributed/distributed_c10d.py, torch 2.13). Point-to-point
#: ops (send, recv, isend, irecv) are rank-conditional by nature and are not listed.
TORCH_COLLECTIVES: frozenset[str] = frozenset(
    {
        "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
        "all_gather_object", "all_gather_coalesced", "all_to_all", "all_to_all_single",
        "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor",
        "gather", "gather_object", "scatter", "scatter_object_list", "barrier",
        "monitored_barrier", "new_group", "new_subgroups", "new_subgroups_by_enumeration",
        "_all_gather_base", "_reduce_scatter_base",
    }
)

#: Module prefixes under which a name in :data:`TORCH_COLLECTIVES` is the torch collective.
TORCH_DIST_PREFIXES: tuple[str, ...] = (
    "torch.distributed.",
    "torch.distributed.distributed_c10d.",
    "torch.distributed.c10d.",
)

#: DeepSpeed calls that gather ZeRO-3 partitioned parameters from every rank (collective on the
#: data-parallel group): deepspeed/runtime/zero/partition_parameters.py, ``GatheredParameters``
#: ("a context that collects parameters that were partitioned via ZeRO-3", all-gather on entry).
DEEPSPEED_GATHERS: frozenset[str] = frozenset({"deepspeed.zero.GatheredParameters"})
#: torch.distributed.checkpoint entry points: collective (dcp.save on rank 0 only: both ranks time
#: out, measured; torch/distributed/checkpoint/state_dict_saver.py plans across ranks).
DCP_COLLECTIVES: frozenset[str] = frozenset(
    {
        "torch.distributed.checkpoint.save",
        "torch.distributed.checkpoint.async_save",
        "torch.distributed.checkpoint.load",
        "torch.distributed.checkpoint.save_state_dict",
        "torch.distributed.checkpoint.load_state_dict",
        "torch.distributed.checkpoint.state_dict_saver.save",
        "torch.distributed.checkpoint.state_dict_loader.load",
        "torch.distributed.checkpoint.state_dict.get_state_dict",
        "torch.distributed.checkpoint.state_dict.get_model_state_dict",
        "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict",
        "torch.distributed.checkpoint.state_dict.set_state_dict",
        "torch.distributed.checkpoint.state_dict.set_model_state_dict",
    }
)

#: Collectives whose result (returned, or written in place into the listed argument) is the same
#: on every rank afterwards (distributed_c10d.py docstrings).
UNIFORM_INPLACE: dict[str, int] = {
    "all_reduce": 0, "broadcast": 0, "all_gather": 0, "all_gather_object": 0,
    "broadcast_object_list": 0, "all_gather_into_tensor": 0, "_all_gather_base": 0,
}
#: Collectives whose result differs per rank (only ``dst`` holds it, or each rank gets its chunk).
RANKED_INPLACE: dict[str, int] = {
    "reduce": 0, "scatter": 0, "reduce_scatter": 0, "reduce_scatter_tensor": 0,
    "scatter_object_list": 0, "gather": 1, "gather_object": 1, "all_to_all": 0,
    "all_to_all_single": 0, "recv": 0, "irecv": 0,
}

#: Wrappers whose construction is itself collective (DDP broadcasts parameters from rank 0 and
#: verifies shapes across ranks; FSDP may sync module states) and whose forward/backward syncs.
DDP_WRAPPERS: frozenset[str] = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.nn.DistributedDataParallel",
        "DistributedDataParallel",
        "DDP",
        # mmcv/mmengine's subclass of torch's DDP (MotionDiffuse, the OpenMMLab trainers)
        "mmcv.parallel.MMDistributedDataParallel", "mmengine.model.MMDistributedDataParallel",
        "MMDistributedDataParallel",
        # torchrec: DistributedModelParallel shards the model (a collective plan and broadcast)
        # and its forward/backward all-to-all the embeddings (torchrec/distributed/model_parallel.py)
        "torchrec.distributed.DistributedModelParallel",
        "torchrec.distributed.model_parallel.DistributedModelParallel",
        "DistributedModelParallel",
    }
)
FSDP_WRAPPERS: frozenset[str] = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "FullyShardedDataParallel",
        "FSDP",
    }
)
#: FSDP2 applies in place to its argument (torch.distributed.fsdp.fully_shard).
FSDP_INPLACE: frozenset[str] = frozenset(
    {"torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard", "fully_shard"}
)
#: Methods of a wrapped model that return the same wrapped model.
WRAPPED_KEEP_METHODS: frozenset[str] = frozenset(
    {"to", "cuda", "train", "eval", "half", "float", "bfloat16", "requires_grad_"}
)
#: Methods of an FSDP-wrapped model that are collective (full state dicts all-gather shards).
FSDP_COLLECTIVE_METHODS: frozenset[str] = frozenset(
    {"state_dict", "full_optim_state_dict", "optim_state_dict", "summon_full_params", "clip_grad_norm_"}
)

#: Framework objects and their collective methods. Keys are the framework kind inferred for a
#: receiver. Sources: accelerate/accelerator.py (wait_for_everyone, gather, reduce, backward,
#: save_state); lightning/fabric/fabric.py (barrier, broadcast, all_gather, all_reduce, save, load,
#: backward); lightning/pytorch/trainer/trainer.py (save_checkpoint ends in strategy.barrier);
#: deepspeed/runtime/engine.py (backward, step, save_checkpoint, load_checkpoint).
FRAMEWORK_COLLECTIVES: dict[str, frozenset[str]] = {
    "accelerator": frozenset(
        {"wait_for_everyone", "gather", "gather_for_metrics", "reduce", "pad_across_processes",
         "backward", "save_state", "load_state", "prepare", "prepare_model", "clip_grad_norm_"}
    ),
    "fabric": frozenset(
        {"barrier", "broadcast", "all_gather", "all_reduce", "save", "load", "backward", "setup",
         "setup_module", "clip_gradients"}
    ),
    # Lightning's Trainer (fit/validate/test/predict, save_checkpoint) and transformers' Trainer
    # (train and evaluate run the DDP loop and gather metrics: transformers/trainer.py)
    "trainer": frozenset({"save_checkpoint", "fit", "validate", "test", "predict", "train", "evaluate"}),
    "strategy": frozenset({"barrier", "broadcast", "reduce", "all_gather"}),
    "engine": frozenset({"backward", "step", "save_checkpoint", "load_checkpoint"}),
    # torchrec's train pipelines: progress() runs the sharded model's forward and backward
    # (torchrec/distributed/train_pipeline/train_pipelines.py)
    "pipeline": frozenset({"progress"}),
}
#: Framework collectives whose returned value is the same on every rank.
FRAMEWORK_UNIFORM_RESULTS: frozenset[str] = frozenset(
    {"gather", "gather_for_metrics", "reduce", "broadcast", "all_gather", "all_reduce"}
)
#: Receiver names that identify a framework object when its construction is not visible.
FRAMEWORK_NAMES: dict[str, str] = {
    "accelerator": "accelerator", "fabric": "fabric", "trainer": "trainer",
    "engine": "engine", "model_engine": "engine", "strategy": "strategy",
}
#: Constructors of framework objects (dotted-name suffixes).
FRAMEWORK_CONSTRUCTORS: dict[str, str] = {
    "Accelerator": "accelerator", "Fabric": "fabric", "Trainer": "trainer",
    "TrainPipelineSparseDist": "pipeline", "TrainPipelineBase": "pipeline", "PrefetchTrainPipelineSparseDist": "pipeline",
}
#: Horovod's collectives (horovod/torch/mpi_ops.py, horovod/torch/functions.py), by the op the
#: rules know them as; called on ``hvd`` (``import horovod.torch as hvd``, or stored on an object).
HOROVOD_COLLECTIVES: dict[str, str] = {
    "allreduce": "all_reduce", "allreduce_": "all_reduce", "allgather": "all_gather",
    "broadcast": "broadcast", "broadcast_": "broadcast", "broadcast_parameters": "broadcast",
    "broadcast_optimizer_state": "broadcast", "broadcast_object": "broadcast", "alltoall": "all_to_all",
    "barrier": "barrier",
}
#: Project helpers commonly copied between training repos (torchvision references utils,
#: detectron2 comm, YOLOv5 torch_utils): known collectives even when their source is not linted.
GENERIC_COLLECTIVE_HELPERS: dict[str, str] = {
    "barrier": "barrier", "synchronize": "barrier", "wait_for_everyone": "barrier",
    "reduce_dict": "all_reduce", "all_reduce_mean": "all_reduce", "reduce_tensor": "all_reduce",
    "distribute_bn": "all_reduce",
    "all_gather": "all_gather", "all_reduce": "all_reduce", "broadcast": "broadcast",
}
#: Helpers that return a value that is the same on every rank (they all-reduce or broadcast).
GENERIC_UNIFORM_HELPERS: frozenset[str] = frozenset(
    {"reduce_dict", "all_reduce_mean", "reduce_tensor", "all_gather", "broadcast", "gather_for_metrics"}
)

#: Context managers that run their body on every rank but one rank first, with barriers around
#: (accelerate main_process_first, transformers main_process_first, YOLOv5
#: torch_distributed_zero_first): a collective inside the body meets the other ranks' barrier.
ORDERED_CONTEXTS: frozenset[str] = frozenset(
    {"main_process_first", "local_main_process_first", "torch_distributed_zero_first",
     "distributed_zero_first", "rank_zero_first"}
)
#: Decorators that run a function on global rank 0 only (lightning rank_zero_only,
#: accelerate on_main_process).
RANK_ZERO_DECORATORS: frozenset[str] = frozenset({"rank_zero_only", "on_main_process"})
RANK_LOCAL_ZERO_DECORATORS: frozenset[str] = frozenset({"on_local_main_process"})

# -- rank sources ---------------------------------------------------------------------------
#: Environment variables that hold a rank (torchrun sets RANK/LOCAL_RANK/GROUP_RANK; SLURM, Open
#: MPI, MPICH launchers their own).
RANK_ENV: dict[str, str] = {
    "RANK": "rank", "GROUP_RANK": "other", "NODE_RANK": "other", "PET_NODE_RANK": "other",
    "LOCAL_RANK": "local", "SLURM_PROCID": "rank", "SLURM_LOCALID": "local",
    "SLURM_NODEID": "other", "OMPI_COMM_WORLD_RANK": "rank", "OMPI_COMM_WORLD_LOCAL_RANK": "local",
    "PMI_RANK": "rank", "MV2_COMM_WORLD_RANK": "rank",
}
#: Names of a node's index among the job's nodes: ``local_rank + node_index * gpus_per_node`` is
#: the global rank (torchrun: RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK).
NODE_INDEX_NAMES: frozenset[str] = frozenset({
    "node_index", "node_rank", "node_idx", "node_id", "nodeid", "machine_rank", "machine_index", "group_rank", "nr",
    "NODE_RANK", "GROUP_RANK", "SLURM_NODEID"})
#: Functions (terminal name) returning a rank-dependent value, when not defined in the project
#: (torch.distributed, torchvision references, Accelerate, transformers, timm ``is_primary``,
#: DALLE-pytorch ``is_root_worker``).
RANK_FUNCTIONS: dict[str, str] = {
    "get_rank": "rank", "Get_rank": "rank", "get_ordinal": "rank", "get_local_rank": "local",
    "get_node_local_rank": "local", "get_local_ordinal": "local",
    "is_main_process": "zero", "is_master": "zero", "is_rank_zero": "zero", "is_rank_0": "zero",
    "is_primary": "zero", "is_local_primary": "lzero",
    "is_global_zero": "zero", "is_world_process_zero": "zero", "is_master_process": "zero",
    "is_local_main_process": "lzero", "is_local_master": "lzero", "is_local_process_zero": "lzero",
    "is_master_ordinal": "lzero", "split_between_processes": "other",
    # DALLE-pytorch's backends (distributed_backends: DeepSpeed, Horovod, dummy)
    "is_root_worker": "zero", "is_local_root_worker": "lzero",
    # Megatron-LM's parallel state (megatron/core/parallel_state.py; its older ``mpu``, copied into
    # DeepSpeed examples and LMOps): a rank within one parallel group, so each value (0 too) is
    # held by one process of every other group: several ranks in all
    "get_data_parallel_rank": "other", "get_model_parallel_rank": "other",
    "get_tensor_model_parallel_rank": "other", "get_pipeline_model_parallel_rank": "other",
    "get_context_parallel_rank": "other", "get_expert_model_parallel_rank": "other",
    "get_sequence_parallel_rank": "other",
}
#: Attributes (on any object) that hold a rank-dependent value (Accelerate PartialState,
#: Lightning Trainer/Fabric/LightningModule, transformers TrainingArguments, argparse idioms).
RANK_ATTRIBUTES: dict[str, str] = {
    "rank": "rank", "global_rank": "rank", "process_index": "rank", "local_rank": "local",
    "local_process_index": "local", "RANK": "rank", "LOCAL_RANK": "local",  # yacs configs: cfg.RANK
    "GLOBAL_RANK": "rank", "world_rank": "rank", "WORLD_RANK": "rank",  # Grendel-GS's utils.GLOBAL_RANK
    "dist_rank": "rank",  # segmenter's ptu.dist_rank (a module global its init function sets from SLURM_PROCID)
    "ddp_rank": "rank", "process_rank": "rank", "proc_rank": "rank",  # DAN's params["training_params"]["ddp_rank"]
    # the node's index: true on every process of that node (`args.nr` of the widely copied DDP
    # tutorial, `rank = args.nr * args.gpus + gpu`; Accelerate's machine_rank; torchrun's group rank)
    "node_rank": "other", "nr": "other", "node_id": "other", "machine_rank": "other", "group_rank": "other",
    "is_main_process": "zero", "is_global_zero": "zero", "is_master": "zero",
    "master_process": "zero", "is_rank_zero": "zero", "should_save": "zero", "is_main": "zero",
    "is_local_main_process": "lzero", "is_local_zero": "lzero", "is_local_master": "lzero",
    # transformers TrainerState (a callback hook's `state`)
    "is_world_process_zero": "zero", "is_local_process_zero": "lzero",
}
#: Functions and attributes that are the same on every rank (world size and friends).
UNIFORM_FUNCTIONS: frozenset[str] = frozenset(
    {"get_world_size", "is_initialized", "is_available", "is_dist_avail_and_initialized",
     "get_backend", "is_torchelastic_launched", "get_local_world_size"}
)
#: What a tensor *is*, fixed by the model and its configuration rather than by this rank's batch:
#: read from per-rank data (a forward's output) these are the same on every rank (``if
#: logits.dtype != torch.float32:``, ``if out.dim() == 3:``). Not ``shape``/``size()`` (a last,
#: shorter batch) nor ``device`` (each rank its own GPU).
TENSOR_CONFIG_ATTRS: frozenset[str] = frozenset({"dtype", "ndim", "layout", "is_cuda"})
TENSOR_CONFIG_METHODS: frozenset[str] = frozenset({"dim", "ndimension", "is_floating_point", "is_complex"})
#: Clock reads: each rank reads its own clock, so a test of a duration or a deadline
#: (``if time.time() - start > limit: break``) is crossed on different steps on different ranks.
CLOCK_READS: frozenset[str] = frozenset(
    {"time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "time.perf_counter_ns",
     "time.monotonic_ns"}
)
#: Values unique to each process: a file name built from one is a per-rank name (dnnlib's
#: ``open_url`` cache writes ``"tmp_" + uuid.uuid4().hex + ...``, then renames it atomically).
UNIQUE_PER_PROCESS: frozenset[str] = frozenset(
    {"uuid.uuid4", "uuid.uuid1", "os.getpid", "tempfile.mktemp", "secrets.token_hex"}
)
#: Library functions that run their first argument's forward (FLOP counters and model
#: summaries): on a DDP/FSDP-wrapped model that forward is a collective, and under a rank-0 guard
#: (``if is_master_proc(): log_model_info(model)``) the other ranks never join it.
MODEL_RUNNERS: frozenset[str] = frozenset(
    {"fvcore.nn.flop_count", "fvcore.nn.flop_count.flop_count", "fvcore.nn.activation_count",
     "fvcore.nn.activation_count.activation_count", "fvcore.nn.FlopCountAnalysis", "fvcore.nn.ActivationCountAnalysis",
     "thop.profile", "torchinfo.summary", "torchsummary.summary", "ptflops.get_model_complexity_info"}
)
#: Library checkpointers (constructor -> kind) and the methods that write (kind -> (event, methods)):
#: timm's ``CheckpointSaver`` (timm/utils/checkpoint_saver.py) ``torch.save``s wherever it is
#: called (scripts build it on rank 0 only); fvcore/detectron2's ``Checkpointer``
#: (fvcore/common/checkpoint.py) writes only where ``save_to_disk`` (the main process, as
#: detectron2 builds it), and ``PeriodicCheckpointer.step`` calls its ``save``: a rank-0 write.
CHECKPOINTER_CLASSES: dict[str, str] = {
    "CheckpointSaver": "saver", "DetectionCheckpointer": "checkpointer0", "Checkpointer": "checkpointer0",
    "PeriodicCheckpointer": "checkpointer0",
}
CHECKPOINTER_WRITES: dict[str, tuple[str, frozenset[str]]] = {
    "saver": ("write", frozenset({"save_checkpoint", "save_recovery"})),
    "checkpointer0": ("write0", frozenset({"save", "step"})),
}
#: Widely copied helpers that return ranks in a tuple, when their source is not linted (kinds
#: by position; ``None``: the same on every rank): open_clip's and open_flamingo's
#: ``world_info_from_env()`` -> (local_rank, global_rank, world_size) (open_clip_train/distributed.py),
#: mmcv/mmengine's ``get_dist_info()`` -> (rank, world_size) (mmengine/dist/utils.py).
TUPLE_RANK_HELPERS: dict[str, tuple[str | None, ...]] = {
    "world_info_from_env": ("local", "rank", None),
    "get_dist_info": ("rank", None),
}
MODEL_RUNNER_NAMES: frozenset[str] = frozenset(q.rsplit(".", 1)[-1] for q in MODEL_RUNNERS)
#: Parameter names that hold a rank in an entry point whose callers are not in the project.
RANK_PARAMS: dict[str, str] = {"rank": "rank", "global_rank": "rank", "local_rank": "local"}
#: Flags whose name says "this run is distributed" (pytorch/examples' ``args.distributed``,
#: TransReID's ``cfg.MODEL.DIST_TRAIN``): true in every distributed run, so the ``else`` arm of
#: ``if flag:`` runs in single-process runs only. ``multiprocessing_distributed`` is not one: a
#: torchrun job leaves it False.
DIST_FLAG_NAMES: frozenset[str] = frozenset(
    {"distributed", "is_distributed", "use_distributed", "dist_train", "ddp", "use_ddp", "is_ddp", "multi_gpu",
     "use_multi_gpu", "ddp_enabled", "distributed_enabled"})
#: Parameter names of a function no linted code calls that are taken to hold the DDP-wrapped
#: model (MAE's ``train_one_epoch(model, ...)``, detectron2's ``do_train(cfg, model)``): its
#: forward's output is per-rank data and its backward all-reduces.
MODEL_PARAMS: frozenset[str] = frozenset({"model", "ddp_model"})
#: Launchers whose target's first parameter is the process index (torch.multiprocessing.spawn).
SPAWN_FUNCTIONS: frozenset[str] = frozenset(
    {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes", "mp.spawn", "spawn",
     "start_processes", "xmp.spawn"}
)

#: Method names too common to stand for one project class's method when the receiver's class is
#: unknown (:meth:`k8sddp.lint.analyzer.Analyzer.unique_method`): library objects have them too.
COMMON_METHODS: frozenset[str] = frozenset(
    {"save", "load", "write", "open", "close", "update", "step", "train", "eval", "forward", "run", "log",
     "add", "get", "put", "append", "extend", "save_pretrained", "from_pretrained", "to", "cuda", "state_dict",
     "load_state_dict", "save_checkpoint", "load_checkpoint", "dump", "save_state", "flush", "info"})

# -- IO -------------------------------------------------------------------------------------
#: Writers whose path is the argument at the given index (or keyword).
WRITE_CALLS: dict[str, tuple[int, str]] = {
    "torch.save": (1, "f"), "numpy.save": (0, "file"), "numpy.savez": (0, "file"),
    "numpy.savez_compressed": (0, "file"), "numpy.savetxt": (0, "fname"),
    "safetensors.torch.save_file": (1, "filename"), "torch.jit.save": (1, "f"),
    "shutil.copy": (1, "dst"), "shutil.copy2": (1, "dst"), "shutil.copyfile": (1, "dst"), "shutil.move": (1, "dst"),
    "shutil.copytree": (1, "dst"),
    # samples and logs (F5-TTS's torchaudio.save, FourCastNet's save_image, fairseq's log file)
    "torchaudio.save": (0, "uri"), "soundfile.write": (0, "file"), "scipy.io.wavfile.write": (0, "filename"),
    "torchvision.utils.save_image": (1, "fp"), "cv2.imwrite": (0, "filename"), "imageio.imwrite": (0, "uri"),
    "logging.FileHandler": (0, "filename"), "matplotlib.pyplot.savefig": (0, "fname"),
    # timm's logging set-up attaches a RotatingFileHandler on log_path when one is given (OFAKD)
    "timm.utils.setup_default_logging": (1, "log_path"), "timm.utils.log.setup_default_logging": (1, "log_path"),
    "setup_default_logging": (1, "log_path"),  # `from timm.utils import *` (the timm training script's idiom)
}
#: Writers of :data:`WRITE_CALLS` that write nothing when their path argument is left out.
OPTIONAL_PATH_WRITERS: frozenset[str] = frozenset(
    {"timm.utils.setup_default_logging", "timm.utils.log.setup_default_logging", "setup_default_logging"})
#: Writers that are safe on every rank: they save on the main process only
#: (torchvision references utils.save_on_master, accelerate Accelerator.save,
#: torch_xla xm.save(master_only=True)).
SAFE_WRITERS: frozenset[str] = frozenset({"save_on_master", "xm.save", "torch_xla.core.xla_model.save"})
#: Methods that write to the receiver path or directory.
WRITE_METHODS: frozenset[str] = frozenset({"write_text", "write_bytes", "save_pretrained", "to_csv", "to_json", "to_parquet"})
#: Methods on any receiver that write the path given as an argument (index, keyword): matplotlib's
#: ``Figure.savefig(fname)`` (MindEye's ``grid.savefig(os.path.join(outdir, ...))``).
WRITE_METHODS_ARG: dict[str, tuple[int, str]] = {"savefig": (0, "fname")}
#: Experiment trackers and writers: one run per rank on the same project, or one event file per
#: rank in the same directory (tensorboard SummaryWriter, wandb.init, mlflow.start_run).
TRACKER_CALLS: frozenset[str] = frozenset(
    {"torch.utils.tensorboard.SummaryWriter", "tensorboardX.SummaryWriter", "SummaryWriter",
     "wandb.init", "mlflow.start_run", "neptune.init_run", "comet_ml.Experiment"}
)
#: Readers whose path is the argument at the given index (or keyword).
READ_CALLS: dict[str, tuple[int, str]] = {
    "torch.load": (0, "f"), "numpy.load": (0, "file"), "safetensors.torch.load_file": (0, "filename"),
    "pickle.load": (0, "file"), "torch.jit.load": (0, "f"),
}
READ_METHODS: frozenset[str] = frozenset({"read_text", "read_bytes", "from_pretrained", "load_from_disk"})
#: Calls that make a file object or an in-memory buffer: a write to it is not a write to a path
#: (the ``open`` that made it is checked itself).
FILE_OBJECT_CALLS: frozenset[str] = frozenset(
    {"open", "BytesIO", "StringIO", "NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile", "fdopen"}
)

#: Calls whose value iterates exactly like their first argument (progress bars, enumerate):
#: ``tqdm(loader, disable=rank != 0)`` runs as many iterations on every rank.
ITER_PASSTHROUGH: frozenset[str] = frozenset({"tqdm", "enumerate", "iter", "list", "tuple", "sorted", "reversed"})

#: Signs that a file trains on GPUs (DataLoader pin_memory matters only there).
GPU_MARKERS: tuple[str, ...] = ("cuda", "nccl", "accelerate", "Accelerator", "deepspeed", "Fabric", "lightning")
#: DataLoader drop-ins that take DataLoader's arguments (torchdata's StatefulDataLoader, used by
#: torchtune and Accelerate's use_stateful_dataloader; timm's MultiEpochsDataLoader keeps its
#: workers alive by itself, so it needs no persistent_workers; webdataset's WebLoader subclasses
#: DataLoader and passes it every argument).
DATALOADER_DROP_INS = frozenset({"DataLoader", "StatefulDataLoader", "MultiEpochsDataLoader", "WebLoader"})
#: Modules those drop-ins come from (the qualified name's prefix).
DATALOADER_MODULES: tuple[str, ...] = ("torch.utils.data", "torchdata", "timm", "webdataset", "torch_geometric")
#: Framework process-group setup whose default timeout is explicit in the framework (1800 s):
#: deepspeed.init_distributed (deepspeed/comm/comm.py timeout=default_pg_timeout, 30 min) and
#: Lightning's strategies (lightning/fabric/plugins/collectives/torch_collective.py
#: default_pg_timeout = timedelta(seconds=1800)). XLAStrategy and XLAFSDPStrategy take no timeout (the XLA
#: runtime sets it up), so nothing can be passed there.
FRAMEWORK_PG_SETUP = frozenset(
    {"init_distributed", "DDPStrategy", "FSDPStrategy", "DeepSpeedStrategy", "ModelParallelStrategy"}
)

#: mpi4py's collectives on the world communicator (``MPI.COMM_WORLD.bcast``: guided-diffusion and
#: improved-diffusion load checkpoints through them); every rank of the communicator must call
#: them, as with torch.distributed (mpi4py docs, "Collective Communication").
MPI_COMM_PREFIXES: tuple[str, ...] = ("mpi4py.MPI.COMM_WORLD.", "MPI.COMM_WORLD.")
MPI_COLLECTIVES = frozenset({"bcast", "Bcast", "allreduce", "Allreduce", "reduce", "Reduce", "allgather", "Allgather",
                             "gather", "Gather", "scatter", "Scatter", "barrier", "Barrier", "alltoall", "Alltoall"})

#: Rank kinds that say "am I this rank" (a flag), not a rank number.
TEST_KINDS = frozenset({"zero", "nzero", "lzero", "nlzero", "one"})
#: Keyword arguments of functions the linter cannot see that choose who logs or where tensors
#: live, not what the function returns (issue 17: `verbose=rank == 0`, `device=...`).
PLACEMENT_KWARGS = frozenset(
    {"verbose", "device", "device_id", "device_ids", "rank", "local_rank", "global_rank", "gpu", "gpu_id",
     "disable", "quiet", "silent", "is_main_process", "main_process", "is_master", "master", "is_primary",
     "logger", "log", "print_fn", "prefix", "position", "leave", "map_location", "enabled"}
)
#: Builtins and conversions whose result is computed from their arguments, flags included.
VALUE_CALLS = frozenset(
    {"float", "int", "bool", "str", "len", "abs", "max", "min", "sum", "any", "all", "list", "tuple", "set",
     "dict", "sorted", "round", "torch.tensor", "torch.as_tensor", "torch.full", "torch.ones", "torch.zeros",
     "numpy.array", "numpy.asarray", "f"}
)
#: Base classes (terminal name) whose ``on_*`` methods the framework calls on every rank with the
#: same arguments: transformers' ``TrainerCallback`` (trainer_callback.py, CallbackHandler runs
#: each event on every process) and Lightning's ``Callback`` (its hooks run on every rank; writes
#: belong under ``trainer.is_global_zero``).
CALLBACK_BASES: frozenset[str] = frozenset({"TrainerCallback", "Callback"})
