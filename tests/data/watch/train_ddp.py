"""A tiny DDP run for torchrun on CPU (gloo): fp16 autocast + GradScaler("cpu"); prints "done" per rank."""
import sys

import torch
import torch.distributed as dist
from torch import nn


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    gen = torch.Generator().manual_seed(rank)
    for step in range(6):
        x = torch.randn(4, 8, generator=gen)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    dist.barrier()  # no rank tears the group down while another still uses it (gloo then aborts, ~1 run in 10)
    dist.destroy_process_group()
    sys.stdout.write(f"done {rank}\n")  # one write: two ranks share the pipe, print() writes word by word


if __name__ == "__main__":
    main()
