"""AMP601 bf16-without-capability-check."""
from __future__ import annotations

from typing import Iterator, List

from amplint.model import (
    AutocastRegion, Diagnostic, Invalid, ModuleContext, Rule, Severity, Valid, literal_bool, torchapi,
)


class Bf16WithoutCapabilityCheck(Rule):
    """
    ## What it does
    Flags CUDA autocast regions with `dtype=torch.bfloat16` in a file that
    never checks the GPU's compute capability (`torch.cuda.get_device_capability()`,
    `torch.cuda.get_device_properties(...)`, or
    `torch.cuda.is_bf16_supported(including_emulation=False)`). Reported once
    per file, on the first such region. Off by default (info).

    ## Why is this bad?
    bf16 tensor cores start at compute capability 8.0 (Ampere). On Volta,
    Turing and even Pascal, bf16 autocast does not raise and does not fall back
    to fp32: ops run on bf16 tensors without bf16 tensor cores, which one user
    measured 1.85x *slower* than fp32 for a matmul on a GTX 1080, and cuDNN has
    no bf16 convolution engines there, so some convolutions fail. The bare
    `torch.cuda.is_bf16_supported()` does not protect against this: with its
    default `including_emulation=True` it returns True on those GPUs whenever a
    bf16 tensor can be created (a T4 and a GTX 1080 both report True).

    ## Example
    ```python
    use_bf16 = torch.cuda.is_bf16_supported()  # True on a T4, by emulation
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
        loss = model(x).loss
    ```

    ## Use instead
    ```python
    use_bf16 = torch.cuda.get_device_capability() >= (8, 0)
    dtype = torch.bfloat16 if use_bf16 else torch.float16
    with torch.autocast("cuda", dtype=dtype):
        loss = model(x).loss
    ```

    ## Fix safety
    No fix is offered: choosing the fallback (fp16 with a GradScaler, or
    fp32) is the author's decision.

    ## Verification
    `amplint --verify` reports the CUDA device's compute capability and
    `is_bf16_supported()` with and without `including_emulation=False`; the
    finding is confirmed below 8.0 and not reproduced on Ampere or newer.
    Nothing is timed. On a CPU run it is inconclusive ("needs CUDA").

    ## Notes
    CPU bf16 autocast is not flagged (its speed-up needs AVX512-BF16/AMX,
    but it works everywhere), nor regions whose dtype is decided at run time.

    ## References
    - amplint's evidence page: `amplint --explain AMP601` (docs/evidence.md#amp601)
    - https://pytorch.org/docs/stable/generated/torch.cuda.is_bf16_supported.html
    """

    code = "AMP601"
    name = "bf16-without-capability-check"
    severity = Severity.INFO
    message = "CUDA bf16 autocast without a compute-capability check"
    triggers = ("bfloat16",)

    VALID = [
        Valid(
            """
import torch
assert torch.cuda.get_device_capability() >= (8, 0), "bf16 needs an Ampere or newer GPU"
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).mean()
""",
            "a capability check",
        ),
        Valid(
            """
import torch
if not torch.cuda.is_bf16_supported(including_emulation=False):
    raise SystemExit("no bf16 tensor cores")
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).mean()
""",
            "is_bf16_supported without emulation is a capability check",
        ),
        Valid(
            """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = model(x).mean()
""",
            "CPU autocast",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(x).mean()
""",
            "fp16 (AMP602's business)",
        ),
        Valid(
            """
import torch
dtype = torch.bfloat16 if args.bf16 else torch.float16
with torch.autocast("cuda", dtype=dtype):
    loss = model(x).mean()
""",
            "dtype decided at run time",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
""",
            line=3,
        ),
        Invalid(
            """
import torch
use_bf16 = torch.cuda.is_bf16_supported()
with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_bf16):
    loss = model(x).mean()
""",
            line=3,
            why="the bare is_bf16_supported() is True on Volta/Turing by emulation",
        ),
        Invalid(
            """
from torch import bfloat16, nn
from torch.cuda.amp import autocast

class Model(nn.Module):
    @autocast(dtype=bfloat16)
    def forward(self, x):
        return self.body(x)
""",
            line=5,
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        regions = [r for r in ctx.regions if _cuda_region(r) and r.dtype == "bf16" and not _version_gated(ctx, r)]
        if not regions or capability_checked(ctx, bf16=True):
            return
        bare = bool(ctx.calls_to(*torchapi.BF16_SUPPORT_FUNCTIONS))
        message = f"CUDA bf16 autocast ({_count(regions)}) with no compute-capability check in this file"
        if bare:
            message = f"CUDA bf16 autocast ({_count(regions)}) checked only by `is_bf16_supported()`, True by emulation"
        help = "Check `torch.cuda.get_device_capability() >= (8, 0)`"
        yield ctx.diagnostic(self, regions[0].call, message, data={"regions": len(regions), "bare_is_bf16_supported": bare}, help=help)


def _cuda_region(r: AutocastRegion) -> bool:
    return r.device == "cuda" and r.enabled is not False and not r.framework


def _version_gated(ctx: ModuleContext, r: AutocastRegion) -> bool:
    """Regions in compatibility branches for old torch versions (`if TORCH_VERSION < ...`)."""
    info = ctx.call_info(r.call)
    return info is not None and ctx.is_version_gated(info.path)


def _count(regions: List[AutocastRegion]) -> str:
    return "1 region" if len(regions) == 1 else f"{len(regions)} regions"


def capability_checked(ctx: ModuleContext, bf16: bool) -> bool:
    """Whether the file asks the GPU for its compute capability anywhere."""
    if ctx.calls_to(*torchapi.CAPABILITY_FUNCTIONS):
        return True
    if bf16:
        for call in ctx.calls_to(*torchapi.BF16_SUPPORT_FUNCTIONS):
            if literal_bool(call.arg(0, "including_emulation")) is False:
                return True
    return False
