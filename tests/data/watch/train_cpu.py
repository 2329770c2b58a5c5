"""A small CPU fp16-autocast training run for tests/test_watch_*.py.

    python train_cpu.py MODE [STEPS]

MODE picks what goes wrong (see MODES). Prints each step's loss as a hex
float so runs can be compared bit for bit, and "done" at the end.
"""
import sys

import torch
from torch import nn

MODES = ("healthy", "collapse", "clip_scaled", "bypass", "noscaler", "half", "save", "noupdate", "accumulate", "forward_overflow", "settling")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 64)
        self.act = nn.ReLU()
        self.hidden = nn.Linear(64, 64)
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(self.act(self.hidden(self.act(self.inp(x)))))


def batch(step, gen):
    x = torch.randn(32, 16, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    return x, y


def main(mode, steps):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = Net()
    if mode == "half":
        model = model.half()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    # "settling": the default 65536 start, which overflows for a few steps until the scale fits
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** (16 if mode == "settling" else 10))
    for step in range(steps):
        x, y = batch(step, gen)
        if mode == "collapse" and step >= 10:
            x = x * 3e3  # from step 10 on, the scaled gradients overflow fp16
        if mode == "forward_overflow" and step >= 10:
            x = x * 3e4  # from step 10 on, `inp`'s output is past fp16's range
        if mode == "half":
            loss = nn.functional.mse_loss(model(x.half()).float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(step, loss.float().item().hex())
            continue
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x).float(), y)
        if mode == "noscaler":
            loss.backward()
            opt.step()
        elif mode == "bypass":
            scaler.scale(loss).backward()
            opt.step()  # bypasses the scaler
        elif mode == "accumulate":
            scaler.scale(loss).backward()
            if step % 2 == 0:
                scaler.unscale_(opt)  # on the first micro-batch: the second one adds scaled gradients
            else:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
        else:
            scaler.scale(loss).backward()
            if mode == "clip_scaled":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            else:
                scaler.unscale_(opt)
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if mode == "healthy":
                    print("norm", step, norm.item().hex())
            scaler.step(opt)
            if mode == "noupdate":
                scaler.step(opt)
            scaler.update()
        opt.zero_grad()
        print(step, loss.item().hex())
    if mode == "save":
        torch.save({"optimizer": opt.state_dict()}, "optimizer.pt")
        torch.save(model.half().state_dict(), "model_fp16.pt")
    print("done")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30)
