"""AMP503 custom-fwd-without-device-type."""
from __future__ import annotations

from typing import Iterator

from amplint.model import (
    AMP_CUSTOM_BWD, AMP_CUSTOM_FWD, CUSTOM_FWD_BWD, Diagnostic, Invalid, ModuleContext, Reference, Rule, Severity,
    Valid, append_argument_edit, call_is_plain, imported_names, make_fix, replace_node,
)

_ALL = AMP_CUSTOM_FWD | AMP_CUSTOM_BWD


class CustomFwdWithoutDeviceType(Rule):
    """
    ## What it does
    Flags `torch.amp.custom_fwd` / `torch.amp.custom_bwd` (any alias) used as a
    bare decorator (`@custom_fwd`) or called without `device_type=`
    (`@custom_fwd(cast_inputs=torch.float32)`, `custom_bwd(backward)`).

    ## Why is this bad?
    Unlike the deprecated `torch.cuda.amp` versions, the generic decorators take
    a required keyword-only `device_type`. Without it the decorator raises
    `TypeError: custom_fwd() missing 1 required keyword-only argument:
    'device_type'` when the class body runs, which is at
    import time: the module cannot even be imported. The docs page's bare
    `@custom_fwd` example is only valid for `torch.cuda.amp.custom_fwd`.

    ## Example
    ```python
    from torch.amp import custom_bwd, custom_fwd

    class MyMM(torch.autograd.Function):
        @staticmethod
        @custom_fwd
        def forward(ctx, a, b): ...

        @staticmethod
        @custom_bwd
        def backward(ctx, grad): ...
    ```

    ## Use instead
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @custom_fwd(device_type="cuda")
        def forward(ctx, a, b): ...

        @staticmethod
        @custom_bwd(device_type="cuda")
        def backward(ctx, grad): ...
    ```

    ## Fix safety
    Safe: adds `device_type="cuda"` (the device the `torch.cuda.amp` forms
    implied), or the one device every autocast region of the file names
    (`"cpu"` in a CPU-only file). No fix when the name may also be the
    deprecated `torch.cuda.amp` decorator (a try/except ImportError import),
    because that one rejects `device_type`.

    ## Verification
    `amplint --verify` applies the decorator to a function on the installed
    torch and reports the TypeError.

    ## Notes
    The deprecated `torch.cuda.amp.custom_fwd` / `custom_bwd` take no
    `device_type` and are AMP001's business. A name rebound in the file
    (`custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")`)
    is not followed.

    ## References
    - amplint's evidence page: `amplint --explain AMP503` (docs/evidence.md#amp503)
    - https://pytorch.org/docs/stable/amp.html#torch.amp.custom_fwd
    """

    code = "AMP503"
    name = "custom-fwd-without-device-type"
    severity = Severity.ERROR
    message = "torch.amp.custom_fwd/custom_bwd without device_type"
    triggers = ("custom_fwd", "custom_bwd")

    VALID = [
        Valid(
            """
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, a, b):
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        return grad, grad
""",
            "device_type given",
        ),
        Valid(
            """
from torch.cuda.amp import custom_bwd, custom_fwd
class MyMM(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, a, b):
        return a.mm(b)

    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        return grad, grad
""",
            "the deprecated torch.cuda.amp forms take no device_type (AMP001 covers them)",
        ),
        Valid(
            """
import functools
import torch
custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="cuda")

class F(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x * 2
""",
            "a local partial that binds device_type",
        ),
        Valid(
            """
from torch.amp import custom_fwd
kwargs = {"device_type": "cuda"}
class F(torch.autograd.Function):
    @staticmethod
    @custom_fwd(**kwargs)
    def forward(ctx, x):
        return x * 2
""",
            "**kwargs may carry device_type",
        ),
        Valid(
            '''
import torch
def doc():
    """Decorate with @torch.amp.custom_fwd and @torch.amp.custom_bwd."""
''',
            "text in a docstring",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad.mm(b.t()), a.t().mm(grad)
""",
            line=4,
            count=2,
            fixed="""
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad.mm(b.t()), a.t().mm(grad)
""",
        ),
        Invalid(
            """
from torch.amp import custom_fwd as fwd_decorator
import torch

class Fp32Op(torch.autograd.Function):
    @staticmethod
    @fwd_decorator(cast_inputs=torch.float32)
    def forward(ctx, x):
        return my_ext.run(x)
""",
            line=6,
            fixed="""
from torch.amp import custom_fwd as fwd_decorator
import torch

class Fp32Op(torch.autograd.Function):
    @staticmethod
    @fwd_decorator(cast_inputs=torch.float32, device_type="cuda")
    def forward(ctx, x):
        return my_ext.run(x)
""",
        ),
        Invalid(
            """
from torch import amp
import torch

class Gelu(torch.autograd.Function):
    forward = staticmethod(amp.custom_fwd(_gelu_forward))
    backward = staticmethod(amp.custom_bwd(_gelu_backward))

with torch.autocast("cpu"):
    y = Gelu.apply(x)
""",
            line=5,
            count=2,
            fixed="""
from torch import amp
import torch

class Gelu(torch.autograd.Function):
    forward = staticmethod(amp.custom_fwd(_gelu_forward, device_type="cpu"))
    backward = staticmethod(amp.custom_bwd(_gelu_backward, device_type="cpu"))

with torch.autocast("cpu"):
    y = Gelu.apply(x)
""",
            why="functional form; the file's only autocast device is cpu",
        ),
        Invalid(
            """
try:
    from torch.amp import custom_fwd
except ImportError:
    from torch.cuda.amp import custom_fwd

class F(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x * 2
""",
            line=8,
            why="raises on every torch that has torch.amp; no fix (the fallback rejects device_type)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        device = _device(ctx)
        for ref in ctx.references():
            if not ref.qualnames & _ALL or ref.use == "bare" or ctx.is_rebound(ref.root):
                continue
            if not ref.qualnames <= CUSTOM_FWD_BWD:
                continue  # may be something else entirely
            if ref.use == "call" and not _lacks_device_type(ref):
                continue
            which = "custom_bwd" if ref.qualnames & AMP_CUSTOM_BWD else "custom_fwd"
            ambiguous = not ref.qualnames <= _ALL
            fix = None if ambiguous else _fix(ctx, ref, device)
            spelled = ctx.code_for(ref.node)
            message = f"`{spelled}` without `device_type=` raises `TypeError` at import"
            if ambiguous:
                message += " (unless it is `torch.cuda.amp`'s)"
            node = ref.decorator.decorator if ref.decorator is not None else ref.call
            data = {"decorator": f"torch.amp.{which}", "snippet": ctx.code_for(node), "names": imported_names(ctx, node)}
            yield ctx.diagnostic(self, node, message, fix=fix, data=data, help=f'Pass `device_type="{device}"`')


def _lacks_device_type(ref: Reference) -> bool:
    call = ref.call
    if any(a.star == "**" for a in call.args):
        return False
    return not any(a.keyword is not None and a.keyword.value == "device_type" for a in call.args)


def _device(ctx: ModuleContext) -> str:
    devices = {r.device for r in ctx.regions if not r.framework}
    if len(devices) == 1 and None not in devices:
        return next(iter(devices))
    return "cuda"


def _fix(ctx: ModuleContext, ref: Reference, device: str):
    text = f'device_type="{device}"'
    if ref.use == "decorator":
        edit = replace_node(ctx, ref.node, f"{ctx.code_for(ref.node)}({text})")
    elif ref.call is not None and call_is_plain(ref.call):
        edit = append_argument_edit(ctx, ref.call, text)
    else:
        return None
    return make_fix(f"Add `{text}`", [edit], safe=True)
