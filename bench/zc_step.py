"""The bench's ordinary DDP script (no k8sddp import): a fixed ~20 ms step (a small forward /
backward / all-reduce, then sleep to the step's end). Prints LOOP_S_PER_STEP; ZC_STALL_AT=N:
rank 1 prints STALL_AT <wall time> and sleeps at step N."""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEP_S = 0.02
steps = int(os.environ.get("ZC_STEPS", "300"))
stall_at = int(os.environ.get("ZC_STALL_AT", "-1"))
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
for _ in range(5):  # warm-up
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
dist.barrier()
t0 = time.perf_counter()
for step in range(steps):
    start = time.perf_counter()
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    if step == stall_at and rank == 1:
        print("STALL_AT", time.time(), flush=True)
        time.sleep(3600)
    time.sleep(max(0.0, start + STEP_S - time.perf_counter()))
print("LOOP_S_PER_STEP", (time.perf_counter() - t0) / steps, flush=True)
dist.destroy_process_group()
