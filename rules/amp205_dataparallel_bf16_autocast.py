"""AMP205 dataparallel-bf16-autocast."""
from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amplint.model import (
    AutocastRegion, CallInfo, Diagnostic, Invalid, ModuleContext, Rule, Severity, Valid, active_region, call_chain,
    dotted_name, held_autocasts, region_dtype_choices, self_bindings, torchapi,
)


class DataParallelBf16Autocast(Rule):
    """
    ## What it does
    Flags a call of a `torch.nn.DataParallel` model (or of
    `torch.nn.parallel.data_parallel(...)`) inside a `torch.autocast` region
    whose dtype is `torch.bfloat16`.

    ## Why is this bad?
    Autocast state is thread-local, and DataParallel runs each replica in a
    worker thread. Its `parallel_apply` re-enters autocast in every worker
    with only the `enabled` flag of the main thread, not its dtype, so with
    more than one GPU the replicas autocast to CUDA's default dtype, fp16,
    while the code asked for bf16 (docs/evidence.md shows the mechanism). bf16 was usually chosen for its range: in fp16 activations above
    65504 become inf and small gradients underflow without a GradScaler. With
    one GPU DataParallel calls the module in the main thread and bf16 holds,
    so the bug appears only when the job gets a second GPU.

    ## Example
    ```python
    model = torch.nn.DataParallel(model)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).loss
    ```

    ## Use instead
    ```python
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).loss
    ```
    or apply `@torch.autocast("cuda", dtype=torch.bfloat16)` to the wrapped
    model's `forward`, so each replica thread enters it itself.

    ## Fix safety
    No fix is offered: moving to DistributedDataParallel or into `forward`
    is a structural change.

    ## Verification
    On a machine with two or more GPUs, `amplint --verify` calls a tiny
    `DataParallel` model over two of them under bf16 autocast and reports each
    replica's output dtype and the autocast dtype its thread saw (confirmed
    when a replica ran fp16). With fewer it is inconclusive ("needs 2 CUDA
    devices") and reports, as evidence only, the thread-local mechanism on the
    lab's device (a thread re-entering autocast with only `enabled=` gets the
    device default dtype) and whether `parallel_apply` forwards the dtype.

    ## Notes
    Also flags a region whose `dtype=` is picked at run time among literal
    dtypes the file spells, bf16 one of them (`torch.bfloat16 if
    args.amp_dtype == "bfloat16" else torch.float16`; the message says "may
    be bf16"), and an autocast held in a `functools.partial` bound in the file
    and entered later (`amp_autocast = partial(torch.autocast, ...)`, then
    `with amp_autocast():`, or `self.amp_autocast`). fp16 autocast around DataParallel is fine (the replicas' default is
    fp16, and the propagation has worked since torch 1.7), and so is
    DistributedDataParallel. Calls of `model.module(...)` bypass the replicas
    and are not flagged.

    ## References
    - amplint's evidence page: `amplint --explain AMP205` (docs/evidence.md#amp205)
    - pytorch/pytorch `torch/nn/parallel/parallel_apply.py` (`torch.amp.autocast(device_type, enabled=autocast_enabled)`)
    - https://pytorch.org/docs/stable/notes/amp_examples.html#dataparallel-in-a-single-process
    """

    code = "AMP205"
    name = "dataparallel-bf16-autocast"
    severity = Severity.WARNING
    message = "DataParallel called under bf16 autocast: replicas run fp16"
    triggers = ("DataParallel", "data_parallel")
    requires = (("autocast",),)  # the bf16 region is in this file

    VALID = [
        Valid(
            """
import torch
model = torch.nn.DataParallel(model)
with torch.autocast("cuda"):
    loss = model(x).mean()
""",
            "fp16 autocast around DataParallel: the replicas' default dtype is the one asked for",
        ),
        Valid(
            """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(model, device_ids=[rank])
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).mean()
""",
            "DDP runs one process per GPU: no worker threads",
        ),
        Valid(
            """
import torch
model = torch.nn.DataParallel(model)
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model.module(x).mean()
""",
            "`model.module` bypasses the replicas",
        ),
        Valid(
            """
import torch
from torch import nn
class Net(nn.Module):
    @torch.autocast("cuda", dtype=torch.bfloat16)
    def forward(self, x):
        return self.body(x)
model = nn.DataParallel(Net())
loss = model(x).mean()
""",
            "autocast inside forward: every replica thread enters it",
        ),
        Valid(
            """
import torch
model = torch.nn.DataParallel(model)
model = model.module
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).mean()
""",
            "the name was rebound to the inner module",
        ),
        Valid(
            """
import torch
model = torch.nn.DataParallel(model)
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = model(x).mean()
""",
            "CPU autocast: not the CUDA dtype the replicas lose",
        ),
        Valid(
            """
import torch

class Replicated:
    def __init__(self, net):
        self.model = torch.nn.DataParallel(net)

class Trainer:
    def __init__(self, net):
        self.model = net

    def run(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.model(x)
""",
            "`self.model` of another class: `Trainer`'s own model is not DataParallel",
        ),
        Valid(
            """
import torch
from functools import partial
amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.float16)
model = torch.nn.DataParallel(model)
with amp_autocast():
    out = model(x)
""",
            "an fp16 autocast held in a partial: the replicas' default is the dtype asked for",
        ),
        Valid(
            """
import torch
amp_dtype = torch.float16 if args.fp16 else torch.float32
model = torch.nn.DataParallel(model)
with torch.autocast("cuda", dtype=amp_dtype):
    out = model(x)
""",
            "a dtype picked at run time among fp16 and fp32: no bf16 path",
        ),
        Valid(
            """
import torch
from functools import partial
amp_autocast = partial(torch.autocast, "cpu", dtype=torch.bfloat16)
model = torch.nn.DataParallel(model)
with amp_autocast():
    out = model(x)
""",
            "a held CPU autocast",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
amp_dtype = torch.bfloat16 if args.amp_dtype == "bfloat16" else torch.float16
model = torch.nn.DataParallel(model)
with torch.autocast("cuda", dtype=amp_dtype):
    out = model(x)
""",
            line=5,
            why="a dtype picked at run time among literal dtypes, bf16 one of them: on that path the replicas run fp16",
        ),
        Invalid(
            """
from contextlib import suppress
from functools import partial
import torch

def validate(args, model, loader):
    amp_autocast = suppress
    if args.amp:
        amp_dtype = torch.bfloat16 if args.amp_dtype == "bfloat16" else torch.float16
        amp_autocast = partial(torch.autocast, device_type="cuda", dtype=amp_dtype)
    if args.num_gpu > 1:
        model = torch.nn.DataParallel(model, device_ids=list(range(args.num_gpu)))
    for x, y in loader:
        with amp_autocast():
            out = model(x)
""",
            line=14,
            why="an autocast held in a `partial` and entered by `with amp_autocast():` (timm's validate.py)",
        ),
        Invalid(
            """
import torch
from functools import partial

class Evaluator:
    def __init__(self, net):
        self.model = torch.nn.DataParallel(net)
        self.amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16)

    def run(self, x):
        with self.amp_autocast():
            return self.model(x)
""",
            line=11,
        ),
        Invalid(
            """
import torch
n_gpu = torch.cuda.device_count()
if n_gpu > 1:
    model = torch.nn.DataParallel(model)
for batch in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outputs = model(**batch)
        loss = outputs.loss.mean()
    loss.backward()
""",
            line=7,
        ),
        Invalid(
            """
import torch
from torch.nn.parallel import DataParallel as DP

class Trainer:
    def __init__(self, model):
        self.model = DP(model).cuda()

    def train_step(self, x, y):
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            out = self.model(x)
            return torch.nn.functional.cross_entropy(out, y)
""",
            line=10,
        ),
        Invalid(
            """
import torch
from torch.nn.parallel import data_parallel

@torch.autocast("cuda", dtype=torch.bfloat16)
def forward_all(module, x):
    return data_parallel(module, x, device_ids=[0, 1])
""",
            line=6,
        ),
        Invalid(
            """
import torch.nn as nn
from torch import amp, bfloat16
net = nn.DataParallel(build_model()).to("cuda")
def evaluate(batch, device):
    with amp.autocast(device_type=device, dtype=bfloat16):
        return net.forward(batch)
""",
            line=6,
            why="module-level DataParallel, `.forward` spelling, device from a variable",
        ),
        Invalid(
            """
import torch

class Base:
    def __init__(self, net):
        self.model = torch.nn.DataParallel(net)

class Trainer(Base):
    def run(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.model(x)
""",
            line=10,
            why="`self.model` wrapped by a base class defined in the file",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        bf16 = [r for r in ctx.regions if _may_be_bf16(ctx, r)]
        held = [h for h in held_autocasts(ctx) if h.enabled is not False and h.device in ("cuda", None)
                and (h.dtype == "bf16" or (h.dtype is None and "bf16" in h.dtypes))]
        if not bf16 and not held:
            return
        for call in ctx.calls:
            region = active_region(call.region)
            if region is not None:
                if region.framework or region.device not in ("cuda", None) or not _may_be_bf16(ctx, region):
                    continue
                maybe = region.dtype is None
                where = ctx.position(region.call)[0].row
            else:  # `with amp_autocast():`, `amp_autocast = partial(torch.autocast, ...)`
                h = next((h for h in held if h.scope is call.scope and h.contains(ctx, call.node)), None)
                if h is None:
                    continue
                maybe = h.dtype is None
                where = ctx.position(h.node)[0].row
            what = self._replicated(ctx, call)
            if what is not None:
                yield self._diagnostic(ctx, call, where, what, maybe)

    def _replicated(self, ctx: ModuleContext, call: CallInfo) -> Optional[str]:
        """How the call is named when it runs a DataParallel model's replicas (None: it does not)."""
        if call.calls_any(torchapi.DATA_PARALLEL_FUNCTIONS):
            return "torch.nn.parallel.data_parallel(...)"
        if call.qualnames:
            return None
        key = call.dotted
        if call.method == "forward":
            key = call.receiver_dotted
        if key and _is_data_parallel(ctx, key, call):
            return f"`{key}` (a DataParallel model)"
        return None

    def _diagnostic(self, ctx: ModuleContext, call: CallInfo, row: int, what: str, maybe: bool) -> Diagnostic:
        dtype = "an autocast that may be bf16" if maybe else "bf16 autocast"
        message = f"{what} runs under {dtype}, but its replicas autocast to fp16"
        help = "Use DistributedDataParallel, or autocast inside the model's forward"
        return ctx.diagnostic(self, call.node, message, data={"region_line": row, "maybe_bf16": maybe}, help=help)


def _may_be_bf16(ctx: ModuleContext, region: AutocastRegion) -> bool:
    """bf16 autocast, or one whose `dtype=` is picked at run time among literal dtypes the
    file spells, bf16 one of them (`dtype=torch.bfloat16 if args.bf16 else torch.float16`):
    on that documented path the replicas lose it (AMP105 counts a may-be-fp16 region alike)."""
    if region.framework or region.enabled is False:
        return False
    return region.dtype == "bf16" or (region.dtype is None and "bf16" in region_dtype_choices(ctx, region))


def _constructs_data_parallel(ctx: ModuleContext, value: cst.BaseExpression) -> bool:
    sides = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
    for side in sides:
        for c in call_chain(side):
            if not ctx.qualnames(c.func).isdisjoint(torchapi.DATA_PARALLEL_CLASSES):
                return True
    return False


def _chain_root(value: cst.BaseExpression) -> Optional[str]:
    """`model` for `model.to(device).cuda()`."""
    node: cst.CSTNode = value
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        node = node.func.value
    return dotted_name(node) if node is not value else None


def _is_data_parallel(ctx: ModuleContext, key: str, call: CallInfo) -> bool:
    if key.startswith("self."):
        # `self.model` of the calling class or its bases here, not another class's attribute
        return any(not a.unpacked and _constructs_data_parallel(ctx, a.value) for a in self_bindings(ctx, key, call.scope))
    assignments = [a for a in ctx.assignments_to(key) if not a.unpacked]
    local = [a for a in assignments if a.scope is call.scope and a.order < call.order]
    if not local and not call.scope.is_module and key not in call.scope.params:
        local = [a for a in assignments if a.scope.is_module]
    state = False
    for a in sorted(local, key=lambda a: a.order):
        if _constructs_data_parallel(ctx, a.value):
            state = True
        elif _chain_root(a.value) != key:
            state = False
    return state
