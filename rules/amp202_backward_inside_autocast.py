"""AMP202 backward-inside-autocast."""
from __future__ import annotations

import re


from typing import TYPE_CHECKING, Iterator

from amplint.model import Diagnostic, Invalid, Project, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    from amplint.model import ModuleContext

_BACKWARD_EVENTS = ("scaled_backward", "backward", "framework_backward")


class BackwardInsideAutocast(Rule):
    """
    ## What it does
    Flags `loss.backward()`, `scaler.scale(loss).backward()`,
    `torch.autograd.backward(...)` and framework backward calls
    (`accelerator.backward(loss)`) written inside an enabled `torch.autocast`
    region (a `with` block or an `@autocast` decorator).

    ## Why is this bad?
    Autocast should wrap only the forward pass and the loss. PyTorch's autocast
    documentation calls backward passes under autocast "not recommended":
    backward ops already run in the dtypes autocast chose for the matching
    forward ops, so for plain layers the region adds nothing (in amplint's measurement
    the gradients were identical inside and outside). Two things do change:
    every op written after the backward in the same block (gradient clipping,
    gradient penalties, the optimizer step, logging math) is autocast as well,
    and the backward of a layer the forward deliberately kept fp32 with a
    nested `autocast(enabled=False)` is no longer protected: it runs in
    fp16/bf16. The verifier measured that layer's gradient error against fp64
    at 2.7e-4 inside the region vs 6.9e-8 after it (H200, CUDA fp16; 1.75e-3 vs
    1.0e-7 on CPU). It is a warning, not an error: nothing raises.

    ## Example
    ```python
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix is offered: moving the backward (and whatever follows it) out of
    the `with` block changes which statements autocast, so a human decides
    where the region ends.

    ## Verification
    `amplint --verify` runs a tiny model's backward inside and after the
    region and reports: the plain gradients' largest difference and the
    backward's dtype at the low-precision activation (the same both ways, as
    in E23); the dtype of an `mm` written after the backward in the block;
    and, for a layer kept fp32 with a nested `autocast(enabled=False)`, its
    gradients' error against an fp64 run inside and outside (its backward
    autocasts inside the region). Confirmed when either of the last two ran
    in low precision; not reproduced when nothing changed.

    ## Notes
    A backward inside a nested `autocast(enabled=False)` of the same device
    is not flagged. accelerate's region (`accelerator.autocast()`) is
    `torch.autocast` in the Accelerator's dtype whenever it runs mixed
    precision (accelerate's `get_mixed_precision_context_manager`), so a
    backward inside it is flagged where the receiver is certainly an
    `Accelerator` (built in the file, or a parameter annotated so): without
    a suffix for a literal `mixed_precision="fp16"`/`"bf16"`, with "(when
    mixed precision is on)" when the precision is chosen at run time (omitted,
    accelerate reads `ACCELERATE_MIXED_PRECISION`, which `accelerate launch`
    and `accelerate config` set; an option, `**kwargs`), and not at all for a
    literal `"no"` or `cpu=True`, where the region is a `nullcontext`.
    accelerate's docstring example wraps a whole `train()` in it; PyTorch's
    autocast documentation, which that region is, keeps backward out. Fabric's
    `fabric.autocast()` and other framework regions are not flagged (a
    "-true" precision's context is no autocast). A framework backward inside
    a plain `torch.autocast` region is flagged like any other.
    A region whose `enabled=` is decided at run time (`enabled=use_amp`) is
    flagged: whenever AMP is on, the backward is inside it. Not when the
    backward sits on a branch taken only with that flag false (the `else` of
    `if args.amp:` under `autocast(enabled=args.amp)`, or `if not args.amp:`):
    the region is off there. Silent, too, where no optimizer update is within
    reach of the backward (AMP105's Notes: no step in the function, its callees
    or its callers; a static check or timing function nothing in a file without
    any step calls; a test the test runner runs): a gradient check or a fwd+bwd
    benchmark, whose gradients are compared or thrown away.

    Across files: also flags a backward inside an autocast the file alone
    does not show: one held in an attribute or `partial`
    (`amp_autocast = partial(torch.autocast, ...)` then `with amp_autocast():`),
    one entered by a project decorator defined in another module, and one a
    caller enters around the call of the project function that runs the
    backward (`with torch.autocast("cuda"): contrastive_forward(...)`, whose
    body calls `scaler.scale(loss_k).backward()`; the related site names the
    calls in between). A backward on a call's result
    (`criterion(out, y).backward()`) counts like one on a name. A framework's
    precision setting (Lightning's `Trainer(precision=...)` running
    `training_step`, accelerate's prepared forward) does not count, as in one
    file (fixtures/projects/backward_helper).
    An autocast class a project helper returns counts too: `autocast =
    get_autocast(args.precision)`, whose helper (in any file) returns
    `torch.cuda.amp.autocast` itself for one precision and `suppress` for
    another, then `with autocast(): ... scaler.scale(loss).backward()` (also in
    a closure reading `autocast`) is flagged "(when enabled)", its dtype left to
    run time. Silent when the `with` passes arguments (`with autocast(enabled=False):`:
    what they set is not read) and when every return of the helper is no
    autocast (`return suppress`).

    ## References
    - amplint's evidence page: `amplint --explain AMP202` (docs/evidence.md#amp202)
    - https://pytorch.org/docs/stable/amp.html#torch.autocast
    """

    code = "AMP202"
    name = "backward-inside-autocast"
    severity = Severity.WARNING
    message = "backward pass inside an autocast region"
    triggers = ("autocast",)  # a region in this file (every region is an autocast call)
    requires = (("backward",),)
    #: an autocast region: a call of autocast (any spelling ends so) or an import alias of it
    gate_regex = re.compile(r"autocast\s*\(|autocast\s+as\s")
    #: findings depend only on the region's own definition, module-level statements and the class family
    gate_sites = "amplint.core.gates:autocast_region_lines"

    VALID = [
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            "the documented shape: backward after the `with` block",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).float().pow(2).mean()
    with torch.autocast("cuda", enabled=False):
        loss.backward()
