"""AMP103 scaler-step-without-update."""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set

from amplint.model import (
    Diagnostic, Edit, Event, Invalid, Location, ModuleContext, Rule, Scope, Severity, Valid, events_before, exclusive,
    make_fix, step_data, step_source,
)


class ScalerStepWithoutUpdate(Rule):
    """
    ## What it does
    Flags a GradScaler that is `step`ped but never `update`d: no
    `scaler.update()` inside the training loop that runs `scaler.step(optimizer)`
    (directly or in a helper it calls), or, for a step outside any such loop,
    in its function, its helpers, or the functions of this file that call it.

    ## Why is this bad?
    `update()` ends the iteration: it resets the per-optimizer state and adapts
    the scale. Without it the next iteration's `scaler.step(optimizer)` raises
    `RuntimeError: step() has already been called since the last update().`
    (with an `unscale_` first: `unscale_() is being called after step().`), and
    the scale never backs off after an overflow or grows after 2000 clean steps.

    ## Example
    ```python
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```

    ## Fix safety
    Unsafe: inserts `scaler.update()` after the last `scaler.step(...)` of
    that block (after every optimizer's step: call it once per iteration).
    Offered only when all the steps sit in the same block.

    ## Verification
    `amplint --verify` runs two iterations of the flagged step with a real
    GradScaler and reports the exception the second `step` raises.

    ## Notes
    The rule follows calls inside this file: an `update()` in a helper method
    called from the loop, or in the caller of a `train_step(..., scaler)`
    helper, counts. A scaler passed in as a parameter to a function that no
    code in this file calls is left alone (its caller may update it), and so is
    a scaler built with `enabled=False`.

    ## References
    - amplint's evidence page: `amplint --explain AMP103` (docs/evidence.md#amp103)
    - https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler.update
    """

    code = "AMP103"
    name = "scaler-step-without-update"
    severity = Severity.ERROR
    message = "GradScaler stepped but never updated"
    triggers = ("GradScaler",)  # only a scaler built in this file is reported (`info.constructors`)
    requires = (("step",),)

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
from torch.cuda.amp import GradScaler

class Trainer:
    def __init__(self, model, optimizer):
        self.optimizer = optimizer
        self.scaler = GradScaler()

    def _finish_step(self):
        self.scaler.update()
        self.optimizer.zero_grad()

    def train(self, loader):
        for batch in loader:
            self.scaler.scale(self.model(**batch).loss).backward()
            self.scaler.step(self.optimizer)
            self._finish_step()
