#!/usr/bin/env python3
"""The guard's per-step cost on a small model, side by side with the unwatched run (run by hand; not a test).

    nice -n 10 python benchmarks/watch_overhead.py                # CPU, fp16 autocast + GradScaler("cpu")
    python benchmarks/watch_overhead.py --device cuda --steps 300 # a GPU, when there is one

One process, one model: blocks of --steps optimizer steps alternate between
unwatched and watched (the guard installed into a temporary DIR, then
removed), --rounds times each, after a warm-up. Each step is a full
iteration (forward under autocast, scaled backward, unscale_, clip, step,
update, zero_grad) timed in this process's CPU time on CPU (one torch thread: a
shared machine's scheduling noise would otherwise swamp the difference) and
with perf_counter after a synchronize on CUDA. Prints
the median step time of each side and the overhead, the fastest step of each
side, the median of the per-round overheads (each round's watched block against
the unwatched block just before it: drift in the machine's load cancels), plus
the events.jsonl size per step. The issue's budget is under 5%.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from amplint.watch import guard  # noqa: E402


def block(model, opt, scaler, x, y, steps, device):
    times = []
    clock = time.perf_counter if device == "cuda" else time.process_time
    for _ in range(steps):
        t0 = clock()
        with torch.autocast(device, dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(clock() - t0)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    torch.manual_seed(0)
    w = args.width
    model = nn.Sequential(nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 1)).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(args.device, init_scale=1024.0)
    x = torch.randn(args.batch, w, device=args.device)
    y = torch.randn(args.batch, 1, device=args.device)
    block(model, opt, scaler, x, y, 50, args.device)  # warm-up
    plain, watched, paired = [], [], []
    out = tempfile.mkdtemp(prefix="amplint-bench-")
    for _ in range(args.rounds):
        pb = block(model, opt, scaler, x, y, args.steps, args.device)
        g = guard.install(out)
        wb = block(model, opt, scaler, x, y, args.steps, args.device)
        guard.uninstall()
        plain += pb
        watched += wb
        paired.append(statistics.median(wb) / statistics.median(pb) - 1)
    mp, mw = statistics.median(plain), statistics.median(watched)
    size = os.path.getsize(os.path.join(out, "events.jsonl"))
    print(f"device {args.device}, width {w}, batch {args.batch}, {args.rounds} x {args.steps} steps per side")
    print(f"median step: unwatched {mp * 1e3:.3f} ms, watched {mw * 1e3:.3f} ms, overhead {100 * (mw / mp - 1):+.1f}%")
    lp, lw = min(plain), min(watched)
    print(f"fastest step: unwatched {lp * 1e3:.3f} ms, watched {lw * 1e3:.3f} ms, overhead {100 * (lw / lp - 1):+.1f}% "
          "(less sensitive to a busy machine than the medians)")
    print(f"per round (median watched / median unwatched of the same round): median {100 * statistics.median(paired):+.1f}%, "
          f"rounds {' '.join(f'{100 * r:+.1f}%' for r in paired)}")
    print(f"events.jsonl: {size / len(watched):.0f} bytes per step")
    del g
    return 0


if __name__ == "__main__":
    sys.exit(main())
