"""AMP101 clip-grad-before-unscale."""
from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Sequence

from amplint.model import (
    CLIP_FUNCTIONS, Diagnostic, Edit, Invalid, Location, Project, ProjectCall, Rule, Severity, Valid, insert_line_before, make_fix, replace_node,
)

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    from amplint.model import CallInfo, Event, ModuleContext, Scope

#: accelerate's methods that unscale the gradients of its GradScaler (clip_grad_* call unscale_gradients)
_ACCELERATE_UNSCALING = frozenset(("unscale_gradients", "clip_grad_norm_", "clip_grad_value_"))
#: the keywords accelerate's clip methods take, by torch clip function (torch's take more)
_ACCELERATE_CLIP_KEYWORDS = {
    "clip_grad_norm_": frozenset(("parameters", "max_norm", "norm_type")),
    "clip_grad_value_": frozenset(("parameters", "clip_value")),
}


class ClipGradBeforeUnscale(Rule):
    """
    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` called on
    gradients produced by `scaler.scale(loss).backward()` with no
    `scaler.unscale_(optimizer)` before it in that training step. The same
    for accelerate: a torch clip after `accelerator.backward(loss)` of an
    `Accelerator(mixed_precision="fp16")` built in the same file, with no
    `accelerator.unscale_gradients()` before it; and for Lightning Fabric: a
    torch clip after `fabric.backward(loss)` of a `Fabric(precision="16-mixed")`
    built in the same file, with no `fabric.clip_gradients(...)` before it;
    and for a LightningModule optimizing by hand
    (`self.automatic_optimization = False`): a torch clip after
    `self.manual_backward(loss)` under a `Trainer(precision="16-mixed")`, with
    no `self.clip_gradients(...)` before it.

    ## Why is this bad?
    The gradients are still multiplied by the loss scale (65536 by default), so
    `clip_grad_norm_` sees exactly scale x the true norm. The clip therefore
    *always* fires and divides the real update by roughly the scale: in
    amplint's measurement (docs/evidence.md) the weight moved 1.0e-6 instead of 0.049. For
    `clip_grad_value_` the effective threshold in true-gradient units is
    `clip_value / scale`. Training silently crawls; no error is raised.
    accelerate's fp16 `backward` is `scaler.scale(loss).backward()` with its
    own GradScaler, and only its `unscale_gradients()` (which its
    `clip_grad_norm_` / `clip_grad_value_` call) unscales before the
    prepared optimizer's `step`: a torch clip in between sees the scaled norm.
    Fabric's `"16-mixed"` plugin works the same way (`MixedPrecision.backward`
    is `scaler.scale(tensor).backward()`); `fabric.clip_gradients` calls
    `precision.unscale_gradients(optimizer)` before clipping. A LightningModule's
    `manual_backward` is the Trainer's precision plugin's backward, the same
    `scaler.scale(loss).backward()`; the plugin unscales only inside the
    optimizer's `step()` (`opt.step()` of `self.optimizers()`), after the clip,
    and `self.clip_gradients(opt, ...)` unscales before clipping.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Unsafe: inserts `scaler.unscale_(optimizer)` before the clip, taking the
    optimizer from the `scaler.step(...)` of the same step. When the step
    already calls `scaler.unscale_(optimizer)`, after the clip, a second call
    would raise, so that line is moved up before the clip instead (offered
    when it is a statement of its own in the same branch as the clip). With several
    optimizers sharing the clipped parameters a human must choose which to
    unscale. Offered only when that `scaler.step` is found.
    For Fabric, unsafe: replaces the call with
    `fabric.clip_gradients(model, optimizer, max_norm=...)` (`clip_val=` for
    `clip_grad_value_`), taking the module from `model.parameters()` and the
    optimizer from the `optimizer.step()` after the clip; offered only when both
    are found and the clip passes just the parameters and the threshold.
    For Lightning manual optimization, unsafe: replaces the call with
    `self.clip_gradients(opt, gradient_clip_val=..., gradient_clip_algorithm="norm")`
    (`"value"` for `clip_grad_value_`), taking the optimizer from the
    `opt.step()` after the clip; it clips the parameters of that optimizer,
    not the ones the torch call named, so a human checks they are the same.
    For accelerate, unsafe too: calls `accelerator.clip_grad_norm_` (or
    `clip_grad_value_`) in place of torch's, the replacement accelerate
    documents; it unscales every prepared optimizer, so it is offered only
    for the first clip after the backward, when nothing else in the function
    unscales, and when the call passes no argument accelerate's method lacks
    (`foreach=`, `error_if_nonfinite=`).

    ## Verification
    `amplint --verify` runs the flagged step on a tiny model with a real
    GradScaler and reports the clip's pre-clip norm against the true norm
    (their ratio is the scale) and how much the update shrank.

    ## Notes
    Fused optimizers (`fused=True`) unscale inside their kernel at `step`,
    which is after the clip, so they need `unscale_` before clipping too.
    The rule stays silent when any `unscale_` precedes the clip in the step
    (even under an `if`), when the scaler is built with `enabled=False`, and
    when the clip is not a torch function (accelerate's
    `accelerator.clip_grad_norm_` unscales for you). accelerate's clip
    unscales only the optimizers `prepare` wrapped, though: after the scaling
    `accelerator.backward(loss)`, before `optimizer.step()` of an optimizer
    built in the file from optimizer classes (also through a local class
    name: `optimizer_class = torch.optim.AdamW`) in a file whose `prepare`
    calls are given no optimizer at all (`accelerator.prepare(unet,
    text_encoder, loader)`), `accelerator.clip_grad_norm_` unscales nothing
    and clips the scaled gradients. Reported at that clip (AMP102 reports the
    step); silent when any `prepare` is given an optimizer or `*args`.

    With accelerate it fires only where fp16 is certain from the code: the
    `Accelerator(...)` that `.backward` is called on is built in the same
    file with the literal `mixed_precision="fp16"`, and every binding of that
    name is such a constructor. It is silent for `"bf16"` and `"no"` (no
    scaler), for a `mixed_precision` read from a config, the arguments or the
    environment (decided at run time: a bf16 run would make the finding
    false, so amplint does not guess), for an accelerator passed in as a
    parameter, for `cpu=True` (accelerate builds no scaler on a CPU), for a
    DeepSpeed, FSDP or Megatron-LM plugin (they own scaling and clipping),
    for a `GradScalerKwargs(enabled=...)` handler in the file, and when
    `accelerator.unscale_gradients()`, `accelerator.clip_grad_norm_` or
    `clip_grad_value_` runs before the clip (even under an `if`). An
    `accelerate launch` configuration can still switch to DeepSpeed at run
    time; the rule judges the code it reads.

    An `Accelerator` that states no precision (`mixed_precision` omitted,
    `None`, or a parameter of its function defaulting to None) takes
    accelerate's config or launcher's (`ACCELERATE_MIXED_PRECISION`): the
    file cannot know it. When the file enters that accelerator's
    `autocast()` the code expects a mixed run, and on the fp16 one the clip
    sees scaled gradients: a warning naming the run (`when accelerate's
    config is fp16: ...`), never an error. Without `autocast()`, and for a
    plugin, `cpu=` or `**kwargs`, it stays silent.

    Per-parameter gradient hooks (the project model): a torch clip inside a
    function registered with `register_post_accumulate_grad_hook` in a loop
    over the parameters, by a function that calls `accelerator.backward` of
    a scaling Accelerator (followed across files as AMP102 and AMP104 follow
    it: a literal "fp16", an argparse choice, a launcher's precision), runs
    inside that backward on the gradient it just scaled (accelerate's
    prepared optimizer unscales only in `step()`); a warning when fp16 is a
    choice. Silent when the hook calls any `unscale_` / `unscale_gradients`,
    and for a hook whose accelerator is a parameter nobody passes (a
    library class: its users choose the precision).

    One run-time choice counts: `mixed_precision=args.mixed_precision` where
    the file defines that argparse option with literal `choices` that include
    `"fp16"` (`choices=["no", "fp16", "bf16"]`). The fp16 run is then a
    documented, supported choice and on it the clip certainly sees scaled
    gradients, so the rule reports it, naming the choice (`when
    --mixed_precision is fp16: ...`), at its usual severity: the finding is
    certain on that run, only the run is the user's choice. Choices without
    `"fp16"`, an option with no `choices` or non-literal ones, and a parser
    in another file stay silent.

    With Fabric the same holds for `Fabric(precision="16-mixed")` (or `"16"`,
    `16`) built in the file: silent for `"bf16-mixed"`, a precision decided at
    run time, `plugins=`, `accelerator="cpu"` (Lightning runs bf16 there) and
    an FSDP or DeepSpeed strategy (their own precision plugins; a torch clip on
    an FSDP model is AMP801, on a DeepSpeed engine AMP805).

    With Lightning manual optimization the Trainer is usually built by a
    script elsewhere in the project, so the precision is read from the
    project: the finding holds when some Lightning `Trainer(...)` of the
    project runs `precision="16-mixed"` (`"16"`, `16`) on the path the
    project configures: a literal; `precision=args.precision` whose argparse
    option (same file) has such a literal `default=`; or, for a namespace
    that no argparse option of that file defines (prefigure's
    `get_all_args()` and its kin read a defaults file), a `.ini` at the
    project root that sets the key (`precision = "16-mixed"` in
    `defaults.ini`). A Trainer the module's own file builds decides alone
    (bf16 or 32 there: silent). Silent when no Trainer's precision is known
    to be fp16 mixed (bf16, `"16-true"` or 32 everywhere, a precision with no
    literal default, a run-time choice: precision first, no lower-severity
    guess), for a Trainer with `plugins=`, `accelerator="cpu"` or a DeepSpeed
    or FSDP strategy (a literal or a strategy class), when the class does not
    set `self.automatic_optimization = False` (itself or a base in the file),
    and when `self.clip_gradients`, an `unscale_` or `unscale_gradients` call
    precedes the clip in the step. The `precision = "fp16"` setting makes it
    hold, `"bf16"` silences it. One project-wide answer: a project with an
    fp16 Trainer and a bf16 one holds for every manual-optimization module.

    Silent, on every path, for a clip under a guard no construction turns on
    (`model/facts.argument_may_be_passed`, read from the project's files when
    conditions are resolved): the `if` around it tests `self.<attr> > 0`,
    `self.<attr> is not None` or `self.<attr>`, the class sets `self.<attr>`
    once, in its `__init__`, from a parameter whose default turns the test
    off (`clip_grad_norm=0.0`), and no call of the class in the project
    passes that parameter (by name, at its position, or through `*`/`**`;
    Lightning's `Class.load_from_checkpoint(path, **kw)` counts by its
    keywords). The clip never runs: stable-audio-tools' autoencoder wrapper,
    which its only builder never hands a `clip_grad_norm`. Reported as before
    when the class is named otherwise (a subclass, a registry, a `partial`, a
    config file or a notebook naming it) or built nowhere in the project (its
    users build it).

    ## References
    - amplint's evidence page: `amplint --explain AMP101` (docs/evidence.md#amp101)
    - https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping
    """

    code = "AMP101"
    name = "clip-grad-before-unscale"
    severity = Severity.ERROR
    message = "gradient clipping on scaled gradients"
    triggers = ("clip_grad",)
    # a scaled backward: `scaler.scale(loss).backward()`, or `accelerator.backward(loss)` of an fp16 Accelerator
    requires = (("backward",), ("scale", "Accelerator", "Fabric", "manual_backward"))
    # `.scale(` called as a method (not `self.scale` in attention code), or "Accelerator" with "fp16"
    gate_check = "amplint.core.gates:scaled_backward_possible"

    VALID = [
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
            "the documented order",
        ),
        Valid(
            """
import torch
def train(model, loader, optimizer, scaler, clip):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
""",
            "unscale_ under the same `if` as the clip; scaler passed in as a parameter",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.autocast():
        loss = model(**batch).loss
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
            "accelerate unscales inside accelerator.clip_grad_norm_",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
optimizer = torch.optim.AdamW(model.parameters())
model, loader = accelerator.prepare(model, loader)
disc_opt = accelerator.prepare(disc_opt)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
            "another optimizer is prepared: what accelerate's clip unscales is not known from here (AMP102 has the step)",
        ),
        Valid(
            """
import torch
scaler = torch.cuda.amp.GradScaler(enabled=False)
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
""",
            "a scaler built with enabled=False scales nothing",
        ),
        Valid(
            """
from timm.utils import NativeScaler
loss_scaler = NativeScaler()
loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
""",
            "timm's NativeScaler unscales before its own clip",
        ),
        Valid(
            """
import torch
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
scaler.unscale_(opt)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(opt)
scaler.update()
""",
            "fused optimizer, unscaled before the clip",
        ),
        Valid(
            """
import torch
if use_amp:
    scaler.scale(loss).backward()
else:
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            "the clip is on the non-AMP branch",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="bf16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
            "accelerate with bf16 builds no GradScaler",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision=args.mixed_precision)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
            "accelerate's mixed precision decided at run time",
        ),
        Valid(
            """
import argparse
import torch
from accelerate import Accelerator
parser = argparse.ArgumentParser()
parser.add_argument("--mixed_precision", default="no", choices=["no", "bf16"])
args = parser.parse_args()
accelerator = Accelerator(mixed_precision=args.mixed_precision)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
            "a --mixed_precision flag whose choices include no fp16: accelerate never builds a GradScaler",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    if accelerator.sync_gradients:
        accelerator.unscale_gradients()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
            "accelerate fp16, gradients unscaled with accelerator.unscale_gradients() before the clip",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator

class Exporter:
    def __init__(self):
        self.accelerator = Accelerator(mixed_precision="fp16")

class Trainer:
    def step(self, loss):
        self.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
""",
            "`self.accelerator` of another class: `Trainer`'s own accelerator is not visible here",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            "accelerate's config decides and nothing in the file implies a mixed run: silent (precision first)",
        ),
        Valid(
            """
import torch
import lightning as L
fabric = L.Fabric(accelerator="cuda", devices=2, precision="16-mixed")
model, optimizer = fabric.setup(model, optimizer)
for batch in loader:
    fabric.backward(model(batch).loss)
    fabric.clip_gradients(model, optimizer, max_norm=1.0)
    optimizer.step()
""",
            "Fabric's own clip unscales first",
        ),
        Valid(
            """
import torch
import lightning as L
fabric = L.Fabric(accelerator="cuda", precision="bf16-mixed")
model, optimizer = fabric.setup(model, optimizer)
fabric.backward(model(batch).loss)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
optimizer.step()
""",
            "Fabric bf16: no GradScaler",
        ),
        Valid(
            """
import torch
import lightning as L
fabric = L.Fabric(accelerator="cuda", precision=args.precision)
model, optimizer = fabric.setup(model, optimizer)
fabric.backward(model(batch).loss)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
optimizer.step()
""",
            "Fabric's precision decided at run time",
        ),
        Valid(
            """
import torch
import lightning as L

class GAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch):
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(self.loss(batch))
        self.clip_gradients(opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        opt.step()

trainer = L.Trainer(accelerator="gpu", precision="16-mixed")
trainer.fit(GAN())
""",
            "manual optimization clipping with `self.clip_gradients`, which unscales first",
        ),
        Valid(
            """
import torch
import lightning as L

class GAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch):
        opt = self.optimizers()
        self.manual_backward(self.loss(batch))
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        opt.step()

