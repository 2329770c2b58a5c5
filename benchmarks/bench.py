#!/usr/bin/env python3
"""amplint against its peers, on the same files, in the same run (run by hand; not a test).

    python benchmarks/bench.py                 # set up (first time: downloads) and measure
    python benchmarks/bench.py --corpora timm --runs 3
    python benchmarks/bench.py --slow-peers all  # fixit and torchfix on every corpus (minutes each)
    python benchmarks/bench.py --corpora small fixture --runs 9 --slow-peers none   # issue 26's small targets
    python benchmarks/bench.py --corpora transformers --runs 5 --skip jobs1 parse --slow-peers none --interleave

Everything downloaded lives outside the repository, in $AMPLINT_BENCH_CACHE
(default ~/.cache/amplint-bench): pinned wheels of the corpora (unpacked, never
imported or installed), and one virtualenv per tool: amplint (this checkout,
installed non-editable, as users get it), ruff, fixit, torchfix (which needs
libcst<1.6, hence its own venv). psutil is installed into the amplint venv
only to measure.

Two corpora need no download (issue 26: where a pre-commit hook feels every start-up cost):
`small`, a generated three-file project (a trainer, a model, a loss module, each parsed), and
`fixture`, fixtures/projects/overflow_mask (10 files, 4 parsed). After each corpus's table the
issue's targets are printed with their verdicts from the same run's medians.

For each corpus it times, as whole processes: amplint cold (fresh cache dir)
with --jobs 1 and the default jobs, amplint warm (nothing changed), amplint
on one file of the warm corpus just touched (what pre-commit runs after an
edit; the cross-file pass reads the other files' cached summaries), amplint
--version and --help, `ruff check --select ALL --output-format concise --no-cache`,
`ruff --version`, `ruff --help`,
`fixit lint`, `torchfix`, and a bare libcst parse of every file (a process
pool of one worker per core). Each number is the median of --runs runs
(tools that take minutes: --slow-runs, default 1, and only on corpora of at
most --slow-max-files files unless --slow-peers all); peak memory is the
largest resident set of any process of the run (the pool workers included).
With --interleave the rows are measured round after round (each row once a round, cold before
warm, amplint before ruff), so that a load that drifts over the minutes weighs on every row
alike: the side-by-side reading issue 26 asks for on a shared machine.
The table goes to stdout as Markdown; --json writes the raw numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from typing import Dict, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.expanduser(os.environ.get("AMPLINT_BENCH_CACHE", "~/.cache/amplint-bench"))

CORPORA = {
    # name: (PyPI requirement, folder inside the wheel that is the package)
    "transformers": ("transformers==5.24.0", "transformers"),
    "diffusers": ("diffusers==0.42.1", "diffusers"),
    "timm": ("timm==1.0.31", "timm"),
    "pytorch-lightning": ("pytorch-lightning==2.6.6", "pytorch_lightning"),
}
#: corpora written by this script (no download): issue 26's small projects, where a
#: pre-commit hook feels every start-up cost
LOCAL = {
    # a trainer, a model and a loss module, each with AMP code (all three are parsed)
    "small": "generated",
    # a fixture project of 10 files (4 parsed), copied from this checkout
    "fixture": os.path.join("fixtures", "projects", "overflow_mask"),
}

SMALL_PROJECT = {
    "train.py": '''"""Fine-tune the segmentation model with mixed precision."""
import torch

from model import SegNet
from losses import DiceBCELoss


def train(loader, epochs=10, lr=1e-3):
    model = SegNet().cuda()
    loss_fn = DiceBCELoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(epochs):
        for images, masks in loader:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                logits = model(images.cuda())
                loss = loss_fn(logits, masks.cuda())
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
    return model
''',
    "model.py": '''"""A small attention segmentation head."""
import torch
from torch import nn


class SegNet(nn.Module):
    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.stem = nn.Conv2d(3, dim, 3, padding=1)
        self.qkv = nn.Linear(dim, dim * 3)
        self.head = nn.Conv2d(dim, 1, 1)

    def forward(self, x, mask=None):
        f = self.stem(x)
        b, c, h, w = f.shape
        t = f.flatten(2).transpose(1, 2)
        q, k, v = self.qkv(t).chunk(3, dim=-1)
        attn = q @ k.transpose(-2, -1)
        if mask is not None:
            attn = attn.masked_fill(~mask[:, None, :], -1e9)
        t = attn.softmax(dim=-1) @ v
        return self.head(t.transpose(1, 2).reshape(b, c, h, w))
''',
    "losses.py": '''"""Losses for binary masks."""
import torch
from torch import nn
import torch.nn.functional as F


class DiceBCELoss(nn.Module):
    def __init__(self, bce_weight=0.5, eps=1.0):
        super().__init__()
        self.bce_weight = bce_weight
        self.eps = eps

    def forward(self, logits, target):
        probs = torch.sigmoid(logits)
        bce = F.binary_cross_entropy(probs, target.float())
        inter = (probs * target).sum()
        dice = 1.0 - (2.0 * inter + self.eps) / (probs.sum() + target.sum() + self.eps)
        return self.bce_weight * bce + (1.0 - self.bce_weight) * dice
''',
}

PEERS = {
    "ruff": ["ruff==0.17.6"],
    "fixit": ["fixit==2.2.1"],
    "torchfix": ["torchfix==0.7.0", "libcst<1.6"],
}

# runs a command, prints {"wall": s, "maxrss_kb": largest process of the tree, "rc": n}
_WRAPPER = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": u.ru_utime + u.ru_stime, "maxrss_kb": u.ru_maxrss, "rc": p.returncode}))
"""

