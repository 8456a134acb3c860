"""torchvision references/classification/train.py shape."""
import os
import time

import torch
import torch.utils.data
import utils
from torch import nn


def train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args):
    model.train()
    for i, (image, target) in enumerate(data_loader):
        start_time = time.time()
        image, target = image.to(device), target.to(device)
        output = model(image)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i % args.print_freq == 0:
            print(f"epoch {epoch} step {i} loss {loss.item():.3f} {time.time() - start_time:.2f}s")


def evaluate(model, criterion, data_loader, device):
    model.eval()
    num_processed_samples = 0
    with torch.inference_mode():
        for image, target in data_loader:
            image = image.to(device, non_blocking=True)
            output = model(image)
            num_processed_samples += image.shape[0]
    num_processed_samples = utils.reduce_across_processes(num_processed_samples)
    return num_processed_samples


def main(args):
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    utils.init_distributed_mode(args)
    device = torch.device(args.device)
    dataset, dataset_test = torch.load(args.train_cache), torch.load(args.test_cache)
    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
        test_sampler = torch.utils.data.distributed.DistributedSampler(dataset_test, shuffle=False)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
        test_sampler = torch.utils.data.SequentialSampler(dataset_test)
    data_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler,
                                              num_workers=args.workers, pin_memory=True,
                                              persistent_workers=args.workers > 0)
    data_loader_test = torch.utils.data.DataLoader(dataset_test, batch_size=args.batch_size, sampler=test_sampler,
                                                   num_workers=args.workers, pin_memory=True,
                                                   persistent_workers=args.workers > 0)
    model = nn.Linear(10, 10)
    model.to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model_without_ddp = model
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        model_without_ddp = model.module
    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args)
        evaluate(model, criterion, data_loader_test, device=device)
        if args.output_dir:
            checkpoint = {"model": model_without_ddp.state_dict(), "optimizer": optimizer.state_dict(),
                          "epoch": epoch, "args": args}
            utils.save_on_master(checkpoint, os.path.join(args.output_dir, f"model_{epoch}.pth"))
            utils.save_on_master(checkpoint, os.path.join(args.output_dir, "checkpoint.pth"))
