"""A training loop on the DeepSpeed STAND-IN (deepspeed_standin/, not DeepSpeed): the engine's backward and
step, 2 micro-batches per optimizer step, fp16 loss scale 2**4 with minimum 1.

    python train_deepspeed_standin.py spikes|abort STEPS

spikes: the batch is inf on optimizer steps 3 and 4 (two skipped steps, the scale 16 -> 4);
abort: inf from optimizer step 3 on, until the scaler raises at its minimum scale.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "deepspeed_standin"))

import deepspeed  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402


def main():
    mode, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    config = {"gradient_accumulation_steps": 2, "fp16": {"enabled": True, "initial_scale_power": 4, "min_loss_scale": 1}}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1e-3), config=config)
    gen = torch.Generator().manual_seed(1)
    for micro in range(2 * steps):
        step = micro // 2 + 1
        x = torch.randn(4, 8, generator=gen)
        if step in (3, 4) or (mode == "abort" and step >= 3):
            x[0, 0] = float("inf")
        loss = engine(x).pow(2).mean()
        engine.backward(loss)
        engine.step()
    print("done", engine.global_steps, engine.skipped_steps, engine.optimizer.loss_scaler.cur_scale)


if __name__ == "__main__":
    main()
