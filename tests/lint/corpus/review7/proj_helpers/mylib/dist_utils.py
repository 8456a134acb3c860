# Issue-7 review (first-time user, written without reading tests/lint): dist_utils.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import torch
import torch.distributed as dist


def is_master():
    return dist.get_rank() == 0


def sync_metrics(t):
    dist.all_reduce(t)
    return t / dist.get_world_size()


def write_ckpt(state, path):
    torch.save(state, path)
