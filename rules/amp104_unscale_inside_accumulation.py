"""AMP104 unscale-inside-accumulation."""
from __future__ import annotations


from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import Diagnostic, Invalid, Project, ProjectCall, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: `_per_file_model` imports it when `check` runs (check_project needs no libcst)
    import libcst as cst

    from amplint.model import Event, Frame, GuardedPaths, ModuleContext, Path, Scope


def _per_file_model() -> None:
    """Import what the per-file `check` runs on (libcst and the per-file model) into this
    module's globals, once: the project half (`check_project`) runs without them."""
    if "_AccumulationTest" in globals():
        return
    import libcst

    from amplint.model import (
        events_before, exclusive, innermost_common_loop, loop_body_source, path_contains, step_data, step_source,
    )

    globals().update(
        cst=libcst, events_before=events_before, exclusive=exclusive, innermost_common_loop=innermost_common_loop,
        loop_body_source=loop_body_source, path_contains=path_contains, step_data=step_data, step_source=step_source,
    )

    class _AccumulationTest(libcst.CSTVisitor):
        """`i % k` or an `accum...`/`sync_gradients` name in a test (defined once, not per call:
        a class defined per call would hold its closure, and so the file's tree, in a reference cycle)."""

        def __init__(self) -> None:
            super().__init__()
            self.nodes: List[Any] = []

        def visit_BinaryOperation(self, node: libcst.BinaryOperation) -> None:
            if isinstance(node.operator, libcst.Modulo):
                self.nodes.append(node)

        def visit_Name(self, node: libcst.Name) -> None:
            if "accum" in node.value.lower() or node.value == "sync_gradients":
                self.nodes.append(node)

    globals()["_AccumulationTest"] = _AccumulationTest


@dataclass(frozen=True)
class _Step:
    """An event seen from one function, with the helpers it calls inlined."""

    event: Event
    path: Path  # the call sites' paths followed by the event's own
    order: Tuple[int, ...]
    inlined: bool

    @property
    def kind(self) -> str:
        return self.event.kind


