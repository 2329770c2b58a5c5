"""AMP204's before-region shape (issue 22, read15): a tensor a module's forward made by a
lower-precision op before its own `autocast(enabled=False)` region, used uncast inside it.
Several uses of that one op's result are one bug: one finding, the other uses related."""
from __future__ import annotations

import textwrap

from amplint import Config, lint_source

ATTENTION = """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)

    def forward(self, x):
        qkv = self.qkv(x).reshape(x.shape[0], -1, 3, 8).permute(2, 0, 1, 3)
        with torch.cuda.amp.autocast(enabled=False):
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = (q @ k.transpose(-2, -1)).softmax(-1)
            return attn @ v
"""


def _lint(code: str):
    return lint_source(textwrap.dedent(code).lstrip("\n"), "t.py", Config(select=("AMP204",)))


def test_three_uses_of_one_linear_are_one_finding_with_the_others_related():
    found = _lint(ATTENTION)
    assert [(d.location.row, d.data["name"]) for d in found] == [(14, "q")]
    related = [(r.location.row, r.message) for r in found[0].related]
    assert (14, "`k` also used uncast") in related and (15, "`v` also used uncast") in related


def test_the_fix_casts_every_use():
    (found,) = _lint(ATTENTION)
    replaced = sorted(e.content for e in found.fix.edits)
    assert replaced == ["k.float()", "q.float()", "v.float()"]


def test_two_ops_feeding_one_region_are_two_findings():
    two = ATTENTION.replace(
        "        self.qkv = nn.Linear(dim, dim * 3)\n",
        "        self.qkv = nn.Linear(dim, dim * 3)\n        self.gate = nn.Linear(dim, dim)\n",
    ).replace(
        "        with torch.cuda.amp.autocast(enabled=False):\n",
        "        g = self.gate(x)\n        with torch.cuda.amp.autocast(enabled=False):\n",
    ).replace("return attn @ v", "return (attn @ v) @ g")
    assert sorted(d.data["name"] for d in _lint(two)) == ["g", "q"]
