"""AMP108 scaler-with-bf16."""
from __future__ import annotations

from typing import Iterator

from amplint.model import CallInfo, Diagnostic, Invalid, ModuleContext, Rule, Severity, Valid


class ScalerWithBf16(Rule):
    """
    ## What it does
    Flags an enabled `GradScaler` in a file whose autocast regions are all
    bf16 (and that has no fp16 cast or dtype anywhere).

    ## Why is this bad?
    It is harmless but unneeded: bf16 has fp32's exponent range (max 3.39e38,
    the same smallest normal 1.18e-38), so gradients do not underflow and
    there is nothing to scale. The scaler still
    costs a pass over every gradient in `unscale_` and a host sync per step
    (`step` reads `found_inf` with `.item()`), and its state adds noise to
    checkpoints.

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    ```
    Or keep one code path for both dtypes:
    `GradScaler("cuda", enabled=(dtype == torch.float16))`.

    ## Fix safety
    No fix: removing the scaler changes the step and the checkpoint format.

    ## Verification
    `amplint --verify` trains a tiny model 20 steps under bf16 autocast from
    one seed with and without a GradScaler and reports whether the final
    parameters are bitwise identical, the steps skipped, and the scaler's
    extra work per step (one unscale/inf-check pass over every gradient
    element, the `.item()` host sync in `step`, one scale update) with the
    median step times (reported, not judged). Confirmed ("unneeded: same
    parameters, extra work") when the parameters are identical.

    ## Notes
    Silent when any region is fp16 or of unknown dtype, when the file casts
    anything to fp16 or names `torch.float16`, when the scaler's `enabled=`
    is decided at run time (`enabled=(dtype == "float16")`, `enabled=args.fp16`),
    and for framework regions (`accelerator.autocast()`).

    ## References
    - amplint's evidence page: `amplint --explain AMP108` (docs/evidence.md#amp108)
    - https://github.com/pytorch/pytorch/issues/36169
    """

    code = "AMP108"
    name = "scaler-with-bf16"
    severity = Severity.INFO
    message = "GradScaler is unneeded with bf16 autocast"
    triggers = ("GradScaler",)

    VALID = [
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x)
scaler.scale(loss).backward()
""",
            "enabled only for fp16",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda"):
    loss = model(x)
scaler.scale(loss).backward()
""",
            "CUDA autocast defaults to fp16",
        ),
        Valid(
            """
import torch
amp_dtype = torch.bfloat16 if args.bf16 else torch.float16
scaler = torch.amp.GradScaler("cuda", enabled=not args.bf16)
with torch.autocast("cuda", dtype=amp_dtype):
    loss = model(x)
""",
            "dtype decided at run time",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    feats = backbone(x)
with torch.autocast("cuda", dtype=torch.float16):
    loss = head(feats)
scaler.scale(loss).backward()
""",
            "an fp16 region too",
        ),
        Valid(
            """
import torch
scaler = torch.cuda.amp.GradScaler()
for x in loader:
    loss = model(x)
    scaler.scale(loss).backward()
""",
            "no autocast region in this file: its dtype is unknown here",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            line=2,
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler
import torch

class Trainer:
    def __init__(self):
        self.scaler = GradScaler()

    def step(self, batch):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=self.use_amp):
            loss = self.model(**batch).loss
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            line=6,
        ),
        Invalid(
            """
from torch import amp
scaler = amp.GradScaler("cpu")
with amp.autocast("cpu"):
    loss = model(x)
scaler.scale(loss).backward()
""",
            line=2,
            why="CPU autocast defaults to bf16",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        regions = [r for r in ctx.regions if r.enabled is not False]
        if not regions or any(r.framework or r.dtype != "bf16" for r in regions):
            return
        if any(c.dtype == "fp16" for c in ctx.low_precision_casts) or any(d == "fp16" for d, _ in ctx.dtype_refs):
            return
        for info in ctx.scalers.values():
            if info.enabled is not True:
                continue
            for ctor in info.constructors:
                yield self._diagnostic(ctx, ctor)

    def _diagnostic(self, ctx: ModuleContext, ctor: CallInfo) -> Diagnostic:
        message = "GradScaler is enabled but every autocast region in this file is bf16, which needs no scaling"
        help = "Drop the scaler, or build it with `enabled=(dtype == torch.float16)`"
        return ctx.diagnostic(self, ctor.node, message, help=help)