class UnscaleInsideAccumulation(Rule):
    """
    ## What it does
    Flags `scaler.unscale_(optimizer)` that runs more often than
    `scaler.step(optimizer)`: on every micro-batch of a gradient-accumulation
    loop (outside the `if (step + 1) % accum == 0:` boundary, or inside an
    inner micro-batch loop), or twice for one optimizer before `update()`.
    It also flags `scaler.update()` that runs on every micro-batch while the
    step runs only at the boundary.

    ## Why is this bad?
    `unscale_` may run once per optimizer per iteration, after all of that
    step's gradients have been accumulated:
    - A second `unscale_` before `update()` raises
      `RuntimeError: unscale_() has already been called on this optimizer since the last update().`
      With `unscale_` on every micro-batch that is the second micro-batch.
    - When it runs mid-window without raising (under a logging `if`, or with an
      `update()` on every micro-batch) no error is raised and the gradients are
      silently wrong: later micro-batches add scaled gradients onto unscaled
      ones and `step` does not unscale again (wrong by ~1e5 in E18), or each
      `unscale_` divides the earlier micro-batches by the scale again.
    - `update()` on a micro-batch with no `step`/`unscale_` raises
      `AssertionError: No inf checks were recorded prior to update.`
      (`update(new_scale)` sets the scale without reading them: not flagged.)

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y) / accum).backward()
        scaler.unscale_(optimizer)
        if (i + 1) % accum == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Fix safety
    No fix: where the call belongs (inside the boundary `if`, before the clip)
    depends on the surrounding code.

    ## Verification
    `amplint --verify` runs a two-micro-batch accumulation window of the
    flagged loop with a real GradScaler and reports the exception, or the ratio
    of the accumulated gradient to the true one.

    ## Notes
    The rule reasons over branch paths and follows helper calls in this file
    (`self.training_step(batch)` per micro-batch, `self.optimizer_step()` under
    the boundary). An `if` around the step counts as an accumulation boundary
    only when the gradients persist across iterations: `zero_grad` inside it,
    or a test with `%` or an `accum...` name, and no `zero_grad` on every
    iteration. `unscale_` inside the boundary `if` (also through a helper) and
    a scaler built with `enabled=False` are fine, and so is an `unscale_`
    followed in its own block by a `step` of its optimizer (`unscale_`, clip,
    `step`, `update` together, whatever the block's test: `% accum == 0`, the
    `else` of `!= 0`), also when another step of the pass (the flush of a
    last partial window after the loop of a helper called once per epoch)
    would make it look mid-window. A guard clause is a branch
    too: after `if step % accum: return` (or `continue`), the rest of the
    function (or loop body) runs only at the boundary, so an early return
    that waits for N micro-batches is a boundary, and an `unscale_` before
    `if ...: continue` runs on every micro-batch.

    accelerate's `clip_grad_norm_`, `clip_grad_value_` and `unscale_gradients()`
    run `scaler.unscale_` on every optimizer passed to `prepare` (its
    `unscale_gradients(optimizer=None)`), and only a prepared optimizer's
    `step` runs `scaler.update()`: two such calls on one Accelerator in one
    pass with no step between them (clipping two parameter groups one after
    the other) raise on the second under fp16. An error for a literal
    `mixed_precision="fp16"`; a warning "when accelerate runs fp16" when the
    precision is chosen at run time (omitted, so `accelerate launch` /
    `accelerate config` decide, `**kwargs`, a parameter typed `Accelerator`);
    silent for a literal "bf16" or "no", for calls on exclusive branches or
    in a loop only one of them is in, and when a `step` or a call of a
    function of the file (which may step) comes between them.

    Inside `with accelerator.accumulate(model):` on an Accelerator built with a
    constant `gradient_accumulation_steps` above 1 (a literal or a module
    constant), the prepared optimizer's `step` does nothing on the micro-batches
    that do not sync, so it does not update the scaler there: a clip (or
    `unscale_gradients()`) in the block that runs on every micro-batch raises on
    the second one, the step between them notwithstanding. Error and warning as
    above; silent under a boundary test in the block (`if
    accelerator.sync_gradients:`, `% accum`, also as a guard clause), for the
    default of 1 or a count read at run time (`args.accum`), with a plugin,
    `cpu=` or a `gradient_accumulation_plugin`, and without a `prepare`d
    optimizer in the file.

    Per-parameter gradient hooks (the project model): a function registered
    with `param.register_post_accumulate_grad_hook(hook)` (a nested `def`, or
    the one a factory `make_hook(group)` returns) runs once per parameter
    inside the backward. When it calls accelerate's `clip_grad_norm_`,
    `clip_grad_value_` or `unscale_gradients` on an Accelerator that scales
    the loss, each call runs `scaler.unscale_` on every prepared optimizer,
    so the second parameter's hook raises. The Accelerator is followed across
    files (`accelerator = train_util.prepare_accelerator(args)` returning
    `Accelerator(mixed_precision=args.mixed_precision)`); it scales for a
    literal `"fp16"`, or on the `"fp16"` choice of an argparse option with
    literal `choices` defined in its file or the modules that file imports
    (reported as a warning naming the choice: `when --mixed_precision is
    fp16: ...`). Silent without an optimizer prepared and a `backward` of
    that Accelerator in the registering function, for an Accelerator handed
    in as a parameter, `cpu=` not literally False, `**kwargs`, a DeepSpeed /
    FSDP / Megatron-LM plugin built inline or by a helper that never returns
    None, and when two parsers offer different choices.

    An `unscale_` of one object and a `step` of another on the same scaler
    unscale twice without raising: GradScaler keys its per-optimizer state
    by the object, so `scaler.step(wrapper)` after
    `scaler.unscale_(wrapper.optimizer)` (a wrapper's inner torch optimizer,
    also through a one-line `@property` of the class returning it, as
    fairseq's `AMPOptimizer.optimizer` does) finds the wrapper not unscaled
    and divides the same gradients by the scale again. Flagged when the
    `unscale_` argument is one attribute below the `step` argument, in one
    function or the methods of one class (an `unscale_` exists to clip before
    the step: its method runs first), silent where the class also unscales
    the wrapper.

    ## References
    - amplint's evidence page: `amplint --explain AMP104` (docs/evidence.md#amp104)
    - https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation
    """

    code = "AMP104"
    name = "unscale-inside-accumulation"
    severity = Severity.ERROR
    message = "unscale_/update outside the accumulation boundary"
    triggers = ("unscale_(", ".update(", ".clip_grad_norm_(", ".clip_grad_value_(", ".unscale_gradients(")
    #: the scaler shapes need a scaled backward or unscale_; accelerate's a clip or unscale of its own
    requires = ((".scale(", "unscale_(", ".clip_grad_norm_(", ".clip_grad_value_(", ".unscale_gradients("),)

    VALID = [
        Valid(
            """
import torch


class AMPOptimizer:
    def __init__(self, optimizer):
        self._optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    @property
    def optimizer(self):
        return self._optimizer

    def clip_grad_norm(self, max_norm):
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.params, max_norm)

    def step(self):
        self.scaler.step(self._optimizer)
        self.scaler.update()
""",
            "a property returning the very optimizer `step` is given: one object, unscaled once",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda"):
        loss = model(x, y) / accum
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            "unscale_ inside the boundary `if`",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    scaler.scale(model(x, y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if torch.isfinite(loss):
        scaler.step(optimizer)
    scaler.update()
""",
            "no accumulation (zero_grad every iteration): a conditional step is not a boundary",
        ),
        Valid(
            """
from torch.cuda.amp import GradScaler

class Trainer:
    def __init__(self):
        self.scaler = GradScaler()

    def training_step(self, batch):
        loss = self.model(**batch).loss / self.accum
        self.scaler.scale(loss).backward()

    def optimizer_step(self):
        if self.max_grad_norm:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

    def train(self):
        for step, batch in enumerate(self.loader):
            self.training_step(batch)
            if (step + 1) % self.accum == 0:
                self.optimizer_step()
""",
            "HF-style: unscale_ in the helper called under the boundary",
        ),
        Valid(
            """
import torch
def gan_step(scaler, opt_g, opt_d, loss_d, loss_g):
    scaler.scale(loss_d).backward()
    scaler.unscale_(opt_d)
    scaler.step(opt_d)
    scaler.scale(loss_g).backward()
    scaler.unscale_(opt_g)
    scaler.step(opt_g)
    scaler.update()
""",
            "one unscale_ per optimizer (two optimizers, one scaler)",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
for i, batch in enumerate(loader):
    scaler.scale(model(batch)).backward()
    scaler.unscale_(optimizer)
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            "a disabled scaler's unscale_ does nothing",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    scaler.scale(model(batch)).backward()
    if clip:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
            "unscale_ under `if clip:`, once per step",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, (real, _) in enumerate(loader):
    with torch.autocast("cuda"):
        loss_d = critic_loss(critic, gen, real)
    scaler.scale(loss_d).backward()
    scaler.step(opt_d)
    if i % n_critic == 0:
        with torch.autocast("cuda"):
            loss_g = gen_loss(critic, gen, real)
        scaler.scale(loss_g).backward()
        scaler.unscale_(opt_g)
        scaler.step(opt_g)
        opt_g.zero_grad()
    scaler.update()
    opt_d.zero_grad()
""",
            "WGAN: the critic steps every iteration, the generator every n_critic; one update per iteration",
        ),
        Valid(
            """
import math

import torch

scaler = torch.amp.GradScaler("cuda")


class Trainer:
    def train_step(self, batch):
        with torch.autocast("cuda"):
            loss = self.model(batch) / self.accum_steps
        scaler.scale(loss).backward()
        self.micro_batches += 1
        if self.micro_batches < self.accum_steps:
            return loss
        self.micro_batches = 0
        scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if math.isfinite(norm):
            scaler.step(self.optimizer)
            self.optimizer.zero_grad()
        scaler.update()
        return loss

    def fit(self, loader):
        for batch in loader:
            self.train_step(batch)
""",
            "the accumulation boundary is an early return: everything after it runs once per window",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
gen, disc, opt_g, opt_d = accelerator.prepare(gen, disc, opt_g, opt_d)
for batch in loader:
    accelerator.backward(gen_loss(batch))
    accelerator.clip_grad_norm_(gen.parameters(), 1.0)
    opt_g.step()
    accelerator.backward(disc_loss(batch))
    accelerator.clip_grad_norm_(disc.parameters(), 1.0)
    opt_d.step()
""",
            "accelerate: one clip per step (the prepared optimizer's `step` updates the scaler in between)",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="bf16")
model, optimizer = accelerator.prepare(model, optimizer)
accelerator.backward(loss)
accelerator.clip_grad_norm_(model.encoder.parameters(), 1.0)
accelerator.clip_grad_norm_(model.decoder.parameters(), 1.0)
optimizer.step()
""",
            "accelerate with bf16: no GradScaler, so nothing is unscaled twice",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.accumulate(model):
        accelerator.backward(model(batch))
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
""",
            "accelerate's `accumulate`: the clip runs under `sync_gradients`, once per step",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.accumulate(model):
        accelerator.backward(model(batch))
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
""",
            "`accumulate` with the default gradient_accumulation_steps=1: every micro-batch syncs and steps",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for batch_idx, batch in enumerate(loader):
    scaler.scale(model(batch) / accum).backward()
    if (batch_idx + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    if batch_idx % 100 == 0:
        cur_grad_scale = scaler._scale.item()
        if cur_grad_scale < 1.0:
            scaler.update(cur_grad_scale * 2.0)
""",
            "icefall's scale bump: `update(new_scale)` sets the scale and reads no inf checks, so it does not raise",
        ),
        Valid(
            """
import torch


def train_epoch(loader, start_step=0):
    last_step = start_step
    for step, (x, y) in enumerate(loader, start=start_step + 1):
        last_step = step
        with autocast_ctx:
            loss = model(x, y) / args.accumulation_steps
        scaler.scale(loss).backward()
        if step % args.accumulation_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
    if last_step > start_step and last_step % args.accumulation_steps != 0:
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    autocast_ctx = torch.autocast("cuda", dtype=torch.float16)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(args.epochs):
        train_epoch(loader)
""",
            "unscale_, clip and step in the boundary block; the flush of a partial last window after the loop does not make it mid-window",
        ),
        Valid(
            """
import torch


def train_one_epoch(model, loader, optimizer, scaler, accum_iter):
    for it, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = model(x, y) / accum_iter
        scaler.scale(loss).backward()
        if (it + 1) % accum_iter != 0:
            log_micro_batch(it)
        else:
            scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if torch.isfinite(norm):
                scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


def main():
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(10):
        train_one_epoch(model, loader, optimizer, scaler, args.accum_iter)
""",
            "the boundary is the `else` of `% accum_iter != 0`; its step sits under a plain `if` in that block",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch


class AMPOptimizer:
    def __init__(self, fp32_optimizer):
        self.fp32_optimizer = fp32_optimizer  # a wrapper holding the torch optimizer as `.optimizer`
        self._grad_scaler = torch.amp.GradScaler("cuda")

    @property
    def scaler(self):
        return self._grad_scaler

    @property
    def optimizer(self):
        return self.fp32_optimizer.optimizer

    def clip_grad_norm(self, max_norm):
        self.scaler.unscale_(self.optimizer)
        return self.fp32_optimizer.clip_grad_norm(max_norm)

    def step(self):
        self.scaler.step(self.fp32_optimizer)
        self.scaler.update()
""",
            line=18,
            count=1,
            why="the blind drill (fairseq): unscale_ of the inner optimizer, step of its wrapper, another object to GradScaler",
        ),
        Invalid(
            """
import torch

scaler = torch.amp.GradScaler("cuda")


def train(model, loader, optimizer, accum):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = model(x, y) / accum
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if (i + 1) % accum != 0:
            continue
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            line=11,
            why="a guard clause (`continue`) is the boundary; the unscale before it runs on every micro-batch",
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F

def train(model, loader, epochs=3, accum_steps=8, max_norm=1.0):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for i, (images, labels) in enumerate(loader):
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(images), labels) / accum_steps
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            if (i + 1) % accum_steps == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
""",
            line=12,
            why="unscale_ on every micro-batch: the second raises RuntimeError",
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler

class Trainer:
    def __init__(self):
        self.scaler = GradScaler()

    def training_step(self, batch):
        loss = self.model(**batch).loss / self.args.gradient_accumulation_steps
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        self.grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)

    def optimizer_step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

    def train(self):
        for step, batch in enumerate(self.loader):
            self.training_step(batch)
            if (step + 1) % self.args.gradient_accumulation_steps == 0:
                self.optimizer_step()
""",
            line=10,
            why="HF-style trainer: the per-micro-batch helper unscales",
        ),
        Invalid(
            """
from torch import amp
scaler = amp.GradScaler()
for step, batch in enumerate(loader):
    scaler.scale(model(batch) / accum).backward()
    if step % log_every == 0:
        scaler.unscale_(opt)
        log(grad_norm(model))
    if (step + 1) % accum == 0:
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
""",
            line=6,
            why="unscale_ for logging mid-window: silently wrong gradients",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    for chunk in batch.split(micro):
        scaler.scale(model(chunk) / n_chunks).backward()
        scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
            line=6,
            why="an inner micro-batch loop",
        ),
        Invalid(
            """
import torch
def train_step(model, optimizer, scaler, loss, max_norm):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if log_grads:
        scaler.unscale_(optimizer)
        log(model)
    scaler.step(optimizer)
    scaler.update()
""",
            line=7,
            why="twice for one optimizer in one step: RuntimeError",
        ),
        Invalid(
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
            line=8,
            why="update() on every micro-batch: AssertionError on the first non-boundary one",
        ),
        Invalid(
            """
from accelerate import Accelerator

class GANTrainer:
    def __init__(self, gen, disc, opt_g, opt_d):
        self.accelerator = Accelerator(mixed_precision="fp16")
        self.gen, self.disc, self.opt_g, self.opt_d = self.accelerator.prepare(gen, disc, opt_g, opt_d)

    def discriminator_step(self, batch, max_norm):
        self.accelerator.backward(self.disc_loss(batch))
        self.accelerator.clip_grad_norm_(self.disc.features.parameters(), max_norm)
        self.accelerator.clip_grad_norm_(self.disc.head.parameters(), max_norm)
        self.opt_d.step()
        self.opt_d.zero_grad()
""",
            line=11,
            why="each accelerate clip unscales every prepared optimizer; only a step updates the scaler, so the second raises",
        ),
        Invalid(
            """
from accelerate import Accelerator

ACCUMULATE_EVERY = 4
accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=ACCUMULATE_EVERY)
model, optim, loader = accelerator.prepare(model, optim, loader)
for batch in loader:
    with accelerator.accumulate(model):
        loss = model(batch)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
""",
            line=10,
            why="the prepared step skips non-syncing micro-batches, so the scaler is not updated and the second clip raises",
        ),
        Invalid(
            """
import torch


def train_epoch(loader):
    for step, (x, y) in enumerate(loader, start=1):
        with autocast_ctx:
            loss = model(x, y) / args.accumulation_steps
        scaler.scale(loss).backward()
        if step % args.log_interval == 0:
            scaler.unscale_(optimizer)
            log(grad_norm(model))
        if step % args.accumulation_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
    if step % args.accumulation_steps != 0:
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    autocast_ctx = torch.autocast("cuda", dtype=torch.float16)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(args.epochs):
        train_epoch(loader)
""",
            line=10,
            why="the logging `if` unscales mid-window; only the boundary block's own unscale_ is followed by its step",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        from amplint.model import GuardedPaths

        _per_file_model()
        reported: Set[int] = set()
        guards = GuardedPaths(ctx)
        for scope in ctx.scopes:
            if not any(e.kind in ("unscale", "update") for e in ctx.reachable_events(scope, depth=2)):
                continue
            steps = _flatten(ctx, scope, 2, guards)
            for finding in _findings(ctx, steps):
                node = finding[0].event.call.node
                if id(node) in reported:
                    continue
                reported.add(id(node))
                yield self._diagnostic(ctx, *finding)
        yield from self._accelerate_twice(ctx)
        yield from self._accelerate_accumulate(ctx)
        yield from self._inner_unscaled(ctx)

    def _inner_unscaled(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """`scaler.unscale_(X)` and `scaler.step(Y)` on one scaler where `X` is an attribute of `Y`
        (`unscale_(self.optimizer)` through a property returning `self.fp32_optimizer.optimizer`,
        `step(self.fp32_optimizer)`): GradScaler keys its per-optimizer state by the object, so
        `step` finds the wrapper not yet unscaled and unscales the same gradients again."""
        if "unscale_(" not in ctx.source or ".step(" not in ctx.source:
            return
        for scope, props, calls in _wrapper_scopes(ctx):
            unscaled = [(c, _resolved(r, props), _resolved(a, props)) for c, m, r, a, _ in calls if m == "unscale_"]
            stepped = [(c, _resolved(r, props), _resolved(a, props)) for c, m, r, a, _ in calls if m == "step"]
            all_unscaled = {a for _, _, a in unscaled}
            for u, receiver, inner in unscaled:
                if "scaler" not in receiver.lower():
                    continue
                for st, st_receiver, outer in stepped:
                    if st_receiver != receiver or outer in all_unscaled or not inner.startswith(outer + "."):
                        continue
                    if "." in inner[len(outer) + 1:]:
                        continue  # one attribute down: the wrapper's own inner optimizer
                    arg = ctx.code_for(u.args[0].value)
                    message = f"`unscale_({arg})` unscales the inner optimizer, `step({ctx.code_for(st.args[0].value)})` again"
                    if len(message) >= 100:
                        message = "unscale_ of an inner optimizer, then step of its wrapper: gradients unscaled twice"
                    data = {"shape": "inner", "scaler": ctx.code_for(u.func.value), "optimizer": arg, "stepped": outer,
                            "optimizer_class": None, "dtype": None, "device": None}
                    yield ctx.diagnostic(
                        self, u, message, data=data,
                        related=(ctx.related(st, "steps the wrapper: GradScaler keys its state by optimizer object"),),
                        help="Unscale the object `scaler.step` is given (or step the inner optimizer)",
                    )
                    break

    def _accelerate_accumulate(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """accelerate's `clip_grad_norm_` / `clip_grad_value_` / `unscale_gradients()` inside
        `with accelerator.accumulate(model):` on an Accelerator built with a constant
        `gradient_accumulation_steps` above 1, not under a boundary test (`if
        accelerator.sync_gradients:`): the block runs once per micro-batch, each call runs
        `scaler.unscale_` on every prepared optimizer, and the prepared optimizer's `step` (the
        only `scaler.update()`) skips the micro-batches that do not sync, so the second
        micro-batch raises under fp16."""
        from amplint.model import accelerator_precision, accumulating_accelerator

        if not any(c.method in ("prepare", "prepare_optimizer") and c.node.args for c in ctx.calls):
            return  # no prepared optimizer: `unscale_gradients` has nothing to unscale
        for scope in ctx.scopes:
            for u in scope.calls:
                if u.method not in _ACCELERATE_UNSCALES or not u.receiver_dotted:
                    continue
                if u.method == "unscale_gradients" and u.node.args:
                    continue
                block = _accumulate_block(ctx, u)
                if block is None or accumulating_accelerator(ctx, u.receiver_dotted, scope) is None:
                    continue
                settings = accelerator_precision(ctx, u.receiver_dotted, scope)
                if not settings or not settings <= {"fp16", "runtime"}:
                    continue
                yield self._accumulate_diagnostic(ctx, u, block, settings)

    def _accumulate_diagnostic(self, ctx: ModuleContext, u: Any, block: Any, settings: frozenset) -> Diagnostic:
        receiver = u.receiver_dotted
        message, severity = _accelerate_wording(
            settings, f"`{receiver}.{u.method}` unscales on every micro-batch of `accumulate`; it raises",
            f"`{u.method}` in `accumulate` unscales each micro-batch; it raises")
        help = (f"Only the syncing micro-batch steps and updates the scaler: clip under "
                f"`if {receiver}.sync_gradients:`")
        data = {"shape": "accelerate-accumulate", "scaler": None, "optimizer": None, "framework": "accelerate",
                "accelerator": receiver, "first_line": ctx.position(block)[0].row}
        return ctx.diagnostic(self, u.node, message, data=data, help=help,
                              related=(ctx.related(block, "accumulates gradients over micro-batches"),),
                              severity=severity)

    def _accelerate_twice(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """accelerate's `clip_grad_norm_` / `clip_grad_value_` / `unscale_gradients()` called twice
        on one Accelerator with no optimizer step between them: each call runs
        `scaler.unscale_(opt)` on every prepared optimizer (accelerate's
        `unscale_gradients(optimizer=None)`), and only a prepared optimizer's `step` runs
        `scaler.update()`, so under fp16 the second call raises."""
        from amplint.model import accelerator_precision, exclusive, path_contains

        for scope in ctx.scopes:
            unscales = [c for c in scope.calls if c.method in _ACCELERATE_UNSCALES and c.receiver_dotted
                        and not (c.method == "unscale_gradients" and c.node.args)]
            if len(unscales) < 2:
                continue
            flagged: Set[int] = set()
            for i, u2 in enumerate(unscales):
                for u1 in unscales[:i]:
                    if id(u1) in flagged or u1.receiver_dotted != u2.receiver_dotted:
                        continue
                    if exclusive(u1.path, u2.path) or not (path_contains(u1.path, u2.path) or path_contains(u2.path, u1.path)):
                        continue
                    if any(f.kind == "loop" and not _has(u2.path, f) for f in u1.path) or any(f.kind == "loop" and not _has(u1.path, f) for f in u2.path):
                        continue
                    if any(u1.order < c.order < u2.order and _may_step(ctx, c) for c in scope.calls):
                        continue
                    settings = accelerator_precision(ctx, u2.receiver_dotted, scope)
                    if not settings or not settings & {"fp16", "runtime"}:
                        continue
                    flagged.add(id(u2))
                    yield self._accelerate_diagnostic(ctx, u1, u2, settings)
                    break

    def _accelerate_diagnostic(self, ctx: ModuleContext, u1: Any, u2: Any, settings: frozenset) -> Diagnostic:
        row = ctx.position(u1.node)[0].row
        message, severity = _accelerate_wording(
            settings, f"`{u2.receiver_dotted}.{u2.method}` unscales every prepared optimizer again before a step; it raises",
            f"a second `{u2.method}` before a step unscales again; it raises")
        help = (f"Each call runs `scaler.unscale_` on every prepared optimizer and only a step updates the scaler: "
                f"clip all the parameters in one call")
        data = {"shape": "accelerate-twice", "scaler": None, "optimizer": None, "framework": "accelerate",
                "accelerator": u2.receiver_dotted, "first_line": row}
        return ctx.diagnostic(self, u2.node, message, data=data, help=help, related=(ctx.related(u1.node, "unscaled first"),),
                              severity=severity)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """accelerate's clip (or `unscale_gradients`) inside a per-parameter gradient hook
        (`register_post_accumulate_grad_hook`): the hook runs once per parameter during one
        backward, and each call runs `scaler.unscale_(optimizer)` on every prepared optimizer,
        so the second parameter's hook raises `unscale_() has already been called on this
        optimizer since the last update()`. Only for an Accelerator that scales
        (`project_scaling_accelerator`, followed across files), with an optimizer
        prepared and its `backward` called in the function registering the hook (or around it)."""
        from amplint.model import enclosing_calls, grad_hooks, project_scaling_accelerator

        for path in list(project.summaries):
            for hook in grad_hooks(project, path):
                info = project.function((path, hook.hook))
                if info is None:
                    continue
                for r in info["calls"]:
                    receiver, _, method = (r["f"] or "").rpartition(".")
                    if method not in _ACCELERATE_UNSCALES or not receiver or "." in receiver:
                        continue
                    outer = list(enclosing_calls(project, path, hook.registrar))
                    if not any(c["f"] == f"{receiver}.backward" for c in outer):
                        continue
                    if not any(c["f"] in (f"{receiver}.prepare", f"{receiver}.prepare_optimizer") and c["a"] for c in outer):
                        continue  # no prepared optimizer: `unscale_gradients` has nothing to unscale
                    scaling = project_scaling_accelerator(project, path, hook.hook, receiver)
                    if scaling is None:
                        continue
                    yield self._hook_diagnostic(project, ProjectCall(path, hook.hook, r), receiver, method, hook, scaling)

    def _hook_diagnostic(self, project: Project, call: Any, receiver: str, method: str, hook: Any, scaling: Any) -> Diagnostic:
        from amplint.model import hook_sites

        message = f"{scaling.prefix()}`{receiver}.{method}` in a per-parameter grad hook raises"
        if len(message) >= 100:
            message = f"{scaling.prefix()}`{method}` in a per-parameter grad hook raises"
        related = hook_sites(project, hook, scaling)
        data = {"shape": "hook", "scaler": None, "optimizer": None, "framework": "accelerate", "accelerator": receiver,
                "choice": scaling.choice}
        help = (f"Each call unscales every prepared optimizer, so the second parameter's raises `unscale_() has "
                f"already been called`{scaling.runs()}: clip once per step after `{receiver}.backward(...)`, not in the hook")
        return project.diagnostic(self, call, message, data=data, help=help, related=tuple(related),
                                  severity=Severity.WARNING if scaling.runtime else None)

    def _diagnostic(self, ctx: ModuleContext, flagged: _Step, shape: str, other: Optional[_Step]) -> Diagnostic:
        e = flagged.event
        scaler = e.scaler
        opt = e.optimizer or "optimizer"
        unscale = f"`{scaler}.unscale_({opt})`"
        if shape == "every":
            message = f"{unscale} runs on every micro-batch, `step` only at the boundary; it raises"
            help = "Move it inside the accumulation boundary `if`, before the clip"
        elif shape == "every-updated":
            message = f"{unscale} and `update()` run on every micro-batch: accumulated gradients are unscaled again"
            help = "Move both inside the accumulation boundary `if`"
        elif shape == "sometimes":
            message = f"{unscale} can run in the middle of an accumulation window"
            help = "Unscale only inside the accumulation boundary `if`"
        elif shape == "twice":
            message = f"{unscale} runs a second time before `{scaler}.update()`; it raises"
            help = "Unscale each optimizer once per step"
        else:  # "update"
            message = f"`{scaler}.update()` runs on every micro-batch, `step` only at the boundary; it raises"
            help = "Move it inside the accumulation boundary `if`, after the step"
        data = {"shape": shape, "scaler": scaler, "optimizer": e.optimizer}
        data.update(_step_data(ctx, flagged, shape, other))
        return ctx.diagnostic(self, e.call.node, message, data=data, help=help)


def _wrapper_scopes(ctx: ModuleContext) -> Iterator[Tuple[Any, Dict[str, str], List[Tuple[Any, str, str, str, Any]]]]:
    """Each class (its methods together) and each module-level function: its properties
    (`self.name` -> the dotted value a one-line `@property` returns) and its
    `R.unscale_(A)` / `R.step(A)` calls with one dotted argument: (call, method, R, A, function)."""
    import libcst as cst

    from amplint.model import dotted_name as _dotted

    scopes: List[Tuple[Any, List[Any], bool]] = []
    for stmt in ctx.module.body:
        if isinstance(stmt, cst.ClassDef):
            scopes.append((stmt, [f for f in stmt.body.body if isinstance(f, cst.FunctionDef)], True))
        elif isinstance(stmt, cst.FunctionDef):
            scopes.append((stmt, [stmt], False))
    for scope, functions, is_class in scopes:
        props: Dict[str, str] = {}
        calls: List[Tuple[Any, str, str, str, Any]] = []
        for fn in functions:
            if is_class and any(_dotted(d.decorator) == "property" for d in fn.decorators):
                body = fn.body.body
                if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Return):
                    value = _dotted(body[0].body[0].value)
                    if value:
                        props[f"self.{fn.name.value}"] = value
                continue
            for call in _calls_in(fn):
                func = call.func
                if not isinstance(func, cst.Attribute) or func.attr.value not in ("unscale_", "step") or len(call.args) != 1:
                    continue
                receiver, arg = _dotted(func.value), _dotted(call.args[0].value)
                if receiver and arg and call.args[0].keyword is None:
                    calls.append((call, func.attr.value, receiver, arg, fn))
        if calls:
            yield scope, props, calls


