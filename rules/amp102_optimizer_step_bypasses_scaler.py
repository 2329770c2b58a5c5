"""AMP102 optimizer-step-bypasses-scaler."""
from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional

import libcst as cst

from amplint.model import (
    Diagnostic, Event, Invalid, ModuleContext, Rule, Scope, Severity, Valid, events_after, events_before, exclusive,
    is_grad_scaler_call, make_fix, replace_node, sees_self_of, self_bindings, step_data, step_source,
)

_BACKWARDS = ("scaled_backward", "backward", "framework_backward")


class OptimizerStepBypassesScaler(Rule):
    """
    ## What it does
    Flags `optimizer.step()` called directly on gradients produced by
    `scaler.scale(loss).backward()`, instead of `scaler.step(optimizer)`.

    ## Why is this bad?
    The gradients are still multiplied by the loss scale (65536 by default),
    and `optimizer.step()` does not know it: no error is raised and an SGD
    update is 65536x too large (amplint measured a ratio of 65536.0;
    Adam-family optimizers normalize the gradient, so their step size barely
    changes, but their eps becomes 65536x smaller relative to it). The
    following `scaler.update()` then raises
    `AssertionError: No inf checks were recorded prior to update.`, because no
    `scaler.step`/`unscale_` recorded an inf check. When `scaler.unscale_(opt)`
    ran first the size is right, but `optimizer.step()` still skips GradScaler's
    inf/NaN check: a step with overflowed gradients (expected while the scale
    calibrates) writes inf/NaN into the weights instead of being skipped.

    ## Example
    ```python
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Unsafe: replaces `optimizer.step()` with `scaler.step(optimizer)`, which
    changes what runs (the step is skipped when gradients overflow). Offered
    only when the call passes no arguments.

    ## Verification
    `amplint --verify` runs the flagged step on a tiny model with a real
    GradScaler and reports the update size against the unscaled update (their
    ratio is the scale) and the exception `scaler.update()` raises.

    ## Notes
    The rule stays silent on optimizers prepared by accelerate, Lightning
    Fabric or DeepSpeed (`accelerator.prepare(...)`: they unscale and skip
    themselves), on apex's `amp.scale_loss`, on `optimizer.step()` in the
    non-AMP branch of `if use_amp: ... else: ...` (also when the condition is
    tested twice), when the last backward before the step was not scaled, and
    when the scaler is built with `enabled=False` or is not a torch GradScaler.

    ## References
    - amplint's evidence page: `amplint --explain AMP102` (docs/evidence.md#amp102)
    - https://pytorch.org/docs/stable/amp.html#gradient-scaling
    """

    code = "AMP102"
    name = "optimizer-step-bypasses-scaler"
    severity = Severity.ERROR
    message = "optimizer.step() on scaled gradients"
    triggers = (".step(",)
    gate_regex = re.compile(r"\.scale\(")

    VALID = [
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
            "the documented step",
        ),
        Valid(
            """
import torch
def train(model, loader, optimizer, scaler, use_amp):
    for x, y in loader:
        with torch.autocast("cuda", enabled=use_amp):
            loss = model(x, y)
        if use_amp:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
""",
            "optimizer.step() in the non-AMP branch",
        ),
        Valid(
            """
import torch
scaler = torch.cuda.amp.GradScaler() if args.fp16 else None
for batch in loader:
    loss = model(batch)
    if scaler is not None:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
""",
            "the same condition tested twice: the direct step is on the fp32 path",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    loss = model(**batch).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
""",
            "accelerate's prepared optimizer unscales and skips itself",
        ),
        Valid(
            """
from apex import amp
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for batch in loader:
    loss = model(batch)
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
""",
            "apex's amp.scale_loss unscales when the context exits",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
scaler.scale(loss).backward()
optimizer.step()
""",
            "a disabled scaler returns the loss unchanged",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss_d).backward()
