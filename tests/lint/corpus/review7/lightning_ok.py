# Issue-7 review (first-time user, written without reading tests/lint): lightning_ok.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import os

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import DataLoader, random_split
from torchvision import transforms
from torchvision.datasets import MNIST


class LitClassifier(L.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.l1 = nn.Linear(28 * 28, 128)
        self.l2 = nn.Linear(128, 10)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        return self.l2(torch.relu(self.l1(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("val_loss", loss, sync_dist=True)

    def on_validation_epoch_end(self):
        if self.global_rank == 0:
            self.print("validation done")
        self.write_summary()

    @rank_zero_only
    def write_summary(self):
        with open(os.path.join(self.trainer.default_root_dir, "summary.txt"), "a") as f:
            f.write(f"epoch {self.current_epoch}\n")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class MNISTData(L.LightningDataModule):
    def __init__(self, data_dir="./data", batch_size=64, num_workers=4):
        super().__init__()
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.num_workers = num_workers

    def prepare_data(self):
        MNIST(self.data_dir, train=True, download=True)

    def setup(self, stage=None):
        full = MNIST(self.data_dir, train=True, transform=transforms.ToTensor())
        self.train_set, self.val_set = random_split(full, [55000, 5000])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True,
                          num_workers=self.num_workers, pin_memory=True, persistent_workers=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=self.num_workers,
                          pin_memory=True, persistent_workers=self.num_workers > 0)


if __name__ == "__main__":
    trainer = L.Trainer(accelerator="cuda", devices=4, strategy="ddp", max_epochs=5)
    model = LitClassifier()
    trainer.fit(model, datamodule=MNISTData())
    trainer.save_checkpoint("final.ckpt")
    if trainer.is_global_zero:
        print("best:", trainer.checkpoint_callback.best_model_path)
