# Issue-7 review (first-time user, written without reading tests/lint): accel_ok.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import argparse
import json
import os

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from datasets import load_dataset
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", default="out")
    parser.add_argument("--num_epochs", type=int, default=3)
    parser.add_argument("--with_tracking", action="store_true")
    args = parser.parse_args()

    accelerator = Accelerator(log_with="tensorboard" if args.with_tracking else None, project_dir=args.output_dir)
    set_seed(42)
    tokenizer = AutoTokenizer.from_pretrained("bert-base-cased")
    with accelerator.main_process_first():
        datasets = load_dataset("glue", "mrpc")
        tokenized = datasets.map(lambda ex: tokenizer(ex["sentence1"], ex["sentence2"], truncation=True), batched=True)

    train_dataloader = DataLoader(tokenized["train"], shuffle=True, batch_size=16, pin_memory=True)
    eval_dataloader = DataLoader(tokenized["validation"], shuffle=False, batch_size=32, pin_memory=True)
    model = AutoModelForSequenceClassification.from_pretrained("bert-base-cased")
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    lr_scheduler = get_linear_schedule_with_warmup(optimizer, 100, 1000)
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    if args.with_tracking:
        accelerator.init_trackers("glue_no_trainer", vars(args))

    best = 0.0
    for epoch in range(args.num_epochs):
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        correct = 0
        total = 0
        for batch in eval_dataloader:
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            correct += (predictions == references).sum().item()
            total += references.numel()
        acc = correct / total
        accelerator.print(f"epoch {epoch}: {acc}")
        if acc > best:
            best = acc
            accelerator.save_state(os.path.join(args.output_dir, "best"))
        if args.with_tracking:
            accelerator.log({"accuracy": acc}, step=epoch)

    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(args.output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save)
    if accelerator.is_main_process:
        tokenizer.save_pretrained(args.output_dir)
        with open(os.path.join(args.output_dir, "all_results.json"), "w") as f:
            json.dump({"eval_accuracy": best}, f)
    accelerator.end_training()


if __name__ == "__main__":
    main()
