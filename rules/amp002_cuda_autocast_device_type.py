"""AMP002 cuda-autocast-device-type."""
from __future__ import annotations

from typing import Iterator, List, Optional

import libcst as cst

from amplint.model import (
    DEPRECATED_AMP, Diagnostic, Invalid, ModuleContext, Reference, Rule, Severity, Valid, call_is_plain,
    imported_names, insert_keyword_edits, make_fix, replace_node, rewrite_with_imports,
)

_TYPE_ERROR = "TypeError: autocast.__new__() got an unexpected keyword argument 'device_type'"


class CudaAutocastDeviceType(Rule):
    """
    ## What it does
    Flags `torch.cuda.amp.autocast(device_type=...)` (and the same call on
    `torch.cpu.amp.autocast`), in any import or alias spelling.

    ## Why is this bad?
    The device-specific autocast classes take `(enabled, dtype, cache_enabled)`;
    they have no `device_type` parameter. The call raises
    `TypeError: autocast.__new__() got an unexpected keyword argument
    'device_type'` the moment it runs. It is a common mix-up
    of the two APIs, spread by tutorials that import `autocast` from
    `torch.cuda.amp` and then call it with `device_type="cuda"`.

    ## Example
    ```python
    from torch.cuda.amp import autocast

    with autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Use instead
    ```python
    import torch

    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Fix safety
    Safe: the call is rewritten to `torch.autocast(...)` (available since torch
    1.10), keeping every keyword and mapping any positional argument to the
    keyword it had (`enabled`, `dtype`, `cache_enabled`). `import torch` is
    added when missing and a `from torch.cuda.amp import autocast` left unused
    is removed. No fix for calls with `*args`/`**kwargs` or when
    `torch-version` is older than 1.10.

    ## Verification
    `amplint --verify` makes the same call on the installed torch and reports
    the TypeError.

    ## Notes
    The call raises wherever it runs, so unlike AMP001 this rule also fires
    inside version-gated branches. A name that may be either `torch.amp.autocast`
    or `torch.cuda.amp.autocast` (a try/except ImportError import) is left alone:
    the call is valid on the torch that takes the first branch.

    ## References
    - amplint's evidence page: `amplint --explain AMP002` (docs/evidence.md#amp002)
    - https://pytorch.org/docs/stable/amp.html#torch.autocast
    """

    code = "AMP002"
    name = "cuda-autocast-device-type"
    severity = Severity.ERROR
    message = "torch.cuda.amp.autocast has no device_type parameter"
    # the deprecated class is spelled through torch.cuda.amp / torch.cpu.amp / `from torch.cuda import amp`
    triggers = ("cuda.amp", "cpu.amp", "import amp")
    requires = (("device_type",),)  # only torch.cuda.amp.autocast(device_type=...) crashes

    VALID = [
        Valid(
            """
import torch
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = model(x)
""",
            "the generic autocast takes device_type",
        ),
        Valid(
            """
from torch.amp import autocast
with autocast(device_type="cuda"):
    loss = model(x)
""",
            "torch.amp.autocast imported by name",
        ),
        Valid(
            """
try:
    from torch.amp import autocast
except ImportError:
    from torch.cuda.amp import autocast
with autocast(device_type="cuda"):
    loss = model(x)
""",
            "ambiguous fallback import: valid on the torch that has torch.amp",
        ),
        Valid(
            """
from torch.cuda.amp import autocast
with autocast(dtype=torch.bfloat16):
    loss = model(x)
""",
            "deprecated but valid (AMP001's business)",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator()
with accelerator.autocast():
    out = model(batch, device_type="cuda")
""",
            "device_type passed to something else",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from torch.cuda.amp import autocast
with autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = model(x)
""",
            line=3,
            fixed="""
import torch
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = model(x)
""",
        ),
        Invalid(
            """
import torch

class Trainer:
    def train_step(self, batch):
        with torch.cuda.amp.autocast(self.use_amp, device_type="cuda"):
            out = self.model(batch)
        return out
""",
            line=5,
            fixed="""
import torch

class Trainer:
    def train_step(self, batch):
        with torch.autocast(enabled=self.use_amp, device_type="cuda"):
            out = self.model(batch)
        return out
""",
        ),
        Invalid(
            """
from torch.cuda import amp as cuda_amp
from torch.cuda.amp import GradScaler
scaler = GradScaler()
for x in loader:
    if bf16:
        ctx = cuda_amp.autocast(device_type="cuda", dtype=torch.bfloat16)
    else:
        ctx = cuda_amp.autocast()
""",
            line=6,
            fixed="""
import torch
from torch.cuda import amp as cuda_amp
from torch.cuda.amp import GradScaler
scaler = GradScaler()
for x in loader:
    if bf16:
        ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    else:
        ctx = cuda_amp.autocast()
""",
        ),
        Invalid(
            """
import torch.cpu.amp as cpu_amp
with cpu_amp.autocast(device_type="cpu"):
    out = model(x)
""",
            line=2,
            fixed="""
import torch
with torch.autocast(device_type="cpu"):
    out = model(x)
""",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        flagged = [r for r in ctx.references() if _crashes(ctx, r)]
        for ref in flagged:
            edits = rewrite_with_imports(ctx, self.code, ref, flagged, lambda r, p: _rewrite(ctx, r, p))
            needs = "" if ctx.config.torch_version is not None else " (needs torch >= 1.10)"
            fix = make_fix(f"Use `torch.autocast(device_type=...)`{needs}", edits, safe=True) if edits else None
            old = DEPRECATED_AMP[min(ref.qualnames)].old  # min: a name bound two ways reads the same in every process
            spelled = ctx.code_for(ref.node)
            name = f"`{old}`" if spelled == old else f"`{spelled}` (`{old}`)"
            message = f"{name} has no `device_type` parameter; this call raises `TypeError`"
            yield ctx.diagnostic(
                self,
                ref.call,
                message,
                fix=fix,
                help="Use `torch.autocast(device_type=...)`",
                data={
                    "deprecated": old,
                    "exception": _TYPE_ERROR,
                    "snippet": ctx.code_for(ref.call),
                    "names": imported_names(ctx, ref.call),
                },
            )


def _crashes(ctx: ModuleContext, ref: Reference) -> bool:
    if ref.use != "call" or ref.call is None:
        return False
    apis = [DEPRECATED_AMP.get(q) for q in ref.qualnames]
    if not apis or any(a is None or a.kind != "autocast" for a in apis):
        return False
    if ctx.is_rebound(ref.root):
        return False
    return any(a.keyword is not None and a.keyword.value == "device_type" for a in ref.call.args)


def _rewrite(ctx: ModuleContext, ref: Reference, prefix: str) -> Optional[List]:
    if not _crashes(ctx, ref):
        return None
    version = ctx.config.torch_version
    if version is not None and version < (1, 10):
        return None
    call: cst.Call = ref.call
    api = DEPRECATED_AMP[min(ref.qualnames)]  # min, not the set's hash order
    if not call_is_plain(call) or sum(1 for a in call.args if a.keyword is None) > len(api.params):
        return None
    return [replace_node(ctx, ref.node, f"{prefix}.autocast"), *insert_keyword_edits(ctx, call, api.params)]
