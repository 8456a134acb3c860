"""Lightning image classifier shape (Lightning-AI/pytorch-lightning examples), fixed."""
import os

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from torch import nn
from torch.utils.data import DataLoader, random_split
from torchvision import transforms
from torchvision.datasets import MNIST


class Backbone(nn.Module):
    def __init__(self, hidden_dim: int = 128) -> None:
        super().__init__()
        self.l1 = nn.Linear(28 * 28, hidden_dim)
        self.l2 = nn.Linear(hidden_dim, 10)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        x = torch.relu(self.l1(x))
        return torch.relu(self.l2(x))


class LitClassifier(L.LightningModule):
    def __init__(self, backbone: nn.Module | None = None, learning_rate: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone or Backbone()

    def forward(self, x):
        return self.backbone(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("valid_loss", loss, sync_dist=True)

    def on_validation_epoch_end(self):
        if self.trainer.is_global_zero:
            torch.save(self.backbone.state_dict(), os.path.join(self.trainer.default_root_dir, "backbone.pt"))
        self.print_summary()

    @rank_zero_only
    def print_summary(self):
        rank_zero_info(f"epoch {self.current_epoch} done")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class MNISTDataModule(L.LightningDataModule):
    def __init__(self, data_dir: str = "./data", batch_size: int = 32, workers: int = 4) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.workers = workers

    def prepare_data(self):
        MNIST(self.data_dir, train=True, download=True)

    def setup(self, stage: str):
        full = MNIST(self.data_dir, train=True, transform=transforms.ToTensor())
        self.train_set, self.val_set = random_split(full, [55000, 5000])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, num_workers=self.workers)  # expect: KDP507 KDP508

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=self.workers,
                          persistent_workers=self.workers > 0, pin_memory=True)


def cli_main():
    model = LitClassifier()
    dm = MNISTDataModule()
    trainer = L.Trainer(accelerator="cuda", devices=4, strategy="ddp", max_epochs=5,
                        callbacks=[ModelCheckpoint(monitor="valid_loss")])
    trainer.fit(model, datamodule=dm)
    trainer.save_checkpoint("final.ckpt")
    if trainer.is_global_zero:
        print("best:", trainer.checkpoint_callback.best_model_path)


if __name__ == "__main__":
    cli_main()