def _calls_in(node: Any) -> List[Any]:
    """The calls under `node`, in source order."""
    import libcst as cst

    found: List[Any] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call):
            found.append(current)
        stack.extend(reversed(current.children))
    return found


def _resolved(name: str, props: Dict[str, str]) -> str:
    """`self.optimizer` through the class's properties (`self.fp32_optimizer.optimizer`), a few
    hops at most."""
    for _ in range(4):
        head, _, rest = name.partition(".")
        second, _, tail = rest.partition(".")
        key = f"{head}.{second}"
        if head != "self" or key not in props:
            break
        name = props[key] + (f".{tail}" if tail else "")
    return name


#: accelerate's methods that run `scaler.unscale_` on every prepared optimizer when they are called
_ACCELERATE_UNSCALES = frozenset(("clip_grad_norm_", "clip_grad_value_", "unscale_gradients"))


def _accumulate_block(ctx: ModuleContext, call: Any) -> Optional[Any]:
    """The `with <receiver>.accumulate(...):` statement of the same function whose body runs
    `call` on every micro-batch: no `if` / `else` on the way whose test reads a boundary
    (`sync_gradients`, `% accum`, an `accum...` name), and no such `if` anywhere in the
    block's body (a guard clause `if not accelerator.sync_gradients: continue`)."""
    import libcst as cst

    node = ctx.parent(call.node)
    conditional = False
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.Module)):
        if isinstance(node, cst.If):
            conditional = conditional or _boundary_test(node.test)
        elif isinstance(node, cst.With) and any(_is_accumulate(item.item, call.receiver_dotted) for item in node.items):
            if conditional or _boundary_in(node.body):
                return None
            return node
        node = ctx.parent(node)
    return None


