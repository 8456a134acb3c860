"""DeepSpeed training script shape (microsoft/DeepSpeedExamples cifar / bing_bert style)."""
import argparse
import os

import deepspeed
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def add_argument():
    parser = argparse.ArgumentParser(description="CIFAR")
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--ckpt_dir", type=str, default="checkpoints")
    parser = deepspeed.add_config_arguments(parser)
    return parser.parse_args()


def main():
    args = add_argument()
    deepspeed.init_distributed()
    trainset = torch.utils.data.TensorDataset(torch.randn(1024, 32), torch.randint(0, 10, (1024,)))
    net = Net()
    parameters = filter(lambda p: p.requires_grad, net.parameters())
    model_engine, optimizer, _, _ = deepspeed.initialize(args=args, model=net, model_parameters=parameters)
    sampler = DistributedSampler(trainset)
    trainloader = DataLoader(trainset, batch_size=16, sampler=sampler, num_workers=2,
                             persistent_workers=True, pin_memory=True)
    local_device = torch.device("cuda", model_engine.local_rank)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        running_loss = 0.0
        for i, (inputs, labels) in enumerate(trainloader):
            inputs, labels = inputs.to(local_device), labels.to(local_device)
            outputs = model_engine(inputs)
            loss = F.cross_entropy(outputs, labels)
            model_engine.backward(loss)
            model_engine.step()
            running_loss += loss.item()
            if i % 100 == 99 and model_engine.global_rank == 0:
                print(f"[{epoch + 1}, {i + 1}] loss: {running_loss / 100:.3f}")
                running_loss = 0.0
        if model_engine.global_rank == 0:
            model_engine.save_checkpoint(args.ckpt_dir, tag=f"epoch{epoch}")  # expect: KDP501
    if model_engine.global_rank == 0:
        with open(os.path.join(args.ckpt_dir, "DONE"), "w") as fh:
            fh.write("ok")


if __name__ == "__main__":
    main()
