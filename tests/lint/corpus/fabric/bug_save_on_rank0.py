"""Lightning Fabric training loop shape (Lightning-AI fabric examples)."""
import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main(epochs: int = 5, ckpt: str = "checkpoint.ckpt") -> None:
    fabric = L.Fabric(accelerator="cuda", devices=4, strategy="ddp")
    fabric.launch()
    fabric.seed_everything(42)
    dataset = TensorDataset(torch.randn(512, 16), torch.randint(0, 2, (512,)))
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2, persistent_workers=True,
                        pin_memory=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(loader)
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            fabric.backward(loss)
            optimizer.step()
        total = fabric.all_reduce(loss.detach(), reduce_op="mean")
        if fabric.global_rank == 0:
            print(f"epoch {epoch}: loss {total.item():.4f}")
        if total.item() < 0.01:
            break
        state = {"model": model, "optimizer": optimizer, "epoch": epoch}
        if fabric.is_global_zero:
            fabric.save(ckpt, state)  # expect: KDP501
    fabric.barrier()
    if fabric.is_global_zero:
        print("done")


if __name__ == "__main__":
    main()
