"""transformers legacy examples shape (run_glue.py before Trainer): --local_rank launcher."""
import argparse
import logging
import os

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler
from torch.utils.data.distributed import DistributedSampler
from torch.utils.tensorboard import SummaryWriter
from transformers import AutoModelForSequenceClassification, AutoTokenizer

logger = logging.getLogger(__name__)


def set_seed(args):
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)


def load_and_cache_examples(args, tokenizer, evaluate=False):
    if args.local_rank not in [-1, 0] and not evaluate:
        torch.distributed.barrier()  # only the first process builds the cache
    cached = os.path.join(args.data_dir, "cached_{}".format("dev" if evaluate else "train"))
    if os.path.exists(cached):
        features = torch.load(cached)
    else:
        features = torch.randn(100, 8)
        if args.local_rank in [-1, 0]:
            torch.save(features, "/tmp/" + os.path.basename(cached))
    if args.local_rank == 0 and not evaluate:
        torch.distributed.barrier()
    return torch.utils.data.TensorDataset(features)


def train(args, train_dataset, model):
    if args.local_rank in [-1, 0]:
        tb_writer = SummaryWriter(comment=f"_rank{torch.distributed.get_rank() if args.local_rank != -1 else 0}")
    train_sampler = RandomSampler(train_dataset) if args.local_rank == -1 else DistributedSampler(train_dataset)
    train_dataloader = DataLoader(train_dataset, sampler=train_sampler, batch_size=8, pin_memory=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    if args.local_rank != -1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[args.local_rank], output_device=args.local_rank, find_unused_parameters=True)
    global_step = 0
    for epoch in range(int(args.num_train_epochs)):
        if args.local_rank != -1:
            train_sampler.set_epoch(epoch)
        for step, batch in enumerate(train_dataloader):
            model.train()
            outputs = model(batch[0].to(args.device))
            loss = outputs[0].mean()
            loss.backward()
            optimizer.step()
            model.zero_grad()
            global_step += 1
            if args.local_rank in [-1, 0] and global_step % 50 == 0:
                tb_writer.add_scalar("loss", loss.item(), global_step)
    if args.local_rank in [-1, 0]:
        tb_writer.close()
    return global_step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--output_dir", default="out")
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--num_train_epochs", default=3.0, type=float)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    if args.local_rank == -1:
        args.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        torch.cuda.set_device(args.local_rank)
        args.device = torch.device("cuda", args.local_rank)
        torch.distributed.init_process_group(backend="nccl", timeout=__import__("datetime").timedelta(seconds=1800))
    set_seed(args)
    if args.local_rank not in [-1, 0]:
        torch.distributed.barrier()  # only the first process downloads model & vocab  # expect: KDP503
    tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
    model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
    model.to(args.device)
    train_dataset = load_and_cache_examples(args, tokenizer, evaluate=False)
    train(args, train_dataset, model)
    if args.local_rank == -1 or torch.distributed.get_rank() == 0:
        if not os.path.exists(args.output_dir):
            os.makedirs(args.output_dir)
        model_to_save = model.module if hasattr(model, "module") else model
        model_to_save.save_pretrained(args.output_dir)
        tokenizer.save_pretrained(args.output_dir)
        torch.save(args, os.path.join(args.output_dir, "training_args.bin"))


if __name__ == "__main__":
    main()
