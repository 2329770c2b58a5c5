"""Focused tests of the fp16-numerics and checkpoint rules (AMP301, AMP302, AMP303, AMP401, AMP402)
and of the AMP-model helpers they rely on (`known_dtype`, `bound_name`, literal order)."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint import Config, Severity, lint_paths, lint_source
from amplint.fix.apply import fix_source
from amplint.model.context import ModuleContext


def lint(code, rule, **config):
    source = textwrap.dedent(code).lstrip("\n")
    return [d for d in lint_source(source, "example.py", Config(select=(rule,), **config)) if d.code == rule]


def fixed(code, rule):
    source = textwrap.dedent(code).lstrip("\n")
    out, _ = fix_source(source, lambda s: [d for d in lint_source(s, "x.py", Config(select=(rule,))) if d.code == rule], unsafe=True)
    return out


def write(tmp_path, files):
    for name, code in files.items():
        (tmp_path / name).write_text(textwrap.dedent(code).lstrip("\n"))


MODEL = """
import torch
from torch import nn

class Attention(nn.Module):
    def forward(self, q, k, attention_mask):
        scores = torch.matmul(q, k.transpose(-1, -2))
        return scores.masked_fill(attention_mask == 0, -1e9).softmax(-1)
"""

# --------------------------------------------------------------------- AMP301: project facts


@pytest.mark.parametrize("names", [("a_model.py", "b_train.py"), ("z_model.py", "a_train.py")])
def test_amp301_silent_in_bf16_only_project(tmp_path, names):
    write(
        tmp_path,
        {
            names[0]: MODEL,
            names[1]: """
                import torch
                for x in loader:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = model(x)
                    loss.backward()
            """,
        },
    )
    result = lint_paths([str(tmp_path)], Config(select=("AMP301",)))
    assert [d for d in result.diagnostics if d.code == "AMP301"] == []


@pytest.mark.parametrize("names", [("a_model.py", "b_train.py"), ("z_model.py", "a_train.py")])
def test_amp301_kept_when_another_file_uses_fp16(tmp_path, names):
    write(
        tmp_path,
        {
            names[0]: MODEL,
            names[1]: """
                import torch
                scaler = torch.amp.GradScaler("cuda")
                for x in loader:
                    with torch.autocast("cuda"):
                        loss = model(x)
                    scaler.scale(loss).backward()
            """,
        },
    )
    found = [d for d in lint_paths([str(tmp_path)], Config(select=("AMP301",))).diagnostics if d.code == "AMP301"]
    assert len(found) == 1
    d = found[0]
    assert d.filename.endswith(names[0]) and d.severity is Severity.ERROR
    assert d.data == {
        "literal": -1e9,
        "op": "masked_fill",
        "snippet": "scores.masked_fill(attention_mask == 0, -1e9)",
        "tensor": "scores",
        "raises": True,
        "dtype": None,  # no autocast region around the literal
        "device": None,
    }
    assert d.message == "-1e9 in `masked_fill` does not fit fp16; on an fp16 tensor it raises"


def test_amp301_half_elsewhere_and_runtime_dtype(tmp_path):
    write(tmp_path, {"model.py": MODEL, "export.py": "model = load().half()\n"})
    assert any(d.code == "AMP301" for d in lint_paths([str(tmp_path)], Config(select=("AMP301",))).diagnostics)
    write(tmp_path, {"export.py": 'import torch\nwith torch.autocast("cuda", dtype=args.dtype):\n    y = model(x)\n'})
    assert any(d.code == "AMP301" for d in lint_paths([str(tmp_path)], Config(select=("AMP301",))).diagnostics)


def test_amp301_precision_setting_overrides():
    assert lint(MODEL, "AMP301") == []  # a lone model file: nothing says fp16
    assert len(lint(MODEL, "AMP301", precision="fp16")) == 1
    fp16_file = MODEL + "\nmodel = Attention().half()\n"
    assert lint(fp16_file, "AMP301", precision="bf16") == []


# --------------------------------------------------------------------- AMP301: shapes


ADDITIVE = """
import torch
model = model.half()

