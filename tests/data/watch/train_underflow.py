"""fp16 autocast without a GradScaler, for AMP105's flushed share (tests/test_watch_underflow.py).

    python train_underflow.py FACTOR    # the loss is multiplied by FACTOR: 1e-6 makes its gradients underflow fp16
"""
import sys

import torch
from torch import nn


def main(factor):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randn(32, 16)
        y = x.sum(dim=1, keepdim=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x).float(), y) * factor
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(step, loss.item().hex(), model[0].weight.sum().item().hex())
    print("done")


if __name__ == "__main__":
    main(float(sys.argv[1]))
