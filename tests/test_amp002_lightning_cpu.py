"""AMP002 across files: a Lightning bf16 autocast the CPU may run under, over a model whose
fp32 stretches are shielded by CUDA-only `autocast("cuda", enabled=False)` regions."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from amplint import Config, lint_paths

LAYER = '''import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.proj(x)
        with torch.autocast({device}, enabled=False):
            return torch.einsum("bd,ed->be", h.float(), h.float())
'''

MODEL = '''import lightning as L

from kit.layers import Head


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.head = Head(16)

    def training_step(self, batch, batch_idx):
        return self.head(batch).mean()
'''

TRAIN = '''import argparse

import lightning as L

from kit.model import Net

parser = argparse.ArgumentParser()
parser.add_argument("--accelerator", default="gpu", choices={choices})
args = parser.parse_args()
trainer = L.Trainer(accelerator=args.accelerator, precision={precision})
trainer.fit(Net(), train_dataloaders=None)
'''


def _codes(tmp_path: Path, device: str = '"cuda"', choices: str = '["gpu", "cpu"]', precision: str = '"bf16-mixed"') -> Dict[str, List[str]]:
    (tmp_path / "kit").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "kit" / "__init__.py").write_text("")
    (tmp_path / "kit" / "layers.py").write_text(LAYER.format(device=device))
    (tmp_path / "kit" / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN.format(choices=choices, precision=precision))
    out: Dict[str, List[str]] = {}
    for d in lint_paths([str(tmp_path)], Config(select=("AMP002",))).diagnostics:
        out.setdefault(Path(d.filename).name, []).append(f"{d.location.row} {d.code}")
    return out


def test_an_argparse_cpu_choice_under_bf16_mixed_is_flagged_at_the_precision(tmp_path):
    assert _codes(tmp_path) == {"train.py": ["10 AMP002"]}


def test_choices_without_the_cpu_are_silent(tmp_path):
    assert _codes(tmp_path, choices='["gpu", "tpu"]') == {}


def test_a_region_of_the_tensors_device_is_silent(tmp_path):
    assert _codes(tmp_path, device="x.device.type") == {}


def test_fp16_or_fp32_precision_is_silent(tmp_path):
    for i, precision in enumerate(('"16-mixed"', "32", '"bf16-true"')):
        root = tmp_path / str(i)
        root.mkdir()
        assert _codes(root, precision=precision) == {}, precision


def test_either_arm_of_a_conditional_precision(tmp_path):
    assert _codes(tmp_path, precision='32 if args.fast else "bf16-mixed"') == {"train.py": ["10 AMP002"]}