def attend(q, k, mask, attention_mask):
    scores = q @ k.transpose(-1, -2)  # visibly low precision under fp16: a matmul result
    a = scores + (1 - mask) * -1e9
    scores += mask * -1e9
    extended_attention_mask = (1.0 - attention_mask.to(q.dtype)) * -10000000000.0
    b = torch.where(mask, -1e9, scores)
    c = scores - 1e9 * mask.float()
    d = index + 100000
    best = -1e9
    e = probs - 1e8
    f = torch.softmax(scores - 1e9 * 1, dim=-1)
    g = (scores + -1e9).softmax(-1)
    return a, b, c, d
"""


BUILT_FROM_PARAMETER = """
import torch
model = model.half()

def similarity(visual, video_mask, steps):
    extended_mask = (1.0 - video_mask.unsqueeze(1)) * -1e6
    out = transformer(visual, extended_mask)
    video_mask = allgather(video_mask)
    return out

def cast_first(visual, video_mask):
    video_mask = video_mask.to(dtype=visual.dtype)
    extended_mask = (1.0 - video_mask.unsqueeze(1)) * -1e6
    return transformer(visual, extended_mask)

def in_a_loop(visual, video_mask):
    for layer in layers:
        extended_mask = (1.0 - video_mask) * -1e6
        visual = layer(visual, extended_mask)
        video_mask = visual.new_ones(visual.shape[:2])
    return visual
