"""The shared AMP model: names, autocast regions, scalers, optimizers, casts, events."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.model.context import ModuleContext
from amplint.model.paths import exclusive


def build(code: str) -> ModuleContext:
    source = textwrap.dedent(code).lstrip("\n")
    return ModuleContext.build(cst.parse_module(source), source, "t.py")


@pytest.mark.parametrize(
    "code,device,dtype,enabled",
    [
        ("import torch\nwith torch.autocast('cuda'):\n    f()", "cuda", "fp16", True),
        ("import torch\nwith torch.autocast('cpu'):\n    f()", "cpu", "bf16", True),
        ("import torch\nwith torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n    f()", "cuda", "bf16", True),
        ("import torch as T\nwith T.amp.autocast('cuda', T.float16):\n    f()", "cuda", "fp16", True),
        ("from torch.cuda.amp import autocast\nwith autocast():\n    f()", "cuda", "fp16", True),
        ("from torch.cuda import amp\nwith amp.autocast(enabled=False):\n    f()", "cuda", "fp16", False),
        ("import torch\nwith torch.cuda.amp.autocast(False):\n    f()", "cuda", "fp16", False),
        ("import torch\nwith torch.cpu.amp.autocast(dtype=torch.float16):\n    f()", "cpu", "fp16", True),
        ("import torch\nwith torch.autocast(dev.type, dtype=dt):\n    f()", None, None, True),
        ("import torch\nwith torch.autocast('cuda', enabled=args.amp):\n    f()", "cuda", "fp16", None),
        ("import torch\nwith torch.autocast('cuda') if amp else nullcontext():\n    f()", "cuda", "fp16", None),
        ("import torch\nctx = torch.autocast('cuda', dtype=torch.bfloat16)\nwith ctx:\n    f()", "cuda", "bf16", True),
        ("import torch\n@torch.autocast('cuda')\ndef fwd():\n    f()", "cuda", "fp16", True),
    ],
)
def test_autocast_region_forms(code, device, dtype, enabled):
    ctx = build(code)
    (call,) = [c for c in ctx.calls if c.dotted == "f"]
    region = call.region
    assert region is not None
    assert (region.device, region.dtype, region.enabled) == (device, dtype, enabled)


@pytest.mark.parametrize(
    "code,expected",
    [
        # a script's `if __name__ == "__main__":` binds the context below the function reading it
        ("import torch\ndef g():\n    with ctx:\n        f()\nif __name__ == '__main__':\n    ctx = torch.autocast('cuda')\n    g()",
         ("cuda", "fp16", True)),
        ("import torch\ndef g():\n    with ctx:\n        f()\nctx = torch.autocast('cuda', dtype=torch.bfloat16) if gpu else nullcontext()",
         ("cuda", "bf16", None)),
        # bound to something else too: a function may read either binding
        ("import torch\ndef g():\n    with ctx:\n        f()\nif amp:\n    ctx = torch.autocast('cuda')\nelse:\n    ctx = nullcontext()",
         ("cuda", "fp16", None)),
        # the function's own name: a parameter, or a local bound before the `with`
        ("import torch\ndef g(ctx):\n    with ctx:\n        f()\nctx = torch.autocast('cuda')", None),
        ("import torch\ndef g():\n    ctx = make()\n    with ctx:\n        f()\nctx = torch.autocast('cuda')", None),
        # module-level code reads only what is bound above it
        ("import torch\nwith ctx:\n    f()\nctx = torch.autocast('cuda')", None),
    ],
)
def test_module_context_bound_below_the_function(code, expected):
    ctx = build(code)
    (call,) = [c for c in ctx.calls if c.dotted == "f"]
    region = call.region
    assert (None if region is None else (region.device, region.dtype, region.enabled)) == expected


def test_accelerate_autocast_is_a_framework_region():
    ctx = build("with accelerator.autocast():\n    f()")
    (call,) = [c for c in ctx.calls if c.dotted == "f"]
    assert call.region.framework and call.region.dtype is None


def test_code_after_the_region_is_outside():
    ctx = build("import torch\nwith torch.autocast('cuda'):\n    f()\ng()")
    (g,) = [c for c in ctx.calls if c.dotted == "g"]
    assert g.region is None


def test_strings_are_not_code():
    ctx = build('X = """\nwith torch.autocast("cuda"):\n    scaler.scale(loss).backward()\n"""')
    assert not ctx.regions and not ctx.scalers


@pytest.mark.parametrize(
    "code,key,enabled",
    [
        ("import torch\nscaler = torch.amp.GradScaler('cuda')", "scaler", True),
        ("from torch.cuda.amp import GradScaler\nscaler = GradScaler(enabled=False)", "scaler", False),
        ("import torch\nscaler = torch.cuda.amp.GradScaler(enabled=args.fp16)", "scaler", None),
        ("from torch import amp\nclass T:\n    def __init__(self):\n        self.scaler = amp.GradScaler()", "self.scaler", True),
        ("def step(loss, grad_scaler):\n    grad_scaler.scale(loss).backward()", "grad_scaler", None),
        ("import torch\nscaler = torch.amp.GradScaler() if fp16 else None", "scaler", None),
    ],
)
def test_scaler_bindings(code, key, enabled):
    ctx = build(code)
    assert key in ctx.scalers
    assert ctx.scalers[key].enabled is enabled


def test_optimizers_and_fused():
    ctx = build(
        "import torch\nopt = torch.optim.AdamW(m.parameters(), fused=True)\n"
        "sgd = torch.optim.SGD(m.parameters(), lr=0.1)\nsched = torch.optim.lr_scheduler.StepLR(opt, 1)"
    )
    assert ctx.optimizers["opt"].fused is True
    assert ctx.optimizers["sgd"].fused is False
    assert "sched" not in ctx.optimizers and not ctx.is_optimizer("sched")


def test_prepared_optimizer():
    ctx = build("model, optimizer = accelerator.prepare(model, optimizer)")
    assert ctx.optimizers["optimizer"].prepared


@pytest.mark.parametrize(
    "code,subject,dtype",
    [
        ("model = Net().cuda().half()", "model", "fp16"),
        ("model.half()", "model", "fp16"),
        ("import torch\nmodel = model.to(torch.float16)", "model", "fp16"),
        ("import torch\nmodel.to(device, dtype=torch.bfloat16)", "model", "bf16"),
        ("import torch\nm = AutoModel.from_pretrained('x', torch_dtype=torch.float16)", "m", "fp16"),
        ("m = AutoModel.from_pretrained('x', torch_dtype='float16')", "m", "fp16"),
    ],
)
def test_low_precision_casts(code, subject, dtype):
    ctx = build(code)
    assert [(c.subject, c.dtype) for c in ctx.low_precision_casts] == [(subject, dtype)]


def test_training_step_events_in_order_with_branches():
    ctx = build(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        def train(model, opt, loader, clip):
            for x in loader:
                loss = model(x)
                scaler.scale(loss).backward()
                if clip:
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
        """
    )
    scope = ctx.scope_named("train")
    kinds = [e.kind for e in scope.events]
    assert kinds == ["scaled_backward", "unscale", "clip", "scaler_step", "update", "zero_grad"]
    unscale = scope.events[1]
    assert [f.kind for f in unscale.path] == ["loop", "if"]
    assert unscale.optimizer == "opt"


