"""YOLOv5 train.py shape (ultralytics/yolov5): RANK/LOCAL_RANK globals, torch_distributed_zero_first,
EMA on the main process, tqdm only on the main process, smart_DDP from the project's utils."""
import math
import os
import time
from copy import deepcopy
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim import lr_scheduler
from tqdm import tqdm

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
RANK = int(os.getenv("RANK", -1))
WORLD_SIZE = int(os.getenv("WORLD_SIZE", 1))


class ModelEMA:
    def __init__(self, model, decay=0.9999):
        self.ema = deepcopy(model.module if hasattr(model, "module") else model).eval()
        self.updates = 0
        self.decay = lambda x: decay * (1 - math.exp(-x / 2000))

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        msd = (model.module if hasattr(model, "module") else model).state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v *= d
                v += (1 - d) * msd[k].detach()


def smart_DDP(model):
    return DDP(model, device_ids=[LOCAL_RANK], output_device=LOCAL_RANK)


def train(hyp, opt, device, dataset, val_fn):
    save_dir, epochs, batch_size = Path(opt.save_dir), opt.epochs, opt.batch_size
    w = save_dir / "weights"
    (w.parent if opt.evolve else w).mkdir(parents=True, exist_ok=True)
    last, best = w / "last.pt", w / "best.pt"
    cuda = device.type != "cpu"
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.SiLU(), nn.Flatten(), nn.LazyLinear(85)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=hyp["lr0"], momentum=hyp["momentum"], nesterov=True)
    lf = lambda x: (1 - x / epochs) * (1.0 - hyp["lrf"]) + hyp["lrf"]  # noqa: E731
    scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    ema = ModelEMA(model) if RANK in {-1, 0} else None
    sampler = None if RANK == -1 else torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True)
    train_loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size // WORLD_SIZE, sampler=sampler,
                                               shuffle=sampler is None, num_workers=8, pin_memory=True,
                                               persistent_workers=True)
    nb = len(train_loader)
    if cuda and RANK != -1:
        model = smart_DDP(model)
    best_fitness, start_epoch = 0.0, 0
    scaler = torch.cuda.amp.GradScaler(enabled=cuda)
    stopper, stop = None, False
    for epoch in range(start_epoch, epochs):
        model.train()
        if RANK != -1:
            train_loader.sampler.set_epoch(epoch)
        pbar = enumerate(train_loader)
        if RANK in {-1, 0}:
            pbar = tqdm(pbar, total=nb, bar_format="{l_bar}{bar:10}{r_bar}")
        optimizer.zero_grad()
        for i, (imgs, targets) in pbar:
            imgs = imgs.to(device, non_blocking=True).float() / 255
            with torch.cuda.amp.autocast(cuda):
                pred = model(imgs)
                loss = ((pred - targets.to(device)) ** 2).mean()
                if RANK != -1:
                    loss *= WORLD_SIZE
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            if ema:
                ema.update(model)
            if RANK in {-1, 0}:
                mem = f"{torch.cuda.memory_reserved() / 1e9 if torch.cuda.is_available() else 0:.3g}G"
                pbar.set_description(f"{epoch}/{epochs - 1} {mem} {loss.item():.4f}")
        scheduler.step()
        if RANK in {-1, 0}:
            final_epoch = (epoch + 1 == epochs)
            fi = val_fn(ema.ema)
            if fi > best_fitness:
                best_fitness = fi
            ckpt = {"epoch": epoch, "best_fitness": best_fitness, "ema": deepcopy(ema.ema).half(),
                    "date": datetime.now().isoformat()}
            torch.save(ckpt, last)
            if best_fitness == fi:
                torch.save(ckpt, best)
            del ckpt
            stop = final_epoch
        if stop:
            break  # expect: KDP502
    torch.cuda.empty_cache()
    return best_fitness


def main(opt, hyp, dataset, val_fn):
    if LOCAL_RANK != -1:
        torch.cuda.set_device(LOCAL_RANK)
        device = torch.device("cuda", LOCAL_RANK)
        dist.init_process_group(backend="nccl" if dist.is_nccl_available() else "gloo",
                                timeout=timedelta(seconds=10800))
    else:
        device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    train(hyp, opt, device, dataset, val_fn)
    if WORLD_SIZE > 1 and RANK == 0:
        print("Destroying process group... ")
        dist.destroy_process_group()
