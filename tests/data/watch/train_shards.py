"""Two CPU ranks (gloo) training one linear layer sharded by rows, the way FSDP1 shards a flat
parameter: the forward all-gathers the shards, backward reduce-scatters the gradient, and each rank's
optimizer steps its own shard. FSDP1 itself needs an accelerator (on CPU it raises), so this is a
stand-in for its sharding with torch.distributed's own collectives; the scalers are torch's.

    python -m torch.distributed.run --standalone --nproc_per_node=2 train_shards.py plain|sharded|fsdp2 [STEPS] [SPIKE]

fp16 autocast with `GradScaler("cpu", init_scale=1024)` (plain) or FSDP's `ShardedGradScaler`
(sharded); fsdp2: a real FSDP2 `fully_shard` linear layer (DTensor rows 4-7 on rank 1) with the plain
GradScaler, which FSDP2 needs. At step SPIKE (default 3) the loss weighs output row 6 by 100, so that row's fp16 gradient
(100 * 1024 > 65504) overflows; row 6 is in rank 1's shard, so only rank 1's gradients hold an inf.
Prints one line per rank: "done RANK SCALE SHARD_SUM".
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class _Gather(torch.autograd.Function):
    """all-gather the row shards forward; reduce-scatter (mean) the full gradient backward."""

    @staticmethod
    def forward(ctx, shard):
        world = dist.get_world_size()
        parts = [torch.empty_like(shard) for _ in range(world)]
        dist.all_gather(parts, shard.detach().contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):
        world = dist.get_world_size()
        out = torch.empty(grad.shape[0] // world, *grad.shape[1:], dtype=grad.dtype)
        dist.reduce_scatter(out, [c.contiguous() for c in grad.chunk(world)])
        return out / world


class ShardedLinear(nn.Module):
    def __init__(self, features):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        full = torch.randn(features, features, generator=torch.Generator().manual_seed(0)) / features ** 0.5
        self.shard = nn.Parameter(full.chunk(world)[rank].clone())

    def forward(self, x):
        return F.linear(x, _Gather.apply(self.shard))


def main():
    mode = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    spike = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "fsdp2":  # the real FSDP2: rows 4-7 of the weight are rank 1's local shard
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        model = nn.Linear(8, 8, bias=False)
        fully_shard(model)
    else:
        model = ShardedLinear(8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    if mode == "sharded":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        scaler = ShardedGradScaler("cpu", init_scale=1024.0)
    else:
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    gen = torch.Generator().manual_seed(rank)
    for step in range(1, steps + 1):
        x = torch.randn(4, 8, generator=gen)
        weight = torch.ones(8)
        if step == spike:
            weight[6] = 100.0
        with torch.autocast("cpu", dtype=torch.float16):
            loss = (model(x).float() * weight).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    local = sum(float(getattr(p, "to_local", lambda p=p: p)().detach().sum()) for p in model.parameters())
    sys.stdout.write(f"done {rank} {scaler.get_scale():g} {local:.6f}\n")
    dist.barrier()  # no rank tears the group down while another still uses it (gloo aborts then)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch 2.13's gloo can abort at interpreter teardown, after the group is destroyed ("terminate
    # called without an active exception", exit -6, about one run in five under load): run the exit
    # handlers (amplint run's report among them) and leave without the C++ teardown, so the exit
    # status says how the training went
    import atexit
    import os

    sys.stdout.flush()
    atexit._run_exitfuncs()
    os._exit(0)