""",
            "a nested autocast(enabled=False) of the same device turns autocast off",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.autocast():
        loss = model(**batch).loss
    accelerator.backward(loss)
    optimizer.step()
""",
            "accelerate's region closed before `accelerator.backward`",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="no")
for batch in loader:
    with accelerator.autocast():
        loss = model(**batch).loss
        accelerator.backward(loss)
    optimizer.step()
""",
            "an Accelerator literally without mixed precision: its region is a nullcontext",
        ),
        Valid(
            """
def train_step(fabric, model, batch, optimizer):
    with fabric.autocast():
        loss = model(batch).mean()
        fabric.backward(loss)
    optimizer.step()
""",
            "a region of an object not known to be an accelerate Accelerator (Fabric's precision plugins differ)",
        ),
        Valid(
            """
from torch.cuda.amp import autocast
with autocast(enabled=False):
    loss = model(x).sum()
    loss.backward()
""",
            "a literally disabled region is not autocast",
        ),
        Valid(
            """
import torch
def train_step(model, x, y, optimizer):
    with torch.autocast("cuda"):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
""",
            "backward in the same function, after the region",
        ),
        Valid(
            """
import torch
for x, y in loader:
    with torch.autocast("cuda", enabled=args.amp):
        loss = criterion(model(x), y)
        if not args.amp:
            loss.backward()
            optimizer.step()
""",
            "the branch taken only with the region's `enabled=` flag false: autocast is off there",
        ),
        Valid(
            """
import torch


class CHECKS:
    def check_fast_equals_ref():
        x = torch.randn(8, 64).half().cuda().requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        with torch.cuda.amp.autocast():
            y1 = ref(x)
            y1.sum().backward()
        with torch.cuda.amp.autocast():
            y2 = fast(x2)
            y2.sum().backward()
        print((x.grad - x2.grad).abs().sum())
""",
            "an equivalence check: no optimizer anywhere, so the placement changes no update",
        ),
        Valid(
            """
import pytest
import torch


class QuantizationTesterMixin:
    def _test_quantization_training(self, config_kwargs):
        model = self._create_quantized_model(config_kwargs)
        with torch.amp.autocast("cuda", dtype=torch.float16):
            out = model(**self.get_dummy_inputs())[0]
            out.norm().backward()
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)

    def test_bnb_training(self):
        self._test_quantization_training({"load_in_4bit": True})
""",
            "a gradient-existence test the test runner runs: no optimizer steps after it",
        ),
    ]

    INVALID = [
        Invalid(
            """
import pytest
import torch


def test_amp_step():
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).float().mean()
        loss.backward()
        optimizer.step()
