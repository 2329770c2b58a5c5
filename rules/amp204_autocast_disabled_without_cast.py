"""AMP204 autocast-disabled-without-cast."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence, Set, Tuple

from amplint.model import Diagnostic, Invalid, Project, ProjectCall, Rule, Severity, Valid, torchapi

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import (
        Assignment, AutocastOp, AutocastRegion, CallInfo, ModuleContext, Scope, active_region, assignment_before,
        autocast_op_of, autocast_ops, make_fix, region_within, replace_node, same_device, strip_views,
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

    Also the sibling shape: a model's output made in an fp16 autocast block
    (`with autocast(device): outputs = model(x)`) and passed, once that block
    has closed, uncast to a loss inside a later `autocast(device,
    enabled=False)` block of the same function (`loss = criterion(outputs,
    targets)`), whose result is backpropagated or returned.

    ## Why is this bad?
    `autocast(enabled=False)` stops autocast from casting anything; it does
    not convert tensors that already are fp16/bf16. PyTorch's autocast
    documentation says tensors coming from the surrounding region must be cast
    back by hand. Without the cast the op runs on the low-precision tensor: with
    an fp32 weight it raises `mat1 and mat2 must have the same dtype`,
    and with low-precision operands on both sides it silently runs in
    fp16/bf16, which is exactly what disabling autocast was meant to prevent.
    In the sibling shape the loss (a detector's matching costs, focal and box
    losses) then runs in fp16 on fp16 logits, though the block was opened to
    compute it in fp32.

    ## Example
    ```python
    with torch.autocast("cuda"):
        h = self.proj(x)
        with torch.autocast("cuda", enabled=False):
            out = self.head(h)  # h is fp16, head's weight fp32
    ```
    ```python
    with torch.autocast(device_type=str(device)):
        outputs = model(samples)
    with torch.autocast(device_type=str(device), enabled=False):
        loss_dict = criterion(outputs, targets)  # outputs still fp16
    scaler.scale(sum(loss_dict.values())).backward()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        h = self.proj(x)
        with torch.autocast("cuda", enabled=False):
            out = self.head(h.float())
    ```
    ```python
    with torch.autocast(device_type=str(device), enabled=False):
        outputs = tree_map(lambda t: t.float() if t.is_floating_point() else t, outputs)
        loss_dict = criterion(outputs, targets)
    ```

    ## Fix safety
    Unsafe: appends `.float()` to the flagged name (not in the sibling shape
    when the name holds a model's output, which may be a dict or a tuple). That is what the docs
    prescribe, but it changes the op's dtype (and memory use), so it is
    offered for review rather than applied blindly.

    ## Verification
    `amplint --verify` runs the flagged call inside
    `autocast(enabled=False)` with the named tensor in the autocast dtype and
    the other inputs fp32, reporting the dtype or the exception.

    ## Notes
    Only names assigned inside the enclosing region, in the same function,
    from an op on that device's lower-precision list are followed, and only
    uses in such ops are flagged. Across one call in the same file: a
    function that opens `autocast(enabled=False)` on its own and is called
    from inside an enabled region with such a tensor (or the op itself) is
    flagged where it uses the parameter unchanged, with the call as a related
    location. Deeper, or across files (the project model): a parameter passed
    on unchanged through more calls (`Head.forward` -> `Head.project` ->
    `stable_logits`), or a tensor made by such an op in a function that runs
    under another file's autocast, is followed along the call graph; the
    finding's related locations are the passing calls and the region's start, with
    the chain of calls. Arguments made before the region, or by a project module the
    model does not resolve to an `nn.Linear`/`nn.Conv*`, are not followed.
    A tensor a function made before its own `autocast(enabled=False)` region
    (no region in its file around either), by such an op and then only viewed,
    indexed or unpacked (`qkv = self.qkv(x).reshape(...)`, `q, k, v = qkv[0],
    qkv[1], qkv[2]`), is flagged where the region uses it: the region only
    matters under a caller's autocast, and there that op ran in fp16/bf16. The
    region's uses of one such op's result are one finding (the first use; the
    others are related locations, and the fix casts them all).
    A disabled region for another device
    (`autocast("cpu", enabled=False)` inside CUDA autocast) does not turn
    CUDA autocast off and is not considered.

    The sibling shape: the name is assigned in the enabled block, in the same
    function, from a lower-precision op or from a call of a model the
    function is handed or holds (`model(x)`, `self.model(x)`); the disabled
    block opens after that block closed, for the same device (the same literal,
    or the same expression: `device_type=str(device)` twice), with no enabled
    region around it; the loss is a callable whose code the file does not hold
    (a parameter, `self.criterion`, a library loss such as
    `nn.CrossEntropyLoss()`), and what it returns reaches a `backward()` of
    the function or its `return`. fp16 only: an explicit
    `dtype=torch.float16`, or no dtype on CUDA or on a device decided at run
    time, where CUDA's default is fp16 (CPU's is bf16). Without a dtype the
    finding holds where the project may run fp16, and is certain where a
    GradScaler scales that loss. Silent on bf16 blocks (bf16 has fp32's
    range), on an output cast at the call or recast in the disabled block
    (`.float()`, `.to(torch.float32)`, a tree map), on a disabled block whose
    result feeds no loss (post-processing), and on a loss or a model that is a
    function or class of the same file (its body may cast its inputs; not read
    yet). A criterion from another file that casts its own inputs is not read
    either: cast at the call, or `# noqa: AMP204`.

    ## References
    - amplint's evidence page: `amplint --explain AMP204` (docs/evidence.md#amp204)
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
        Valid(
            """
