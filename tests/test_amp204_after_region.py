"""AMP204's sibling shape (issue 22, read5): a model's output made in an fp16 autocast block,
passed uncast to a loss inside a *later* `autocast(enabled=False)` block of the same function
(not one nested in the enabled block), and the look-alikes that stay silent."""
from __future__ import annotations

import textwrap

import pytest

from amplint import Config, lint_source


def _found(code: str):
    source = textwrap.dedent(code).lstrip("\n")
    return [(d.location.row, d.data.get("name"), d.condition) for d in lint_source(source, "t.py", Config(select=("AMP204",)))]


ENGINE = """
import torch

def train_one_epoch(model, criterion, loader, optimizer, device, scaler):
    for samples, targets in loader:
        with torch.autocast(device_type=str(device), cache_enabled=True):
            outputs = model(samples)
        with torch.autocast(device_type=str(device), enabled=False):
            loss_dict = criterion(outputs, targets)
        loss = sum(loss_dict.values())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def test_the_criterion_after_the_block_gets_the_fp16_outputs():
    # no dtype and a device of run time: fp16 on CUDA; the GradScaler says it is fp16
    assert _found(ENGINE) == [(8, "outputs", None)]


def test_no_gradscaler_leaves_it_conditional_on_fp16():
    source = ENGINE.replace("scaler.scale(loss).backward()", "loss.backward()")
    assert _found(source) == [(8, "outputs", "fp16")]


def test_explicit_fp16_module_attribute_criterion_returned():
    assert _found(
        """
        import torch
        from torch import nn

        class Trainer:
            def __init__(self, model):
                self.model = model
                self.criterion = nn.CrossEntropyLoss()

            def loss(self, x, y):
                with torch.autocast("cuda", dtype=torch.float16):
                    logits = self.model(x)
                with torch.autocast("cuda", enabled=False):
                    loss = self.criterion(logits, y)
                return loss
        """
    ) == [(13, "logits", None)]


def test_a_lower_precision_op_output_gets_the_fix():
    from amplint.fix.apply import fix_source

    source = textwrap.dedent(
        """
        import torch
        import torch.nn.functional as F

        def step(x, w, y, criterion):
            with torch.autocast("cuda"):
                h = F.linear(x, w)
            with torch.autocast("cuda", enabled=False):
                loss = criterion(h, y)
            loss.backward()
        """
    ).lstrip("\n")
    assert _found(source) == [(8, "h", None)]
    fixed, n = fix_source(source, lambda s: list(lint_source(s, "t.py", Config(select=("AMP204",)))), unsafe=True)
    assert n == 1 and "criterion(h.float(), y)" in fixed


def test_a_model_output_gets_no_fix():
    [d] = lint_source(textwrap.dedent(ENGINE).lstrip("\n"), "t.py", Config(select=("AMP204",)))
    assert d.fix is None, "a model may return a dict or a tuple: `.float()` on it is no fix"
    assert [r.message for r in d.related] == ["made under autocast here"]


SILENT = {
    "bf16 keeps fp32's range": """
        import torch
        def step(model, criterion, x, y):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = model(x)
            with torch.autocast("cuda", enabled=False):
                loss = criterion(out, y)
            loss.backward()
    """,
    "CPU autocast's default is bf16": """
        import torch
        def step(model, criterion, x, y):
            with torch.autocast("cpu"):
                out = model(x)
            with torch.autocast("cpu", enabled=False):
                loss = criterion(out, y)
            loss.backward()
    """,
    "cast at the call": """
        import torch
        def step(model, criterion, x, y):
            with torch.autocast("cuda"):
                out = model(x)
            with torch.autocast("cuda", enabled=False):
                loss = criterion(out.float(), y)
            loss.backward()
    """,
    "cast with .to(torch.float32) at the call": """
        import torch
        def step(model, criterion, x, y):
            with torch.autocast("cuda"):
                out = model(x)
            with torch.autocast("cuda", enabled=False):
                loss = criterion(out.to(torch.float32), y)
            loss.backward()
    """,
    "recast at the top of the disabled block": """
        import torch
        def step(model, criterion, x, y):
            with torch.autocast("cuda"):
                out = model(x)
            with torch.autocast("cuda", enabled=False):
                out = {k: v.float() for k, v in out.items()}
                loss = criterion(out, y)
            loss.backward()
    """,
    "the criterion of this file (its body may cast its inputs)": """
        import torch
        from torch import nn

        class FocalLoss(nn.Module):
            def forward(self, out, y):
                return (out.float() - y).abs().mean()

        def step(model, x, y):
            criterion = FocalLoss()
            with torch.autocast("cuda"):
                out = model(x)
            with torch.autocast("cuda", enabled=False):
                loss = criterion(out, y)
            loss.backward()
    """,
    "disabling CPU autocast leaves CUDA's on": """
        import torch
        def step(model, criterion, x, y):
            with torch.autocast("cuda"):
                out = model(x)
            with torch.autocast("cpu", enabled=False):
                loss = criterion(out, y)
            loss.backward()
    """,
    "made before the autocast block: fp32": """
        import torch
        def step(model, criterion, x, y):
            out = model(x)
            with torch.autocast("cuda"):
                other = model(x)
            with torch.autocast("cuda", enabled=False):
                loss = criterion(out, y)
            loss.backward()
    """,
    "the disabled block feeds no loss (evaluation post-processing)": """
        import torch
        def evaluate(model, postprocess, loader):
            results = []
            for x, sizes in loader:
                with torch.autocast("cuda"):
                    out = model(x)
                with torch.autocast("cuda", enabled=False):
                    dets = postprocess(out, sizes)
                results.extend(dets)
            return len(results)
    """,
    "a method of another object (a logger)": """
        import torch
        def step(model, criterion, x, y, logger):
            with torch.autocast("cuda"):
                out = model(x)
            with torch.autocast("cuda", enabled=False):
                logger.log(out)
                loss = criterion(x, y)
            loss.backward()
    """,
    "fp32 autocast lowers nothing": """
        import torch
        def step(model, criterion, x, y):
            with torch.autocast("cuda", dtype=torch.float32):
                out = model(x)
            with torch.autocast("cuda", enabled=False):
                loss = criterion(out, y)
            loss.backward()
    """,
    "made by a function of this file": """
        import torch
        def features(x):
            return x.sum(-1)
        def step(criterion, x, y):
            with torch.autocast("cuda"):
                out = features(x)
            with torch.autocast("cuda", enabled=False):
                loss = criterion(out, y)
            loss.backward()
    """,
}


@pytest.mark.parametrize("why", sorted(SILENT))
def test_look_alikes_stay_silent(why):
    assert _found(SILENT[why]) == [], why


def test_nested_disabled_region_is_still_the_nested_check():
    found = _found(
        """
        import torch
        from torch import nn
        proj = nn.Linear(8, 8)
        head = nn.Linear(8, 2)
        def step(x):
            with torch.autocast("cuda"):
                h = proj(x)
                with torch.autocast("cuda", enabled=False):
                    out = head(h)
            return out
        """
    )
    assert found == [(9, "h", None)]
