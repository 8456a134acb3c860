# Issue-7 review (first-time user, written without reading tests/lint): wrappers_ok.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
"""Common wrappers used without their sources."""
import datetime
import os

import torch
import torch.distributed as dist
from accelerate import Accelerator
from lightning.pytorch.utilities import rank_zero_only
from utils.torch_utils import torch_distributed_zero_first
from utils.general import save_on_master, reduce_dict, synchronize

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
RANK = int(os.getenv("RANK", -1))


@rank_zero_only
def dump_config(cfg, path):
    with open(path, "w") as f:
        f.write(str(cfg))


def build(data_path, cfg):
    dist.init_process_group("nccl", timeout=datetime.timedelta(hours=1))
    accelerator = Accelerator()
    with torch_distributed_zero_first(LOCAL_RANK):
        data = torch.load(data_path)
    with accelerator.main_process_first():
        tokenized = [x * 2 for x in data]
    dump_config(cfg, "/ckpt/config.txt")
    model = torch.nn.Linear(4, 4).cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[LOCAL_RANK])
    for step in range(100):
        out = model(torch.randn(2, 4).cuda())
        loss_dict = {"l": out.sum()}
        reduced = reduce_dict(loss_dict)
        out.sum().backward()
        if RANK in (-1, 0):
            print({k: v.item() for k, v in reduced.items()})
        save_on_master(model.state_dict(), "/ckpt/model.pt")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        accelerator.save(model.state_dict(), "/ckpt/final.pt")
    synchronize()
    return tokenized
