"""AMP204 across calls: a low-precision tensor carried through more than one call, or from
another file, into a helper that opens `autocast(enabled=False)` and uses it without `.float()`."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List

from amplint import Config, lint_paths

from .project_files import write_project
from amplint.model.project import summarize

HELPER = """
import torch
import torch.nn.functional as F

def stable_logits(h, weight):
    with torch.autocast("cuda", enabled=False):
        return F.linear(h, weight)
"""

HEAD = """
import torch
from torch import nn
from .numerics import stable_logits

class Head(nn.Module):
    def __init__(self, dim, n):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.weight = nn.Parameter(torch.randn(n, dim))

    def project(self, h):
        return stable_logits(h, self.weight)

    def forward(self, x):
        with torch.autocast("cuda"):
            h = self.proj(x)
            return self.project(h)
"""


TRAIN = """
import torch
from pkg.head import Head

head = Head(8, 2).cuda()
optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = (head(x) - y).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


def write(root: Path, files: Dict[str, str]) -> Path:
    """A project: `files` and the training script that runs `Head` under autocast."""
    return write_project(root, {"train.py": TRAIN, **files})


def run(root: Path, paths: List[str] = None):
    return lint_paths(paths or [str(root)], Config(select=frozenset({"AMP204"}))).diagnostics


def where(d) -> str:
    return f"{Path(d.filename).name}:{d.location.row}:{d.location.column}"


def test_the_summary_records_both_ends():
    helper = summarize(textwrap.dedent(HELPER))["functions"]["stable_logits"]
    assert [(u["p"], u["op"], u["r"]) for u in helper["disabled"]] == [("h", "linear", 7), ("weight", "linear", 7)]
    head = summarize(textwrap.dedent(HEAD))["functions"]
    assert [c.get("ap") for c in head["Head.project"]["calls"]] == [{"0": "p:h"}]
    passed = [c["ap"] for c in head["Head.forward"]["calls"] if c["f"] == "self.project"]
    assert passed == [{"0": {"m": ["self.proj"]}}], "made by `self.proj`, which the project model resolves"
    fp32 = summarize(textwrap.dedent(HEAD.replace("            h = self.proj(x)\n", "").replace("x):\n", "x):\n        h = self.proj(x)\n")))
    assert [c.get("ap") for c in fp32["functions"]["Head.forward"]["calls"] if c["f"] == "self.project"] == [None], (
        "made before the region: fp32"
    )


def test_two_calls_away_in_another_file_names_the_chain(tmp_path):
    root = write(tmp_path, {"pkg/__init__.py": "", "pkg/numerics.py": HELPER, "pkg/head.py": HEAD})
    found = run(root)
    assert [where(d) for d in found] == ["numerics.py:7:25"]
    d = found[0]
    assert d.message == "`h` arrives fp16 from CUDA autocast: `autocast(enabled=False)` casts nothing back"
    assert [(Path(r.filename).name, r.location.row, r.message) for r in d.related] == [
        ("head.py", 18, "passed in"),
        ("head.py", 16, "autocast entered here (via `Head.forward` -> `Head.project` -> `stable_logits`)"),
    ]
    assert [where(x) for x in run(root, [str(root / "pkg" / "numerics.py")])] == ["numerics.py:7:25"]


def test_one_call_in_the_same_file_is_one_finding(tmp_path):
    same = HELPER + HEAD.split("from .numerics import stable_logits", 1)[1].replace("return self.project(h)", "return stable_logits(h, self.weight)")
    root = write(tmp_path, {"model.py": "import torch\nfrom torch import nn\n" + same})
    assert [where(d) for d in run(root)] == ["model.py:9:25"]


def test_casts_other_devices_and_rebound_parameters_stay_silent(tmp_path):
    cast = write(tmp_path / "cast", {"pkg/__init__.py": "", "pkg/numerics.py": HELPER.replace("F.linear(h,", "F.linear(h.float(),"), "pkg/head.py": HEAD})
    assert run(cast) == []
    cpu = write(tmp_path / "cpu", {"pkg/__init__.py": "", "pkg/numerics.py": HELPER.replace('"cuda", enabled', '"cpu", enabled'), "pkg/head.py": HEAD})
    assert run(cpu) == [], "a CPU autocast turned off leaves CUDA autocast on"
    rebound = HELPER.replace("        return F.linear(h, weight)", "        h = h.float()\n        return F.linear(h, weight)")
    assert run(write(tmp_path / "re", {"pkg/__init__.py": "", "pkg/numerics.py": rebound, "pkg/head.py": HEAD})) == []
    off = HEAD.replace('torch.autocast("cuda")', 'torch.autocast("cuda", enabled=False)')
    assert run(write(tmp_path / "off", {"pkg/__init__.py": "", "pkg/numerics.py": HELPER, "pkg/head.py": off})) == []
