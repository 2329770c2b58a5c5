"""A tiny Hugging Face Trainer run on CPU (no download: a plain nn.Module returning {"loss": ...}).

    python train_hf.py [callback]   # `callback`: amplint.watch.HFCallback instead of `amplint run`
"""
import os
import sys

import torch
from torch import nn
from transformers import Trainer, TrainingArguments


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x, labels=None):
        out = self.net(x)
        loss = nn.functional.mse_loss(out.float(), labels)
        return {"loss": loss, "logits": out}


class Data(torch.utils.data.Dataset):
    def __init__(self, n=64):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.x[i].sum().reshape(1)}


def main(out_dir):
    torch.manual_seed(0)
    callbacks = []
    if sys.argv[1:2] == ["callback"]:
        import amplint

        callbacks.append(amplint.watch.HFCallback(os.environ["REPORT_DIR"]))
    args = TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=8, num_train_epochs=1, learning_rate=1e-3,
        use_cpu=True, bf16=True, report_to=[], save_strategy="no", logging_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0,
    )
    Trainer(model=Regressor(), args=args, train_dataset=Data(), callbacks=callbacks).train()
    print("done")


if __name__ == "__main__":
    main(os.environ.get("HF_OUT", "hf-out"))
