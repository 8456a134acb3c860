"""llama-recipes finetuning shape (meta-llama/llama-recipes): FSDP, torchrun env, rank-0 saving."""
import os
import time
from contextlib import nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.optim as optim
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.optim.lr_scheduler import StepLR
from tqdm import tqdm
from transformers import LlamaForCausalLM


def setup():
    dist.init_process_group("nccl", timeout=timedelta(minutes=60))


def clear_gpu_cache(rank=None):
    if rank == 0:
        print("Clearing GPU cache for all ranks")
    torch.cuda.empty_cache()


def save_model_checkpoint(model, rank, cfg, epoch=1):
    fullstate_save_policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, fullstate_save_policy):
        cpu_state = model.state_dict()
        print(f"saving process: rank {rank}  done w model state_dict\n")
    if rank == 0:
        print("--> saving model ...")
        folder_name = cfg.dist_checkpoint_root_folder + "/" + cfg.dist_checkpoint_folder + "-" + cfg.model_name
        save_dir = os.path.join(os.getcwd(), folder_name)
        os.makedirs(save_dir, exist_ok=True)
        save_full_path = os.path.join(save_dir, cfg.model_name + "-" + str(epoch) + ".pt")
        torch.save(cpu_state, save_full_path)
        print(f"model checkpoint saved for epoch {epoch} at {save_full_path}\n")


def evaluation(model, eval_dataloader, local_rank):
    model.eval()
    eval_loss = 0.0
    for step, batch in enumerate(tqdm(eval_dataloader, colour="green", desc="evaluating Epoch", dynamic_ncols=True)):
        for key in batch.keys():
            batch[key] = batch[key].to(local_rank)
        with torch.no_grad():
            outputs = model(**batch)
            loss = outputs.loss
            eval_loss += loss.detach().float()
    eval_epoch_loss = eval_loss / len(eval_dataloader)
    eval_ppl = torch.exp(eval_epoch_loss)
    if local_rank == 0:
        print(f" {eval_ppl=} {eval_epoch_loss=}")
    return eval_ppl, eval_epoch_loss


def train(model, train_dataloader, eval_dataloader, optimizer, lr_scheduler, gradient_accumulation_steps, train_config,
          local_rank, rank):
    autocast = torch.cuda.amp.autocast if train_config.use_fp16 else nullcontext
    best_val_loss = float("inf")
    for epoch in range(train_config.num_epochs):
        epoch_start_time = time.perf_counter()
        model.train()
        total_loss = 0.0
        total_length = len(train_dataloader) // gradient_accumulation_steps
        pbar = tqdm(colour="blue", desc=f"Training Epoch: {epoch+1}", total=total_length, dynamic_ncols=True)
        for step, batch in enumerate(train_dataloader):
            for key in batch.keys():
                batch[key] = batch[key].to(local_rank)
            with autocast():
                loss = model(**batch).loss
            loss = loss / gradient_accumulation_steps
            total_loss += loss.detach().float()
            loss.backward()
            if (step + 1) % gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                optimizer.step()
                optimizer.zero_grad()
                pbar.update(1)
            pbar.set_description(f"Training Epoch: {epoch+1}/{train_config.num_epochs}, loss: {loss.detach().float()})")
        pbar.close()
        epoch_end_time = time.perf_counter() - epoch_start_time
        dist.all_reduce(total_loss, op=dist.ReduceOp.SUM)
        train_epoch_loss = total_loss / len(train_dataloader)
        lr_scheduler.step()
        if train_config.run_validation:
            eval_ppl, eval_epoch_loss = evaluation(model, eval_dataloader, local_rank)
            if train_config.save_model and eval_epoch_loss < best_val_loss:
                dist.barrier()  # expect: KDP503
                save_model_checkpoint(model, rank, train_config, epoch=epoch)  # expect: KDP501
                dist.barrier()  # expect: KDP503
            if eval_epoch_loss < best_val_loss:
                best_val_loss = eval_epoch_loss
                if rank == 0:
                    print(f"best eval loss on epoch {epoch+1} is {best_val_loss}")
        if rank == 0:
            print(f"Epoch {epoch+1}: train_epoch_loss={train_epoch_loss:.4f}, epoch time {epoch_end_time}s")
    return best_val_loss


def main(train_config, train_dataloader, eval_dataloader):
    setup()
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(local_rank)
    clear_gpu_cache(local_rank)
    model = LlamaForCausalLM.from_pretrained(train_config.model_name, use_cache=False)
    model = FSDP(model, device_id=torch.cuda.current_device(), limit_all_gathers=True, sync_module_states=True)
    optimizer = optim.AdamW(model.parameters(), lr=train_config.lr, weight_decay=0.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=train_config.gamma)
    train(model, train_dataloader, eval_dataloader, optimizer, scheduler, train_config.gradient_accumulation_steps,
          train_config, local_rank, rank)
