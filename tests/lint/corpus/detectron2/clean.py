"""detectron2 plain_train_net.py shape: detectron2.utils.comm helpers, EventStorage, periodic eval."""
import logging
import math
import os
from collections import OrderedDict

import detectron2.utils.comm as comm
import torch
from detectron2.checkpoint import DetectionCheckpointer, PeriodicCheckpointer
from detectron2.engine import default_argument_parser, default_setup, launch
from detectron2.evaluation import inference_on_dataset, print_csv_format
from detectron2.modeling import build_model
from detectron2.solver import build_lr_scheduler, build_optimizer
from detectron2.utils.events import EventStorage
from torch.nn.parallel import DistributedDataParallel

logger = logging.getLogger("detectron2")


def do_test(cfg, model, loaders, evaluators):
    results = OrderedDict()
    for name, loader in loaders.items():
        results_i = inference_on_dataset(model, loader, evaluators[name])
        results[name] = results_i
        if comm.is_main_process():
            logger.info("Evaluation results for {} in csv format:".format(name))
            print_csv_format(results_i)
    return results


def do_train(cfg, model, data_loader, test_loaders, evaluators, resume=False):
    model.train()
    optimizer = build_optimizer(cfg, model)
    scheduler = build_lr_scheduler(cfg, optimizer)
    checkpointer = DetectionCheckpointer(model, cfg.OUTPUT_DIR, optimizer=optimizer, scheduler=scheduler)
    start_iter = checkpointer.resume_or_load(cfg.MODEL.WEIGHTS, resume=resume).get("iteration", -1) + 1
    max_iter = cfg.SOLVER.MAX_ITER
    periodic_checkpointer = PeriodicCheckpointer(checkpointer, cfg.SOLVER.CHECKPOINT_PERIOD, max_iter=max_iter)
    with EventStorage(start_iter) as storage:
        for data, iteration in zip(data_loader, range(start_iter, max_iter)):
            storage.iter = iteration
            loss_dict = model(data)
            losses = sum(loss_dict.values())
            loss_dict_reduced = {k: v.item() for k, v in comm.reduce_dict(loss_dict).items()}
            losses_reduced = sum(loss for loss in loss_dict_reduced.values())
            assert math.isfinite(losses_reduced), loss_dict_reduced  # all-reduced: the same on every rank
            if comm.is_main_process():
                storage.put_scalars(total_loss=losses_reduced, **loss_dict_reduced)
            optimizer.zero_grad()
            losses.backward()
            optimizer.step()
            scheduler.step()
            if cfg.TEST.EVAL_PERIOD > 0 and (iteration + 1) % cfg.TEST.EVAL_PERIOD == 0 and iteration != max_iter - 1:
                do_test(cfg, model, test_loaders, evaluators)
                comm.synchronize()
            periodic_checkpointer.step(iteration)


def main(args, cfg):
    default_setup(cfg, args)
    model = build_model(cfg)
    distributed = comm.get_world_size() > 1
    if distributed:
        model = DistributedDataParallel(model, device_ids=[comm.get_local_rank()], broadcast_buffers=False)
    do_train(cfg, model, args.data_loader, args.test_loaders, args.evaluators, resume=args.resume)
    if comm.is_main_process():
        with open(os.path.join(cfg.OUTPUT_DIR, "config.yaml"), "w") as f:
            f.write(cfg.dump())
    return do_test(cfg, model, args.test_loaders, args.evaluators)


if __name__ == "__main__":
    args = default_argument_parser().parse_args()
    launch(main, args.num_gpus, num_machines=args.num_machines, machine_rank=args.machine_rank,
           dist_url=args.dist_url, args=(args, None))
