"""AMP204 autocast-disabled-without-cast."""
from __future__ import annotations

import re


from typing import Iterator, Optional, Set

import libcst as cst

from amplint.model import (
    AutocastOp, AutocastRegion, Diagnostic, Invalid, ModuleContext, Rule, Severity, Valid, active_region,
    assignment_before, autocast_op_of, autocast_ops, make_fix, region_within, replace_node, same_device,
    strip_views, torchapi,
)

_DTYPE_WORDS = {"fp16": "fp16", "bf16": "bf16", None: "fp16 or bf16"}


class AutocastDisabledWithoutCast(Rule):
    """
    ## What it does
    Inside a nested `autocast(..., enabled=False)` region, flags a tensor that
    was produced in the enclosing low-precision region by an op autocast runs
    in fp16/bf16 (`h = self.fc1(x)`, `scores = q @ k.transpose(-2, -1)`) and
    is now fed, without `.float()` / `.to(torch.float32)`, to an op that the
    author took out of autocast (`linear`, `matmul`, `bmm`, a convolution...).

    ## Why is this bad?
    `autocast(enabled=False)` stops autocast from casting anything; it does
    not convert tensors that already are fp16/bf16. PyTorch's autocast
    documentation says tensors coming from the surrounding region must be cast
    back by hand. Without the cast the op runs on the low-precision tensor: with
    an fp32 weight it raises `mat1 and mat2 must have the same dtype` (amp-facts
    §6.4), and with low-precision operands on both sides it silently runs in
    fp16/bf16, which is exactly what disabling autocast was meant to prevent.

    ## Example
    ```python
    with torch.autocast("cuda"):
        h = self.proj(x)
        with torch.autocast("cuda", enabled=False):
            out = self.head(h)  # h is fp16, head's weight fp32
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        h = self.proj(x)
        with torch.autocast("cuda", enabled=False):
            out = self.head(h.float())
    ```

    ## Fix safety
    Unsafe: appends `.float()` to the flagged name. That is what the docs
    prescribe, but it changes the op's dtype (and memory use), so it is
    offered for review rather than applied blindly.

    ## Verification
    `amplint --verify` produces the tensor under the region's autocast and
    runs the op inside `autocast(enabled=False)` with and without the cast,
    reporting the dtype or the exception.

    ## Notes
    Only names assigned inside the enclosing region, in the same function,
    from an op on that device's lower-precision list are followed, and only
    uses in such ops are flagged. A disabled region for another device
    (`autocast("cpu", enabled=False)` inside CUDA autocast) does not turn
    CUDA autocast off and is not considered.

    ## References
    - amp-facts.md §1.1, §5 (nested `autocast(enabled=False)` regions must cast their inputs; E27), §6.4
    - https://pytorch.org/docs/stable/amp.html#torch.autocast
    """

    code = "AMP204"
    name = "autocast-disabled-without-cast"
    severity = Severity.WARNING
    message = "low-precision tensor used inside autocast(enabled=False) without a cast"
    triggers = ("autocast",)  # a region in this file (every region is an autocast call)
    requires = (("False",),)  # the enabled=False region
    #: an autocast region: a call of autocast (any spelling ends so) or an import alias of it
    gate_regex = re.compile(r"autocast\s*\(|autocast\s+as\s")
    #: findings depend only on the region's own definition, module-level statements and the class family
    gate_sites = "amplint.core.gates:autocast_region_lines"
    facts = ("§1.1", "§5")

    VALID = [
        Valid(
            """
import torch
from torch import nn
proj, head = nn.Linear(8, 8), nn.Linear(8, 2)
with torch.autocast("cuda"):
    h = proj(x)
    with torch.autocast("cuda", enabled=False):
        out = head(h.float())
""",
            "the input is cast with .float(), as the docs prescribe",
        ),
        Valid(
            """
import torch
from torch import nn
proj = nn.Linear(8, 8)
head = nn.Linear(8, 2)
with torch.autocast("cuda", dtype=torch.bfloat16):
    h = proj(x)
    with torch.autocast("cuda", enabled=False):
        h = h.to(torch.float32)
        out = head(h)
""",
            "recast at the top of the disabled region",
        ),
        Valid(
            """
import torch
head = torch.nn.Linear(8, 2)
with torch.autocast("cuda"):
    h = x.softmax(-1)
    with torch.autocast("cuda", enabled=False):
        out = head(h)
""",
            "softmax is not on the lower-precision list: h is not known to be fp16",
        ),
        Valid(
            """
import torch
proj = torch.nn.Linear(8, 8)
head = torch.nn.Linear(8, 2)
h = proj(x)
with torch.autocast("cuda"):
    y = proj(x)
    with torch.autocast("cuda", enabled=False):
        out = head(h)
""",
            "h was computed before autocast started: it is fp32",
        ),
        Valid(
            """
import torch
proj = torch.nn.Linear(8, 8)
head = torch.nn.Linear(8, 2)
with torch.autocast("cuda"):
    h = proj(x)
    with torch.autocast("cpu", enabled=False):
        out = head(h)
""",
            "disabling CPU autocast leaves CUDA autocast on: head(h) is autocast",
        ),
        Valid(
            """
import torch
proj = torch.nn.Linear(8, 8)
with torch.autocast("cuda"):
    h = proj(x)
    with torch.autocast("cuda", enabled=False):
        total = h.sum()
""",
            "h feeds an op that is not on the lower-precision list",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from torch import nn

class Head(nn.Module):
    def __init__(self, dim, n_classes):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, n_classes)

    def forward(self, x):
        with torch.autocast("cuda"):
            h = self.proj(x)
            with torch.autocast("cuda", enabled=False):
                return self.out(h)
""",
            line=14,
            fixed="""
import torch
from torch import nn

class Head(nn.Module):
    def __init__(self, dim, n_classes):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, n_classes)

    def forward(self, x):
        with torch.autocast("cuda"):
            h = self.proj(x)
            with torch.autocast("cuda", enabled=False):
                return self.out(h.float())