import torch
import torch.nn.functional as F


def stable_logits(h, weight):
    with torch.autocast("cuda", enabled=False):
        return F.linear(h.float(), weight)


def forward(x, w1, weight):
    with torch.autocast("cuda"):
        h = F.linear(x, w1)
        return stable_logits(h, weight)


def forward_fp32(x, weight):
    with torch.autocast("cuda"):
        return stable_logits(x, weight)
""",
            "the helper casts its input; a caller passing an input it did not compute under autocast",
        ),
        Valid(
            """
import torch
from torch.utils._pytree import tree_map


def train_one_epoch(model, criterion, loader, device, scaler):
    for samples, targets in loader:
        with torch.autocast(device_type=str(device)):
            outputs = model(samples)
        with torch.autocast(device_type=str(device), enabled=False):
            outputs = tree_map(lambda t: t.float() if t.is_floating_point() else t, outputs)
            loss_dict = criterion(outputs, targets)
        scaler.scale(sum(loss_dict.values())).backward()
""",
            "the model's outputs are cast to fp32 in the disabled block before the loss",
        ),
        Valid(
            """
import torch


def step(model, criterion, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    with torch.autocast("cuda", enabled=False):
        loss = criterion(out, y)
    loss.backward()
""",
            "bf16 outputs: bf16 keeps fp32's range",
        ),
        Valid(
            """
import torch


def evaluate(model, postprocess, loader):
    results = []
    for x, sizes in loader:
        with torch.autocast("cuda"):
            out = model(x)
        with torch.autocast("cuda", enabled=False):
            results.extend(postprocess(out, sizes))
    return len(results)
""",
            "the disabled block after the forward feeds no loss (post-processing)",
        ),
        Valid(
            """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)

    def forward(self, x):
        qkv = self.qkv(x).reshape(x.shape[0], -1, 3, 8).permute(2, 0, 1, 3)
        q, k = qkv[0].float(), qkv[1].float()
        with torch.autocast("cuda", enabled=False):
            return (q @ k.transpose(-2, -1)).softmax(-1)
