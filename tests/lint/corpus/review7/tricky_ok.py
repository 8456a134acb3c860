# Issue-7 review (first-time user, written without reading tests/lint): tricky_ok.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
"""Tricky negatives: all should be clean."""
import argparse
import datetime
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)


def is_main_process():
    return get_rank() == 0


def get_rank():
    if not dist.is_available() or not dist.is_initialized():
        return 0
    return dist.get_rank()


def get_world_size():
    if not dist.is_initialized():
        return 1
    return dist.get_world_size()


def reduce_scalar(x):
    t = torch.tensor([x], device="cuda")
    if get_world_size() > 1:
        dist.all_reduce(t)
    return t.item() / get_world_size()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--distributed", action="store_true")
    p.add_argument("--out", default="/ckpt")
    args = p.parse_args()
    if args.distributed:
        dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=20))
    rank = get_rank()
    world_size = get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    model = torch.nn.Linear(10, 10).cuda()
    if args.distributed:
        model = DDP(model, device_ids=[local_rank])
    if world_size > 1:
        dist.barrier()

    # torch_distributed_zero_first idiom, written out
    if local_rank not in (-1, 0):
        dist.barrier()
    dataset = torch.utils.data.TensorDataset(torch.randn(100, 10))
    if local_rank == 0:
        dist.barrier()

    # subgroup whose members take the branch
    first_half = list(range(world_size // 2))
    g = dist.new_group(first_half)
    if rank in first_half:
        dist.all_reduce(torch.ones(1, device="cuda"), group=g)

    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, pin_memory=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        sampler.set_epoch(epoch)
        running = 0.0
        for (x,) in loader:
            loss = model(x.cuda()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item()
        # uniform after all_reduce
        avg = reduce_scalar(running)
        if avg < 1e-3:
            break
        # broadcast decision from rank 0
        flag = torch.tensor([1.0 if rank == 0 and epoch > 5 else 0.0], device="cuda")
        dist.broadcast(flag, src=0)
        if flag.item() > 0:
            break
        objs = [None]
        if rank == 0:
            objs[0] = {"stop": epoch == 9}
        dist.broadcast_object_list(objs, src=0)
        if objs[0]["stop"]:
            break
        save_on_master({"model": model.state_dict()}, os.path.join(args.out, "ckpt.pt"))
        # per-rank file names are fine
        torch.save(opt.state_dict(), os.path.join(args.out, f"optim_rank{rank}.pt"))
        with open(f"/ckpt/log_rank{rank}.txt", "a") as f:
            f.write(f"{epoch} {avg}\n")
        # node-local scratch under local-rank guard
        if local_rank == 0:
            torch.save(model.state_dict(), "/tmp/scratch.pt")

    if rank == 0:
        print("done")
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