def _is_accumulate(expr: Any, receiver: str) -> bool:
    import libcst as cst

    from amplint.model import dotted_name

    return (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "accumulate"
            and dotted_name(expr.func.value) == receiver)


def _boundary_test(test: Any) -> bool:
    found = _AccumulationTest()
    test.visit(found)
    return bool(found.nodes)


def _if_tests(body: Any) -> List[Any]:
    """The tests of the `if` statements under a block (not in nested functions or classes)."""
    import libcst as cst

    out: List[Any] = []
    stack = [body]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.If):
            out.append(n.test)
        stack.extend(n.children)
    return out


def _boundary_in(body: Any) -> bool:
    return any(_boundary_test(t) for t in _if_tests(body))


def _may_step(ctx: ModuleContext, call: Any) -> bool:
    """A call that may step an optimizer (and so update accelerate's scaler): any `step`, and any
    call of a function or method defined in the file, which the pass does not look into."""
    if call.method in ("step", "step_param") or call.dotted in ("step",):
        return True
    if call.receiver_dotted == "self" and call.method:
        return True
    return call.dotted is not None and "." not in call.dotted and any(s.name == call.dotted for s in ctx.scopes if not s.is_module)


def _flatten(ctx: ModuleContext, scope: Scope, depth: int, guards: GuardedPaths, stack: Tuple[int, ...] = ()) -> List[_Step]:
    """The scope's events with helpers' events inlined; paths include guard clauses (code after
    `if not boundary: return` runs only at the boundary)."""
    out: List[_Step] = []
    for e in scope.events:
        path = guards.path(e.path, e.call.statement)
        if e.kind == "call":
            callee = ctx.callee(e.call)
            if callee is not None and depth > 0 and id(callee) not in stack and id(callee) != id(scope):
                for sub in _flatten(ctx, callee, depth - 1, guards, stack + (id(scope),)):
                    out.append(_Step(sub.event, path + sub.path, (e.order,) + sub.order, True))
                continue
        out.append(_Step(e, path, (e.order,), False))
    return out


