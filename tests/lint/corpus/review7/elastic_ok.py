# Issue-7 review (first-time user, written without reading tests/lint): elastic_ok.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import datetime
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def ddp_setup():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="nccl", timeout=datetime.timedelta(seconds=int(os.environ.get("K8SDDP_PG_TIMEOUT_SECONDS", "1800"))))


class Trainer:
    def __init__(self, model, train_data, val_data, optimizer, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model.to(self.local_rank)
        self.train_data = train_data
        self.val_data = val_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model, device_ids=[self.local_rank])

    def _load_snapshot(self, snapshot_path):
        loc = f"cuda:{self.local_rank}"
        snapshot = torch.load(snapshot_path, map_location=loc)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.cross_entropy(output, targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        total = torch.zeros(1, device=self.local_rank)
        for source, targets in self.train_data:
            source = source.to(self.local_rank)
            targets = targets.to(self.local_rank)
            total += self._run_batch(source, targets)
        dist.all_reduce(total)
        return total

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def _save_dcp(self, epoch):
        state = {"model": self.model.state_dict(), "optim": self.optimizer.state_dict()}
        dcp.save(state, checkpoint_id=f"/ckpt/dcp/epoch_{epoch}")

    def _evaluate(self):
        # rank 0 evaluates the unwrapped module: no collective
        self.model.module.eval()
        with torch.no_grad():
            for source, targets in self.val_data:
                self.model.module(source.to(self.local_rank))
        self.model.module.train()

    def train(self, max_epochs, patience_loss=0.01):
        for epoch in range(self.epochs_run, max_epochs):
            total = self._run_epoch(epoch)
            # all-reduced: the same on every rank
            if total.item() < patience_loss:
                break
            if self.global_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)
                self._evaluate()
            self._save_dcp(epoch)
            dist.barrier()


def main(dataset, val_dataset, model, optimizer, total_epochs, save_every, snapshot_path="/ckpt/snapshot.pt"):
    ddp_setup()
    train_data = DataLoader(dataset, batch_size=32, pin_memory=True, shuffle=False, num_workers=4,
                            persistent_workers=True, sampler=DistributedSampler(dataset))
    val_data = DataLoader(val_dataset, batch_size=32, pin_memory=True)
    trainer = Trainer(model, train_data, val_data, optimizer, save_every, snapshot_path)
    trainer.train(total_epochs)
    dist.destroy_process_group()
