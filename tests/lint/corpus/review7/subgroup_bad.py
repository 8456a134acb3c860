# Issue-7 review (first-time user, written without reading tests/lint): subgroup_bad.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import datetime

import torch
import torch.distributed as dist


def run():
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=10))
    rank = dist.get_rank()
    ws = dist.get_world_size()
    evens = list(range(0, ws, 2))
    g = dist.new_group(evens)
    if rank < ws // 2:
        dist.all_reduce(torch.ones(1).cuda(), group=g)  # expect: KDP501
    if rank in evens:
        dist.all_reduce(torch.ones(1).cuda(), group=g)
    if rank == 0:
        dist.all_gather_into_tensor(torch.empty(ws).cuda(), torch.ones(1).cuda())  # expect: KDP501
    else:
        dist.barrier()  # expect: KDP503
    t = torch.ones(1).cuda()
    dist.all_reduce(t)
    if t.item() > 0:
        dist.barrier()
