# Issue-7 review (first-time user, written without reading tests/lint): tutorial_bad.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)  # expect: KDP505


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(torch.relu(self.net1(x)))


def demo_checkpoint(rank, world_size):
    setup(rank, world_size)
    model = ToyModel().to(rank)
    ddp_model = DDP(model, device_ids=[rank])
    CHECKPOINT_PATH = tempfile.gettempdir() + "/model.checkpoint"
    if rank == 0:
        torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)  # expect: KDP506 (reported at the write; the reviewer marked the read)
    map_location = {"cuda:%d" % 0: "cuda:%d" % rank}
    ddp_model.load_state_dict(torch.load(CHECKPOINT_PATH, map_location=map_location))

    ds = TensorDataset(torch.randn(1000, 10), torch.randn(1000, 5))
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank)  # expect: KDP509
    loader = DataLoader(ds, batch_size=32, sampler=sampler)  # expect: KDP507
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    for epoch in range(5):
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(x.to(rank)), y.to(rank))
            loss.backward()
            optimizer.step()
        if rank == 0:
            val = ddp_model(torch.randn(4, 10).to(rank))  # expect: KDP501
            print(epoch, val.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(demo_checkpoint, args=(2,), nprocs=2, join=True)
