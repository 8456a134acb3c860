"""timm train.py shape (huggingface/pytorch-image-models): helpers from timm.utils, args.rank."""
import argparse
import logging
import os
import time
from collections import OrderedDict

import torch
import torch.nn as nn
from timm import utils
from timm.data import create_loader
from timm.models import create_model
from timm.utils import ApexScaler, NativeScaler
from torch.nn.parallel import DistributedDataParallel as NativeDDP

_logger = logging.getLogger("train")


def train_one_epoch(epoch, model, loader, optimizer, loss_fn, args, lr_scheduler=None, saver=None):
    model.train()
    losses_m = utils.AverageMeter()
    num_updates = epoch * len(loader)
    for batch_idx, (input, target) in enumerate(loader):
        input, target = input.cuda(), target.cuda()
        output = model(input)
        loss = loss_fn(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        num_updates += 1
        if batch_idx % args.log_interval == 0:
            if args.distributed:
                reduced_loss = utils.reduce_tensor(loss.data, args.world_size)
                losses_m.update(reduced_loss.item(), input.size(0))
            if utils.is_primary(args):
                _logger.info(f"Train: {epoch} [{batch_idx}/{len(loader)}] Loss: {losses_m.val:.4f}")
                if losses_m.val > 1e3:
                    break  # expect: KDP502
        if saver is not None and args.recovery_interval and (batch_idx + 1) % args.recovery_interval == 0:
            saver.save_recovery(epoch, batch_idx=batch_idx)
        if lr_scheduler is not None:
            lr_scheduler.step_update(num_updates=num_updates)
    return OrderedDict([("loss", losses_m.avg)])


def validate(model, loader, loss_fn, args):
    model.eval()
    losses_m = utils.AverageMeter()
    with torch.no_grad():
        for batch_idx, (input, target) in enumerate(loader):
            output = model(input.cuda())
            loss = loss_fn(output, target.cuda())
            if args.distributed:
                loss = utils.reduce_tensor(loss.data, args.world_size)
            losses_m.update(loss.item(), input.size(0))
    return OrderedDict([("loss", losses_m.avg)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--recovery-interval", type=int, default=0)
    parser.add_argument("--output", default="")
    parser.add_argument("--dist-bn", default="reduce")
    args = parser.parse_args()
    device = utils.init_distributed_device(args)
    if args.distributed:
        _logger.info(f"Training in distributed mode. Process {args.rank}, total {args.world_size}, device {args.device}.")
    utils.random_seed(42, args.rank)
    model = create_model("resnet50", pretrained=False, num_classes=1000)
    model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if args.distributed:
        model = NativeDDP(model, device_ids=[device], broadcast_buffers=True)
    loader_train = create_loader("imagenet/train", is_training=True, distributed=args.distributed)
    loader_eval = create_loader("imagenet/val", is_training=False, distributed=args.distributed)
    train_loss_fn = nn.CrossEntropyLoss().cuda()
    saver = None
    output_dir = None
    if utils.is_primary(args):
        output_dir = utils.get_outdir(args.output or "./output/train", time.strftime("%Y%m%d-%H%M%S"))
        saver = utils.CheckpointSaver(model=model, optimizer=optimizer, args=args, checkpoint_dir=output_dir)
        with open(os.path.join(output_dir, "args.yaml"), "w") as f:
            f.write(str(vars(args)))
    best_metric = None
    for epoch in range(args.epochs):
        if args.distributed and hasattr(loader_train.sampler, "set_epoch"):
            loader_train.sampler.set_epoch(epoch)
        train_metrics = train_one_epoch(epoch, model, loader_train, optimizer, train_loss_fn, args, saver=saver)
        if args.distributed and args.dist_bn in ("broadcast", "reduce"):
            utils.distribute_bn(model, args.world_size, args.dist_bn == "reduce")
        eval_metrics = validate(model, loader_eval, train_loss_fn, args)
        if output_dir is not None:
            utils.update_summary(epoch, train_metrics, eval_metrics, filename=os.path.join(output_dir, "summary.csv"),
                                 write_header=best_metric is None)
        if saver is not None:
            best_metric, best_epoch = saver.save_checkpoint(epoch, metric=eval_metrics["loss"])


if __name__ == "__main__":
    main()
