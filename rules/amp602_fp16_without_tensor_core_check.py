"""AMP602 fp16-without-tensor-core-check."""
from __future__ import annotations

from typing import Iterator

from amplint.model import AutocastRegion, Diagnostic, Invalid, ModuleContext, Rule, Severity, Valid, torchapi


class Fp16WithoutTensorCoreCheck(Rule):
    """
    ## What it does
    Flags CUDA autocast regions running fp16 (`dtype=torch.float16`, or no
    dtype: CUDA's default) in a file that never checks the GPU's compute
    capability (`torch.cuda.get_device_capability()` or
    `torch.cuda.get_device_properties(...)`). Reported once per file, on the
    first such region. Off by default (info).

    ## Why is this bad?
    fp16 tensor cores start at compute capability 7.0 (Volta: V100; then
    Turing 7.5, Ampere 8.x, Ada 8.9, Hopper 9.0). Below that, autocast still
    works, but the matmuls and convolutions it lowers to fp16 run without
    tensor cores, so the speed-up that mixed precision is used for may not
    come (consumer Pascal GPUs are slow at fp16 arithmetic). Logging or
    checking the capability makes a slow run explainable.

    ## Example
    ```python
    with torch.autocast("cuda"):
        loss = model(x).loss
    ```

    ## Use instead
    ```python
    use_amp = torch.cuda.get_device_capability() >= (7, 0)
    with torch.autocast("cuda", enabled=use_amp):
        loss = model(x).loss
    ```

    ## Fix safety
    No fix is offered.

    ## Verification
    `amplint --verify` reports the CUDA device's compute capability; the
    finding is confirmed below 7.0 and not reproduced on Volta or newer.
    Nothing is timed. On a CPU run it is inconclusive ("needs CUDA").

    ## Notes
    bf16 regions are AMP601's business (threshold 8.0). CPU autocast and
    framework regions (`accelerator.autocast()`) are not flagged. The speed
    ratio itself depends on the GPU and is not claimed here.

    ## References
    - amplint's evidence page: `amplint --explain AMP602` (docs/evidence.md#amp602)
    - https://pytorch.org/docs/stable/generated/torch.cuda.get_device_capability.html
    """

    code = "AMP602"
    name = "fp16-without-tensor-core-check"
    severity = Severity.INFO
    message = "CUDA fp16 autocast without a compute-capability check"
    triggers = ("autocast",)

    VALID = [
        Valid(
            """
import torch
major, minor = torch.cuda.get_device_capability()
use_amp = major >= 7
with torch.autocast("cuda", enabled=use_amp):
    loss = model(x).mean()
""",
            "a capability check",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).mean()
""",
            "bf16: AMP601's business",
        ),
        Valid(
            """
import torch
with torch.autocast("cpu", dtype=torch.float16):
    loss = model(x).mean()
""",
            "CPU autocast",
        ),
        Valid(
            """
from torch.cuda.amp import autocast
with autocast(enabled=False):
    loss = model(x).mean()
""",
            "a disabled region",
        ),
        Valid(
            """
import torch
props = torch.cuda.get_device_properties(0)
print(f"GPU {props.name}, capability {props.major}.{props.minor}")
with torch.autocast("cuda"):
    loss = model(x).mean()
""",
            "the capability is logged",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
""",
            line=4,
        ),
        Invalid(
            """
from torch.cuda.amp import autocast as amp_autocast

class Trainer:
    def train_step(self, batch):
        with amp_autocast(enabled=self.use_amp):
            return self.model(**batch).loss
""",
            line=5,
        ),
        Invalid(
            """
import torch
from torch import nn

class Net(nn.Module):
    @torch.amp.autocast("cuda", dtype=torch.half)
    def forward(self, x):
        return self.body(x)
""",
            line=5,
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        regions = [
            r
            for r in ctx.regions
            if r.device == "cuda" and r.dtype == "fp16" and r.enabled is not False and not r.framework
            and not _version_gated(ctx, r)
        ]
        if not regions or ctx.calls_to(*torchapi.CAPABILITY_FUNCTIONS):
            return
        count = "1 region" if len(regions) == 1 else f"{len(regions)} regions"
        message = f"CUDA fp16 autocast ({count}) with no compute-capability check in this file"
        help = "Check or log `torch.cuda.get_device_capability() >= (7, 0)`"
        yield ctx.diagnostic(self, regions[0].call, message, data={"regions": len(regions)}, help=help)


def _version_gated(ctx: ModuleContext, r: AutocastRegion) -> bool:
    """Regions in compatibility branches for old torch versions (`if TORCH_VERSION < ...`)."""
    info = ctx.call_info(r.call)
    return info is not None and ctx.is_version_gated(info.path)
