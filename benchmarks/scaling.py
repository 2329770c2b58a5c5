#!/usr/bin/env python3
"""How amplint's per-file cost grows with the file (run by hand; not a test).

    python benchmarks/scaling.py                       # 1k..64k AMP-dense lines + the 10 MB file
    python benchmarks/scaling.py --sizes 2500 20000 --runs 3 --no-big
    python benchmarks/scaling.py --shape function      # the dense lines inside one function
    python benchmarks/scaling.py --shape accum         # gradient-accumulation steps in one loop

Each size is one generated file, linted by a fresh `amplint --no-cache --jobs 1
--file-timeout 0` process (the way a user runs it, without the time budget; `--file-timeout S`
measures with one: issue 24's 140,000-line file with 30 s), timed
as a whole: wall time, CPU time (user + system) and peak resident set
(`resource.getrusage(RUSAGE_CHILDREN)` of a wrapper process that runs only it: the largest
process of the run, a forked child included), and the peak of the amplint process alone (its
`VmHWM` at exit: what the per-file bounds, which hold only in the children, do not cover).
`--fix` runs `amplint --fix --unsafe-fixes` on a fresh copy of the file each time instead
(the dense shapes' fixes are unsafe; a plain run checks them as that would apply them). On a
shared machine the wall time swings with the neighbours' load; the CPU time much less,
so the growth exponent is fitted on CPU time (and printed for wall time too).

- AMP-dense: `s{i} = scores.masked_fill(scores > k, -1e9)` on an fp16 tensor, every
  line an AMP301 finding (the issue's worst case), at module level (`--shape module`)
  or in the body of one function (`--shape function`), or both (`--shape both`).
- accum (`--shape accum`, not part of `both`): training steps in one loop of one
  function, 8 lines each (autocast forward, scaled backward, `unscale_` on every
  micro-batch, the step under `if (i + 1) % accum == 0:`): an AMP104 finding per step,
  and the shape whose guards, event pairs and step slices used to be quadratic.
- big: about 10 MB of plain model code (classes with methods doing arithmetic, no AMP
  word) and a single `masked_fill(..., -1e9)` under fp16 autocast near the end: the
  file passes the gate, so its cost is the parse, the model and the rules on 10 MB.

It prints one line per size (median wall seconds, min, peak RSS MB, findings) and the
growth exponent k of time ~ lines^k fitted between consecutive sizes and over all of
them (1: linear; 2: quadratic). --json writes the raw numbers.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SIZES = (1000, 2500, 5000, 10000, 20000, 40000, 64000)

# runs a command, prints {"wall": s, "maxrss_kb": peak of the largest process, "own_kb": the
# command's own peak (written by `_AMPLINT` to $AMPLINT_SCALING_PEAK), "rc": n, "lines": stdout lines}
_WRAPPER = r"""
import json, os, resource, subprocess, sys, tempfile, time
with tempfile.NamedTemporaryFile() as peak:
    t = time.perf_counter()
    p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "AMPLINT_SCALING_PEAK": peak.name})
    wall = time.perf_counter() - t
    own = peak.read().strip()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss, "own_kb": int(own or 0), "rc": p.returncode, "lines": p.stdout.count(b"\n")}))
"""

# the console script's entry point (as the installed `amplint` runs it), writing the process's own
# peak resident set at exit (forked children leave with os._exit and write nothing)
_AMPLINT = r"""
import atexit, os, sys

