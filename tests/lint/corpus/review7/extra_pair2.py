# Issue-7 review (first-time user, written without reading tests/lint): pair2.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import datetime
import torch.distributed as dist


def main():
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5))
    rank = dist.get_rank()
    if rank == 0:
        dist.barrier()
    else:
        dist.barrier()