def _same_scaler(ctx: ModuleContext, a: _Step, b: _Step) -> bool:
    if a.inlined or b.inlined:
        return True  # parameter names change across calls
    return a.event.scaler == b.event.scaler


def _sets_scale(u: _Step) -> bool:
    """`scaler.update(new_scale)`: an update given the scale (`update(scale * 2.0)`, `new_scale=t`)
    sets it and reads no inf checks, so it does not raise on a micro-batch that recorded none."""
    import libcst as cst

    for arg in u.event.call.node.args:
        if arg.keyword is None or arg.keyword.value == "new_scale":
            return not (isinstance(arg.value, cst.Name) and arg.value.value == "None")
    return False


def _same_optimizer(a: _Step, b: _Step) -> bool:
    oa, ob = a.event.optimizer, b.event.optimizer
    return oa is None or ob is None or oa == ob


def _enabled(ctx: ModuleContext, step: _Step) -> bool:
    info = ctx.scaler(step.event.scaler)
    return info is not None and info.enabled is not False


def _has(path: Path, frame: Frame) -> bool:
    return any(f is frame for f in path)


def _equivalent_in(path: Path, frame: Frame) -> bool:
    """`path` runs under `frame` or under an `if` testing the same condition the same way."""
    for f in path:
        if f is frame:
            return True
        if f.kind == frame.kind and f.test is not None and frame.test is not None and f.test.deep_equals(frame.test):
            return True
    return False


