"""A tiny Accelerate loop on CPU/gloo under torchrun (nothing downloaded).
ZC_STALL=1: rank ZC_RANK sleeps after optimizer step ZC_AT."""

import os
import tempfile
import time

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

from k8sddp.integrations.accelerate import guard_accelerator

AT, WHO = int(os.environ.get("ZC_AT", "6")), int(os.environ.get("ZC_RANK", "1"))

acc = guard_accelerator(Accelerator(cpu=True, gradient_accumulation_steps=2))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(96, 8)), batch_size=4)
model, opt, loader = acc.prepare(model, opt, loader)
steps = 0
for (x,) in loader:
    with acc.accumulate(model):
        acc.backward(model(x).pow(2).mean())
        opt.step()
        opt.zero_grad()
    if acc.sync_gradients:
        steps += 1
        if os.environ.get("ZC_STALL") == "1" and steps == AT and acc.process_index == WHO:
            time.sleep(3600)  # stalled after an optimizer step
acc.save_state(tempfile.mkdtemp())
acc.wait_for_everyone()
print(f"rank {acc.process_index}: accelerate done ({steps} steps)", flush=True)
acc.end_training()
