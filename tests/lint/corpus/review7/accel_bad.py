# Issue-7 review (first-time user, written without reading tests/lint): accel_bad.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
import os

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification


def main(train_ds, eval_ds, output_dir="out"):
    accelerator = Accelerator()
    train_dataloader = DataLoader(train_ds, shuffle=True, batch_size=16, pin_memory=True)
    model = AutoModelForSequenceClassification.from_pretrained("bert-base-cased")
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)

    for epoch in range(3):
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            if torch.isnan(loss):
                continue  # expect: KDP502
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.is_main_process:
            accelerator.save_state(os.path.join(output_dir, f"epoch_{epoch}"))  # expect: KDP501
            preds = accelerator.gather(outputs.logits)  # expect: KDP501
            print(preds.shape)

    with open(os.path.join(output_dir, "done.txt"), "w") as f:  # expect: KDP504
        f.write("ok")
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(output_dir)  # expect: KDP504
    if accelerator.is_local_main_process:
        torch.save(unwrapped.state_dict(), os.path.join(output_dir, "model.pt"))  # expect: KDP504