class _Memo:
    """What `_findings` would otherwise recompute for every (backward, scaler step) pair.

    `_equivalent_in` treats two `if`s of one kind with equal tests alike, so whatever
    depends on a boundary frame only through it is computed once per such class: the
    class key is the frame when it has no test, else the first frame seen of that kind
    whose test `deep_equals` it (bucketed by the test's code)."""

    def __init__(self, ctx: ModuleContext, steps: List[_Step]) -> None:
        self.ctx = ctx
        self.zero_grads = [s for s in steps if s.kind == "zero_grad"]
        self.buckets: Dict[Tuple[str, str], List[Frame]] = {}
        self.boundaries: Dict[Tuple[int, int], bool] = {}
        self.zeroed: Dict[int, bool] = {}

    def frame_class(self, frame: Frame) -> int:
        if frame.test is None:
            return id(frame)
        bucket = self.buckets.setdefault((frame.kind, self.ctx.module.code_for_node(frame.test)), [])
        for seen in bucket:
            if seen.test.deep_equals(frame.test):
                return id(seen)
        bucket.append(frame)
        return id(frame)

    def zeroed_in(self, loop: Frame) -> bool:
        """A `zero_grad` runs somewhere inside `loop`."""
        if id(loop) not in self.zeroed:
            self.zeroed[id(loop)] = any(_has(s.path, loop) for s in self.zero_grads)
        return self.zeroed[id(loop)]


