"""An ordinary DDP training script with no k8sddp import (zero-code mode's test subject).

ZC_MODE: ok | stall (ZC_RANK sleeps at step ZC_AT) | gil (ZC_RANK holds the GIL in one C call)
| amp (gradient accumulation over a DataLoader, then GradScaler-skipped steps; ZC_STALL=1 stalls
ZC_RANK among the skipped steps). ZC_STEP_S: seconds per step.
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

MODE = os.environ.get("ZC_MODE", "ok")
STEPS = int(os.environ.get("ZC_STEPS", "12"))
AT = int(os.environ.get("ZC_AT", "5"))
WHO = int(os.environ.get("ZC_RANK", "1"))
STEP_S = float(os.environ.get("ZC_STEP_S", "0.01"))

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def stall_here() -> None:
    time.sleep(3600)  # ZC-STALLED-LINE


if MODE in ("ok", "stall", "gil"):
    for step in range(STEPS):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == AT and rank == WHO:
            if MODE == "stall":
                stall_here()
            elif MODE == "gil":
                sum(range(10**11))  # ZC-GIL-LINE: holds the GIL inside one C call
        time.sleep(STEP_S)
elif MODE == "amp":
    budget = float(os.environ["K8SDDP_WATCHDOG_TIMEOUT_SECONDS"])
    # 1. gradient accumulation: 8 micro-batches per optimizer step, longer than the budget
    #    between two optimizer steps; each DataLoader fetch beats.
    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=4)
    micro = budget / 5
    opt.zero_grad()
    for i, (x,) in enumerate(loader):
        model(x).pow(2).mean().backward()
        time.sleep(micro)
        if (i + 1) % 8 == 0:
            opt.step()
            opt.zero_grad()
    # 2. GradScaler-skipped steps (inf loss: no optimizer step, no optimizer hook) for longer
    #    than the budget, tensors only (no DataLoader).
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    skipped = 0
    for step in range(int(2.5 * budget / micro)):
        loss = model(torch.randn(4, 8)).pow(2).mean() * float("inf")
        opt.zero_grad()
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skipped += scaler.get_scale() < before
        if os.environ.get("ZC_STALL") == "1" and step == 3 and rank == WHO:
            stall_here()
        time.sleep(micro)
    print(f"rank {rank}: skipped {skipped} steps", flush=True)
dist.destroy_process_group()
print(f"rank {rank}: done", flush=True)