""",
            "update() in a helper method called from the loop",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for step, batch in enumerate(loader):
    scaler.scale(model(batch) / accum).backward()
    if (step + 1) % accum == 0:
        if max_norm:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            "update() after the clipping `if`, inside the accumulation boundary",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for step, batch in enumerate(loader):
    scaler.scale(model(batch) / accum).backward()
    if (step + 1) % accum == 0:
        scaler.step(optimizer)
        optimizer.zero_grad()
    scaler.update()
""",
            "update() after the accumulation `if` is an update (AMP104 reports that it runs per micro-batch)",
        ),
        Valid(
            """
import torch
def train_step(model, batch, optimizer, scaler):
    scaler.scale(model(batch)).backward()
    scaler.step(optimizer)

def main(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        train_step(model, batch, optimizer, scaler)
        scaler.update()
""",
            "the caller updates the scaler it passed in",
        ),
        Valid(
            """
def optimizer_step(optimizer, scaler):
    scaler.step(optimizer)
""",
            "a scaler parameter of a function no code here calls: its caller may update it",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
for batch in loader:
    scaler.scale(model(batch)).backward()
    scaler.step(optimizer)
""",
            "a disabled scaler's step is just optimizer.step()",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
def gan_step(loss_d, loss_g):
    scaler.scale(loss_d).backward()
    scaler.step(opt_d)
    scaler.scale(loss_g).backward()
    scaler.step(opt_g)

for batch in loader:
    gan_step(*losses(batch))
    scaler.update()
""",
            "a module-level scaler updated once after both optimizers' steps",
        ),
        Valid(
            """
from torch.amp.grad_scaler import GradScaler

class Trainer:
    def __init__(self):
        self.state.scaler = GradScaler()

    def _train_batch(self, use_grad_scaling):
        while True:
            try:
                self._train_microbatches(microbatches, total_loss_dict)
                for optimizer in self.state.optimizers:
                    if use_grad_scaling:
                        self.state.scaler.step(optimizer)
                    else:
                        optimizer.step()
            except RuntimeError as e:
                continue
            break

    def _train_microbatches(self, microbatches, loss_dict):
        for microbatch in microbatches:
            self.state.scaler.scale(self._loss(microbatch)).backward()

    def _train_loop(self):
        for batch_idx, self.state.batch in enumerate(self._iter_dataloader()):
            total_loss_dict = self._train_batch(use_grad_scaling)
            if use_grad_scaling:
                self.state.scaler.update()
""",
            "composer: a step per optimizer inside an OOM-retry loop, update() in the caller's batch loop",
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
    scaler.step(optimizer)
    optimizer.zero_grad()
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
    optimizer.zero_grad()
""",
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler as Scaler

class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = Scaler()

    def optimizer_step(self):
        self.scaler.unscale_(self.optimizer)
        self.scaler.step(self.optimizer)
        self.optimizer.zero_grad()

    def train(self, loader):
        for step, batch in enumerate(loader):
            self.scaler.scale(self.model(**batch).loss).backward()
            if (step + 1) % self.accum == 0:
                self.optimizer_step()
""",
            line=11,
        ),
        Invalid(
            """
import torch
def train(gen, disc, opt_g, opt_d, loader):
    scaler = torch.amp.GradScaler()
    for real in loader:
        scaler.scale(d_loss(disc, gen, real)).backward()
        scaler.step(opt_d)
        scaler.scale(g_loss(disc, gen, real)).backward()
        scaler.step(opt_g)
    scaler.update()
""",
            line=6,
            count=1,
            why="update() after the loop, not once per iteration",
        ),
        Invalid(
            """
import torch
def train_step(model, batch, optimizer, scaler):
    scaler.scale(model(batch)).backward()
    scaler.step(optimizer)

def main(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        train_step(model, batch, optimizer, scaler)
""",
            line=4,
            why="neither the helper nor its caller updates",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        updated = _Updated(ctx)
        for scope in ctx.scopes:
            reported: Set[str] = set()
            steps = [e for e in scope.events if e.kind == "scaler_step" and e.scaler]
            for step in steps:
                if step.scaler in reported:
                    continue
                info = ctx.scaler(step.scaler)
                if info is None or info.enabled is False or not info.constructors:
                    continue
                if updated(scope, step):
                    continue
                reported.add(step.scaler)
                group = [e for e in steps if e.scaler == step.scaler]
                yield self._diagnostic(ctx, step, group)

    def _diagnostic(self, ctx: ModuleContext, step: Event, group: List[Event]) -> Diagnostic:
        scaler = step.scaler
        message = f"`{scaler}.step(...)` is never followed by `{scaler}.update()`; the next step raises"
        fix = None
        last = group[-1]
        if all(e.path == last.path for e in group):
            _, end = ctx.position(last.call.statement)
            indent = _indent(ctx.source, end.row)
            edit = Edit(Location(end.row + 1, 1), Location(end.row + 1, 1), f"{indent}{scaler}.update()\n")
            fix = make_fix(f"Insert `{scaler}.update()` after the last `{scaler}.step(...)`", [edit], safe=False)
        data = {"scaler": scaler, "optimizers": [e.optimizer for e in group]}
        data.update(_step_data(ctx, step, group))
        help = f"Call `{scaler}.update()` once per iteration, after every optimizer's step"
        return ctx.diagnostic(self, step.call.node, message, fix=fix, data=data, help=help)


def _indent(source: str, row: int) -> str:
    lines = source.splitlines()
    line = lines[row - 1] if 0 < row <= len(lines) else ""
    return line[: len(line) - len(line.lstrip(" \t"))]


class _Updated:
    """Whether some `update()` ends the iteration a scaler step runs in, per file.

    The answer depends on a step only through its scope, scaler and the loops around
    it, so it is worked out once per such triple; what it reads of the whole file (the
    backwards' loops of a scope, the scalers updated anywhere, each loop nest's
    updates) is read once, so n steps in one function cost n, not n times the file."""

    def __init__(self, ctx: ModuleContext) -> None:
        self.ctx = ctx
        self.answers: Dict[tuple, bool] = {}
        self.training_loops: Dict[int, Set[int]] = {}
        self.updates_in: Dict[int, Dict[Optional[int], List[Event]]] = {}
        self.helpers: Dict[int, bool] = {}
        self.updated_anywhere: Optional[Set[Optional[str]]] = None

    def __call__(self, scope: Scope, step: Event) -> bool:
        # the training loops around the step: those that also run a backward here (not a
        # loop over optimizers, nor a retry loop around a helper that does the work)
        if id(scope) not in self.training_loops:
            backwards = [e for e in scope.events if e.kind in ("scaled_backward", "backward", "framework_backward")]
            self.training_loops[id(scope)] = {id(f) for b in backwards for f in b.path if f.kind == "loop"}
        around = self.training_loops[id(scope)]
        loops = [f for f in _loops(step.path) if id(f) in around]
        key = (id(scope), step.scaler, tuple(id(f) for f in loops))
        if key not in self.answers:
            self.answers[key] = self._updated(scope, step.scaler or "", loops)
        return self.answers[key]

    def _updated(self, scope: Scope, key: str, loops: List[object]) -> bool:
        ctx = self.ctx
        if self._update_within(scope, loops):
            return True
        if loops:
            return False  # the step repeats in this loop with no update inside it
        # the step's function runs once per call: look at its callers (up to 3 levels)
        frontier = [scope]
        seen = {id(scope)}
        for _ in range(3):
            following: List[Scope] = []
            for s in frontier:
                for call in ctx.callers(s):
                    caller = call.scope
                    if self._update_within(caller, _loops(call.path)):
                        return True
                    if not _loops(call.path) and id(caller) not in seen:
                        seen.add(id(caller))
                        following.append(caller)
            frontier = following
        # hooks run by a framework: a shared scaler updated anywhere in this file
        shared = key.startswith("self.") or (key not in scope.params and not ctx.assignments_to(key, scope))
        if shared:
            if self.updated_anywhere is None:
                self.updated_anywhere = {e.scaler for s in ctx.scopes for e in s.events if e.kind == "update"}
            if key in self.updated_anywhere:
                return True
        # a parameter of a function nobody here calls: its caller (elsewhere) may update it
        if key.split(".")[0] in scope.params and not ctx.callers(scope):
            return True
        info = ctx.scalers[key]
        if key.startswith("self.") and scope.cls is not None and all(c.scope.cls is not scope.cls for c in info.constructors):
            return True  # built by another class: a base class elsewhere may update it
        return False

    def _update_within(self, scope: Scope, loops: List[object]) -> bool:
        """`scope` has an `update()` (directly, or in a helper it calls) inside every one of `loops`."""
        index = self.updates_in.get(id(scope))
        if index is None:
            index = self.updates_in[id(scope)] = self._updates_by_loop(scope)
        if not loops:
            return bool(index.get(None))
        return any(all(any(f is loop for f in e.path) for loop in loops) for e in index.get(id(loops[-1]), ()))

    def _updates_by_loop(self, scope: Scope) -> Dict[Optional[int], List[Event]]:
        """The scope's updates (and calls of helpers that update), filed under every loop
        around them (None: all of them)."""
        index: Dict[Optional[int], List[Event]] = {None: []}
        for e in scope.events:
            if e.kind == "update" or (e.kind == "call" and self._helper_updates(e)):
                index[None].append(e)
                for f in e.path:
                    if f.kind == "loop":
                        index.setdefault(id(f), []).append(e)
        return index

    def _helper_updates(self, call: Event) -> bool:
        callee = self.ctx.callee(call.call)
        if callee is None:
            return False
        if id(callee) not in self.helpers:
            self.helpers[id(callee)] = any(x.kind == "update" for x in self.ctx.reachable_events(callee))
        return self.helpers[id(callee)]


def _loops(path) -> List[object]:
    return [f for f in path if f.kind == "loop"]


def _step_data(ctx: ModuleContext, step: Event, group: List[Event]) -> dict:
    """For the verifier: the step from the scaled backward before it through the last
    `step` of this scaler (and a following zero_grad); no slice without a backward here."""
    scope = step.call.scope
    backward = None
    for at in range(events_before(scope, step.order) - 1, -1, -1):  # latest first
        e = scope.events[at]
        if e.kind == "scaled_backward" and e.scaler == step.scaler and not exclusive(e.path, step.path):
            backward = e
            break
    data = step_data(ctx, scope, backward or step, step.optimizer)
    if backward is not None:
        data["step_source"] = step_source(ctx, backward, group[-1], scope, closers=("zero_grad",))
    return data

