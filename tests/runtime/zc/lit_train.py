"""A tiny Lightning run on CPU/gloo under torchrun with k8sddp's callback (nothing downloaded).
ZC_STALL=1: rank ZC_RANK sleeps in training_step at batch ZC_AT."""

import os
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from k8sddp.integrations.lightning import K8sddpCallback

AT, WHO = int(os.environ.get("ZC_AT", "6")), int(os.environ.get("ZC_RANK", "1"))


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        if os.environ.get("ZC_STALL") == "1" and batch_idx == AT and self.global_rank == WHO:
            time.sleep(3600)  # stalled in training_step
        (x,) = batch
        return self.net(x).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val", self.net(x).pow(2).mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def data() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(96, 8)), batch_size=4)


trainer = L.Trainer(accelerator="cpu", devices=2, num_nodes=1, strategy="ddp", max_epochs=1,
                    limit_val_batches=3, val_check_interval=6, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, enable_checkpointing=False,
                    accumulate_grad_batches=2, callbacks=[K8sddpCallback()])
trainer.fit(Tiny(), data(), data())
print(f"rank {trainer.global_rank}: lightning done", flush=True)