""",
            "tensors made before the function's own disabled region, cast to fp32 before it",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
import torch.nn.functional as F
from torch import nn


def stable_logits(h, weight):
    with torch.autocast("cuda", enabled=False):
        return F.linear(h, weight)


class Head(nn.Module):
    def __init__(self, dim, n_classes):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.weight = nn.Parameter(torch.randn(n_classes, dim))

    def forward(self, x):
        with torch.autocast("cuda"):
            h = self.proj(x)
            return stable_logits(h, self.weight)
""",
            line=8,
            why="across a call: the helper's autocast(enabled=False) gets the caller's fp16 `h` (the call is a related site)",
        ),
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
        Invalid(
            """
import torch


def train_one_epoch(model, criterion, loader, optimizer, device, scaler):
    for samples, targets in loader:
        with torch.autocast(device_type=str(device)):
            outputs = model(samples)
        with torch.autocast(device_type=str(device), enabled=False):
            loss_dict = criterion(outputs, targets)
        loss = sum(loss_dict.values())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            line=9,
            why="the sibling shape: the loss's fp32 block comes after the fp16 forward's block, not inside it",
        ),
        Invalid(
            """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)

    def forward(self, x):
        qkv = self.qkv(x).reshape(x.shape[0], -1, 3, 8).permute(2, 0, 1, 3)
        with torch.cuda.amp.autocast(enabled=False):
            q, k = qkv[0], qkv[1]
            return (q @ k.transpose(-2, -1)).softmax(-1)
