# Issue-7 review (first-time user, written without reading tests/lint): lightning_bad.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import os

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.tensorboard import SummaryWriter


class LitClassifier(L.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.l1 = nn.Linear(28 * 28, 10)
        self.writer = SummaryWriter("runs/exp")  # expect: KDP504

    def forward(self, x):
        x = x.view(x.size(0), -1)
        out = self.l1(x)
        if out.abs().max() > 100:  # expect: KDP510
            out = out / out.abs().max()
        return out

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.writer.add_scalar("loss", loss.item(), self.global_step)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        if self.global_rank == 0:
            self.log("val_loss", loss, sync_dist=True)  # expect: KDP501

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main(train_set):
    trainer = L.Trainer(accelerator="cuda", devices=4, strategy="ddp", max_epochs=5)
    model = LitClassifier()
    loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)  # expect: KDP508
    trainer.fit(model, loader)
    if trainer.is_global_zero:
        trainer.save_checkpoint("final.ckpt")  # expect: KDP501
