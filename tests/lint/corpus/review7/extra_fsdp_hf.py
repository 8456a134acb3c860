# Issue-7 review (first-time user, written without reading tests/lint): fsdp_hf.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import datetime
import os

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x, mask=None):
        if mask is None:
            mask = torch.ones_like(x)
        if x.shape[0] == 0:
            return x
        if self.training:
            x = torch.nn.functional.dropout(x, 0.1)
        idx = torch.nonzero(x > 0)  # expect: KDP510
        while x.norm().item() > 10:  # expect: KDP510
            x = x / 2
        return self.fc(x * mask) + idx.numel()


def main(args):
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5))
    model = FSDP(Net().cuda())
    if args.local_rank in [-1, 0]:
        sd = model.state_dict()  # expect: KDP501
        torch.save(sd, "/ckpt/fsdp.pt")  # expect: KDP504
    np.save("/ckpt/stats.npy", np.zeros(3))  # expect: KDP504
    with open("/ckpt/config.json") as f:
        cfg = f.read()
    rank = dist.get_rank()
    if rank == 0:
        dist.barrier()
    else:
        dist.barrier()
    step = 0
    while True:
        out = model(torch.randn(4, 8).cuda())
        out.sum().backward()
        step += 1
        if rank == 0 and step > 100:
            break  # expect: KDP502
    g = [torch.zeros(1) for _ in range(dist.get_world_size())] if rank == 0 else None
    dist.gather(torch.ones(1), g, dst=0)
    if rank == 0 and sum(x.item() for x in g) > 1:
        print("ok")
    if rank == 0:
        with open("/ckpt/ready", "w") as f:
            f.write("1")
    dist.barrier()
    with open("/ckpt/ready") as f:
        f.read()
    return cfg
