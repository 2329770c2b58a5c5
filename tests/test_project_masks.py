"""AMP301 across functions and files: mask constants under an fp16 autocast the file
does not show (another file's, a held `partial`, a project decorator, a framework)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Dict, List

from amplint import Config, lint_paths

from .project_files import write_project
from amplint.model.project import summarize

ATTENTION = """
import torch
from torch import nn

class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask == 0, -1e9)
        return scores.softmax(-1) @ v
"""


def write(root: Path, files: Dict[str, str]) -> Path:
    return write_project(root, files)


def run(root: Path, paths: List[str] = None):
    return [d for d in lint_paths(paths or [str(root)], Config(select=frozenset({"AMP301"}))).diagnostics]


def masks_of(source: str, func: str) -> list:
    return summarize(textwrap.dedent(source))["functions"][func].get("masks", [])


# ------------------------------------------------------------------ the summary's facts


def test_the_summary_records_what_made_the_masked_tensor():
    found = masks_of(ATTENTION, "Attention.forward")
    assert [(m["r"], m["t"], m["op"], m["raises"], m["x"], m["src"]) for m in found] == [
        (13, "-1e9", "masked_fill", 1, "scores", "lp")
    ]
    src = """
        import torch
        NEG_INF = -1e9

        def f(self, q, k, mask, x, idx):
            scores = torch.matmul(q, k)
            a = scores.float().masked_fill(mask, -1e9)
            b = scores.masked_fill(mask, NEG_INF)
            c = x.masked_fill(mask, -1e9)
            h = self.proj(x)
            h += mask * -1e9
            e = idx + mask * 100000
            return torch.where(mask, -1e9, scores)
    """
    found = masks_of(src, "f")
    assert [(m["r"], m["op"], m["x"], m["src"]) for m in found] == [
        (8, "masked_fill", "scores", "lp"),  # through the module constant
        (11, "additive", "h", {"m": ["self.proj"]}),  # the project model resolves `self.proj`
        (13, "torch.where", "scores", "lp"),
    ], "fp32 tensors, parameters nothing computes and integer arithmetic are not recorded"


def test_a_function_that_tests_a_dtype_records_nothing():
    src = """
        import torch
        def attend(q, k, mask):
            scores = q @ k
            if scores.dtype == torch.float16:
                return scores.masked_fill(mask, -65504.0)
            return scores.masked_fill(mask, -1e9)

        def other(q, k, mask):
            scores = q @ k
            return scores.masked_fill(mask, -1e4 if scores.dtype == torch.float16 else -1e9)
    """
    assert masks_of(src, "attend") == [] and masks_of(src, "other") == []
    assert json.loads(json.dumps(summarize(textwrap.dedent(ATTENTION)))) == summarize(textwrap.dedent(ATTENTION))


# ------------------------------------------------------------------ findings


def test_a_held_fp16_autocast_in_another_file_names_its_cause(tmp_path):
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/attn.py": ATTENTION,
        "pkg/trainer.py": """
            from functools import partial
            import torch

            class Trainer:
                def __init__(self, model, optimizer):
                    self.model = model
                    self.optimizer = optimizer
                    self.amp = partial(torch.autocast, device_type="cuda", dtype=torch.float16)

                def step(self, x, m):
                    with self.amp():
                        loss = self.model(x, m).sum()
                    loss.backward()
        """,
        "train.py": """
            import torch
            from pkg.attn import Attention
            from pkg.trainer import Trainer

            model = Attention(64).cuda()
            trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))
        """,
    })
    found = run(root)
    assert len(found) == 1, "one bug, one finding"
    d = found[0]
    assert (Path(d.filename).name, d.location.row) == ("attn.py", 13)
    assert d.message == "-1e9 in `masked_fill` does not fit fp16 and raises: `scores` is fp16 under autocast"
    assert d.fix is not None, "the per-file fix is kept"
    assert [(Path(r.filename).name, r.location.row) for r in d.related] == [("trainer.py", 12)]
    assert "`Attention.forward`" in d.related[0].message
    assert run(root, [str(root / "pkg" / "attn.py")])[0].message == d.message, "a one-file run says the same"


def test_bf16_regions_and_fp32_tensors_stay_silent(tmp_path):
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/attn.py": ATTENTION,
        "pkg/fp32.py": """
            import torch
            from torch import nn

            class Head(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.proj = nn.Linear(dim, dim)

                def forward(self, x, mask):
                    logits = self.proj(x).float()
                    return (logits + mask * -1e9).softmax(-1)
        """,
        "train.py": """
            from functools import partial
            import torch
            from pkg.attn import Attention
            from pkg.fp32 import Head

            model, head = Attention(64).cuda(), Head(64).cuda()
            opt = torch.optim.AdamW(model.parameters())
            amp = partial(torch.autocast, "cuda", dtype=torch.bfloat16)
            for x, m in loader:
                with amp():
                    loss = head(model(x, m), m).sum()
                loss.backward()
        """,
    })
    assert run(root) == [], "bf16 represents -1e9"
    (root / "fp16.py").write_text(textwrap.dedent("""
        import torch
        from pkg.fp32 import Head
        head = Head(64).cuda()
        with torch.autocast("cuda", dtype=torch.float16):
            out = head(x, m)
    """))
    (root / "pkg" / "attn.py").unlink()
    (root / "train.py").unlink()
    assert run(root) == [], "the logits were cast to fp32 before the mask"


def test_a_lightning_fp16_trainer_makes_a_mask_in_the_module_a_finding(tmp_path):
    root = write(tmp_path, {
        "lit/__init__.py": "",
        "lit/attn.py": ATTENTION,
        "lit/module.py": """
            import lightning as L
            import torch
            from .attn import Attention

            class LitModel(L.LightningModule):
                def __init__(self):
                    super().__init__()
                    self.attn = Attention(64)

                def training_step(self, batch, idx):
                    x, m = batch
                    return self.attn(x, m).sum()

                def configure_optimizers(self):
                    return torch.optim.AdamW(self.parameters())
        """,
        "main.py": """
            import lightning as L
            from lit.module import LitModel

            trainer = L.Trainer(precision="16-mixed", accelerator="gpu")
            trainer.fit(LitModel(), loader)
        """,
    })
    found = run(root)
    assert [(Path(d.filename).name, d.location.row) for d in found] == [("attn.py", 13)]
    assert [(Path(r.filename).name, r.location.row, r.message.split(" (via")[0]) for r in found[0].related] == [("main.py", 5, "precision set here")]
    (root / "main.py").write_text((root / "main.py").read_text().replace("16-mixed", "bf16-mixed"))
    assert run(root) == []


def test_two_fills_of_one_tensor_under_another_files_autocast_are_one_finding(tmp_path):
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/attn.py": """
            import torch
            from torch import nn

            class Attention(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.qkv = nn.Linear(dim, 3 * dim)

                def forward(self, x, pad, causal):
                    q, k, v = self.qkv(x).chunk(3, dim=-1)
                    scores = q @ k.transpose(-2, -1)
                    scores.masked_fill_(pad, -1e9)
                    scores.masked_fill_(causal, -1e9)
                    return scores.softmax(-1) @ v
        """,
        "pkg/trainer.py": """
            from functools import partial
            import torch

            class Trainer:
                def __init__(self, model, optimizer):
                    self.model = model
                    self.optimizer = optimizer
                    self.amp = partial(torch.autocast, device_type="cuda", dtype=torch.float16)

                def step(self, x, m):
                    with self.amp():
                        loss = self.model(x, m, m).sum()
                    loss.backward()
        """,
        "train.py": """
            import torch
            from pkg.attn import Attention
            from pkg.trainer import Trainer

            model = Attention(64).cuda()
            trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))
        """,
    })
    found = run(root)
    assert [(Path(d.filename).name, d.location.row) for d in found] == [("attn.py", 13)], "one bug, one finding"
    d = found[0]
    assert d.message == "-1e9 in `masked_fill_` does not fit fp16 and raises: `scores` is fp16 under autocast"
    assert [(Path(r.filename).name if r.filename else None, r.location.row) for r in d.related] == [
        ("trainer.py", 12), (None, 14)
    ]
    assert d.related[1].message == "-1e9 also filled in `scores`'s dtype"
