# Issue-7 review (first-time user, written without reading tests/lint): elastic_bad.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def ddp_setup():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="nccl")  # expect: KDP505


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = DDP(model.to(self.local_rank), device_ids=[self.local_rank])
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.deadline = time.time() + 3600

    def _run_epoch(self, epoch):
        for step, (source, targets) in enumerate(self.train_data):
            if self.global_rank == 0 and time.time() > self.deadline:
                break  # expect: KDP502
            self.optimizer.zero_grad()
            loss = F.cross_entropy(self.model(source.to(self.local_rank)), targets.to(self.local_rank))
            loss.backward()
            self.optimizer.step()

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, self.snapshot_path)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.local_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)  # expect: KDP504
            if self.global_rank == 0:
                state = {"model": self.model.state_dict()}
                dcp.save(state, checkpoint_id=f"/ckpt/dcp/epoch_{epoch}")  # expect: KDP501
                dist.barrier()  # expect: KDP503
            torch.save(self.model.module.state_dict(), "/ckpt/last.pt")  # expect: KDP504


def main(dataset, model, optimizer, total_epochs, save_every, snapshot_path="/ckpt/snapshot.pt"):
    ddp_setup()
    train_data = DataLoader(dataset, batch_size=32, num_workers=4,  # expect: KDP507 KDP508
                            sampler=DistributedSampler(dataset, shuffle=True))  # expect: KDP509
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path)
    trainer.train(total_epochs)
    rank = dist.get_rank()
    if rank != 0:
        return  # expect: KDP502
    dist.all_reduce(torch.ones(1).cuda())
    dist.destroy_process_group()