_PARSE = r"""
import os, sys
from concurrent.futures import ProcessPoolExecutor
import libcst

def parse(path):
    with open(path, "rb") as fh:
        try:
            libcst.parse_module(fh.read())
        except Exception:
            return 1
    return 0

if __name__ == "__main__":
    files = [os.path.join(d, f) for d, _, fs in os.walk(sys.argv[1]) for f in fs if f.endswith(".py")]
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        failed = sum(pool.map(parse, files, chunksize=16))
"""


def sh(cmd: Sequence[str], **kw) -> str:
    return subprocess.run(list(cmd), check=True, capture_output=True, text=True, **kw).stdout


def venv(name: str, packages: Sequence[str]) -> str:
    """The python of a virtualenv under the cache with `packages` installed (created once)."""
    root = os.path.join(CACHE, "venvs", name)
    python = os.path.join(root, "bin", "python")
    stamp = os.path.join(root, ".installed")
    want = "\n".join(packages)
    if not os.path.exists(stamp) or open(stamp).read() != want:
        shutil.rmtree(root, ignore_errors=True)
        sh([sys.executable, "-m", "venv", root])
        sh([python, "-m", "pip", "install", "-q", *packages])
        with open(stamp, "w") as fh:
            fh.write(want)
    return python


def amplint_venv() -> str:
    """This checkout, installed non-editable (re-installed on every run: it is what is measured)."""
    python = venv("amplint", ["psutil"])
    sh([python, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", REPO])
    sh([python, "-m", "pip", "install", "-q", REPO])  # its dependencies
    return python


def local_corpus(name: str, work: str) -> str:
    """A small project written (or copied) under `work`."""
    target = os.path.join(work, "corpus-" + name)
    shutil.rmtree(target, ignore_errors=True)
    if LOCAL[name] == "generated":
        os.makedirs(target)
        for rel, text in SMALL_PROJECT.items():
            with open(os.path.join(target, rel), "w") as fh:
                fh.write(text)
    else:
        shutil.copytree(os.path.join(REPO, LOCAL[name]), target)
    return target


def corpus(name: str) -> str:
    requirement, folder = CORPORA[name]
    wheels = os.path.join(CACHE, "wheels")
    os.makedirs(wheels, exist_ok=True)
    dist = requirement.split("==")[0].replace("-", "_").lower()
    version = requirement.split("==")[1]
    found = [w for w in os.listdir(wheels) if w.lower().startswith(f"{dist}-{version}-") and w.endswith(".whl")]
    if not found:
        sh([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", requirement, "-d", wheels])
        found = [w for w in os.listdir(wheels) if w.lower().startswith(f"{dist}-{version}-") and w.endswith(".whl")]
    target = os.path.join(CACHE, "src", found[0][:-4])
    if not os.path.isdir(target):
        with zipfile.ZipFile(os.path.join(wheels, found[0])) as z:
            z.extractall(target)
    return os.path.join(target, folder)


def sample(cmd: Sequence[str], before=None, cwd: Optional[str] = None) -> Dict[str, float]:
    """One timed run of `cmd` (a whole process and its children)."""
    if before is not None:
        before()
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True, text=True, cwd=cwd, check=True)
    return json.loads(out.stdout)


def row_of(cmd: Sequence[str], samples: Sequence[Dict[str, float]]) -> Dict[str, float]:
    walls = [d["wall"] for d in samples]
    row = {
        "median_s": statistics.median(walls), "min_s": min(walls), "cpu_s": statistics.median(d["cpu"] for d in samples),
        "runs": len(samples), "peak_mb": max(d["maxrss_kb"] for d in samples) / 1024, "rc": samples[-1]["rc"],
    }
    print(f"  {' '.join(os.path.basename(c) for c in cmd[:3])} ...: {row}", file=sys.stderr, flush=True)
    return row


def measure(cmd: Sequence[str], runs: int, before=None, cwd: Optional[str] = None) -> Dict[str, float]:
    return row_of(cmd, [sample(cmd, before, cwd) for _ in range(runs)])


def measure_all(specs: Sequence[tuple], interleave: bool) -> Dict[str, Dict[str, float]]:
    """{name: row} for specs (name, cmd, runs, before, cwd). Interleaved: round after round, each
    spec run once a round in the given order (so a load that changes over the minutes weighs on
    every row alike, as side-by-side numbers need); else each spec's runs in a row."""
    if not interleave:
        return {name: measure(cmd, runs, before, cwd) for name, cmd, runs, before, cwd in specs}
    samples: Dict[str, list] = {name: [] for name, *_ in specs}
    for r in range(max((spec[2] for spec in specs), default=0)):
        for name, cmd, runs, before, cwd in specs:
            if r < runs:
                samples[name].append(sample(cmd, before, cwd))
        print(f"  round {r + 1} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    return {name: row_of(cmd, samples[name]) for name, cmd, *_ in specs}


def count(path: str) -> Dict[str, int]:
    files = lines = size = 0
    for d, _, fs in os.walk(path):
        for f in fs:
            if f.endswith(".py"):
                files += 1
                with open(os.path.join(d, f), "rb") as fh:
                    data = fh.read()
                size += len(data)
                lines += data.count(b"\n")
    return {"files": files, "lines": lines, "bytes": size}


def gate_stats(python: str, path: str) -> Dict[str, object]:
    """How many files pass each default rule's gate (what amplint has to parse)."""
    code = r"""
import json, os, sys
from amplint.core.gating import passing
from amplint.engine.pipeline import default_codes
from amplint.engine.registry import rule_specs
specs = [s for s in rule_specs() if s.code in set(default_codes())]
per = {s.code: [0, 0] for s in specs}
anyp = [0, 0]
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        if f.endswith(".py"):
            text = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
            hit = passing(specs, text)
            if hit:
                anyp[0] += 1; anyp[1] += len(text)
            for s in hit:
                per[s.code][0] += 1; per[s.code][1] += len(text)
print(json.dumps({"any": anyp, "per_rule": per}))
"""
    return json.loads(sh([python, "-c", code, path]))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", default=[*LOCAL, *CORPORA], choices=[*LOCAL, *CORPORA])
    ap.add_argument("--runs", type=int, default=5, help="runs per fast measurement (median)")
    ap.add_argument("--slow-runs", type=int, default=1, help="runs for fixit and torchfix")
    ap.add_argument("--slow-max-files", type=int, default=400, help="run fixit/torchfix only on corpora this small")
    ap.add_argument("--slow-peers", choices=["auto", "all", "none"], default="auto")
    ap.add_argument("--json", help="also write the raw numbers here")
    ap.add_argument(
        "--interleave", action="store_true",
        help="run the rows round after round (each once a round) instead of each row's runs in a row",
    )
    ap.add_argument(
        "--skip", nargs="+", default=[], choices=["jobs1", "parse"],
        help="leave out the cold --jobs 1 rows (jobs1) or the bare libcst parse (parse): minutes on a loaded machine",
    )
    args = ap.parse_args(argv)

    work = tempfile.mkdtemp(prefix="amplint-bench-")
    os.chdir(work)  # never import the checkout's amplint from the current folder
    amplint_py = amplint_venv()
    bindir = os.path.dirname(amplint_py)
    amplint = os.path.join(bindir, "amplint")
    wanted = PEERS if args.slow_peers != "none" else {"ruff": PEERS["ruff"]}  # fixit/torchfix: their venvs only when run
    peers = {name: os.path.dirname(venv(name, pkgs)) for name, pkgs in wanted.items()}
    versions = {
        "amplint": sh([amplint, "--version"]).strip(),
        "ruff": sh([os.path.join(peers["ruff"], "ruff"), "--version"]).strip(),
    }
    if "fixit" in peers:
        versions["fixit"] = sh([os.path.join(peers["fixit"], "python"), "-c", "import fixit, libcst; print('fixit', fixit.__version__, 'libcst', libcst.__version__ if hasattr(libcst, '__version__') else '')"]).strip()
        versions["torchfix"] = sh([os.path.join(peers["torchfix"], "python"), "-c", "import importlib.metadata as m; print('torchfix', m.version('torchfix'), 'libcst', m.version('libcst'))"]).strip()
    versions.update({
        "libcst (amplint venv)": sh([amplint_py, "-c", "import importlib.metadata as m; print(m.version('libcst'))"]).strip(),
        "python": platform.python_version(),
    })
    machine = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "load_before": os.getloadavg(),
    }
    results: Dict[str, Dict[str, object]] = {}
    env_cache = os.path.join(work, "cache")
    try:
        for name in args.corpora:
            local = name in LOCAL
            path = local_corpus(name, work) if local else corpus(name)
            info: Dict[str, object] = {"path": path, **count(path), "gates": gate_stats(amplint_py, path)}
            fresh = lambda: shutil.rmtree(env_cache, ignore_errors=True)  # noqa: E731
            base = [amplint, path, "--isolated", "--exit-zero", "--cache-dir", env_cache]
            ruff_exe = os.path.join(peers["ruff"], "ruff")
            one = _one_file(path)
            specs: list = []
            if "jobs1" not in args.skip:
                specs.append(("amplint cold, --jobs 1", [*base, "--jobs", "1"], args.runs, fresh, work))
            specs.append(("amplint cold, default jobs", base, args.runs, fresh, work))
            # the cold default-jobs run just before fills the cache (measured one by one, it is filled once here)
            specs.append(("amplint warm, default jobs", base, args.runs, None, work))
            if "jobs1" not in args.skip:
                specs.append(("amplint warm, --jobs 1", [*base, "--jobs", "1"], args.runs, None, work))
            # what pre-commit runs after an edit: one file, the rest of the project from the warm cache
            specs.append((
                f"amplint one file, warm project ({os.path.relpath(one, path)})",
                [amplint, one, "--isolated", "--exit-zero", "--cache-dir", env_cache], args.runs, lambda: _touch(one), work,
            ))
            specs.append(("amplint --version", [amplint, "--version"], args.runs, None, work))
            specs.append(("amplint --help", [amplint, "--help"], args.runs, None, work))
            specs.append((
                "ruff check --select ALL --output-format concise --no-cache",
                [ruff_exe, "check", "--select", "ALL", "--output-format", "concise", "--no-cache", "--exit-zero", "--isolated", path],
                args.runs, None, work,
            ))
            # (no warm ruff row: with --select ALL, ruff 0.17.6 here took as long with its cache
            # filled as without, 4.3 s CPU on transformers either way)
            specs.append(("ruff --version", [ruff_exe, "--version"], args.runs, None, work))
            specs.append(("ruff --help", [ruff_exe, "--help"], args.runs, None, work))
            if "parse" not in args.skip and not local:
                specs.append(("bare libcst parse (pool, 1 worker per core)", [amplint_py, "-c", _PARSE, path], max(1, min(args.runs, 3)), None, work))
            if not args.interleave:
                specs = _cache_filled_before_warm(specs, base, work, fresh)
            rows: Dict[str, Dict[str, float]] = measure_all(specs, args.interleave)
            slow = args.slow_peers == "all" or (args.slow_peers == "auto" and not local and info["files"] <= args.slow_max_files)
            if slow:
                rows["fixit lint"] = measure([os.path.join(peers["fixit"], "fixit"), "lint", path], args.slow_runs, cwd=work)
                rows["torchfix"] = measure([os.path.join(peers["torchfix"], "torchfix"), path], args.slow_runs, cwd=work)
            info["rows"] = rows
            results[name] = info
            _print_corpus(name, info)
    finally:
        os.chdir(os.path.expanduser("~"))
        shutil.rmtree(work, ignore_errors=True)
    machine["load_after"] = os.getloadavg()
    print("\n## Machine and versions\n")
    for k, v in {**machine, **versions}.items():
        print(f"- {k}: {v}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine, "versions": versions, "results": results}, fh, indent=2)
    return 0


def _cache_filled_before_warm(specs: list, base: Sequence[str], work: str, fresh) -> list:
    """Measured one row after the other, the cold rows leave the cache of their last run; the
    warm rows must find it filled by a run of the default command: the first warm row fills it."""
    out = []
    for name, cmd, runs, before, cwd in specs:
        if name == "amplint warm, default jobs":
            def fill(before=before) -> None:
                if not getattr(fill, "done", False):
                    fresh()
                    subprocess.run(base, stdout=subprocess.DEVNULL, cwd=work)
                    fill.done = True  # type: ignore[attr-defined]
            before = fill
        out.append((name, cmd, runs, before, cwd))
    return out


def _one_file(path: str) -> str:
    """The first file (in walk order) that starts the project model (a BCE loss, an optimizer,
    a GradScaler), else the largest: the one-file run then pays for the cross-file pass."""
    largest, size = "", -1
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            full = os.path.join(dirpath, f)
            with open(full, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            if "BCELoss" in text or "GradScaler(" in text or "optim.Adam" in text:
                return full
            if len(text) > size:
                largest, size = full, len(text)
    return largest


def _touch(path: str) -> None:
    """An edit that keeps the bytes: the file is re-read and re-hashed, the rest stays cached."""
    os.utime(path)


def _print_corpus(name: str, info: Dict[str, object]) -> None:
    rows = info["rows"]  # type: ignore[index]
    ruff = rows["ruff check --select ALL --output-format concise --no-cache"]["median_s"]  # type: ignore[index]
    gates = info["gates"]  # type: ignore[index]
    print(f"\n### {name}: {info['files']} files, {info['lines']:,} lines, {info['bytes'] / 1e6:.1f} MB; "
          f"{gates['any'][0]} files ({gates['any'][1] / 1e6:.1f} MB) pass a default rule's gate\n")
    ruff_cpu = rows["ruff check --select ALL --output-format concise --no-cache"]["cpu_s"]  # type: ignore[index]
    print("| tool | median wall (s) | min (s) | CPU user+sys (s) | runs | peak RSS per process (MB) | wall x ruff | CPU x ruff |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for tool, r in rows.items():  # type: ignore[union-attr]
        print(
            f"| {tool} | {r['median_s']:.2f} | {r['min_s']:.2f} | {r['cpu_s']:.2f} | {r['runs']} | {r['peak_mb']:.0f} "
            f"| {r['median_s'] / ruff:.2f} | {r['cpu_s'] / max(ruff_cpu, 1e-9):.2f} |"
        )
    cold = rows["amplint cold, default jobs"]["median_s"]  # type: ignore[index]
    for peer in ("fixit lint", "torchfix", "bare libcst parse (pool, 1 worker per core)"):
        if peer in rows:  # type: ignore[operator]
            print(f"\namplint cold / {peer}: {cold / rows[peer]['median_s']:.3f}")  # type: ignore[index]
    heavy = sorted(gates["per_rule"].items(), key=lambda kv: -kv[1][1])[:5]
    print("\nGates letting the most bytes through: " + ", ".join(f"{c} {n} files/{b / 1e6:.1f} MB" for c, (n, b) in heavy))
    _print_targets(name, rows)  # type: ignore[arg-type]
    sys.stdout.flush()


#: issue 26's targets: (row, limit, "s" for seconds of median wall or "x" for x ruff's cold run)
SMALL_TARGETS = [
    ("amplint cold, default jobs", 0.5, "s"),
    ("amplint warm, default jobs", 0.15, "s"),
    ("amplint --help", 0.1, "s"),
    ("amplint --version", 0.1, "s"),
]
TARGETS = {
    "small": SMALL_TARGETS,
    "fixture": SMALL_TARGETS,
    "transformers": [
        ("amplint cold, default jobs", 1.0, "x"),
        ("amplint warm, default jobs", 0.2, "s"),
        ("amplint one file", 0.25, "s"),
        ("amplint --help", 0.1, "s"),
        ("amplint --version", 0.1, "s"),
    ],
}


def _print_targets(name: str, rows: Dict[str, Dict[str, float]]) -> None:
    """Issue 26's targets for this corpus, read from this run's medians."""
    if name not in TARGETS:
        return
    ruff = rows["ruff check --select ALL --output-format concise --no-cache"]["median_s"]
    print("\n| issue 26 target | measured (median wall) | ruff, same run | verdict |")
    print("|---|---:|---:|---|")
    for prefix, limit, unit in TARGETS[name]:
        row = next((k for k in rows if k.startswith(prefix)), None)
        if row is None:
            continue
        value = rows[row]["median_s"]
        if unit == "x":
            got, want = value / ruff, f"<= {limit:.1f}x ruff"
            shown = f"{value:.2f} s = {got:.2f}x"
        else:
            got, want = value, f"<= {limit:.2f} s"
            shown = f"{value:.3f} s"
        peer = {"amplint --help": "ruff --help", "amplint --version": "ruff --version"}.get(prefix)
        peer = peer or "ruff check --select ALL --output-format concise --no-cache"
        print(f"| {row} {want} | {shown} | {rows[peer]['median_s']:.3f} s | {'met' if got <= limit else 'NOT met'} |")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