""",
            line=8,
            why="a test stepping an optimizer inside the region: the step runs under autocast",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            line=6,
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler, autocast

class Trainer:
    def __init__(self, model, optimizer, use_amp):
        self.model = model
        self.optimizer = optimizer
        self.use_amp = use_amp
        self.scaler = GradScaler(enabled=use_amp)

    def training_step(self, batch):
        with autocast(enabled=self.use_amp):
            loss = self.model(**batch).loss
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
""",
            line=13,
        ),
        Invalid(
            """
import torch as th

@th.autocast("cuda", dtype=th.bfloat16)
def train_step(model, x, y, opt):
    loss = th.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
""",
            line=6,
        ),
        Invalid(
            """
from torch import autocast as amp_ctx
for step, batch in enumerate(loader):
    with amp_ctx("cuda"):
        loss = model(**batch).loss / accum
        if (step + 1) % accum == 0:
            accelerator.backward(loss)
            optimizer.step()
""",
            line=6,
        ),
        Invalid(
            """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = model(x).mean()
    with torch.autocast("cuda", enabled=False):
        torch.autograd.backward(loss)
optimizer.step()
""",
            line=5,
            why="disabling CUDA autocast leaves the CPU region in force",
        ),
        Invalid(
            """
import torch
for x, y in loader:
    with torch.autocast("cuda", enabled=args.amp):
        loss = criterion(model(x), y)
        if args.amp:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
""",
            line=6,
            count=1,
            why="the flag's true branch runs under the region; its `else` (amp off) is silent",
        ),
        Invalid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="bf16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.autocast():
        loss = model(**batch).loss
        accelerator.backward(loss)
    optimizer.step()
""",
            line=7,
            why="accelerate's region is `torch.autocast` in the Accelerator's dtype",
        ),
        Invalid(
            """
from accelerate import Accelerator

class Trainer:
    def __init__(self, model, optimizer, accelerator: Accelerator | None = None, **accelerate_kwargs):
        self.accelerator = accelerator
        if self.accelerator is None:
            self.accelerator = Accelerator(**accelerate_kwargs)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

    def train_step(self, batch):
        with self.accelerator.autocast():
            loss = self.model(batch)
            self.accelerator.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad()
""",
            line=13,
            why="precision chosen at run time (`accelerate launch --mixed_precision`, kwargs): flagged for the runs that choose it",
        ),
        Invalid(
            """
import torch


class Throughput:
    @staticmethod
    def fwd_bwd(loader, model, optimizer, amp=True):
        for images, targets in loader:
            with torch.autocast("cuda", enabled=amp):
                loss = criterion(model(images), targets)
                loss.backward()
            optimizer.step()