scaler.step(opt_d)
loss_g.backward()
opt_g.step()
scaler.update()
""",
            "the direct step follows a plain (unscaled) backward",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
for batch in loader:
    scaler.scale(model(batch)).backward()
    if scaler.is_enabled():
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
""",
            "scaler.step and optimizer.step as alternatives after one scaled backward",
        ),
        Valid(
            """
class FP16Optimizer:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.scaler = DynamicLossScaler(init_scale=2.0 ** 15)

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def step(self):
        self.scaler.scale(loss).backward()
        self.optimizer.step()
""",
            "a custom loss scaler (not torch's GradScaler) unscales inside its optimizer wrapper",
        ),
        Valid(
            """
import torch
from apex_like import DynamicLossScaler

class Mixed:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

class Plain:
    def __init__(self):
        self.scaler = DynamicLossScaler(init_scale=2.0 ** 15)

    def step(self, x):
        self.scaler.scale(self.model(x).mean()).backward()
        self.optimizer.step()
""",
            "`Plain`'s own `self.scaler` is not a torch GradScaler; the other class's is another object",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
""",
            line=7,
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler, autocast

class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = GradScaler()

    def training_step(self, batch):
        with autocast():
            loss = self.model(**batch).loss
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        self.optimizer.step()
        self.scaler.update()
""",
            line=14,
            why="unscaled first: the size is right but inf/NaN steps are not skipped",
        ),
        Invalid(
            """
from torch import amp as tamp
scaler = tamp.GradScaler()
for step, batch in enumerate(loader):
    with tamp.autocast("cuda"):
        loss = model(batch) / accum
    scaler.scale(loss).backward()
    if (step + 1) % accum == 0:
        optimizer.step()
        scaler.update()
        optimizer.zero_grad()
""",
            line=8,
        ),
        Invalid(
            """
import torch
def gan_step(gen, disc, opt_g, opt_d, scaler, loss_d, loss_g):
    scaler.scale(loss_d).backward()
    scaler.step(opt_d)
    scaler.scale(loss_g).backward()
    opt_g.step()
    scaler.update()
""",
            line=6,
            why="two optimizers, one scaler: the generator's step bypasses it",
        ),
        Invalid(
            """
import torch

class Base:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

class Trainer(Base):
    def step(self, x):
        self.scaler.scale(self.model(x).mean()).backward()
        self.optimizer.step()
""",
            line=10,
            why="`self.scaler` built by a base class defined in the file",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        for scope in ctx.scopes:
            events = scope.events
            scaler_steps: Optional[_ScalerSteps] = None
            for step in (e for e in events if e.kind == "optimizer_step"):
                info = ctx.optimizers.get(step.optimizer or "")
                if info is not None and info.prepared:
                    continue
                backward = _last_backward(scope, step)
                if backward is None or backward.kind != "scaled_backward":
                    continue
                if not _is_enabled_torch_scaler(ctx, backward.scaler, scope):
                    continue
                between = [
                    e
                    for e in events[events_after(scope, backward.order) : events_before(scope, step.order)]
                    if not exclusive(e.path, step.path)
                ]
                if any(e.kind == "scaler_step" for e in between):
                    continue  # scaler.step already ran in this step: a different problem
                if scaler_steps is None:
                    scaler_steps = _ScalerSteps(events)
                if scaler_steps.alternative(backward, step):
                    continue  # `if scaler.is_enabled(): scaler.step(opt) else: opt.step()`: alternatives
                unscaled = any(e.kind == "unscale" and e.optimizer == step.optimizer for e in between)
                yield self._diagnostic(ctx, step, backward, unscaled, scaler_steps)

    def _diagnostic(self, ctx: ModuleContext, step: Event, backward: Event, unscaled: bool, scaler_steps: "_ScalerSteps") -> Diagnostic:
        opt, scaler = step.optimizer, backward.scaler
        if unscaled:
            message = f"`{opt}.step()` bypasses `{scaler}`: steps with inf/NaN gradients are not skipped"
        else:
            message = f"`{opt}.step()` applies gradients still multiplied by the loss scale"
        fix = None
        if not step.call.node.args:
            fix = make_fix(
                f"Replace with `{scaler}.step({opt})`",
                [replace_node(ctx, step.call.node, f"{scaler}.step({opt})")],
                safe=False,
            )
        data = {"optimizer": opt, "scaler": scaler, "unscaled": unscaled}
        scope = step.call.scope
        data.update(step_data(ctx, scope, backward, opt))
        if not scaler_steps.earlier_through(scaler, step):  # with another optimizer stepped through the scaler, a one-optimizer slice would not behave the same
            data["step_source"] = step_source(ctx, backward, step, scope)
        return ctx.diagnostic(self, step.call.node, message, fix=fix, data=data, help=f"Call `{scaler}.step({opt})` instead")


def _last_backward(scope: Scope, step: Event) -> Optional[Event]:
    """The last backward of any kind that can run before `step` in the same pass."""
    events = scope.events
    for at in range(events_before(scope, step.order) - 1, -1, -1):
        e = events[at]
        if e.kind in _BACKWARDS and not exclusive(e.path, step.path):
            return e
    return None


class _ScalerSteps:
    """A scope's `scaler.step(...)` calls, one entry per (path, scaler) with the first and
    last order seen there: the questions below depend on a scaler step only through its
    path, scaler and order, so each optimizer step asks once per distinct place, not once
    per scaler step in the function."""

    def __init__(self, events: List[Event]) -> None:
        self.places: Dict[tuple, List] = {}
        for e in events:
            if e.kind == "scaler_step":
                place = self.places.get((tuple(id(f) for f in e.path), e.scaler))
                if place is None:
                    self.places[(tuple(id(f) for f in e.path), e.scaler)] = [e.path, e.scaler, e.order, e.order]
                else:
                    place[3] = e.order

    def alternative(self, backward: Event, step: Event) -> bool:
        """A scaler step after `backward` that never runs with `step` (the other branch)."""
        return any(last > backward.order and exclusive(path, step.path) for path, _, _, last in self.places.values())

    def earlier_through(self, scaler: Optional[str], step: Event) -> bool:
        """A step through `scaler` before `step` that can run with it (another optimizer)."""
        return any(
            key == scaler and first < step.order and not exclusive(path, step.path)
            for path, key, first, _ in self.places.values()
        )


def _is_enabled_torch_scaler(ctx: ModuleContext, key: Optional[str], scope: Scope) -> bool:
    """A torch GradScaler that may be enabled: built here by `GradScaler(...)`,
    or passed in, and never assigned from anything else in this file (for
    `self.scaler` read in `scope`: by its class or a base, not an unrelated class)."""
    info = ctx.scaler(key)
    if info is None or info.enabled is False:
        return False
    constructors, assignments = info.constructors, ctx.assignments_to(info.key)
    if info.key.startswith("self."):
        constructors = [c for c in constructors if sees_self_of(ctx, scope, c.scope)]
        assignments = self_bindings(ctx, info.key, scope)
    if constructors:
        return True
    for a in assignments:
        if isinstance(a.value, cst.Call):
            call = ctx.call_info(a.value)
            if call is not None and not is_grad_scaler_call(call):
                return False
    return True

