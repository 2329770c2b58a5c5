"""The report must not depend on the hash seed or on the number of processes.

Set and frozenset iteration order changes with PYTHONHASHSEED, so any pick from a
set (`next(iter(s))`, a loop that stops early, a join for a message) can change a
finding, a message, a fix or the output order from one run to the next. This runs
the whole fixtures tree, every rule's examples and a few names bound two ways (all
written out as files) under several hash seeds in fresh processes, one with
`--jobs 1` and the others with `--jobs 2`, and asserts the JSON reports are identical.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.core.rule import example_source
from amplint.engine.registry import all_rules

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

# Names bound two ways (try/except ImportError, if/else): their qualnames are a set of
# two, and a pick from it followed the hash seed (AMP002 named `torch.cuda.amp.autocast`
# in some processes and `torch.cpu.amp.autocast` in others).
TWO_WAYS = {
    "amp002_two_ways.py": """\
import torch

try:
    from torch.cuda.amp import autocast
except ImportError:
    from torch.cpu.amp import autocast


def step(model, x):
    with autocast(device_type="cuda"):
        return model(x)
""",
    "dtype_two_ways.py": """\
import torch

if torch.cuda.is_bf16_supported():
    from torch import bfloat16 as half
else:
    from torch import float16 as half


def train(model, data, optimizer):
    model = model.to(half)
    for x, y in data:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""",
    "ops_two_ways.py": """\
import torch

try:
    from torch import mm as product
except ImportError:
    from torch import bmm as product
try:
    from apex.optimizers import FusedAdam as Adam
except ImportError:
    from torch.optim import Adam


def step(a, b, model):
    opt = Adam(model.parameters(), eps=1e-8)
    with torch.autocast("cuda"):
        out = product(a.half(), b.float())
    return out, opt
""",
}


def _write_examples(folder: Path) -> None:
    for rule in all_rules():
        for kind in ("VALID", "INVALID"):
            for i, case in enumerate(getattr(rule, kind)):
                (folder / f"{rule.code.lower()}_{kind.lower()}_{i}.py").write_text(example_source(case.code), encoding="utf-8")
    for name, text in TWO_WAYS.items():
        (folder / name).write_text(text, encoding="utf-8")


def _report(tree: Path, seed: int, jobs: int) -> str:
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    cmd = [
        sys.executable, "-m", "amplint", "fixtures", "examples", "--select", "ALL", "--output-format", "json",
        "--no-cache", "--exit-zero", "--isolated", "--jobs", str(jobs),
    ]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_report_same_under_every_hash_seed_and_job_count(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "fixtures", tree / "fixtures")
    (tree / "examples").mkdir()
    _write_examples(tree / "examples")
    runs = [(0, 1), (1, 2), (2, 2), (12345, 2), (random.randrange(2**32), 2)]
    reports = {run: _report(tree, *run) for run in runs}
    first = reports[runs[0]]
    assert '"code": "AMP' in first  # the tree does produce findings
    for (seed, jobs), report in reports.items():
        assert report == first, f"report differs under PYTHONHASHSEED={seed} --jobs {jobs} from seed 0 --jobs 1"
