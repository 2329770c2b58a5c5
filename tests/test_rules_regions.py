"""Focused tests for the AMP2xx/AMP6xx region rules and the AMP-model helpers they use
(autocast-listed op uses, the active region, fp32 casts), beyond the rules' own examples."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint import Config, lint_source
from amplint.model import torchapi
from amplint.model.bindings import module_class
from amplint.model.context import ModuleContext
from amplint.model.dtypes import fp32_cast, strip_views
from amplint.model.regions import active_region, autocast_ops, same_device


def _ctx(code: str) -> ModuleContext:
    source = textwrap.dedent(code).lstrip("\n")
    return ModuleContext.build(cst.parse_module(source), source, "t.py")


def _codes(code: str, *select: str):
    source = textwrap.dedent(code).lstrip("\n")
    return [(d.code, d.location.row) for d in lint_source(source, "t.py", Config(select=select))]


def _expr(ctx: ModuleContext, text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


# --------------------------------------------------------------------------- op lists


def test_lower_precision_lists_follow_the_device():
    # amp-facts §1.2 / §1.3: einsum, mv and the RNN cells are CUDA-only; linear/matmul/SDPA both
    assert torchapi.runs_in_lower_precision("einsum", "cuda")
    assert not torchapi.runs_in_lower_precision("einsum", "cpu")
    assert not torchapi.runs_in_lower_precision("einsum", None)  # unknown device: both lists
    assert torchapi.runs_in_lower_precision("linear", None)
    assert torchapi.runs_in_lower_precision("scaled_dot_product_attention", "cpu")
    assert not torchapi.runs_in_lower_precision("softmax", "cuda")  # fp32 list on CUDA
    assert not torchapi.runs_in_lower_precision("linear", "mps")  # no MPS list in amp-facts
    assert not torchapi.runs_in_lower_precision("cudnn_convolution", "xpu")


def test_autocast_ops_recognise_calls_methods_modules_and_matmul():
    ctx = _ctx(
        """
        import numpy as np
        import torch
        import torch.nn.functional as F
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                self.fc = nn.Linear(4, 4).cuda()
                self.norm = nn.LayerNorm(4)
            def forward(self, x, w):
                a = F.linear(x, w)
                b = x @ w
                c = x.mm(w)
                d = self.fc(x)
                e = self.norm(x)
                f = torch.mm(x, w, out=buf)
                g = x.addmm_(x, w)
                h = torch.einsum("ij,jk->ik", x, w)
                return np.matmul(a, b)
        """
    )
    ops = sorted(o.op for o in autocast_ops(ctx))
    assert ops == ["einsum", "linear", "linear", "matmul", "mm"]
    by_op = {o.op: o for o in autocast_ops(ctx)}
    assert len(by_op["mm"].inputs) == 2  # receiver + argument


def test_module_class_needs_every_assignment_to_agree():
    ctx = _ctx(
        """
        from torch import nn
        class A:
            def __init__(self):
                self.proj = nn.Linear(2, 2)
        class B:
            def __init__(self):
                self.proj = nn.Identity()
        head = nn.Conv2d(3, 8, 3)
        """
    )
    module_scope = ctx.scopes[0]
    assert module_class(ctx, _expr(ctx, "self.proj"), module_scope) is None
    assert module_class(ctx, _expr(ctx, "head"), module_scope) == "torch.nn.Conv2d"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("h.float()", True),
        ("h.to(torch.float32)", True),
        ("h.to(dtype=torch.float)", True),
        ("h.to(device, torch.float32)", True),
        ("h.type(torch.float32)", True),
        ("h.to('cuda')", False),
        ("h.double()", False),
        ("h.to(torch.float16)", False),
        ("h.float", False),
    ],
)
def test_fp32_cast(text, expected):
    ctx = _ctx("import torch\n")
    assert fp32_cast(ctx, _expr(ctx, text)) is expected


def test_strip_views_stops_at_dtype_reinterpretation():
    ctx = _ctx("import torch\n")
    assert cst.ensure_type(strip_views(ctx, _expr(ctx, "h.transpose(1, 2)[0].T")), cst.Name).value == "h"
    viewed = strip_views(ctx, _expr(ctx, "h.view(torch.float16)"))
    assert isinstance(viewed, cst.Call)


# --------------------------------------------------------------------------- regions


def _regions_by_line(ctx):
    return {ctx.position(r.call)[0].row: r for r in ctx.regions}


def test_active_region_honours_the_device_of_enabled_false():
    ctx = _ctx(
        """
        import torch
        with torch.autocast("cuda"):
            with torch.autocast("cpu", enabled=False):
                a = 1
            with torch.autocast("cuda", enabled=False):
                b = 2
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=flag):
                    c = 3
            with torch.autocast(device_type=dev, enabled=False):
                d = 4
        """
    )
    r = _regions_by_line(ctx)
    assert active_region(r[3]) is r[2]  # a CPU switch-off leaves CUDA on
    assert active_region(r[5]) is None
    assert active_region(r[7]) is r[7]  # re-enabled, maybe (enabled=flag)
    assert active_region(r[9]) is None  # unknown device switched off: assume it is this one


def test_same_device_compares_device_expressions():
    ctx = _ctx(
        """
        import torch
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            with torch.autocast(device_type=dev, enabled=False):
                pass
            with torch.autocast(device_type=other, enabled=False):
                pass
            with torch.cuda.amp.autocast(enabled=False):
                pass
        """
    )
    r = _regions_by_line(ctx)
    assert same_device(ctx, r[2], r[3])
    assert not same_device(ctx, r[2], r[5])
    assert not same_device(ctx, r[2], r[7])


def test_matmul_operator_is_recorded_with_its_region():
    ctx = _ctx(
        """
        import torch
        y = a @ b
        with torch.autocast("cuda"):
            z = a @ b
        """
    )
    regions = [m.region for m in ctx.matmuls]
    assert regions[0] is None and regions[1] is ctx.regions[0]


# --------------------------------------------------------------------------- AMP202


def test_amp202_multi_item_with_and_nested_disabled_cpu():
    assert _codes(
        """
        import torch
        with torch.no_grad(), torch.autocast("cuda"):
            loss = model(x)
            loss.backward()
        optimizer.step()
        """,
        "AMP202",
    ) == [("AMP202", 4)]
    # disabling CPU autocast inside a CUDA region leaves the backward under CUDA autocast
    assert _codes(
        """
        import torch
        with torch.autocast("cuda"):
            loss = model(x)
            with torch.autocast("cpu", enabled=False):
                loss.backward()
        optimizer.step()
        """,
        "AMP202",
    ) == [("AMP202", 5)]


def test_amp202_framework_backward_inside_framework_region_is_silent():
    assert _codes(
        """
        with fabric.autocast():
            loss = model(x)
            fabric.backward(loss)
        """,
        "AMP202",
    ) == []


# --------------------------------------------------------------------------- AMP203


def test_amp203_name_also_used_after_the_region_is_silent():
    assert _codes(
        """
        import torch
        lin = torch.nn.Linear(4, 4)
        with torch.autocast("cuda"):
            h = lin(x)
            h32 = h.float()
            y = lin(h32)
        stats = h32.abs().max()
        """,
        "AMP203",
    ) == []


def test_amp203_name_flow_into_a_listed_op_is_flagged():
    assert _codes(
        """
        import torch
        lin = torch.nn.Linear(4, 4)
        with torch.autocast("cuda"):
            h = lin(x)
            h32 = h.float()
            y = lin(h32)
        """,
        "AMP203",
    ) == [("AMP203", 5)]


def test_amp203_cast_before_the_region_and_out_calls_are_silent():
    assert _codes(
        """
        import torch
        lin = torch.nn.Linear(4, 4)
        h = lin(x).float()
        with torch.autocast("cuda"):
            y = lin(h)
            z = torch.mm(lin(x).float(), w, out=buf)
        """,
        "AMP203",
    ) == []


def test_amp203_parameter_receiver_is_floating():
    assert _codes(
        """
        import torch
        from torch import nn
        class Head(nn.Module):
            def __init__(self):
                self.weight = nn.Parameter(torch.randn(4, 4))
            def forward(self, x):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return x @ self.weight.float().t()
        """,
        "AMP203",
    ) == [("AMP203", 8)]


# --------------------------------------------------------------------------- AMP204


def test_amp204_reassigned_inside_the_disabled_region_is_silent_and_fix_applies():
    from amplint.fix.apply import fix_source

    source = textwrap.dedent(
        """
        import torch
        lin = torch.nn.Linear(4, 4)
        with torch.autocast("cuda"):
            h = lin(x)
            with torch.autocast("cuda", enabled=False):
                y = lin(h) + lin(h.float())
        """
    ).lstrip("\n")
    found = _codes(source, "AMP204")
    assert found == [("AMP204", 6)]
    fixed, n = fix_source(source, lambda s: [d for d in lint_source(s, "t.py", Config(select=("AMP204",)))], unsafe=True)
    assert n == 1 and "y = lin(h.float()) + lin(h.float())" in fixed


def test_amp204_region_of_another_device_between_is_ignored():
    assert _codes(
        """
        import torch
        lin = torch.nn.Linear(4, 4)
        with torch.autocast("cuda"):
            h = lin(x)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                with torch.autocast("cuda", enabled=False):
                    y = lin(h)
        """,
        "AMP204",
    ) == [("AMP204", 7)]


# --------------------------------------------------------------------------- AMP205


def test_amp205_parameter_shadowing_a_module_level_model_is_silent():
    assert _codes(
        """
        import torch
        model = torch.nn.DataParallel(net)
        def evaluate(model, x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(x)
        """,
        "AMP205",
    ) == []


# --------------------------------------------------------------------------- AMP201


def test_amp201_conversion_after_training_without_a_later_step_is_silent():
    assert _codes(
        """
        import torch
        model = Net().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()
            opt.step()
        model.half()
        torch.save(model.state_dict(), "model_fp16.pt")
        """,
        "AMP201",
    ) == []


def test_amp201_export_method_defined_before_init_is_silent():
    assert _codes(
        """
        import torch
        class Trainer:
            def export(self):
                self.model.half()
                torch.onnx.export(self.model, dummy, "m.onnx")
            def __init__(self, model):
                self.model = model
                self.opt = torch.optim.AdamW(self.model.parameters())
        """,
        "AMP201",
    ) == []


def test_amp201_deepspeed_and_apex_keep_master_weights():
    assert _codes(
        """
        import torch
        import deepspeed
        model = Net().half()
        optimizer = torch.optim.AdamW(model.parameters())
        engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer)
        """,
        "AMP201",
    ) == []


def test_amp201_module_level_model_optimized_in_a_function():
    assert _codes(
        """
        import torch
        model = Net().cuda().half()
        def make_optimizer():
            return torch.optim.Adam(model.parameters(), lr=1e-3)
        """,
        "AMP201",
    ) == [("AMP201", 2)]


# --------------------------------------------------------------------------- AMP6xx


def test_capability_rules_are_off_by_default():
    source = """
    import torch
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = model(x)
    with torch.autocast("cuda"):
        z = model(x)
    """
    default = [c for c, _ in _codes(source)]
    assert "AMP601" not in default and "AMP602" not in default
    assert _codes(source, "AMP601", "AMP602") == [("AMP601", 2), ("AMP602", 4)]


def test_amp601_one_finding_per_file():
    found = _codes(
        """
        import torch
        with torch.autocast("cuda", dtype=torch.bfloat16):
            a = model(x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            b = model(x)
        """,
        "AMP601",
    )
    assert found == [("AMP601", 2)]


def test_capability_rules_skip_old_torch_compatibility_branches():
    assert _codes(
        """
        import torch
        if digit_version(TORCH_VERSION) < digit_version("1.10.0"):
            with torch.cuda.amp.autocast(enabled=enabled):
                yield
        """,
        "AMP602",
    ) == []


def test_amp202_closure_defined_in_a_region_is_silent():
    assert _codes(
        """
        import torch
        with torch.autocast("cuda"):
            def closure():
                optimizer.zero_grad()
                loss = model(x).sum()
                loss.backward()
                return loss
        optimizer.step(closure)
        """,
        "AMP202",
    ) == []


def test_amp201_data_feeds_the_verifier_experiment():
    source = textwrap.dedent(
        """
        import torch
        model = Net().half()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
        """
    ).lstrip("\n")
    (d,) = lint_source(source, "t.py", Config(select=("AMP201",)))
    assert d.data["optimizer_class"] == "torch.optim.Adam"
    assert d.data["lr"] == 1e-3 and d.data["eps"] == 1e-8 and d.data["dtype"] == "fp16"


def test_explicit_fp32_autocast_is_not_low_precision():
    ctx = _ctx(
        """
        import torch
        with torch.autocast("cuda", dtype=torch.float32):
            pass
        """
    )
    assert ctx.regions[0].dtype == "fp32" and ctx.regions[0].enabled is True
    source = """
    import torch
    lin = torch.nn.Linear(4, 4)
    with torch.autocast("cuda", dtype=torch.float32):
        h = lin(x)
        y = lin(h.float())
        with torch.autocast("cuda", enabled=False):
            z = lin(h)
        y.sum().backward()
    """
    assert _codes(source, "AMP202", "AMP203", "AMP204") == []


def test_a_name_imported_two_ways_reads_the_same_in_every_process():
    """`autocast` bound by `try: from torch.amp ...` / `except: from torch.cuda.amp ...`: the
    region (and so AMP602) must not depend on the hash seed's order of the name's targets."""
    import json
    import os
    import subprocess
    import sys

    source = (
        "try:\n    from torch.amp import GradScaler, autocast\nexcept ImportError:\n"
        "    from torch.cuda.amp import GradScaler, autocast\n"
        "scaler = GradScaler()\nwith autocast():\n    loss = model(x)\n"
    )
    script = (
        "import json, sys, libcst as cst\nfrom amplint.model.context import ModuleContext\n"
        "src = sys.stdin.read()\nctx = ModuleContext.build(cst.parse_module(src), src, 't.py')\n"
        "print(json.dumps([(r.device, r.dtype) for r in ctx.regions]))\n"
    )
    seen = set()
    for seed in ("0", "1", "3", "6"):  # 0 and 1 disagreed before
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", script], input=source, capture_output=True, text=True, env=env, check=True)
        seen.add(out.stdout)
    assert len(seen) == 1, seen
    assert json.loads(seen.pop()) == [[None, None]]