def _boundary(memo: _Memo, backward: _Step, step: _Step) -> Optional[Tuple[Frame, Frame]]:
    """(loop, boundary `if`) when `step` runs at accumulation boundaries of a loop that runs `backward` each time."""
    loops = [f for f in backward.path if f.kind == "loop" and _has(step.path, f)]
    if not loops:
        return None
    loop = loops[-1]
    after = list(step.path[[i for i, f in enumerate(step.path) if f is loop][0] + 1 :])
    frame = next((f for f in after if f.kind in ("if", "else") and not _has(backward.path, f)), None)
    if frame is None:
        return None
    key = (id(loop), memo.frame_class(frame))
    if key not in memo.boundaries:
        memo.boundaries[key] = _accumulates(memo, loop, frame)
    return (loop, frame) if memo.boundaries[key] else None


def _accumulates(memo: _Memo, loop: Frame, frame: Frame) -> bool:
    """Gradients persist across iterations of `loop` and `frame` is where they are stepped."""
    zero = [s for s in memo.zero_grads if _has(s.path, loop)]
    if any(not _equivalent_in(s.path, frame) and _runs_every(s, loop) for s in zero):
        return False  # gradients are cleared every iteration: no accumulation
    return any(_equivalent_in(s.path, frame) for s in zero) or _looks_like_accumulation(memo.ctx, frame)


def _steps_in_its_block(ctx: ModuleContext, u: _Step, scaler_steps: List[_Step]) -> bool:
    """`u` is followed in its own block by a step of its optimizer (`if step % accum == 0:
    unscale_; clip; step; update`): that block is the boundary whatever its test, so `u` runs
    once per step, not mid-window of another step of the pass (a flush of the last partial
    window after the loop, a helper called per epoch). The step may sit deeper under a plain
    `if` (`if math.isfinite(norm): scaler.step(opt)`), not under a guard clause or a test that
    itself looks like an accumulation boundary."""
    for s in scaler_steps:
        if s.order <= u.order or not _same_scaler(ctx, u, s) or not _same_optimizer(u, s):
            continue
        if not path_contains(u.path, s.path):
            continue
        if all(f.kind == "if" and not _looks_like_accumulation(ctx, f) for f in s.path[len(u.path):]):
            return True
    return False


def _runs_every(step: _Step, loop: Frame) -> bool:
    """No `if` between `loop` and the step."""
    index = [i for i, f in enumerate(step.path) if f is loop][0]
    return not any(f.kind in ("if", "else", "except") for f in step.path[index + 1 :])


def _looks_like_accumulation(ctx: ModuleContext, frame: Frame) -> bool:
    test = frame.test
    if test is None:
        return False
    found = _AccumulationTest()
    test.visit(found)
    return bool(found.nodes)


def _inner_loop(memo: _Memo, backward: _Step, step: _Step) -> Optional[Frame]:
    """A loop that runs `backward` several times per `step` (micro-batches)."""
    for f in reversed(backward.path):
        if f.kind == "loop" and not _has(step.path, f):
            if memo.zeroed_in(f):
                return None
            if step.order > backward.order:
                return f
    return None


def _findings(ctx: ModuleContext, steps: List[_Step]) -> Iterator[Tuple[_Step, str, Optional[_Step]]]:
    backwards = [s for s in steps if s.kind == "scaled_backward" and _enabled(ctx, s)]
    scaler_steps = [s for s in steps if s.kind == "scaler_step"]
    unscales = [s for s in steps if s.kind == "unscale" and _enabled(ctx, s)]
    updates = [s for s in steps if s.kind == "update" and _enabled(ctx, s)]
    flagged: Set[int] = set()
    memo = _Memo(ctx, steps)
    # 1. more often than the step: outside the accumulation boundary, or in a micro-batch loop
    for b in _distinct_backwards(backwards):
        # A scaler step that finds the same boundary class (or inner loop) as an earlier one,
        # with the same scaler and optimizer, finds nothing new: what it flags depends on it
        # only through those, and it is never among its own `recorded` (it runs under its
        # boundary `if`, outside the inner loop).
        done: Set[tuple] = set()
        for st in scaler_steps:
            if not _same_scaler(ctx, b, st) or exclusive(b.path, st.path):
                continue
            bound = _boundary(memo, b, st)
            inner = _inner_loop(memo, b, st) if bound is None else None
            if bound is None and inner is None:
                continue
            where = (id(bound[0]), memo.frame_class(bound[1])) if bound is not None else (id(inner),)
            key = where + (st.inlined, None if st.inlined else st.event.scaler, st.event.optimizer)
            if key in done:
                continue
            done.add(key)
            per_batch_updates = [
                u
                for u in updates
                if _same_scaler(ctx, u, st)
                and (
                    (bound is not None and _has(u.path, bound[0]) and not _equivalent_in(u.path, bound[1]))
                    or (inner is not None and _has(u.path, inner))
                )
            ]
            for u in unscales:
                if id(u) in flagged or not _same_scaler(ctx, u, st) or not _same_optimizer(u, st):
                    continue
                if _steps_in_its_block(ctx, u, scaler_steps):
                    continue
                if bound is not None:
                    loop, frame = bound
                    if not _has(u.path, loop) or _equivalent_in(u.path, frame) or exclusive(u.path, b.path):
                        continue
                    every = _runs_every(u, loop) or all(_has(b.path, f) for f in u.path)
                else:
                    if not _has(u.path, inner):
                        continue
                    every = all(_has(b.path, f) for f in u.path) or path_contains(u.path, b.path)
                flagged.add(id(u))
                if not every:
                    yield u, "sometimes", st
                elif per_batch_updates:
                    yield u, "every-updated", st
                else:
                    yield u, "every", st
            # an update on every micro-batch is fine when something records inf checks each time
            # (another optimizer stepped every iteration, as in a WGAN critic loop)
            recorded = [
                s
                for s in scaler_steps + unscales
                if s is not st
                and _same_scaler(ctx, s, st)
                and (
                    (bound is not None and _has(s.path, bound[0]) and not _equivalent_in(s.path, bound[1]))
                    or (inner is not None and _has(s.path, inner))
                )
            ]
            if not recorded:
                for u in per_batch_updates:
                    if id(u) not in flagged and u.order > b.order and not _sets_scale(u):
                        flagged.add(id(u))
                        yield u, "update", st
    # 2. twice for one optimizer before update()
    yield from _twice(ctx, unscales, updates, flagged)