def test_exclusive_branches():
    ctx = build("if a:\n    f()\nelse:\n    g()\nh()")
    f, g, h = (next(c for c in ctx.calls if c.dotted == n) for n in "fgh")
    assert exclusive(f.path, g.path)
    assert not exclusive(f.path, h.path)


def test_framework_backward():
    ctx = build("accelerator.backward(loss)\nloss.backward()")
    assert [e.kind for e in ctx.scopes[0].events] == ["framework_backward", "backward"]


def test_version_gated_fallback():
    ctx = build(
        """
        try:
            from torch.amp import GradScaler
        except ImportError:
            from torch.cuda.amp import GradScaler
        if hasattr(torch, "amp"):
            a()
        else:
            b()
        """
    )
    (b,) = [c for c in ctx.calls if c.dotted == "b"]
    assert ctx.is_version_gated(b.path)
    assert ctx.imports.qualnames(cst.parse_expression("GradScaler")) == {
        "torch.amp.GradScaler",
        "torch.cuda.amp.GradScaler",
    }


def test_file_facts():
    assert build("import torch\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    f()").facts.fp16 is False
    assert build("import torch\nwith torch.autocast('cuda'):\n    f()").facts.fp16 is True
    assert build("model.half()").facts.fp16 is True
    unknown = build("import torch\nwith torch.autocast('cuda', dtype=dt):\n    f()").facts
    assert unknown.dtype_unknown and not unknown.fp16


def test_hardware_availability_checks_are_not_version_gates():
    ctx = build(
        """
        if is_torch_tpu_available():
            a()
        if is_torch_greater_or_equal_than_2_3:
            b()
        if version.parse(torch.__version__) >= version.parse("2.4"):
            c()
        """
    )
    a, b, c = (next(x for x in ctx.calls if x.dotted == n) for n in "abc")
    assert not ctx.is_version_gated(a.path)
    assert ctx.is_version_gated(b.path) and ctx.is_version_gated(c.path)


FLOW = """
import torch


def f(a, b, mask, c):
    x = torch.einsum("ij,jk->ik", a, b)
    x = x.float()
    if mask is not None:
        x = x * mask
    x = x.sum(dim=-1)
    g(x)
    y = torch.zeros(3)
    if c:
        y = y.half()
    g(y)
    z = torch.zeros(3)
    for _ in range(c):
        z = z.half()
    g(z)
    w = torch.zeros(3).half()
    try:
        w = w.float()
    except RuntimeError:
        pass
    g(w)
"""


