"""A tiny transformers.Trainer run on CPU/gloo under torchrun with k8sddp's callback (a local
torch model: nothing downloaded). ZC_STALL=1: rank ZC_RANK sleeps in forward at call ZC_AT."""

import os
import sys
import tempfile
import time

import torch
from transformers import Trainer, TrainingArguments

from k8sddp.integrations.transformers import guard_trainer

AT, WHO = int(os.environ.get("ZC_AT", "6")), int(os.environ.get("ZC_RANK", "1"))
RANK = int(os.environ["RANK"])


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.calls = 0

    def forward(self, x, labels=None):
        self.calls += 1
        if os.environ.get("ZC_STALL") == "1" and self.calls == AT and RANK == WHO and self.training:
            time.sleep(3600)  # stalled in forward
        out = self.net(x)
        return {"loss": (out.squeeze(-1) - labels).pow(2).mean(), "logits": out}


class Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(8, generator=g), "labels": torch.randn((), generator=g)}


args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4,
                         per_device_eval_batch_size=4, num_train_epochs=1, eval_strategy="steps",
                         eval_steps=4, save_strategy="steps", save_steps=6, report_to=[],
                         use_cpu=True, ddp_backend="gloo", logging_strategy="no",
                         dataloader_num_workers=0, gradient_accumulation_steps=2,
                         disable_tqdm=True)
trainer = guard_trainer(Trainer(model=Tiny(), args=args, train_dataset=Data(), eval_dataset=Data()))
trainer.train()
print(f"rank {RANK}: transformers done", file=sys.stderr, flush=True)
