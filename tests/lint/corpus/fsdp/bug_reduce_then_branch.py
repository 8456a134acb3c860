"""FSDP fine-tuning shape (pytorch/examples distributed/FSDP), full state dict on rank 0."""
import datetime
import functools
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def setup():
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=1800))


def train(model, rank, world_size, train_loader, optimizer, epoch, sampler):
    model.train()
    ddp_loss = torch.zeros(2).to(rank)
    sampler.set_epoch(epoch)
    for data, target in train_loader:
        data, target = data.to(rank), target.to(rank)
        optimizer.zero_grad()
        output = model(data)
        loss = torch.nn.functional.nll_loss(output, target, reduction="sum")
        loss.backward()
        optimizer.step()
        ddp_loss[0] += loss.item()
        ddp_loss[1] += len(data)
    dist.reduce(ddp_loss, 0, op=dist.ReduceOp.SUM)
    if rank == 0:
        print("Train Epoch: {} \tLoss: {:.6f}".format(epoch, ddp_loss[0] / ddp_loss[1]))
    return ddp_loss


def fsdp_main(args):
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    setup()
    dataset = torch.utils.data.TensorDataset(torch.randn(1024, 1, 28, 28), torch.randint(0, 10, (1024,)))
    sampler = DistributedSampler(dataset, rank=rank, num_replicas=world_size, shuffle=True)
    train_loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=2, pin_memory=True,
                              persistent_workers=True)
    torch.cuda.set_device(local_rank)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 10), torch.nn.LogSoftmax(dim=1))
    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=100)
    model = FSDP(net.to(local_rank), auto_wrap_policy=policy)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    for epoch in range(1, args.epochs + 1):
        totals = train(model, rank, world_size, train_loader, optimizer, epoch, sampler)
        if totals[0] / totals[1] < 0.05:
            break  # expect: KDP502
    dist.barrier()
    cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
        cpu_state = model.state_dict()
    if rank == 0:
        torch.save(cpu_state, "mnist_cnn.pt")
    dist.destroy_process_group()