def _twice(ctx: ModuleContext, unscales: List[_Step], updates: List[_Step], flagged: Set[int]) -> Iterator[Tuple[_Step, str, Optional[_Step]]]:
    """A second unscale of one optimizer before `update()`: `u2` is flagged when an earlier
    unscale `u1` of that optimizer (not flagged itself) and scaler can run in the same pass
    with `u2`, with no update in between that runs with `u2`. Each `u2` reads back only
    to the last such update, and meets only the unflagged unscales of its optimizer after
    it, so n steps in one function cost n, not n^2 pairs. Findings come in the order of
    their `u1` (the earliest that matches), then of `u2`."""
    update_orders = [u.order for u in updates]
    live: Dict[str, Tuple[List[_Step], List[Tuple[int, ...]]]] = {}  # optimizer -> unflagged unscales
    found: List[Tuple[Tuple[int, ...], int, _Step, _Step]] = []
    for j, u2 in enumerate(unscales):
        if id(u2) in flagged:
            continue
        opt = u2.event.optimizer
        if opt is None:
            continue
        earlier, orders = live.setdefault(opt, ([], []))
        if earlier:
            partner = _first_partner(ctx, earlier, orders, updates, update_orders, u2)
            if partner is not None:
                flagged.add(id(u2))
                found.append((partner.order, j, u2, partner))
                continue
        earlier.append(u2)
        orders.append(u2.order)
    found.sort(key=lambda t: (t[0], t[1]))
    for _, _, u2, u1 in found:
        yield u2, "twice", u1


def _first_partner(
    ctx: ModuleContext, earlier: List[_Step], orders: List[Tuple[int, ...]], updates: List[_Step],
    update_orders: List[Tuple[int, ...]], u2: _Step,
) -> Optional[_Step]:
    """The earliest of `earlier` (ascending) that `u2` unscales a second time."""
    last_update = None  # the latest update before u2 that runs with it, after earlier[0]
    for at in range(bisect_left(update_orders, u2.order) - 1, -1, -1):
        if update_orders[at] <= orders[0]:
            break
        if not exclusive(updates[at].path, u2.path):
            last_update = update_orders[at]
            break
    start = 0 if last_update is None else bisect_left(orders, last_update)
    for u1 in earlier[start:]:
        if not _same_scaler(ctx, u1, u2) or exclusive(u1.path, u2.path):
            continue
        if not (path_contains(u1.path, u2.path) or path_contains(u2.path, u1.path)):
            continue
        if not _loop_between(u1, u2):
            return u1
    return None


def _distinct_backwards(backwards: List[_Step]) -> Iterator[_Step]:
    """The backwards that can yield a finding: a backward with the same frames, inlining and
    scaler as an earlier one (all a pairing reads of it besides its order) finds only what
    the earlier one found (its boundary and loops are the same, and an earlier
    backward passes every "after the backward" test a later one passes), so 600 copies of a
    training step in one loop pair one backward with the scaler steps, not 600."""
    seen: Dict[tuple, Tuple[int, ...]] = {}
    for b in backwards:
        key = (tuple(id(f) for f in b.path), b.inlined, None if b.inlined else b.event.scaler)
        if key in seen and seen[key] <= b.order:
            continue
        seen[key] = b.order
        yield b


def _loop_between(u1: _Step, u2: _Step) -> bool:
    """`for opt in optimizers: scaler.unscale_(opt)` style: a loop only one of them is in."""
    return any(f.kind == "loop" for f in u1.path if not _has(u2.path, f)) or any(
        f.kind == "loop" for f in u2.path if not _has(u1.path, f)
    )


def _step_data(ctx: ModuleContext, flagged: _Step, shape: str, other: Optional[_Step]) -> dict:
    """For the verifier: one micro-batch (the body of the accumulation loop, run once per
    micro-batch), or for "twice" the step from the scaled backward through update()."""
    scope = flagged.event.call.scope
    backward = None
    for at in range(events_before(scope, flagged.event.order) - 1, -1, -1):  # latest first
        e = scope.events[at]
        if e.kind == "scaled_backward" and not exclusive(e.path, flagged.event.path):
            backward = e
            break
    data = step_data(ctx, scope, backward, flagged.event.optimizer) if backward is not None else {}
    if shape == "twice":
        if backward is not None and not flagged.inlined:
            data["step_source"] = step_source(ctx, backward, flagged.event, scope, closers=("scaler_step", "update", "zero_grad"))
    elif other is not None:
        data["step_source"] = loop_body_source(ctx, innermost_common_loop(flagged.path, other.path))
    return data


def _accelerate_wording(settings: frozenset, long: str, short: str) -> Tuple[str, Optional[Severity]]:
    """The message and severity of an accelerate finding: certain (the rule's own severity) when
    the Accelerator is fp16 in the code, a warning prefixed "when accelerate runs fp16" when its
    precision is decided at launch; the shorter wording where the long one would pass 100 chars."""
    certain = settings == {"fp16"}
    when = "" if certain else "when accelerate runs fp16: "
    message = when + long
    if len(message) >= 100:
        message = when + short
    return message, None if certain else Severity.WARNING