""",
            line=10,
            why="the same timing loop, stepping the optimizer it is handed",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        from amplint.model import active_region, off_under_guard, update_reachable

        for scope in ctx.scopes:
            for event in scope.events:
                if event.kind not in _BACKWARD_EVENTS:
                    continue
                region = active_region(event.call.region)
                if region is None or region.dtype == "fp32" or _defined_inside(ctx, region, scope):
                    continue
                when = None
                if region.framework:
                    when = _accelerate_mixed(ctx, region)
                    if when is None:
                        continue  # Fabric's region, or an accelerator that never runs mixed precision
                elif off_under_guard(ctx, region, event.call.path):
                    continue  # `enabled=args.amp`, and this is the `else` of `if args.amp:`
                if not update_reachable(ctx, scope, event):
                    continue  # no optimizer steps on these gradients (a benchmark, a gradient check)
                yield self._diagnostic(ctx, event.call, region, when)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """A backward inside an autocast the file alone does not show: one held in an
        attribute or `partial` (`with self.amp_autocast():`), one applied by a project
        decorator defined in another module, or one a caller entered around the call of
        the function holding the backward (`with autocast(): contrastive_forward(...)`,
        whose body runs `scaler.scale(loss_k).backward()`), in any file."""
        project.reached()  # loads the modules autocast regions lead to (`callers` then knows those calls)
        for call in project.calls():
            f = _backward_spelled(call.record)
            if f is None:
                continue
            region = project.region_of(call)
            chain: tuple = ()
            if region is None:
                witness = next((w for w in project.autocast_witnesses((call.path, call.func)) if _enters(w.region)), None)
                if witness is not None:
                    region = witness.region
                    chain = witness.chain if (witness.chain != ((call.path, call.func),) or not _decorated(project, call, region)) else ()
            elif region.kind != "held":
                continue  # `check` sees it
            if region is None or not _enters(region):
                continue
            when = " (when enabled)" if region.enabled is None else ""
            message = f"`{f}()` runs inside {project.named(region)}{when}"
            yield project.diagnostic(self, call, message, data={"region_line": region.row, "device": region.device, "dtype": region.dtype},
                                     related=(project.entered(region, chain),), help="Move the backward after the `with` block")

    def _diagnostic(self, ctx: ModuleContext, call, region, framework_when: "str | None" = None) -> Diagnostic:
        import libcst as cst

        from amplint.model import lines_between

        text = ctx.code_for(call.node)
        if len(text) > 50 or "\n" in text:
            text = ctx.code_for(call.node.func).rsplit(".", 1)[-1] + "(...)"
        row = ctx.position(region.call)[0].row
        if framework_when is not None:
            message = f"`{text}` runs inside `{ctx.code_for(region.call)}`{framework_when}"
        else:
            when = " (when enabled)" if region.enabled is None else ""
            message = f"`{text}` runs inside an autocast region{when}"
        data = {"region_line": row, "device": region.device, "dtype": region.dtype}
        if isinstance(region.node, cst.With):  # the block, for `--verify` to run
            data["step_source"] = lines_between(ctx, region.node, region.node)
        return ctx.diagnostic(self, call.node, message, data=data, help="Move the backward after the `with` block")


def _accelerate_mixed(ctx: ModuleContext, region) -> "str | None":
    """For a framework region (`accelerator.autocast()`): "" when its receiver is an accelerate
    `Accelerator` whose literal `mixed_precision` is "fp16" or "bf16" (accelerate's region is then
    `torch.autocast` of that dtype), " (when mixed precision is on)" when the precision is chosen
    at run time (omitted: `accelerate launch` / `accelerate config` decide; an option, a config,
    `**kwargs`, a parameter typed `Accelerator`), None when it is literally "no" (the region is a
    `nullcontext`), or the receiver is not certainly an Accelerator (Fabric's region, whose
    `forward_context` is no autocast under "-true" precisions, is left alone)."""
    import libcst as cst

    from amplint.model import accelerator_precision, dotted_name

    func = region.call.func
    info = ctx.call_info(region.call)
    if not isinstance(func, cst.Attribute) or info is None:
        return None
    settings = accelerator_precision(ctx, dotted_name(func.value), info.scope)
    if not settings or settings == {"no"}:
        return None
    return "" if settings <= {"fp16", "bf16"} else " (when mixed precision is on)"


def _decorated(project: Project, call, region) -> bool:
    """Whether `region` comes from a decorator of the function holding `call` (not a caller)."""
    info = project.function((call.path, call.func))
    return info is not None and any(project.decorator_region(t) == region for d in info["decorators"] if d for t in project.name_types(call.path, "<module>" if "." not in call.func else call.func.rsplit(".", 1)[0], d))


def _defined_inside(ctx: ModuleContext, region, scope) -> bool:
    """The backward's function is merely *defined* in the region (a closure run
    later, e.g. by `optimizer.step(closure)`), so the region need not be active
    when it runs."""
    if scope.is_module or region.node is scope.node:
        return False
    r_start, r_end = ctx.position(region.node)
    s_start, s_end = ctx.position(scope.node)
    return (r_start.row, r_start.column) <= (s_start.row, s_start.column) and (s_end.row, s_end.column) <= (r_end.row, r_end.column)


def _backward_spelled(record) -> "str | None":
    """How a backward call is spelled (`loss.backward`; `criterion(...).backward` for one on
    a call's result, `criterion(out, y).backward()`), or None when the call is none."""
    f = record["f"]
    if f in ("torch.autograd.backward",):
        return None
    if f.endswith(".backward") or f == "backward":
        return f
    fv = record.get("fv") or {}
    if not f and fv.get("at") == "backward":
        on = fv.get("on") or {}
        return f"{on['c']}(...).backward" if on.get("c") and not on.get("m") else "(...).backward"
    return None


def _enters(region) -> bool:
    """A region that runs a backward under torch autocast: an enabled (or run-time enabled)
    `torch.autocast`, held or written, not an explicit fp32 one; not a framework's precision
    setting (Lightning runs `training_step` under its autocast by design; AMP202 leaves
    framework regions alone, as in one file)."""
    return region.kind in ("autocast", "held") and region.enabled is not False and region.dtype != "fp32"