trainer = L.Trainer(accelerator="gpu", precision="bf16-mixed")
trainer.fit(GAN())
""",
            "manual optimization under a bf16 Trainer: no GradScaler",
        ),
        Valid(
            """
import argparse
import torch
import lightning as L

class GAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch):
        opt = self.optimizers()
        self.manual_backward(self.loss(batch))
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        opt.step()

parser = argparse.ArgumentParser()
parser.add_argument("--precision")
args = parser.parse_args()
L.Trainer(precision=args.precision).fit(GAN())
""",
            "manual optimization, the Trainer's precision decided at run time with no default",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
optimizer = torch.optim.AdamW(unet.parameters())
unet, text_encoder, loader = accelerator.prepare(unet, text_encoder, loader)
for batch in loader:
    accelerator.backward(unet(batch).loss)
    accelerator.clip_grad_norm_(unet.parameters(), 1.0)
    optimizer.step()
""",
            line=8,
            why="accelerate's clip unscales the prepared optimizers only, and none is prepared: it clips scaled gradients",
        ),
        Invalid(
            """
import torch
import pytorch_lightning as pl

class VAEGAN(pl.LightningModule):
    def __init__(self, clip):
        super().__init__()
        self.automatic_optimization = False
        self.clip = clip

    def training_step(self, batch, batch_idx):
        opt_gen, opt_disc = self.optimizers()
        opt_gen.zero_grad()
        self.manual_backward(self.generator_loss(batch))
        torch.nn.utils.clip_grad_norm_(self.generator.parameters(), self.clip)
        opt_gen.step()

trainer = pl.Trainer(accelerator="gpu", precision="16-mixed")
trainer.fit(VAEGAN(1.0))
""",
            line=14,
            why="manual optimization under fp16 mixed precision: the plugin unscales only in opt_gen.step()",
            fixed="""
import torch
import pytorch_lightning as pl

class VAEGAN(pl.LightningModule):
    def __init__(self, clip):
        super().__init__()
        self.automatic_optimization = False
        self.clip = clip

    def training_step(self, batch, batch_idx):
        opt_gen, opt_disc = self.optimizers()
        opt_gen.zero_grad()
        self.manual_backward(self.generator_loss(batch))
        self.clip_gradients(opt_gen, gradient_clip_val=self.clip, gradient_clip_algorithm="norm")
        opt_gen.step()

trainer = pl.Trainer(accelerator="gpu", precision="16-mixed")
trainer.fit(VAEGAN(1.0))
""",
        ),
        Invalid(
            """
import argparse
import torch
from lightning.pytorch import LightningModule, Trainer

class Critic(LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch):
        opt = self.optimizers()
        self.manual_backward(self.loss(batch))
        if self.hparams.clip > 0:
            torch.nn.utils.clip_grad_value_(self.parameters(), self.hparams.clip)
        opt.step()

parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="16")
args = parser.parse_args()
Trainer(precision=args.precision).fit(Critic())
""",
            line=14,
            why="the Trainer's default precision is \"16\" (fp16 mixed): the default run clips scaled gradients",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
""",
            line=4,
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
""",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.encoder.parameters(), 1.0)
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.head.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
""",
            line=4,
            why="the step unscales, but after the first clip: a second `unscale_` would raise, so the fix moves it",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.encoder.parameters(), 1.0)
torch.nn.utils.clip_grad_norm_(model.head.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
""",
        ),
        Invalid(
            """
from torch.nn.utils import clip_grad_norm_ as clip
from torch.cuda.amp import GradScaler

class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = GradScaler()

    def training_step(self, loss):
        self.scaler.scale(loss).backward()
        clip(self.model.parameters(), max_norm=1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            line=12,
        ),
        Invalid(
            """
import torch.nn as nn
from torch import amp
scaler = amp.GradScaler()
for step, batch in enumerate(loader):
    with amp.autocast("cuda"):
        loss = model(batch) / accum
    scaler.scale(loss).backward()
    if (step + 1) % accum == 0:
        nn.utils.clip_grad_value_(model.parameters(), 0.5)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
""",
            line=9,
        ),
        Invalid(
            """
import torch
def step(model, opt, scaler, loss):
    scaled = scaler.scale(loss)
    scaled.backward()
    torch.nn.utils.clip_grad.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
""",
            line=5,
        ),
        Invalid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.autocast():
        loss = model(**batch).loss
    accelerator.backward(loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
""",
            line=9,
            fixed="""
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.autocast():
        loss = model(**batch).loss
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
""",
        ),
        Invalid(
            """
import torch
from accelerate import Accelerator

class Base:
    def __init__(self):
        self.accelerator = Accelerator(mixed_precision="fp16")

class Trainer(Base):
    def step(self, loss):
        self.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
""",
            line=11,
            why="`self.accelerator` built by a base class defined in the file",
        ),
        Invalid(
            """
import torch
import lightning as L
fabric = L.Fabric(accelerator="cuda", devices=2, precision="16-mixed")
model, optimizer = fabric.setup(model, optimizer)
for batch in loader:
    loss = model(batch).loss
    fabric.backward(loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
""",
            line=8,
            fixed="""
import torch
import lightning as L
fabric = L.Fabric(accelerator="cuda", devices=2, precision="16-mixed")
model, optimizer = fabric.setup(model, optimizer)
for batch in loader:
    loss = model(batch).loss
    fabric.backward(loss)
    fabric.clip_gradients(model, optimizer, max_norm=1.0)
    optimizer.step()
    optimizer.zero_grad()
""",
            why="Fabric's fp16 backward scales the loss with its own GradScaler",
        ),
        Invalid(
            """
import argparse
import torch
from accelerate import Accelerator
parser = argparse.ArgumentParser()
parser.add_argument("--mixed_precision", default="no", choices=["no", "fp16", "bf16"])
args = parser.parse_args()
accelerator = Accelerator(mixed_precision=args.mixed_precision)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
            line=11,
            why="the default is no mixed precision, but --mixed_precision fp16 is a supported choice: on it the clip sees scaled gradients",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        for scope in ctx.scopes:
            events = scope.events
            fixed = set()  # (backward, optimizer): one `unscale_` per optimizer per step, before the first clip
            # the first unscale of the scope: "unscaled before the clip" is a prefix question
            first_unscale = next((e.order for e in events if e.kind == "unscale"), None)
            steps = None  # built at the scope's first finding
            for index, clip in enumerate(events):
                if clip.kind != "clip":
                    continue
                at = self._scaled_backward_before(ctx, scope, events, index)
                if at is None:
                    continue
                backward = events[at]
                if first_unscale is not None and first_unscale < clip.order:
                    continue
                accelerate = backward.kind == "framework_backward"
                if accelerate and any(c.order < clip.order for c in _accelerate_unscales(scope)):
                    continue
                if self._unscaled_by_helper(ctx, events, at, index):
                    continue
                if accelerate:
                    yield _guarded(ctx, scope, clip, self._accelerate_diagnostic(ctx, scope, clip, backward, fixed))
                    continue
                if steps is None:
                    steps = _steps_by_scaler(events)
                yield _guarded(ctx, scope, clip, self._diagnostic(ctx, scope, index, backward, fixed, steps))
            for d in _unprepared_accelerate_clips(self, ctx, scope):
                yield d
            for d in _fabric_clips(self, ctx, scope):
                yield d
            for d in _lightning_clips(self, ctx, scope):
                yield d

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """A torch clip inside a per-parameter gradient hook (`register_post_accumulate_grad_hook`
        in a loop over the parameters) registered by a function that calls `accelerator.backward`
        of a scaling Accelerator (`project_scaling_accelerator`, followed across files): the hook
        runs inside that backward, on the gradient it just scaled, and nothing in the hook
        unscales it first (accelerate's `AcceleratedOptimizer` unscales only in `step()`)."""
        from amplint.model import enclosing_calls, grad_hooks, hook_sites, project_scaling_accelerator

        for path in list(project.summaries):
            for hook in grad_hooks(project, path):
                info = project.function((path, hook.hook))
                if info is None:
                    continue
                outer = None
                for r in info["calls"]:
                    if not r["f"] or r["f"].rsplit(".", 1)[-1] not in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads_with_norm_"):
                        continue
                    if not any(t[0] == "X" and t[1] in CLIP_FUNCTIONS for t in project.name_types(path, hook.hook, r["f"])):
                        continue  # accelerate's own clip (AMP104's), or a project function
                    if any((c["f"] or "").rsplit(".", 1)[-1] in ("unscale_", "unscale_gradients") for c in info["calls"]):
                        continue  # the hook unscales (somewhere: silence is the safe answer)
                    outer = outer if outer is not None else list(enclosing_calls(project, path, hook.registrar))
                    accelerators = sorted({c["f"][: -len(".backward")] for c in outer
                                           if c["f"] and c["f"].endswith(".backward") and c["f"].count(".") == 1})
                    for accelerator in accelerators:
                        scaling = project_scaling_accelerator(project, path, hook.hook, accelerator)
                        if scaling is None:
                            continue
                        func = r["f"].rsplit(".", 1)[-1]
                        message = f"{scaling.prefix()}`{func}` in a per-parameter grad hook clips gradients `{accelerator}.backward` left scaled"
                        if len(message) >= 100:
                            message = f"{scaling.prefix()}`{func}` in a per-parameter hook clips scaled gradients"
                        data = {"clip_function": func, "threshold": None, "scaler": None, "framework": "accelerate",
                                "accelerator": accelerator, "optimizer": None, "shape": "hook", "choice": scaling.choice}
                        help = (f"The hook runs inside `{accelerator}.backward`, before accelerate unscales{scaling.runs()}: "
                                f"clip once per step after the backward with `{accelerator}.clip_grad_norm_`, not in the hook")
                        yield project.diagnostic(self, ProjectCall(path, hook.hook, r), message, data=data, help=help,
                                                 related=tuple(hook_sites(project, hook, scaling)),
                                                 severity=Severity.WARNING if scaling.runtime else None)
                        break

    @staticmethod
    def _scaled_backward_before(ctx: ModuleContext, scope: Scope, events, index: int) -> Optional[int]:
        """The index of the scaled backward whose gradients `events[index]` (a clip) clips: the
        last event before it, on a path that can run with it, that is a scaled backward (of an
        enabled scaler, or of an `Accelerator(mixed_precision="fp16")`) or ends one
        (scaler.step, update, another framework's backward); read backwards from the clip,
        so n clips cost the events between each and its backward."""
        from amplint.model import config_scaling_accelerator, exclusive, scaling_accelerator
        clip = events[index]
        for at in range(index - 1, -1, -1):
            e = events[at]
            if e.kind == "scaled_backward":
                scaler = ctx.scaler(e.scaler)
                if scaler is None or scaler.enabled is False or exclusive(e.path, clip.path):
                    continue
                return at
            if e.kind in ("scaler_step", "update", "framework_backward") and not exclusive(e.path, clip.path):
                if e.kind == "framework_backward" and (
                    scaling_accelerator(ctx, e.call.receiver_dotted, scope) is not None
                    or config_scaling_accelerator(ctx, e.call.receiver_dotted, scope) is not None
                ):
                    return at
                return None
        return None

    @staticmethod
    def _unscaled_by_helper(ctx: ModuleContext, events, backward: int, clip: int) -> bool:
        """A call between the backward and the clip to a function of this file that unscales
        (`scaler.unscale_`, or accelerate's `unscale_gradients` / `clip_grad_*`)."""
        for e in events[backward + 1 : clip]:
            if e.kind == "call":
                callee = ctx.scope_named(e.target)
                if callee is not None and (any(x.kind == "unscale" for x in callee.events) or _accelerate_unscales(callee)):
                    return True
        return False

    def _diagnostic(
        self, ctx: ModuleContext, scope: Scope, index: int, backward: Event, fixed: set, steps: Dict[Optional[str], List[int]]
    ) -> Diagnostic:
        """The finding for the clip `scope.events[index]`; `steps` holds the indices of the
        scope's `scaler.step(opt)` events per scaler, so the step after the clip is bisected,
        not rescanned from the scope's start for each clip."""
        from amplint.model import literal_number, path_contains, step_data, step_source
        clip = scope.events[index]
        func = (clip.call.dotted or "clip_grad_norm_").rsplit(".", 1)[-1]
        scaler = backward.scaler
        by_value = "value" in func
        threshold = clip.call.arg(1, "clip_value" if by_value else "max_norm")
        threshold_value = literal_number(threshold) if threshold is not None else None
        message = f"`{clip.call.dotted or func}` clips gradients still multiplied by the loss scale"
        step = _next_step(scope.events, steps.get(scaler, []), index)
        late = _unscale_after(scope.events, index, scaler, step)  # the step unscales, but after this clip
        fix = None
        if step is not None and (backward.order, step.optimizer) not in fixed:
            fixed.add((backward.order, step.optimizer))
            if late is None:
                fix = make_fix(
                    f"Insert `{scaler}.unscale_({step.optimizer})` before the clip",
                    [insert_line_before(ctx, clip.call.statement, f"{scaler}.unscale_({step.optimizer})")],
                    safe=False,
                )
            else:  # a second unscale_ would raise: the one the step has moves up
                moved = _move_before(ctx, late, clip)
                if moved is not None:
                    fix = make_fix(f"Move `{scaler}.unscale_({step.optimizer})` before the clip", moved, safe=False)
        data = {
            "clip_function": func,
            "threshold": threshold_value,
            "scaler": scaler,
            "optimizer": step.optimizer if step else None,
            "step_source": step_source(ctx, backward, step or clip, scope),
        }
        data.update({k: v for k, v in step_data(ctx, scope, backward, data["optimizer"]).items() if k not in data})
        spelled, qualname = clip.call.dotted, clip.call.qualname
        if spelled and qualname and "." not in spelled and spelled != qualname.rsplit(".", 1)[-1]:
            data["names"] = {spelled: qualname}  # an alias (`clip_grad_norm_ as clip`) the verifier resolves
        optimizer = step.optimizer if step is not None else "optimizer"
        if late is not None:
            help = f"Move `{scaler}.unscale_({optimizer})` before the clip: it runs after it now"
            related = (ctx.related(late.call.node, "unscaled only here, after the clip"),)
        elif step is not None and len(step.path) > len(clip.call.path) and path_contains(clip.call.path, step.path):
            # the step runs under a condition the clip does not (an accumulation boundary)
            help = f"Call `{scaler}.unscale_({optimizer})` and then clip inside the block that runs `{scaler}.step({optimizer})`"
            related = ()
        else:
            help = f"Call `{scaler}.unscale_({optimizer})` before the clip"
            related = ()
        return ctx.diagnostic(self, clip.call.node, message, fix=fix, data=data, help=help, related=related)

    def _accelerate_diagnostic(self, ctx: ModuleContext, scope: Scope, clip: Event, backward: Event, fixed: set) -> Diagnostic:
        """The finding for a torch clip after `accelerator.backward(loss)` of an fp16 Accelerator;
        the fix calls the accelerator's own clip method, which accelerate documents for this."""
        from amplint.model import literal_number, scaling_accelerator, scaling_choice, step_source
        accelerator = backward.call.receiver_dotted
        func = (clip.call.qualname or clip.call.dotted or "clip_grad_norm_").rsplit(".", 1)[-1]
        by_value = "value" in func
        threshold = clip.call.arg(1, "clip_value" if by_value else "max_norm")
        spelled = clip.call.dotted or func
        message = f"`{spelled}` clips gradients that the fp16 `{accelerator}.backward` left scaled"
        choice = scaling_choice(ctx, accelerator, scope)
        if choice is not None:  # fp16 is an argparse choice: name the run it concerns
            message = f"when {choice}: `{func}` clips gradients that `{accelerator}.backward` left scaled"
        configured = scaling_accelerator(ctx, accelerator, scope) is None  # the precision is accelerate's config's
        if configured:
            choice = "accelerate's config is fp16"
            message = f"when accelerate's config is fp16: `{func}` clips gradients `{accelerator}.backward` left scaled"
            if len(message) >= 100:
                message = f"when accelerate's config is fp16: `{func}` clips gradients that are still scaled"
        fix = None
        if backward.order not in fixed and _accelerate_clip_compatible(clip.call, func) and len(_accelerate_unscales(scope)) == 0:
            fixed.add(backward.order)
            fix = make_fix(
                f"Call `{accelerator}.{func}` instead",
                [replace_node(ctx, clip.call.node.func, f"{accelerator}.{func}")],
                safe=False,
            )
        data = {
            "clip_function": func,
            "threshold": literal_number(threshold) if threshold is not None else None,
            "scaler": None,
            "framework": "accelerate",
            "accelerator": accelerator,
            "optimizer": None,
            "step_source": step_source(ctx, backward, clip, scope),
        }
        if configured:
            data["choice"] = choice
        help = f"Call `{accelerator}.{func}(...)` instead: it unscales the gradients before clipping"
        return ctx.diagnostic(self, clip.call.node, message, fix=fix, data=data, help=help,
                              severity=Severity.WARNING if configured else None)


def _accelerate_unscales(scope: Scope) -> List[CallInfo]:
    """The calls of `scope` that unscale accelerate's gradients (`accelerator.unscale_gradients()`,
    `accelerator.clip_grad_norm_/value_`, which unscale first): any such method of any receiver,
    since silence is the safe answer when a call may unscale."""
    return [c for c in scope.calls if c.method in _ACCELERATE_UNSCALING and not c.calls_any(CLIP_FUNCTIONS)]


def _accelerate_clip_compatible(call: CallInfo, func: str) -> bool:
    """The torch clip's arguments mean the same to accelerate's method of that name (no
    `foreach=` / `error_if_nonfinite=`, no unpacking), so swapping the callee keeps the call."""
    allowed = _ACCELERATE_CLIP_KEYWORDS.get(func)
    if allowed is None:
        return False
    args = call.node.args
    if any(a.star for a in args):
        return False
    positional = sum(1 for a in args if a.keyword is None)
    return positional <= len(allowed) and all(a.keyword.value in allowed for a in args if a.keyword is not None)


def _unscale_after(events: Sequence[Event], clip: int, scaler: Optional[str], step: Optional[Event]) -> Optional[Event]:
    """The `scaler.unscale_(optimizer)` of the step's optimizer between the clip `events[clip]`
    and that step, on a path that can run with the clip (the step unscales too late)."""
    from amplint.model import exclusive
    if step is None:
        return None
    for e in events[clip + 1 :]:
        if e.order >= step.order:
            return None
        if e.kind == "unscale" and e.scaler == scaler and e.optimizer == step.optimizer and not exclusive(e.path, events[clip].path):
            return e
    return None


def _move_before(ctx: ModuleContext, late: Event, clip: Event):
    """Edits moving the statement `late.call` (a bare `scaler.unscale_(opt)` line) to just
    before the clip's statement; None unless both are in the same branch of the step and
    removing the line leaves its block non-empty."""
    import libcst as cst

    line = late.call.statement
    if late.path != clip.path or not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    expr = line.body[0]
    if not isinstance(expr, cst.Expr) or expr.value is not late.call.node:
        return None
    block = ctx.parent(line)
    if len(getattr(block, "body", ())) < 2:
        return None
    start, end = ctx.position(line)
    text = ctx.module.code_for_node(late.call.node)
    return [insert_line_before(ctx, clip.call.statement, text), Edit(Location(start.row, 1), Location(end.row + 1, 1), "")]


def _steps_by_scaler(events: Sequence[Event]) -> Dict[Optional[str], List[int]]:
    """Indices of the `scaler.step(optimizer)` events (with a known optimizer), per scaler."""
    out: Dict[Optional[str], List[int]] = {}
    for at, e in enumerate(events):
        if e.kind == "scaler_step" and e.optimizer:
            out.setdefault(e.scaler, []).append(at)
    return out


def _next_step(events: Sequence[Event], indices: List[int], clip: int) -> Optional[Event]:
    """The first of `indices` (ascending) after the clip `events[clip]`, also in order number."""
    for at in range(bisect_right(indices, clip), len(indices)):
        if events[indices[at]].order > events[clip].order:
            return events[indices[at]]
    return None


# --- accelerate's own clip with no prepared optimizer (read13 cloneofsimo/lora)


def _unprepared_accelerate_clips(rule: Rule, ctx: ModuleContext, scope: Scope) -> Iterator[Diagnostic]:
    """`accelerator.clip_grad_norm_(...)` (or `clip_grad_value_`) after `accelerator.backward(loss)`
    of an Accelerator that scales the loss (a literal "fp16", or an argparse choice of it), before
    `opt.step()` of an optimizer built in the file from optimizer classes and never given to
    `prepare`, in a file whose `prepare` calls are given no optimizer at all. accelerate's clip
    unscales through `unscale_gradients()`, which unscales only the optimizers `prepare` wrapped
    (`self._optimizers`): with none, it unscales nothing and clips the scaled gradients (AMP102
    reports the step on them)."""
    from amplint.model import exclusive, literal_number, scaling_accelerator, scaling_choice, step_source

    events = scope.events
    for index, backward in enumerate(events):
        if backward.kind != "framework_backward":
            continue
        accelerator = backward.call.receiver_dotted
        if not accelerator or scaling_accelerator(ctx, accelerator, scope) is None:
            continue
        later = events[index + 1:]
        end = next((i for i, e in enumerate(later) if e.kind in ("framework_backward", "scaled_backward")), len(later))
        step = next((e for e in later[:end] if e.kind == "optimizer_step" and not exclusive(e.path, backward.path)), None)
        if step is None or not step.optimizer or not _never_prepared(ctx, scope, step.optimizer, step.order):
            continue
        for clip in scope.calls:
            if (clip.method not in ("clip_grad_norm_", "clip_grad_value_") or clip.receiver_dotted != accelerator
                    or not backward.order < clip.order < step.order or exclusive(clip.path, step.path)):
                continue
            if any(c.method == "unscale_gradients" and c.arg(0) is not None and backward.order < c.order < clip.order
                   for c in scope.calls):
                continue  # handed an optimizer to unscale: not the prepared set
            func = clip.method
            opt = step.optimizer
            message = f"`{accelerator}.{func}` clips scaled gradients: `{opt}` was never prepared"
            choice = scaling_choice(ctx, accelerator, scope)
            if choice is not None:
                message = f"when {choice}: `{func}` sees scaled gradients (`{opt}` unprepared)"
            threshold = clip.arg(1, "clip_value" if "value" in func else "max_norm")
            data = {"step_source": step_source(ctx, backward, step, scope), "clip_function": func,
                    "threshold": literal_number(threshold) if threshold is not None else None,
                    "scaler": None, "framework": "accelerate",
                    "accelerator": accelerator, "optimizer": opt, "mechanism": "unprepared"}
            help = f"Pass `{opt}` to `{accelerator}.prepare(...)`: its clip then unscales that optimizer's gradients first"
            yield ctx.diagnostic(rule, clip.node, message, data=data, help=help)
            return


def _never_prepared(ctx: ModuleContext, scope: Scope, opt: str, before: int) -> bool:
    """`opt` (a plain name of `scope`) is built there from optimizer classes only (its last binding
    before `before`: `torch.optim.AdamW(...)`, or `optimizer_class(...)` through a local name bound
    to optimizer classes), and no `prepare` call of the file is given it, or any optimizer."""
    import libcst as cst

    from amplint.model import descendants, dotted_name, optimizer_classes

    if "." in opt or opt in scope.params:
        return False
    bindings = [a for a in ctx.assignments_to(opt) if a.scope is scope and a.order < before]
    if not bindings or bindings[-1].unpacked or not isinstance(bindings[-1].value, cst.Call):
        return False
    built = ctx.call_info(bindings[-1].value)
    if built is None or not optimizer_classes(ctx, built):
        return False
    for call in ctx.calls:
        if call.method not in ("prepare", "prepare_optimizer"):
            continue
        for arg in call.node.args:
            if arg.star:
                return False  # `prepare(*objects)`: anything may be among them
            for n in descendants(arg.value):
                spelled = dotted_name(n) if isinstance(n, (cst.Name, cst.Attribute)) else None
                if spelled and (spelled == opt or "optim" in spelled.lower() or ctx.is_optimizer(spelled)):
                    return False
    return True


# --- Lightning Fabric (issue 23): `fabric.backward(loss)` under precision="16-mixed", then a torch clip


def _fabric_clips(rule: Rule, ctx: ModuleContext, scope: Scope) -> Iterator[Diagnostic]:
    """Torch clips after `fabric.backward(loss)` of a `Fabric(precision="16-mixed")` built in
    this file, with no `fabric.clip_gradients(...)` (which unscales first) before them."""
    events = scope.events
    fixed: set = set()
    for index, clip in enumerate(events):
        if clip.kind != "clip":
            continue
        backward = _fabric_backward_before(ctx, scope, events, index)
        if backward is None:
            continue
        if any(c.method == "clip_gradients" and c.order < clip.order for c in scope.calls):
            continue
        yield _fabric_diagnostic(rule, ctx, scope, events, index, backward, fixed)


def _fabric_backward_before(ctx: ModuleContext, scope: Scope, events: Sequence[Event], index: int) -> Optional[Event]:
    """The `fabric.backward(loss)` of a scaling Fabric whose gradients the clip `events[index]`
    clips: the last backward-like event before it on a path that can run with it."""
    from amplint.model import exclusive, scaling_fabric
    clip = events[index]
    for at in range(index - 1, -1, -1):
        e = events[at]
        if exclusive(e.path, clip.path):
            continue
        if e.kind == "framework_backward":
            return e if scaling_fabric(ctx, e.call.receiver_dotted, scope) is not None else None
        if e.kind in ("scaled_backward", "backward", "scaler_step", "update", "optimizer_step"):
            return None
    return None


def _fabric_diagnostic(rule: Rule, ctx: ModuleContext, scope: Scope, events: Sequence[Event], index: int, backward: Event, fixed: set) -> Diagnostic:
    from amplint.model import exclusive, literal_number, step_source
    import libcst as cst

    from amplint.model import dotted_name

    clip = events[index]
    fabric = backward.call.receiver_dotted or "fabric"
    func = (clip.call.qualname or clip.call.dotted or "clip_grad_norm_").rsplit(".", 1)[-1]
    by_value = "value" in func
    threshold = clip.call.arg(1, "clip_value" if by_value else "max_norm")
    params = clip.call.arg(0, "parameters")
    module = None
    if isinstance(params, cst.Call) and isinstance(params.func, cst.Attribute) and params.func.attr.value == "parameters" and not params.args:
        module = dotted_name(params.func.value)
    step = next((e for e in events[index + 1:] if e.kind == "optimizer_step" and not exclusive(e.path, clip.path)), None)
    optimizer = step.optimizer if step is not None else None
    spelled = clip.call.dotted or func
    keyword = "clip_val" if by_value else "max_norm"
    message = f"`{spelled}` clips gradients that the fp16 `{fabric}.backward` left scaled"
    fix = None
    simple = len(clip.call.node.args) == 2 and not any(a.star for a in clip.call.node.args)
    if module and optimizer and threshold is not None and simple and backward.order not in fixed:
        fixed.add(backward.order)
        text = f"{fabric}.clip_gradients({module}, {optimizer}, {keyword}={ctx.code_for(threshold)})"
        fix = make_fix(f"Call `{fabric}.clip_gradients` instead", [replace_node(ctx, clip.call.node, text)], safe=False)
    data = {
        "clip_function": func,
        "threshold": literal_number(threshold) if threshold is not None else None,
        "scaler": None,
        "framework": "fabric",
        "fabric": fabric,
        "optimizer": optimizer,
        "step_source": step_source(ctx, backward, clip, scope),
    }
    help = f"Call `{fabric}.clip_gradients({module or 'model'}, {optimizer or 'optimizer'}, {keyword}=...)` instead: it unscales first"
    return ctx.diagnostic(rule, clip.call.node, message, fix=fix, data=data, help=help)


# --- Lightning manual optimization (issue 22): `self.manual_backward(loss)` under an fp16 Trainer, then a torch clip


def _lightning_clips(rule: Rule, ctx: ModuleContext, scope: Scope) -> Iterator[Diagnostic]:
    """Torch clips after `self.manual_backward(loss)` in a LightningModule that optimizes by
    hand (`self.automatic_optimization = False`), with no `self.clip_gradients(...)` or
    `unscale_` before them: under an fp16 mixed Trainer the gradients are still scaled."""
    from amplint.model import LIGHTNING_FP16, own_trainer_precision

    events = scope.events
    fixed: set = set()
    own: object = ...
    for index, clip in enumerate(events):
        if clip.kind != "clip":
            continue
        backward = _manual_backward_before(events, index)
        if backward is None or not _manual_optimization(ctx, scope):
            continue
        if any(c.method in ("clip_gradients", "unscale_", "unscale_gradients") and c.order < clip.order for c in scope.calls):
            continue
        if own is ...:
            own = own_trainer_precision(ctx.source)
        if own is False:
            continue  # the file's own Trainer runs bf16 or 32: no scaler
        yield _guarded(ctx, scope, clip, _lightning_diagnostic(rule, ctx, scope, events, index, backward, fixed, None if own else LIGHTNING_FP16))


def _manual_backward_before(events: Sequence[Event], index: int) -> Optional[Event]:
    """The `self.manual_backward(loss)` whose gradients the clip `events[index]` clips: the last
    backward-like event before it on a path that can run with it."""
    from amplint.model import exclusive
    clip = events[index]
    for at in range(index - 1, -1, -1):
        e = events[at]
        if exclusive(e.path, clip.path):
            continue
        if e.kind == "framework_backward":
            return e if e.call.method == "manual_backward" and e.call.receiver_dotted == "self" else None
        if e.kind in ("scaled_backward", "backward", "scaler_step", "update", "optimizer_step"):
            return None
    return None


def _manual_optimization(ctx: ModuleContext, scope: Scope) -> bool:
    """The class of `scope` (or a base of it in this file) sets `self.automatic_optimization = False`."""
    import libcst as cst

    from amplint.model import sees_self_of

    return any(
        isinstance(a.value, cst.Name) and a.value.value == "False" and sees_self_of(ctx, scope, a.scope)
        for a in ctx.assignments_to("self.automatic_optimization")
    )


def _lightning_diagnostic(
    rule: Rule, ctx: ModuleContext, scope: Scope, events: Sequence[Event], index: int, backward: Event, fixed: set, condition: Optional[str]
) -> Diagnostic:
    from amplint.model import exclusive, literal_number, step_source
    clip = events[index]
    func = (clip.call.qualname or clip.call.dotted or "clip_grad_norm_").rsplit(".", 1)[-1]
    by_value = "value" in func
    threshold = clip.call.arg(1, "clip_value" if by_value else "max_norm")
    step = next((e for e in events[index + 1:] if e.kind == "optimizer_step" and not exclusive(e.path, clip.path)), None)
    if step is None:  # `opt.step()` of `opt = self.optimizers()`: not an optimizer the file builds
        step = next((e for e in events[index + 1:] if e.call.method == "step" and e.call.receiver_dotted and not exclusive(e.path, clip.path)), None)
    optimizer = (step.optimizer or step.call.receiver_dotted) if step is not None else None
    spelled = clip.call.dotted or func
    algorithm = "value" if by_value else "norm"
    message = f"`{spelled}` clips gradients that the fp16 `self.manual_backward` left scaled"
    fix = None
    simple = len(clip.call.node.args) == 2 and not any(a.star or a.keyword for a in clip.call.node.args)
    if optimizer and threshold is not None and simple and backward.order not in fixed:
        fixed.add(backward.order)
        text = f'self.clip_gradients({optimizer}, gradient_clip_val={ctx.code_for(threshold)}, gradient_clip_algorithm="{algorithm}")'
        fix = make_fix("Call `self.clip_gradients` instead", [replace_node(ctx, clip.call.node, text)], safe=False)
    data = {
        "clip_function": func,
        "threshold": literal_number(threshold) if threshold is not None else None,
        "scaler": None,
        "framework": "lightning",
        "optimizer": optimizer,
        "step_source": step_source(ctx, backward, clip, scope),
    }
    help = f"Call `self.clip_gradients({optimizer or 'opt'}, gradient_clip_val=...)` instead: it unscales first"
    return ctx.diagnostic(rule, clip.call.node, message, fix=fix, data=data, help=help, condition=condition)


def _guarded(ctx: ModuleContext, scope: Scope, clip: Event, diagnostic: Diagnostic) -> Diagnostic:
    """`diagnostic`, also needing that the clip's guard can be on: a clip under `if self.clip > 0:`
    (`if self.clip:`, `if self.clip is not None:`) where the class sets `self.clip` once, in its
    `__init__`, from a parameter whose default turns the guard off (`clip_grad_norm=0.0`) runs
    only when some construction of the class passes that parameter (`ARGUMENT_PASSED`, read from
    the project's files; stable-audio-tools' autoencoder wrapper, which its only builder never
    hands a `clip_grad_norm`)."""
    from amplint.model import ARGUMENT_PASSED, with_requirement

    spec = _guard_spec(ctx, scope, clip)
    if spec is None:
        return diagnostic
    if diagnostic.condition:
        diagnostic.condition = with_requirement(diagnostic.condition, ARGUMENT_PASSED, spec)
    else:
        diagnostic.condition = f"{ARGUMENT_PASSED}={spec}"
    return diagnostic


def _guard_spec(ctx: ModuleContext, scope: Scope, clip: Event) -> Optional[str]:
    """`<Class>.<param>.<index>` when the innermost `if` around the clip tests a `self.<attr>`
    set only from the `__init__` parameter `<param>` (positional `<index>` after `self`) whose
    default turns the test off; None otherwise."""
    from amplint.model import literal_number
    import libcst as cst

    from amplint.model import sees_self_of

    frame = next((f for f in reversed(clip.path) if f.kind in ("if", "else")), None)
    if frame is None or frame.kind != "if" or frame.test is None or scope.cls is None:
        return None
    test = frame.test
    off: tuple = ()
    attr = None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        op, right = test.comparisons[0].operator, test.comparisons[0].comparator
        if isinstance(op, cst.GreaterThan) and isinstance(right, (cst.Integer, cst.Float)) and literal_number(right) == 0:
            attr, off = test.left, ("0", "0.0", "0.", "False")  # `x > 0`: off at 0 (None would raise)
        elif isinstance(op, cst.IsNot) and isinstance(right, cst.Name) and right.value == "None":
            attr, off = test.left, ("None",)
    elif isinstance(test, cst.Attribute):
        attr, off = test, ("None", "0", "0.0", "0.", "False")
    if not (isinstance(attr, cst.Attribute) and isinstance(attr.value, cst.Name) and attr.value.value == "self"):
        return None
    target = f"self.{attr.attr.value}"
    writes = [a for a in ctx.assignments_to(target) if sees_self_of(ctx, scope, a.scope)]
    if len(writes) != 1 or writes[0].scope.name != "__init__" or writes[0].scope.cls is not scope.cls:
        return None
    value = writes[0].value
    init = writes[0].scope.node
    if not isinstance(value, cst.Name) or not isinstance(init, cst.FunctionDef):
        return None
    if any(a.target == value.value and a.scope is writes[0].scope for a in ctx.assignments_to(value.value)):
        return None  # the parameter is rebound before it is stored
    positional = list(init.params.posonly_params) + list(init.params.params)
    for index, param in enumerate(positional[1:]):
        if param.name.value == value.value:
            break
    else:
        index = 1 << 16  # keyword-only: passed only by name
        param = next((p for p in init.params.kwonly_params if p.name.value == value.value), None)
    if param is None or param.default is None or ctx.code_for(param.default).strip() not in off:
        return None
    return f"{scope.cls.name.value}.{value.value}.{index}"