""",
            line=14,
            why="made before the function's own disabled region, which exists for a caller's autocast: `q` is fp16",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        import libcst as cst

        from amplint.model import active_region, autocast_ops, region_within, same_device, strip_views
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
        uses = {}  # one finding per disabled region and low-precision op: its first uncast use
        for name, source, op, disabled in _made_before_region(ctx):
            if id(name) in reported:
                continue
            reported.add(id(name))
            uses.setdefault((id(disabled), id(source.node)), []).append((name, source, op, disabled))
        for found_uses in uses.values():
            yield self._before_region(ctx, *found_uses[0], later=[u[0] for u in found_uses[1:]])
        found = {}  # the helper's use of the parameter -> the first caller's facts, every passing call
        for base, source, op, outer, disabled, call in _across_calls(ctx):
            if id(base) in reported:
                continue
            first = found.setdefault(id(base), (base, source, op, outer, disabled, []))
            if call not in first[5]:
                first[5].append(call)
        for base, source, op, outer, disabled, calls in found.values():
            yield self._diagnostic(ctx, base, source, op, outer, disabled, calls)
        yield from self._after_region(ctx)

    def _after_region(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """The sibling shape: `with autocast(...): out = model(x)` then, once that block has
        closed, `with autocast(..., enabled=False): loss = criterion(out, y)` in the same
        function, `loss` backpropagated (or returned): `out` is still fp16 in the fp32 block."""
        from amplint.model import FP16, make_fix, replace_node
        for name, producer, call, made, enabled, tensor, scaled in _after_region(ctx):
            came = _short_call(ctx, producer)
            message = f"`{name.value}` is still fp16 from `{came}` above: `autocast(enabled=False)` casts nothing back"
            fix = None
            if tensor:  # a lower-precision op's output is one tensor; a model's may be a dict or a tuple
                fix = make_fix(f"Cast `{name.value}` with `.float()`", [replace_node(ctx, name, f"{name.value}.float()")], safe=False)
            help = f"Use `{name.value}.float()`" if tensor else f"Cast `{name.value}` to fp32 first (`.float()` on each of its tensors)"
            data = {"name": name.value, "source_op": came, "op": _short_call(ctx, call.node), "device": enabled.device,
                    "dtype": "fp16", "shape": "after-region"}
            yield ctx.diagnostic(
                self, name, message, fix=fix, help=help, data=data,
                # a region of no dtype is fp16 on CUDA, bf16 on CPU: certain where a GradScaler scales the loss (fp16's)
                condition=None if enabled.dtype == "fp16" or scaled else FP16,
                related=[ctx.related(made.node, "made under autocast here")],
            )

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """A function that opens `autocast(enabled=False)` and uses a parameter unchanged in a
        lower-precision op, when a low-precision tensor reaches that parameter through more
        than one call or from another file (one call in the same file is `check`'s)."""
        project.reached()  # loads the modules autocast regions lead to
        for path, qual, info in list(project.functions()):
            uses = info.get("disabled")
            if not uses:
                continue
            regions = project.summaries[path]["regions"]
            reported = set()
            for use in uses:
                if (use["r"], use["c"]) in reported:
                    continue
                if use["op"].startswith("m:") and not project.lowers(path, qual, use["op"][2:]):
                    continue
                device = regions[use["g"]]["device"]
                found = project.carried_into((path, qual), use["p"], device)
                if not found:
                    continue
                reported.add((use["r"], use["c"]))
                region, chain, passing = found[0]
                dtype = _DTYPE_WORDS.get(region.dtype, "fp16 or bf16")
                name = use["p"]
                device = {"cuda": "CUDA ", "cpu": "CPU ", "xpu": "XPU "}.get(region.device or "", "")
                message = f"`{name}` arrives {dtype} from {device}autocast: `autocast(enabled=False)` casts nothing back"
                related = [project.related(c.path, c.row, "passed in") for _, _, c in found[:3]]
                related.append(project.entered(region, chain))
                data = {"name": name, "op": use["op"].replace("m:", ""), "device": region.device, "dtype": region.dtype,
                        "chain": [k[1] for k in chain]}
                yield project.diagnostic(self, ProjectCall(path, qual, use), message, data=data, related=tuple(related),
                                         help=f"Use `{name}.float()`")

    def _before_region(self, ctx: ModuleContext, name: cst.Name, source: AutocastOp, op: AutocastOp,
                       disabled: AutocastRegion, later: List[cst.Name]) -> Diagnostic:
        """A tensor the function made by a lower-precision op just before its own disabled region;
        `later`: the region's other uncast uses of that op's result, shown as related sites (one bug)."""
        from amplint.model import make_fix, replace_node
        message = f"`{name.value}` from `{source.op}` above is fp16/bf16 under autocast: enabled=False casts nothing back"
        fix = make_fix(f"Cast `{name.value}` with `.float()`",
                       [replace_node(ctx, n, f"{n.value}.float()") for n in [name, *later]], safe=False)
        return ctx.diagnostic(
            self, name, message, fix=fix, help=f"Use `{name.value}.float()`",
            data={"name": name.value, "source_op": source.op, "op": op.op, "device": disabled.device, "dtype": None,
                  "shape": "before-region"},
            related=[ctx.related(source.node, "made under the caller's autocast here")]
            + [ctx.related(n, f"`{n.value}` also used uncast") for n in later],
        )

    def _diagnostic(
        self,
        ctx: ModuleContext,
        name: cst.Name,
        source: AutocastOp,
        op: AutocastOp,
        outer: AutocastRegion,
        disabled: AutocastRegion,
        calls: Sequence[CallInfo] = (),
    ) -> Diagnostic:
        from amplint.model import make_fix, replace_node
        dtype = _DTYPE_WORDS.get(outer.dtype, "fp16 or bf16")
        # the tensor was made by a caller and passed in: every call is related
        related = [ctx.related(call.node, "passed in") for call in calls]
        came = "is passed in still" if calls else "is still"
        message = f"`{name.value}` {came} {dtype} from `{source.op}`: `autocast(enabled=False)` casts nothing back"
        fix = make_fix(f"Cast `{name.value}` with `.float()`", [replace_node(ctx, name, f"{name.value}.float()")], safe=False)
        return ctx.diagnostic(
            self,
            name,
            message,
            fix=fix,
            help=f"Use `{name.value}.float()`",
            data={"name": name.value, "source_op": source.op, "op": op.op, "device": outer.device, "dtype": outer.dtype},
            related=related,
        )


def _enclosing(ctx: ModuleContext, disabled: AutocastRegion) -> Optional[AutocastRegion]:
    """The region of the same device that `disabled` switches off, if it was on."""
    from amplint.model import same_device
    r = disabled.parent
    while r is not None:
        if same_device(ctx, r, disabled):
            return None if r.enabled is False or r.framework or r.dtype == "fp32" else r
        r = r.parent
    return None


def _across_calls(ctx: ModuleContext) -> Iterator[Tuple[cst.Name, AutocastOp, AutocastRegion, AutocastOp, AutocastRegion, CallInfo]]:
    """A function of this file that opens `autocast(enabled=False)` with no enabled region around
    it in its own body, called from inside an enabled region of the same device with a tensor
    that region made in low precision: the parameter that receives it, used unchanged in a
    lower-precision op inside the disabled region (the helper is called with fp16 tensors)."""
    import libcst as cst

    from amplint.model import active_region, assignment_before, autocast_ops, region_within, same_device, strip_views
    tops = [r for r in ctx.regions if r.enabled is False and _enclosing(ctx, r) is None and r.parent is None]
    if not tops:
        return
    ops = autocast_ops(ctx)
    for disabled in tops:
        inside = [op for op in ops if region_within(op.region, disabled)]
        if not inside or inside[0].scope.is_module:
            continue
        helper = inside[0].scope
        for call in ctx.calls:
            outer = active_region(call.region)
            if outer is None or outer.framework or outer.dtype == "fp32" or not same_device(ctx, outer, disabled):
                continue
            if ctx.callee(call) is not helper:
                continue
            for param, arg in _bound_arguments(call, helper):
                source = _passed_low_precision(ctx, arg, call, outer)
                if source is None:
                    continue
                for op in inside:
                    if op.scope is not helper or not torchapi.runs_in_lower_precision(op.op, outer.device):
                        continue
                    if active_region(op.region) is not None:
                        continue  # autocast is on again around the op
                    for inp in op.inputs:
                        base = strip_views(ctx, inp)
                        if isinstance(base, cst.Name) and base.value == param:
                            if assignment_before(ctx, param, helper, op.statement, op.order) is None:
                                yield base, source, op, outer, disabled, call


def _made_before_region(ctx: ModuleContext) -> Iterator[Tuple[cst.Name, AutocastOp, AutocastOp, AutocastRegion]]:
    """A function that opens `autocast(enabled=False)` with no region that may be enabled around it
    in its file, and uses inside it, uncast, a tensor it made before the region, outside any region,
    by an op autocast runs in lower precision (`qkv = self.qkv(x).reshape(...)`, then `q, k =
    qkv[0], qkv[1]` and `q @ k.transpose(-2, -1)` in the region). The region is there only for a
    caller's autocast; under it that op ran in fp16/bf16, so the region computes in low precision."""
    import libcst as cst

    from amplint.model import active_region, autocast_ops, region_within, strip_views
    tops = [r for r in ctx.regions if r.enabled is False and not r.framework and _all_disabled(r)]
    if not tops:
        return
    ops = autocast_ops(ctx)
    for disabled in tops:
        for op in ops:
            if not region_within(op.region, disabled) or op.scope.is_module or active_region(op.region) is not None:
                continue
            if not torchapi.runs_in_lower_precision(op.op, disabled.device):
                continue
            for inp in op.inputs:
                base = strip_views(ctx, inp)
                if not isinstance(base, cst.Name) or base.value in op.scope.params:
                    continue
                source = _made_outside(ctx, base.value, op.scope, op.statement, op.order, disabled)
                if source is not None:
                    yield base, source, op, disabled


def _unpacked_element(a: Assignment, name: str) -> Optional[cst.BaseExpression]:
    """The value `name` takes in `a`: the whole value, or the matching element of `q, k = a, b`;
    a view of the whole value (`q, k = t.unbind(0)`) for a single unpacked expression."""
    import libcst as cst

    if not a.unpacked:
        return a.value
    targets = [t.target for t in getattr(a.node, "targets", ())]
    for target in targets:
        if isinstance(target, (cst.Tuple, cst.List)) and isinstance(a.value, (cst.Tuple, cst.List)):
            names = [e.value for e in target.elements]
            if len(names) != len(a.value.elements) or any(not isinstance(n, cst.Name) for n in names):
                return None
            for n, e in zip(names, a.value.elements):
                if n.value == name:
                    return None if isinstance(e, cst.StarredElement) else e.value
            return None
    return a.value


def _made_outside(ctx: ModuleContext, name: str, scope: Scope, statement: cst.CSTNode, order: int,
                  disabled: AutocastRegion) -> Optional[AutocastOp]:
    """The lower-precision op whose result `name` holds, through views, indexing and unpacking
    (`qkv[0]`, `t.unbind(0)`), made in `scope` before `disabled`, in no autocast region of the file."""
    import libcst as cst

    from amplint.model import assignment_before, autocast_op_of, region_within, strip_views
    for _ in range(6):
        a = assignment_before(ctx, name, scope, statement, order)
        if a is None:
            return None
        value = _unpacked_element(a, name)
        if value is None:
            return None
        base = strip_views(ctx, value)
        if a.region is not None and not (region_within(a.region, disabled) and isinstance(base, cst.Name)):
            return None  # made in another region (the sibling shape), or computed in the fp32 one
        if isinstance(base, cst.Name):
            name, statement, order = base.value, a.statement, a.order
            continue
        if a.unpacked and value is a.value and isinstance(a.value, (cst.Tuple, cst.List)):
            return None
        source = autocast_op_of(ctx, base)
        if source is None or not torchapi.runs_in_lower_precision(source.op, disabled.device):
            return None
        return source
    return None


def _bound_arguments(call: CallInfo, helper: Scope) -> Iterator[Tuple[str, cst.BaseExpression]]:
    """(parameter, argument) pairs of a plain call (`self.m(a, b=c)` skips `self`)."""
    params = list(helper.params)
    if helper.cls is not None and call.receiver_dotted == "self" and params:
        params = params[1:]
    for i, a in enumerate(call.node.args):
        if a.star:
            return
        if a.keyword is not None:
            if a.keyword.value in params:
                yield a.keyword.value, a.value
        elif i < len(params):
            yield params[i], a.value


def _passed_low_precision(ctx: ModuleContext, arg: cst.BaseExpression, call: CallInfo, outer: AutocastRegion) -> Optional[AutocastOp]:
    """The lower-precision op (run under `outer`) whose result `arg` is: the op itself, or a
    name assigned from it under `outer` in the caller."""
    import libcst as cst

    from amplint.model import active_region, assignment_before, autocast_op_of, strip_views
    base = strip_views(ctx, arg)
    source = autocast_op_of(ctx, base)
    if source is None and isinstance(base, cst.Name):
        a = assignment_before(ctx, base.value, call.scope, call.statement, call.order)
        if a is None or a.unpacked or active_region(a.region) is not outer:
            return None
        source = autocast_op_of(ctx, strip_views(ctx, a.value))
    if source is None or not torchapi.runs_in_lower_precision(source.op, outer.device):
        return None
    return source


def _low_precision_source(
    ctx: ModuleContext, name: cst.Name, op: AutocastOp, outer: AutocastRegion, disabled: AutocastRegion
) -> Optional[AutocastOp]:
    """The lower-precision op whose result `name` holds, assigned under `outer` but outside `disabled`."""
    from amplint.model import active_region, assignment_before, autocast_op_of, region_within, strip_views
    a = assignment_before(ctx, name.value, op.scope, op.statement, op.order)
    if a is None or a.unpacked:
        return None
    if region_within(a.region, disabled) or active_region(a.region) is not outer:
        return None
    source = autocast_op_of(ctx, strip_views(ctx, a.value))
    if source is None or not torchapi.runs_in_lower_precision(source.op, outer.device):
        return None
    return source


#: the training-step events a loss reaches
_BACKWARDS = ("scaled_backward", "backward", "framework_backward")


def _after_region(ctx: ModuleContext) -> Iterator[Tuple[cst.Name, cst.Call, CallInfo, Assignment, AutocastRegion, bool, bool]]:
    """(name, the call that made it, the call using it, its assignment, the enabled region, made by a
    lower-precision op, the loss is scaled by a GradScaler) for each name a low-precision autocast block of a function assigned from a
    model or a lower-precision op, passed unchanged to a loss-like call inside a later
    `autocast(enabled=False)` block of the same device (one with no enabled region around it),
    whose result the function backpropagates or returns."""
    import libcst as cst

    from amplint.model import active_region, assignment_before, autocast_op_of, region_within, same_device, strip_views
    tops = [r for r in ctx.regions if r.enabled is False and not r.framework and _all_disabled(r)]
    if not tops:
        return
    seen: Set[int] = set()
    for disabled in tops:
        for call in ctx.calls:
            if not region_within(call.region, disabled) or active_region(call.region) is not None or call.scope.is_module:
                continue
            if not _loss_like(ctx, call):
                continue
            fed = _feeds_loss(ctx, call)
            if fed is None:
                continue
            for a in call.node.args:
                if a.star:
                    continue
                base = strip_views(ctx, a.value)
                if not isinstance(base, cst.Name) or id(base) in seen:
                    continue
                made = assignment_before(ctx, base.value, call.scope, call.statement, call.order)
                if made is None or region_within(made.region, disabled):
                    continue
                enabled = active_region(made.region)
                if enabled is None or enabled.framework or enabled.dtype not in ("fp16", None):
                    continue  # bf16 keeps fp32's range; fp32 autocast lowers nothing
                if not same_device(ctx, enabled, disabled) or region_within(disabled, enabled):
                    continue  # another device's autocast; nested regions are `check`'s
                value = strip_views(ctx, made.value)
                if not isinstance(value, cst.Call):
                    continue
                if ctx.known_dtype(value, made.scope, made.order, made.statement) is not None:
                    continue  # visibly cast (`model(x).float()`) or not a float tensor
                op = autocast_op_of(ctx, value)
                tensor = op is not None and torchapi.runs_in_lower_precision(op.op, enabled.device or "cuda")
                if not tensor and (op is not None or not _model_call(ctx, value, made)):
                    continue
                seen.add(id(base))
                yield base, value, call, made, enabled, tensor, fed == "scaled_backward"


def _all_disabled(region: AutocastRegion) -> bool:
    """No region around `region` may be enabled (every one is `enabled=False`)."""
    r = region.parent
    while r is not None:
        if r.enabled is not False:
            return False
        r = r.parent
    return True


def _model_call(ctx: ModuleContext, value: cst.Call, made: Assignment) -> bool:
    """`value` calls a model: a callable the function is handed or binds (`model(x)`,
    `self.model(x)`, `net.forward(x)`), not a function of this file or a library function."""
    import libcst as cst

    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value == "forward":
        func = func.value
    return _opaque_callable(ctx, func, made.scope, made.order, made.statement, allow_local=True)


def _loss_like(ctx: ModuleContext, call: CallInfo) -> bool:
    """`call` runs a criterion on its arguments: a callable the function is handed (`criterion`),
    a module attribute (`self.criterion`) or a local bound to a library class (`loss_fn =
    nn.CrossEntropyLoss()`). A function or class of this file is not (its body may cast the
    inputs first), nor a builtin, a method of another object or a library function."""
    if call.qualnames:
        return False
    return _opaque_callable(ctx, call.node.func, call.scope, call.order, call.statement, allow_local=False)


def _opaque_callable(ctx: ModuleContext, func: cst.BaseExpression, scope: Scope, order: int, statement: cst.CSTNode,
                     allow_local: bool) -> bool:
    """`func` is a callable object whose code this file does not hold: a parameter, a name or
    `self.X` bound to something other than a class or function of this file. `allow_local`: a
    class of this file counts too (its code is not read)."""
    import libcst as cst

    from amplint.model import assignment_before, dotted_name, self_bindings
    dotted = dotted_name(func)
    if dotted is None or ctx.qualnames(func):
        return False
    if isinstance(func, cst.Name):
        bound = assignment_before(ctx, dotted, scope, statement, order)
        if bound is None:
            if dotted in scope.params:
                return dotted not in ("self", "cls")
            bound = next((a for a in ctx.assignments_to(dotted) if a.scope.is_module), None)
            if bound is None:
                return False  # a function or class of this file, a builtin
        return _bound_elsewhere(ctx, bound.value, allow_local)
    if dotted.count(".") == 1 and dotted.startswith("self.") and scope.cls is not None:
        attr = dotted.split(".", 1)[1]
        if any(s.cls is scope.cls and s.name == attr for s in ctx.scopes):
            return False  # a method of its class (kept whole in an excerpt, as the region's)
        bindings = self_bindings(ctx, dotted, scope)
        return all(_bound_elsewhere(ctx, a.value, allow_local) for a in bindings)
    return False


def _bound_elsewhere(ctx: ModuleContext, value: cst.BaseExpression, allow_local: bool) -> bool:
    """A value bound to a name is a callable whose code this file does not hold: not a call of a
    function or class of this file (unless `allow_local`), not a lambda."""
    import libcst as cst

    from amplint.model import constructed_class
    if isinstance(value, cst.Lambda):
        return False
    if isinstance(value, cst.Call) and constructed_class(ctx, value) is None and not allow_local:
        return False
    return True


def _feeds_loss(ctx: ModuleContext, call: CallInfo) -> Optional[str]:
    """Where what `call` returns goes: the kind of the backward of its function it reaches
    (`loss = sum(loss_dict.values())`, `scaler.scale(loss).backward()`: "scaled_backward"), or
    "return"; None when neither."""
    from amplint.model import descendants
    scope = call.scope
    inside = {id(n) for n in descendants(call.node)}
    tainted = {a.target for a in ctx.assignments if a.scope is scope and a.statement is call.statement}
    for a in sorted((a for a in ctx.assignments if a.scope is scope and a.order > call.order), key=lambda a: a.order):
        if _names(a.value) & tainted:
            tainted.add(a.target)

    def reaches(node: Optional[cst.CSTNode]) -> bool:
        if node is None:
            return False
        return bool(_names(node) & tainted) or any(id(n) in inside for n in descendants(node))

    kinds = {e.kind for e in scope.events if e.kind in _BACKWARDS and e.order >= call.order and reaches(e.call.node)}
    if kinds:
        return "scaled_backward" if "scaled_backward" in kinds else sorted(kinds)[0]
    return "return" if any(order >= call.order and reaches(value) for value, order in scope.returns) else None


def _names(node: cst.CSTNode) -> Set[str]:
    import libcst as cst

    from amplint.model import descendants, dotted_name
    out = set()
    for n in descendants(node):
        if isinstance(n, (cst.Name, cst.Attribute)):
            d = dotted_name(n)
            if d is not None:
                out.add(d)
    return out


def _short_call(ctx: ModuleContext, call: cst.Call) -> str:
    """`model(...)` for `model(samples, targets=targets)`."""
    text = ctx.code_for(call.func)
    return f"{text}(...)" if len(text) <= 30 else "the call"
