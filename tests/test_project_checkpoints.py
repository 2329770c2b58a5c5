"""Checkpoints across files: an fp16 model saved by a trainer in another file (AMP401), and
a resume helper that never restores the GradScaler the loop owns (AMP402)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List

from amplint import Config, lint_paths

MODEL = """
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x)
"""


def write(root: Path, files: Dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n')
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def run(root: Path, codes: str, paths: List[str] = None):
    return lint_paths(paths or [str(root)], Config(select=frozenset(codes.split()))).diagnostics


def where(d) -> str:
    return f"{Path(d.filename).name}:{d.location.row}"


# ------------------------------------------------------------------ AMP401


def builder(cast: str) -> str:
    return f"""
        import torch
        from .net import Net

        def build(cfg):
            model = Net()
            model{cast}
            return model.cuda()
    """


TRAINER = """
    import torch

    def train(model, loader, out):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, out + "/last.pt")
        {after}
        torch.save(model.state_dict(), out + "/final.pt")
"""


def project(tmp_path: Path, cast: str, after: str = "pass") -> Path:
    return write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/net.py": MODEL,
        "pkg/builder.py": builder(cast),
        "pkg/engine.py": TRAINER.replace("{after}", after),
        "main.py": """
            from pkg.builder import build
            from pkg.engine import train

            train(build(cfg), loader, "runs")
        """,
    })


def test_an_fp16_model_built_in_another_file_is_one_finding_per_trainer(tmp_path):
    root = project(tmp_path, ".half()")
    found = run(root, "AMP401")
    assert [where(d) for d in found] == ["engine.py:11"], "one bug, one finding"
    d = found[0]
    assert "`torch.save` writes the fp16 weights of `model`, a `Net` that pkg/builder.py:7 made fp16" in d.message
    assert [(Path(r.filename).name, r.location.row, r.message) for r in d.related] == [
        ("builder.py", 7, "made fp16 here"), ("engine.py", 13, "also saved"),
    ]
    assert [where(x) for x in run(root, "AMP401", [str(root / "pkg" / "engine.py")])] == ["engine.py:11"]


def test_bf16_fp32_casts_back_and_optimizer_state_stay_silent(tmp_path):
    assert run(project(tmp_path / "bf16", ".to(torch.bfloat16)"), "AMP401") == []
    assert run(project(tmp_path / "fp32", ".half()", after="model.float()"), "AMP401") == []
    root = project(tmp_path / "opt", ".half()")
    engine = root / "pkg" / "engine.py"
    engine.write_text(engine.read_text().replace('"model": model.state_dict(), ', "").replace("torch.save(model.state_dict()", "torch.save(opt.state_dict()"))
    assert run(root, "AMP401") == []