"""


def test_amp301_mask_built_from_a_parameter_as_passed():
    """The caller's mask, reshaped and shifted: its dtype is the caller's (a data mask makes it
    fp32); a cast in the function or a rebind in a loop around the site keeps the finding
    (InternVideo's CLIP4Clip `_loose_similarity`, read14)."""
    found = lint(BUILT_FROM_PARAMETER, "AMP301")
    assert [d.location.row for d in found] == [12, 17]


def test_amp301_additive_forms_are_warnings():
    found = lint(ADDITIVE, "AMP301")
    assert [(d.location.row, d.severity) for d in found] == [
        (6, Severity.WARNING),
        (7, Severity.WARNING),
        (8, Severity.WARNING),
        (9, Severity.WARNING),
        (15, Severity.WARNING),
    ]
    assert "overflows fp16 to inf" in found[0].message and "NaN" in found[0].message
    assert found[0].data["op"] == "additive" and found[0].data["snippet"] == "scores + (1 - mask) * -1e9"
    assert found[0].fix is None  # adding finfo.min overflows too: no fix for additive masks
    assert found[3].data["op"] == "torch.where" and found[3].fix is not None


def test_amp301_fix_uses_the_local_torch_name_and_needs_one():
    code = """
    import torch as th
    x = th.zeros(3, dtype=th.float16)
    x.fill_(-1e9)
    """
    assert "x.fill_(th.finfo(x.dtype).min)" in fixed(code, "AMP301")
    no_torch = """
    from torch import float16
    x = make().half()
    x.masked_fill_(m, 1e9)
    """
    found = lint(no_torch, "AMP301")
    assert len(found) == 1 and found[0].fix is None
    assert found[0].condition is None  # the tensor is visibly fp16


def test_amp301_full_with_dtype():
    code = """
    import torch
    a = torch.full((2,), -1e9, dtype=torch.float16)
    b = torch.full((2,), -1e9, dtype=dtype)
    c = torch.full((2,), -1e9)
    d = torch.full((2,), -1e9, dtype=torch.float32)
    """
    found = lint(code, "AMP301")
    assert [d.location.row for d in found] == [2, 3]
    assert found[0].condition is None and found[1].condition == "fp16"
    assert "torch.finfo(dtype).min" in fixed(code, "AMP301")


def test_amp301_dtype_aware_and_regions():
    code = """
    import torch
    model.half()
    def f(x, mask):
        mask_value = -1e4 if x.dtype == torch.float16 else -1e9
        y = x.masked_fill(mask, {torch.float16: -1e4}.get(x.dtype, -1e9)) if x.dtype != torch.float16 else x
        with torch.autocast("cuda", dtype=torch.bfloat16):
            z = x.masked_fill(mask, -1e9)
        return y, z
    """
    assert lint(code, "AMP301") == []


# --------------------------------------------------------------------- AMP302


def test_amp302_data_and_default_eps():
    code = """
    import torch
    model = Net().half()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.01)
    adam = torch.optim.Adam(params=[{"params": model.parameters()}], eps=1e-12)
    """
    found = lint(code, "AMP302")
    assert [(d.location.row, d.data["eps"], d.data["optimizer_class"]) for d in found] == [
        (3, 1e-10, "torch.optim.Adagrad"),
        (4, 1e-12, "torch.optim.Adam"),
    ]
    assert "1e-10 rounds to 0 in fp16" in found[0].message


def test_amp302_params_through_a_local_name_and_inference_copies():
    code = """
    import torch
    def train(net):
        model = net.cuda().half()
        params = [p for p in model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=1e-4)
    """
    assert len(lint(code, "AMP302")) == 1
    copy = """
    import torch
    frozen = net.half().eval()
    opt = torch.optim.Adam(frozen.parameters())
    """
    assert lint(copy, "AMP302") == []


def test_amp302_region_of_unknown_dtype_is_conditional():
    code = """
    import torch
    with torch.autocast("cuda", dtype=args.dtype):
        h = torch.matmul(a, b)
        p = h / (h.amax() + 1e-8)
    """
    found = lint(code, "AMP302")
    assert len(found) == 1 and found[0].condition == "fp16"
    assert lint(code, "AMP302", precision="bf16") == []


def test_amp302_fp32_and_unknown_operands_are_silent():
    code = """
    import torch
    model = model.half()
    a = x / (x.norm() + 1e-12)
    b = x.float() / (x.float().norm() + 1e-12)
    c = torch.log(p + 1e-8)
    """
    assert lint(code, "AMP302") == []


# --------------------------------------------------------------------- AMP303


def test_amp303_fix_for_from_import():
    code = """
    import torch
    from torch.nn.functional import binary_cross_entropy
    with torch.autocast("cuda"):
        loss = binary_cross_entropy(torch.sigmoid(z), y, weight=w)
    """
    assert "torch.nn.functional.binary_cross_entropy_with_logits(z, y, weight=w)" in fixed(code, "AMP303")


def test_amp303_no_fix_without_visible_sigmoid_or_with_weighted_instance():
    code = """
    import torch
    crit = torch.nn.BCELoss(weight=w)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a = crit(torch.sigmoid(z), y)
        b = torch.nn.functional.binary_cross_entropy(probs, y)
    """
    found = lint(code, "AMP303")
    assert len(found) == 2 and all(d.fix is None for d in found)
    assert [d.data["function"] for d in found] == ["BCELoss", "binary_cross_entropy"]
    assert "raises" in found[0].message  # banned for bf16 too


def test_amp303_methods_called_from_regions():
    code = """
    import torch
    import torch.nn.functional as F

    class Model(torch.nn.Module):
        def loss(self, probs, y):
            return F.binary_cross_entropy(probs, y)

        def training_step(self, batch):
            with torch.autocast("cuda"):
                probs = self(batch.x)
            with torch.autocast("cuda", enabled=False):
                loss = self.loss(probs.float(), batch.y)
            return loss

        def eval_step(self, batch):
            with torch.autocast("cuda"):
                return self.loss(self(batch.x), batch.y)
    """
    found = lint(code, "AMP303")
    assert len(found) == 1 and found[0].location.row == 6
    assert "(through `self.loss`)" in found[0].message


def test_amp303_rebound_names_are_not_instances():
    code = """
    import torch
    crit = torch.nn.BCELoss()
    crit = torch.nn.BCEWithLogitsLoss()
    with torch.autocast("cuda"):
        loss = crit(model(x), y)
    """
    assert lint(code, "AMP303") == []


# --------------------------------------------------------------------- AMP401 / AMP402


def test_amp401_data():
    code = """
    import torch
    model = Net().half()
    torch.save({"model": model.state_dict()}, "m.pt")
    """
    (d,) = lint(code, "AMP401")
    assert d.data["model"] == "model" and d.message == "`torch.save` writes the fp16 weights of `model`; the lost precision cannot be recovered"


def test_amp402_scaler_used_through_parameter_and_saved_object():
    used = """
    import torch
    def train(model, optimizer, scaler):
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
    """
    (d,) = lint(used, "AMP402")
    assert d.data["side"] == "save" and d.help == "Save `scaler.state_dict()` and restore it with `scaler.load_state_dict(...)`"
    pickled = used.replace('"optimizer": optimizer.state_dict()}', '"optimizer": optimizer.state_dict(), "scaler": scaler}')
    assert lint(pickled, "AMP402") == []
    unused = """
    import torch
    def train(model, optimizer, scaler):
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
    """
    assert lint(unused, "AMP402") == []


# --------------------------------------------------------------------- AMP model helpers


def _ctx(code):
    source = textwrap.dedent(code).lstrip("\n")
    return ModuleContext.build(cst.parse_module(source), source)


def test_known_dtype():
    ctx = _ctx(
        """
        import torch
        a = torch.zeros(3)
        b = torch.ones(3, dtype=torch.float16).view(3, 1)
        c = x.half().transpose(0, 1)
        d = c.to("cuda")
        e = c.to(dtype)
        f = torch.triu(torch.ones(n, n), diagonal=1)
        g = torch.full_like(b, 0)
        h = torch.zeros(3, dtype=torch.long)
        i = x.float()
        if cond:
            j = x.half()
        else:
            j = x.float()
        k = j
        """
    )
    scope = ctx.scopes[0]
    expected = dict(a="fp32", b="fp16", c="fp16", d="fp16", e=None, f="fp32", g="fp16", h="other", i="fp32", j=None)
    for name, dtype in expected.items():
        assert ctx.known_dtype(cst.Name(name), scope, 10_000) == dtype, name


def test_known_dtype_of_arithmetic_pieces_and_dtyped_factories():
    ctx = _ctx(
        """
        import torch
        h = x.half()
        grid = torch.arange(0, w, dtype=torch.float32)
        ints = torch.arange(0, w)
        y, gx = torch.meshgrid(grid, grid, indexing="ij")
        first, second = h.chunk(2)
        value, index = h.max(1)
        a = h * 2.0
        b = -1 * h
        c = h + h
        d = masks * gx.unsqueeze(0)
        e = h * gx
        f = masks * h
        g = h.double() * gx
        i = masks * ints
        """
    )
    scope = ctx.scopes[0]
    expected = dict(
        grid="fp32", ints=None, y="fp32", gx="fp32", first="fp16", second="fp16", value=None, index=None,
        a="fp16", b="fp16", c="fp16", d="fp32", e="fp32", f=None, g=None, i=None,
    )
    for name, dtype in expected.items():
        assert ctx.known_dtype(cst.Name(name), scope, 10_000) == dtype, name


def test_bound_name_and_literal_order():
    ctx = _ctx("import torch as th\nfrom torch import nn\nx = f(1)\ny = -1e9\n")
    assert ctx.imports.bound_name("torch") == "th"
    assert ctx.imports.bound_name("numpy") is None
    (lit,) = ctx.literals
    assert lit.order > max(c.order for c in ctx.calls)


# --------------------------------------------------------------------- AMP301: one bug, one finding

NOISY_CHANNEL = """
import torch
model = Decoder().cuda().half()

def rescore(ch_scores, size, mask, other):
    new_fw = ch_scores.new(size).fill_(-1e17).view(2, -1)
    new_ch = ch_scores.new(size).fill_(-1e17).view(2, -1)
    new_lm = ch_scores.new(size).fill_(-1e17).view(2, -1)
    new_fw[:, 0] = 0
    other.masked_fill_(mask, -1e9)
    ch_scores.masked_fill_(mask, -1e9)
    return new_fw, new_ch, new_lm
"""


def test_consecutive_fills_of_one_tensor_are_one_finding_with_the_others_related():
    found = lint(NOISY_CHANNEL, "AMP301")
    assert [(d.location.row, [r.location.row for r in d.related]) for d in found] == [(5, [6, 7]), (9, []), (10, [])]
    assert found[0].related[0].message == "-1e17 also filled in `ch_scores`'s dtype"


def test_fills_apart_or_of_other_constants_stay_separate_findings():
    source = """
    import torch
    model = Decoder().cuda().half()

    def fill(scores, a, b):
        scores.masked_fill_(a, -1e9)
        n = a.sum()
        scores.masked_fill_(b, -1e9)
        scores.masked_fill_(a, -1e10)
        return scores, n
    """
    assert [(d.location.row, d.related) for d in lint(source, "AMP301")] == [(5, ()), (7, ()), (8, ())]


def test_the_one_finding_fixes_every_fill_it_stands_for():
    source = """
    import torch
    model = Decoder().cuda().half()

    def fill(scores, a, b):
        scores.masked_fill_(a, -1e9)
        scores.masked_fill_(b, -1e9)
        return scores
    """
    assert fixed(source, "AMP301").count("torch.finfo(scores.dtype).min") == 2