""",
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import autocast

def attention(q, k, v):
    with autocast():
        scores = q @ k.transpose(-2, -1)
        with autocast(enabled=False):
            return torch.bmm(scores, v.float())
""",
            line=8,
        ),
        Invalid(
            """
import torch as th
import torch.nn.functional as F
for x in loader:
    with th.amp.autocast(device_type="cpu", dtype=th.bfloat16):
        h = F.linear(x, w1)
        if stable:
            with th.amp.autocast(device_type="cpu", enabled=False):
                y = F.linear(h, w2)
""",
            line=8,
        ),
        Invalid(
            """
import torch
def step(model, x, w, device_type):
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
        feats = torch.matmul(x, w)
        with torch.autocast(device_type=device_type, enabled=False):
            logits = feats @ w.t()
    return logits
""",
            line=6,
            why="the same device expression on both regions",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        if not any(r.enabled is False for r in ctx.regions):
            return
        reported: Set[int] = set()
        for disabled in ctx.regions:
            if disabled.enabled is not False:
                continue
            outer = _enclosing(ctx, disabled)
            if outer is None:
                continue
            for op in autocast_ops(ctx):
                if not region_within(op.region, disabled) or not torchapi.runs_in_lower_precision(op.op, outer.device):
                    continue
                active = active_region(op.region)
                if active is not None and (active is outer or same_device(ctx, active, outer)):
                    continue  # autocast for that device is on again around the op
                for inp in op.inputs:
                    base = strip_views(ctx, inp)
                    if not isinstance(base, cst.Name) or id(base) in reported:
                        continue
                    source = _low_precision_source(ctx, base, op, outer, disabled)
                    if source is None:
                        continue
                    reported.add(id(base))
                    yield self._diagnostic(ctx, base, source, op, outer, disabled)

    def _diagnostic(
        self, ctx: ModuleContext, name: cst.Name, source: AutocastOp, op: AutocastOp, outer: AutocastRegion, disabled: AutocastRegion
    ) -> Diagnostic:
        dtype = _DTYPE_WORDS.get(outer.dtype, "fp16 or bf16")
        outer_row = ctx.position(outer.call)[0].row
        disabled_row = ctx.position(disabled.call)[0].row
        message = (
            f"`{name.value}` comes from `{source.op}` under the autocast region of line {outer_row}, so it is "
            f"{dtype}; `autocast(enabled=False)` (line {disabled_row}) casts nothing back, so `{op.op}` here "
            f"either raises a dtype mismatch against an fp32 operand or silently runs in {dtype}; "
            f"use `{name.value}.float()`"
        )
        fix = make_fix(f"Cast `{name.value}` with `.float()`", [replace_node(ctx, name, f"{name.value}.float()")], safe=False)
        return ctx.diagnostic(
            self,
            name,
            message,
            fix=fix,
            data={"name": name.value, "source_op": source.op, "op": op.op, "device": outer.device, "dtype": outer.dtype},
        )


def _enclosing(ctx: ModuleContext, disabled: AutocastRegion) -> Optional[AutocastRegion]:
    """The region of the same device that `disabled` switches off, if it was on."""
    r = disabled.parent
    while r is not None:
        if same_device(ctx, r, disabled):
            return None if r.enabled is False or r.framework or r.dtype == "fp32" else r
        r = r.parent
    return None


def _low_precision_source(
    ctx: ModuleContext, name: cst.Name, op: AutocastOp, outer: AutocastRegion, disabled: AutocastRegion
) -> Optional[AutocastOp]:
    """The lower-precision op whose result `name` holds, assigned under `outer` but outside `disabled`."""
    a = assignment_before(ctx, name.value, op.scope, op.statement, op.order)
    if a is None or a.unpacked:
        return None
    if region_within(a.region, disabled) or active_region(a.region) is not outer:
        return None
    source = autocast_op_of(ctx, strip_views(ctx, a.value))
    if source is None or not torchapi.runs_in_lower_precision(source.op, outer.device):
        return None
    return source