def _own_peak():
    with open("/proc/self/status") as status, open(os.environ["AMPLINT_SCALING_PEAK"], "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

atexit.register(_own_peak)
from amplint._start import main
sys.exit(main())
"""


_ACCUM_STEP = (
    "        with torch.autocast('cuda', dtype=torch.float16):\n"
    "            loss = model(x) / accum\n"
    "        scaler.scale(loss).backward()\n"
    "        scaler.unscale_(opt)\n"
    "        if (i + 1) % accum == 0:\n"
    "            scaler.step(opt)\n"
    "            scaler.update()\n"
    "            opt.zero_grad()\n"
)


def accum_source(lines: int) -> str:
    """About `lines` lines of gradient-accumulation steps in one loop (8 lines a step)."""
    head = (
        "import torch\n\nscaler = torch.amp.GradScaler('cuda')\n\n\n"
        "def train(model, opt, loader, accum):\n    for i, x in enumerate(loader):\n"
    )
    return head + _ACCUM_STEP * max(1, lines // 8)


def dense_source(lines: int, shape: str) -> str:
    """`lines` AMP301 sites on an fp16 tensor, at module level or inside one function;
    `shape` "accum": `accum_source`."""
    if shape == "accum":
        return accum_source(lines)
    head = ["import torch", "", "k = 0.5"]
    if shape == "module":
        head.append("scores = torch.randn(8, 8, dtype=torch.float16)")
        body = [f"s{i} = scores.masked_fill(scores > k, -1e9)" for i in range(lines)]
        return "\n".join(head + body) + "\n"
    head.append("def attend(q, kt):")
    head.append("    scores = (q @ kt).half()")
    body = [f"    s{i} = scores.masked_fill(scores > k, -1e9)" for i in range(lines)]
    return "\n".join(head + body + ["    return scores"]) + "\n"


_PLAIN_CLASS = '''
class Block{n}(nn.Module):
    """Block {n}: a residual MLP with a learned scale."""

    def __init__(self, dim, hidden={h}):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.scale = nn.Parameter(torch.ones(dim) * {s})

    def forward(self, x):
        y = self.fc2(torch.relu(self.fc1(x)))
        if self.training:
            y = y * {s} + x.mean(dim=-1, keepdim=True) / {h}
        for i in range(3):
            x = x + y[..., i:i + 1] * self.scale
        return x
'''

_FINDING = '''
def attend(q, k, mask):
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-1, -2)
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores
'''


def big_source(target_bytes: int) -> str:
    """About `target_bytes` of plain model code with one AMP301 finding near the end."""
    parts: List[str] = ["import torch", "from torch import nn", ""]
    size = 0
    n = 0
    while size < target_bytes:
        chunk = _PLAIN_CLASS.format(n=n, h=64 + n % 512, s=round(0.5 + (n % 7) / 10, 2))
        parts.append(chunk)
        size += len(chunk)
        n += 1
    parts.insert(len(parts) - 3, _FINDING)
    return "\n".join(parts)


def measure(path: str, runs: int, file_timeout: float = 0, fix: bool = False) -> Dict[str, float]:
    """The medians of `runs` fresh processes on `path` (with `fix`: each on a fresh copy of it)."""
    target = path + ".fixed.py" if fix else path
    cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-c", _AMPLINT, "--no-cache", "--jobs", "1", "--file-timeout", f"{file_timeout:g}", target]
    if fix:
        cmd[-1:-1] = ["--fix", "--unsafe-fixes"]
    walls: List[float] = []
    cpus: List[float] = []
    rss: List[float] = []
    own: List[float] = []
    found = 0
    for _ in range(runs):
        if fix:
            shutil.copyfile(path, target)
        out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, cwd=os.path.dirname(path)).stdout
        row = json.loads(out)
        if row["rc"] not in (0, 1):
            raise SystemExit(f"amplint exited {row['rc']} on {target}")
        walls.append(row["wall"])
        cpus.append(row["cpu"])
        rss.append(row["maxrss_kb"] / 1024)
        own.append(row["own_kb"] / 1024)
        found = row["lines"]
    return {"median": statistics.median(walls), "min": min(walls), "cpu": statistics.median(cpus), "rss_mb": max(rss), "own_mb": max(own), "output_lines": found}


def exponent(n1: float, t1: float, n2: float, t2: float) -> float:
    return math.log(t2 / t1) / math.log(n2 / n1)


def fit(points: Sequence[Sequence[float]]) -> float:
    """Least-squares slope of log(time) against log(lines)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    ap.add_argument("--shape", choices=("module", "function", "both", "accum"), default="both")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--big-mb", type=float, default=10.0)
    ap.add_argument("--no-big", action="store_true", help="skip the 10 MB file")
    ap.add_argument("--max-seconds", type=float, default=300.0,
                    help="stop growing a shape once one size takes longer than this")
    ap.add_argument("--file-timeout", type=float, default=0.0,
                    help="the per-file budget each run gets (default 0: none; files over 512 KB keep their memory bound)")
    ap.add_argument("--fix", action="store_true", help="run `--fix --unsafe-fixes` on a fresh copy of each file")
    ap.add_argument("--json", help="write the raw numbers here")
    args = ap.parse_args(argv)
    env_note = f"python {sys.version.split()[0]}, {os.cpu_count()} cores"
    mode = " --fix --unsafe-fixes" if args.fix else ""
    print(f"# amplint scaling ({env_note}); median of {args.runs} runs, --no-cache --jobs 1 --file-timeout {args.file_timeout:g}{mode}")
    results: Dict[str, list] = {}
    shapes = ("module", "function") if args.shape == "both" else (args.shape,)
    with tempfile.TemporaryDirectory(prefix="amplint-scaling-") as tmp:
        for shape in shapes:
            rows = []
            print(f"\n## {'accumulation steps in one loop' if shape == 'accum' else f'AMP-dense lines, {shape} level'}\n")
            print("| lines | median wall (s) | min wall (s) | median CPU (s) | peak RSS (MB) | amplint process's own peak (MB) | output lines | k (CPU) vs previous |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|")
            for n in args.sizes:
                path = os.path.join(tmp, f"dense_{shape}_{n}.py")
                with open(path, "w") as f:
                    f.write(dense_source(n, shape))
                m = measure(path, args.runs, args.file_timeout, args.fix)
                k = exponent(rows[-1]["lines"], rows[-1]["cpu"], n, m["cpu"]) if rows else None
                rows.append({"lines": n, **m})
                print(f"| {n} | {m['median']:.2f} | {m['min']:.2f} | {m['cpu']:.2f} | {m['rss_mb']:.0f} | {m['own_mb']:.0f} | {m['output_lines']} | "
                      f"{'' if k is None else f'{k:.2f}'} |", flush=True)
                if m["median"] > args.max_seconds:
                    print(f"(stopped: {n} lines took over {args.max_seconds:.0f} s)")
                    break
            if len(rows) > 1:
                print(f"\ngrowth exponent over all sizes: {fit([(r['lines'], r['cpu']) for r in rows]):.2f} (CPU), "
                      f"{fit([(r['lines'], r['median']) for r in rows]):.2f} (wall)")
                by = {r["lines"]: r for r in rows}
                if 2500 in by and 20000 in by:
                    print(f"20,000 / 2,500 lines: {by[20000]['cpu'] / by[2500]['cpu']:.1f}x the CPU time, "
                          f"{by[20000]['median'] / by[2500]['median']:.1f}x the wall time (target: within 10x)")
            results[shape] = rows
        if not args.no_big:
            path = os.path.join(tmp, "big.py")
            with open(path, "w") as f:
                f.write(big_source(int(args.big_mb * 1024 * 1024)))
            size_mb = os.path.getsize(path) / 1024 / 1024
            m = measure(path, args.runs, args.file_timeout, args.fix)
            print(f"\n## {size_mb:.1f} MB plain file with one finding\n")
            print(f"median {m['median']:.2f} s, min {m['min']:.2f} s, CPU {m['cpu']:.2f} s, peak RSS {m['rss_mb']:.0f} MB "
                  f"(amplint's own {m['own_mb']:.0f} MB), "
                  f"{m['output_lines']} output lines (targets: < 30 s, < 1536 MB)")
            results["big"] = [{"mb": size_mb, **m}]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
