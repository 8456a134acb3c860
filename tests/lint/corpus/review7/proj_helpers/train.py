# Issue-7 review (first-time user, written without reading tests/lint): train.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import datetime
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import wandb
from torch.nn.parallel import DistributedDataParallel as DDP

from mylib.dist_utils import is_master, sync_metrics, write_ckpt


class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(4)])
        self.gate = torch.nn.Linear(8, 4)

    def forward(self, x):
        choice = self.gate(x).argmax(-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            sel = x[choice == i]  # expect: KDP510
            if sel.numel() > 0:
                out[choice == i] = expert(sel)
        return out


def worker(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=900))
    wandb.init(project="router")  # expect: KDP504
    model = DDP(Router().cuda(rank), device_ids=[rank])
    opt = torch.optim.Adam(model.parameters())
    for step in range(1000):
        x = torch.randn(32, 8, device=rank)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if is_master():
            m = sync_metrics(loss.detach())  # expect: KDP501
            print(m.item())
        if is_master():
            write_ckpt(model.module.state_dict(), "/ckpt/router.pt")
        total = loss.detach().clone()
        dist.reduce(total, dst=0)
        if total.item() > 1e6:
            sys.exit(1)  # expect: KDP502
        if rank == 1 and step == 500:
            raise RuntimeError("simulated")  # expect: KDP502
    write_ckpt(model.module.state_dict(), "/ckpt/final.pt")  # expect: KDP504
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(4,), nprocs=4)