def test_known_dtype_along_the_control_flow_of_the_point_asked_about():
    """With `path`, an assignment every way to the point runs through hides the ones before it:
    `x` is fp32 after `x = x.float()` whatever `einsum` gave; a branch, a loop body or a `try`
    that may not run leaves both values possible."""
    import libcst as cst

    from amplint.model.context import ModuleContext

    ctx = ModuleContext.build(cst.parse_module(FLOW), FLOW, "flow.py")
    calls = [c for c in ctx.calls if c.dotted == "g"]
    answers = [ctx.known_dtype(c.arg(0), c.scope, c.order, c.statement, path=c.path) for c in calls]
    assert answers == ["fp32", None, None, None]
    # without the flow, every assignment before the point must agree: einsum's is unknown
    assert ctx.known_dtype(calls[0].arg(0), calls[0].scope, calls[0].order, calls[0].statement) is None


def test_known_dtype_promotes_joined_tensors_and_reads_what_a_function_of_the_file_returns():
    """`torch.cat([fp32_zeros, x])` is fp32 whatever `x` is (promotion; autocast runs cat in the
    widest input type), and so is a helper returning it; a generator or a bare `return` tells
    nothing, nor do returns that disagree."""
    ctx = build(
        """
        import torch

        def shift(x):
            return torch.cat([torch.zeros(x.shape[0], 1), x], dim=-1)[:, 1:]

        def either(x, c):
            if c:
                return x.float()
            return x.half()

        def gen(x):
            yield x.float()

        def g(q, k):
            a = shift(q @ k)
            b = torch.stack((q.half(), k.half()))
            c = either(q, 1)
            d = gen(q)
            e = q @ k + shift(q)
        """
    )
    scope = ctx.scope_named("g")
    found = {a.target: ctx.known_dtype(a.value, scope, a.order) for a in ctx.assignments if a.scope is scope}
    assert found == {"a": "fp32", "b": "fp16", "c": None, "d": None, "e": "fp32"}


def test_a_tensor_a_module_makes_in_fp32_is_fp32_unless_the_module_is_cast():
    """`self.bias` registered from an fp32 factory (or an `nn.Parameter` of one) reads as
    MODULE_FP32, which no rule reads as fp32 unless it asks whether modules are cast; what it
    lifts is MODULE_FP32 too, and plain fp32 still wins. A binding the class also makes of
    another dtype, or of an unknown one, leaves it unknown."""
    from amplint.model.torchapi import MODULE_FP32

    ctx = build(
        """
        import torch
        from torch import nn


        class Base(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("bias", torch.tril(torch.ones(4, 4)))
                self.scale = nn.Parameter(torch.empty(4))
                self.cache = None
                self.mixed = torch.ones(4)


        class Attn(Base):
            def reset(self, x):
                self.mixed = x

            def forward(self, q, k):
                a = self.bias[:, :2]
                b = (q @ k) * self.scale
                c = 1e10 * (1 - self.bias)
                d = a + torch.zeros(4)
                e = self.cache
                f = self.mixed
        """
    )
    scope = next(s for s in ctx.scopes if s.name == "forward")
    found = {a.target: ctx.known_dtype(a.value, scope, a.order) for a in ctx.assignments if a.scope is scope}
    assert found == {"a": MODULE_FP32, "b": MODULE_FP32, "c": MODULE_FP32, "d": "fp32", "e": None, "f": None}


def test_known_dtype_reads_a_dtype_the_function_binds_to_one_constant():
    """`dtype = torch.bfloat16` then `torch.randn(n, dtype=dtype)` is bf16 (TransformerEngine's
    quantize benchmark); a parameter, a second value, a loop or a `with ... as` binding it tells
    nothing."""
    ctx = build(
        """
        import torch

        def one(n):
            dtype = torch.bfloat16
            a = torch.randn(n, dtype=dtype)
            b = torch.zeros(n).to(dtype)

        def param(n, dtype=torch.bfloat16):
            c = torch.randn(n, dtype=dtype)

        def two(n, flag):
            dtype = torch.bfloat16
            if flag:
                dtype = torch.float16
            d = torch.randn(n, dtype=dtype)

        def loop(n):
            dtype = torch.bfloat16
            for dtype in (torch.float16, torch.float32):
                e = torch.randn(n, dtype=dtype)

        def same(n, flag):
            dtype = torch.float16
            if flag:
                dtype = torch.half
            f = torch.full((n,), 0.0, dtype=dtype)
        """
    )
    found = {}
    for name in ("one", "param", "two", "loop", "same"):
        scope = ctx.scope_named(name)
        found.update({a.target: ctx.known_dtype(a.value, scope, a.order) for a in ctx.assignments if a.scope is scope and a.target != "dtype"})
    assert found == {"a": "bf16", "b": "bf16", "c": None, "d": None, "e": None, "f": "fp16"}
