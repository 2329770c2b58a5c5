"""AMP102 optimizer-step-bypasses-scaler."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from amplint.model import Diagnostic, Invalid, Project, ProjectCall, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst


    from amplint.model import Assignment, Event, ModuleContext, Scope

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

    With accelerate, `Accelerator(mixed_precision="fp16")`'s
    `accelerator.backward(loss)` scales the loss with its own GradScaler, and
    only the optimizers `prepare` wrapped (`AcceleratedOptimizer`) unscale
    and skip at `step`. accelerate's `prepare` wraps `torch.optim.Optimizer`
    objects only and returns anything else as it is (`_prepare_one`): a
    container of optimizers (a `MultiOptimizer` class), or an optimizer never
    passed to `prepare`, steps on the scaled gradients with no inf/NaN skip,
    and the scale never adapts (its `update` never runs). Flagged when the
    `Accelerator` is built in the file with the literal `"fp16"` (as AMP101
    judges it), and the optimizer is built in the file from a torch optimizer
    class (also through a local name every binding of which is an optimizer
    class: `optimizer_class = bnb.optim.AdamW8bit` under `--use_8bit_adam`, else
    `torch.optim.AdamW`, then `optimizer_class(params)`) and named in no
    `prepare` call, or is an object of a class defined in
    the file that derives from no torch optimizer and no class from elsewhere
    (silent when its inner optimizers are prepared one by one). Across files
    (the project model): the same for an object of a project class of
    another file, typically returned by a helper there (`optimizer =
    build_optimizer(...)` returning a `MultiOptimizer`), when every base of
    the class resolves to project classes; silent when something `prepare`
    is given in that function is not followed (`opt.optimizers[k]`). An
    `Accelerator()` stating no `mixed_precision` takes the launcher's: a
    launch command the project ships (a shell script, a Makefile, a README
    command block) running the file or a script importing it with
    `accelerate launch --mixed_precision=fp16` and no DeepSpeed, FSDP or
    Megatron-LM, or with `--config_file` naming an accelerate YAML of the
    project whose `mixed_precision` is fp16 and whose `distributed_type` is no
    plugin, makes it fp16 (as AMP402 reads it); the container may then be a
    class of the same file too, and the launcher is a related site ("fp16
    chosen here"). When another command of the project launches it in bf16
    or "no", the finding is a warning naming the run (`when launched with
    --mixed_precision fp16: ...`); commands stating no precision (accelerate's
    own default config, outside the project) decide nothing.

    ## Notes
    The rule stays silent on optimizers prepared by accelerate, Lightning
    Fabric or DeepSpeed (`accelerator.prepare(...)`: they unscale and skip
    themselves), on apex's `amp.scale_loss`, on `optimizer.step()` in the
    non-AMP branch of `if use_amp: ... else: ...` (also when the condition is
    tested twice), when the last backward before the step was not scaled, and
    when the scaler is built with `enabled=False` or is not a torch GradScaler.
    An `Accelerator(mixed_precision=args.mixed_precision)` counts as fp16 when
    the file defines that argparse option with literal `choices` that include
    `"fp16"`: on that supported run the step certainly applies scaled
    gradients, and the message names the choice (`when --mixed_precision is
    fp16: ...`); choices without `"fp16"` or ones the file does not spell
    leave it silent.

    Per-parameter gradient hooks (the project model): inside a function
    registered with `register_post_accumulate_grad_hook` (a fused optimizer
    step in the backward), a step method other than `step` itself
    (`optimizer.step_param(tensor, group)`) of an optimizer given to the
    `prepare` of an Accelerator that scales the loss, whose `backward` the
    registering function calls: `AcceleratedOptimizer` unscales and skips
    only in `step()`, so the hook updates the parameter from the gradient the
    backward just scaled. The Accelerator is followed across files as AMP104
    follows it (a helper returning `Accelerator(mixed_precision=args.x)`,
    the argparse option read from the project); on a choice the finding is a
    warning naming it. `optimizer.step()` in the hook stays silent (the
    prepared optimizer unscales).

    ## References
    - amplint's evidence page: `amplint --explain AMP102` (docs/evidence.md#amp102)
    - https://pytorch.org/docs/stable/amp.html#gradient-scaling
    """

    code = "AMP102"
    name = "optimizer-step-bypasses-scaler"
    severity = Severity.ERROR
    message = "optimizer.step() on scaled gradients"
    triggers = (".step(",)
    # `.scale(` called as a method, or "Accelerator" with "fp16" (an fp16 `accelerator.backward` scales)
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
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
optimizer_class = make_optimizer_class(args)
optimizer = optimizer_class(model.parameters(), lr=1e-4)
model, loader = accelerator.prepare(model, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    optimizer.step()
""",
            "a local class name bound to what a helper returns: maybe accelerate's own or a wrapped optimizer",
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
        Valid(
            """
import torch
from accelerate import Accelerator


class MultiOptimizer:
    def __init__(self, optimizers):
        self.optimizers = optimizers

    def step(self, key):
        self.optimizers[key].step()


accelerator = Accelerator(mixed_precision="fp16")
optimizer = MultiOptimizer({"g": torch.optim.AdamW(gen.parameters()), "d": torch.optim.AdamW(disc.parameters())})
for key in optimizer.optimizers:
    optimizer.optimizers[key] = accelerator.prepare(optimizer.optimizers[key])
for batch in loader:
    accelerator.backward(d_loss(batch))
    optimizer.step("d")
""",
            "the container's torch optimizers are prepared one by one: each step unscales and skips",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="bf16")
model, loader = accelerator.prepare(model, loader)
optimizer = torch.optim.AdamW(model.parameters())
for batch in loader:
    accelerator.backward(model(**batch).loss)
    optimizer.step()
""",
            "bf16: accelerate builds no GradScaler, so an optimizer it never wrapped sees true gradients",
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
optimizer = torch.optim.AdamW(model.parameters())
model, loader = accelerator.prepare(model, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    optimizer.step()
    optimizer.zero_grad()
""",
            "a --mixed_precision flag whose choices include no fp16: accelerate's backward never scales",
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
        Invalid(
            """
import torch
from accelerate import Accelerator


class MultiOptimizer:
    def __init__(self, optimizers):
        self.optimizers = optimizers

    def step(self, key=None):
        for k in [key] if key else list(self.optimizers):
            self.optimizers[k].step()


accelerator = Accelerator(mixed_precision="fp16")
optimizer = MultiOptimizer({"g": torch.optim.AdamW(gen.parameters()), "d": torch.optim.AdamW(disc.parameters())})
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    accelerator.backward(d_loss(batch))
    optimizer.step("d")
""",
            line=19,
            why="issue 22 shape 6: accelerate wraps only torch optimizers; the container is returned as it is",
        ),
        Invalid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, loader = accelerator.prepare(model, loader)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    optimizer.step()
    optimizer.zero_grad()
""",
            line=8,
            why="an optimizer never passed to prepare steps on the gradients accelerator.backward scaled",
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
optimizer = torch.optim.AdamW(model.parameters())
model, loader = accelerator.prepare(model, loader)
for batch in loader:
    accelerator.backward(model(**batch).loss)
    optimizer.step()
    optimizer.zero_grad()
""",
            line=12,
            why="--mixed_precision fp16 is a supported choice: on it the unprepared optimizer steps scaled gradients",
        ),
        Invalid(
            """
import torch
from accelerate import Accelerator


def main(args):
    accelerator = Accelerator(mixed_precision="fp16")
    if args.use_8bit_adam:
        import bitsandbytes as bnb
        optimizer_class = bnb.optim.AdamW8bit
    else:
        optimizer_class = torch.optim.AdamW
    optimizer = optimizer_class(unet.parameters(), lr=1e-4)
    unet, text_encoder, loader = accelerator.prepare(unet, text_encoder, loader)
    for batch in loader:
        accelerator.backward(unet(batch).loss)
        optimizer.step()
        optimizer.zero_grad()
""",
            line=16,
            why="the optimizer class is picked by a flag, an optimizer class either way; prepare was never given it",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        from amplint.model import events_after, events_before, exclusive

        for scope in ctx.scopes:
            events = scope.events
            scaler_steps: Optional[_ScalerSteps] = None
            for step in (e for e in events if e.kind == "optimizer_step"):
                info = ctx.optimizers.get(step.optimizer or "")
                backward = _last_backward(scope, step)
                if backward is not None and backward.kind == "framework_backward":
                    found = self._accelerate(ctx, scope, step, backward)
                    if found is not None:
                        yield found
                    continue
                if info is not None and info.prepared:
                    continue
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

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """issue 22 shape 6 across files: after `accelerator.backward(loss)` of an
        `Accelerator(mixed_precision="fp16")`, `opt.step()` on an object of a project class in
        another file that derives from no torch optimizer (a container of optimizers built by a
        helper there): accelerate's `prepare` returned it unwrapped, so nothing unscales."""
        for path in list(project.summaries):
            summary = project.summaries[path]
            entries = [e for e in summary.get("frameworks", ()) if e["kind"] == "accelerate" and e["dtype"] == "fp16"
                       and e.get("device") != "cpu" and not e.get("plugin")]
            for entry in entries:
                yield from self._unwrapped_containers(project, path, entry)
            yield from self._launched_containers(project, path)
            yield from self._hook_steps(project, path)

    def _launched_containers(self, project: Project, path: str) -> Iterator[Diagnostic]:
        """The same container shape where the `Accelerator(...)` states no `mixed_precision` and
        the launch commands the project ships make it fp16 (`accelerate launch
        --mixed_precision=fp16 train.py`, or a `--config_file` YAML of the project saying fp16:
        `accelerate_hooks.launched_fp16` through `project_scaling_accelerator`). The per-file
        check cannot see a launcher, so the container may be a class of the same file too."""
        from amplint.model import project_scaling_accelerator

        for record in project.summaries[path].get("acc", ()):
            if "mp" in record or record.get("pl"):
                continue  # a precision in code (the per-file check's, or the literal entries above), or a plugin
            scaling = project_scaling_accelerator(project, path, record["fn"], record["t"])
            if scaling is None or scaling.option is None:
                continue
            entry = {"target": record["t"], "func": record["fn"]}
            yield from self._unwrapped_containers(project, path, entry, scaling)

    def _hook_steps(self, project: Project, path: str) -> Iterator[Diagnostic]:
        """A per-parameter step inside a gradient hook (`register_post_accumulate_grad_hook`)
        of an optimizer prepared by a scaling Accelerator whose `backward` the registering
        function calls: `opt.step_param(p, group)` (a fused per-parameter step) runs inside that
        backward on the gradient it just scaled, and accelerate's `AcceleratedOptimizer`
        unscales and skips only in `step()`. A method whose name starts with `step` other than
        `step` itself (the one `prepare` wraps)."""
        from amplint.model import enclosing_calls, grad_hooks, hook_sites, project_scaling_accelerator

        for hook in grad_hooks(project, path):
            info = project.function((path, hook.hook))
            if info is None:
                continue
            outer = None
            for r in info["calls"]:
                opt, _, method = (r["f"] or "").rpartition(".")
                if not opt or "." in opt or not method.startswith("step") or method == "step":
                    continue
                outer = outer if outer is not None else list(enclosing_calls(project, path, hook.registrar))
                accelerators = {
                    c["f"].rsplit(".", 1)[0] for c in outer
                    if c["f"] and c["f"].rsplit(".", 1)[-1] in ("prepare", "prepare_optimizer")
                    and any(a and a.get("n") == opt for a in c["a"])
                }
                for accelerator in sorted(accelerators):
                    if "." in accelerator or not any(c["f"] == f"{accelerator}.backward" for c in outer):
                        continue
                    scaling = project_scaling_accelerator(project, path, hook.hook, accelerator)
                    if scaling is None:
                        continue
                    message = f"{scaling.prefix()}`{opt}.{method}` in a per-parameter grad hook steps scaled gradients"
                    if len(message) >= 100:
                        message = f"{scaling.prefix()}`{method}` in a per-parameter grad hook steps scaled gradients"
                    related = hook_sites(project, hook, scaling)
                    data = {"optimizer": opt, "scaler": None, "framework": "accelerate", "accelerator": accelerator,
                            "unscaled": False, "optimizer_class": None, "dtype": "fp16", "device": None, "choice": scaling.choice}
                    help = (f"`{accelerator}.backward` scaled the gradient and `{opt}` unscales and skips only in `step()`"
                            f"{scaling.runs()}: step through `{opt}.step()` after the backward, or train this run without fp16 loss scaling")
                    yield project.diagnostic(self, ProjectCall(path, hook.hook, r), message, data=data, help=help,
                                             related=tuple(related), severity=Severity.WARNING if scaling.runtime else None)
                    break

    def _unwrapped_containers(self, project: Project, path: str, entry: dict, launched: Any = None) -> Iterator[Diagnostic]:
        """`launched`: the `accelerate_hooks.Scaling` a launch command gives an Accelerator that
        states no precision (then a container class of the step's own file counts too)."""
        target, home = entry["target"], entry["func"]
        cls = home.split(".", 1)[0] if "." in home else None
        for qual, info in project.summaries[path]["functions"].items():
            if home != "<module>" and qual != home and not (target.startswith("self.") and cls and qual.startswith(cls + ".")):
                continue  # the accelerator is not what this function calls `target`
            if any(own == target for own in info["locals"]) and qual != home:
                continue  # a local of the same name is another object
            calls = info["calls"]
            backward = next((r["r"] for r in calls if r["f"] == f"{target}.backward"), None)
            if backward is None:
                continue
            prepares = [r for r in calls if r["f"] in (f"{target}.prepare", f"{target}.prepare_optimizer")]
            if any(a is None for r in prepares for a in r["a"]):
                continue  # something `prepare` was given is not followed (`opt.optimizers[k]`): maybe the inner ones
            for r in calls:
                if not r["f"].endswith(".step") or r["r"] <= backward:
                    continue
                opt = r["f"][: -len(".step")]
                if not opt or opt.startswith(target):
                    continue
                found = _project_container(project, path, qual, opt, same_file=launched is not None)
                if found is None:
                    continue
                where, name = found
                related = [project.related(where[0], where[1], f"`{name}` defined here")]
                prefix = ""
                data = {"optimizer": opt, "scaler": None, "framework": "accelerate", "accelerator": target,
                        "unscaled": False, "optimizer_class": None, "dtype": "fp16", "device": None}
                if launched is not None:
                    prefix = launched.prefix()
                    related.append(project.related(launched.option[0], launched.option[1], "fp16 chosen here"))
                    data["choice"] = launched.choice
                message = f"{prefix}`{opt}.step()` steps scaled gradients: `{target}.prepare` left `{name}` unwrapped"
                help = f"Pass each torch optimizer `{name}` holds to `{target}.prepare(...)` instead of the `{name}`"
                yield project.diagnostic(self, ProjectCall(path, qual, r), message, data=data, help=help, related=tuple(related),
                                         severity=Severity.WARNING if launched is not None and launched.runtime else None)
                break

    def _accelerate(self, ctx: ModuleContext, scope: Scope, step: Event, backward: Event) -> Optional[Diagnostic]:
        """`opt.step()` after `accelerator.backward(loss)` of an `Accelerator(mixed_precision="fp16")`
        when accelerate did not wrap `opt`: it was never passed to `prepare`, or what was passed
        is an object of a class of this file that is no `torch.optim.Optimizer` (accelerate's
        `prepare` returns such objects as they are). The loss was scaled all the same."""
        from amplint.model import scaling_accelerator, scaling_choice, step_data

        accelerator = backward.call.receiver_dotted
        if scaling_accelerator(ctx, accelerator, scope) is None or not step.optimizer:
            return None
        why = _not_wrapped(ctx, step.optimizer, scope, step.order)
        if why is None:
            return None
        opt = step.optimizer
        if why == "":
            message = f"`{opt}.step()` applies gradients `{accelerator}.backward` scaled: `{opt}` was never prepared"
            help = f"Pass `{opt}` to `{accelerator}.prepare(...)`: its step then unscales and skips overflowing steps"
        else:
            message = f"`{opt}.step()` steps scaled gradients: `{accelerator}.prepare` left `{why}` unwrapped"
            help = f"Pass each torch optimizer `{why}` holds to `{accelerator}.prepare(...)` instead of the `{why}`"
        choice = scaling_choice(ctx, accelerator, scope)
        if choice is not None:  # fp16 is an argparse choice: name the run it concerns
            message = f"when {choice}: `{opt}.step()` steps scaled gradients" + (
                f": `{opt}` was never prepared" if why == "" else f" (`{why}` is not prepared)"
            )
        data = {"optimizer": opt, "scaler": None, "framework": "accelerate", "accelerator": accelerator, "unscaled": False}
        data.update(step_data(ctx, scope, backward, opt))
        return ctx.diagnostic(self, step.call.node, message, data=data, help=help)

    def _diagnostic(self, ctx: ModuleContext, step: Event, backward: Event, unscaled: bool, scaler_steps: "_ScalerSteps") -> Diagnostic:
        from amplint.model import make_fix, replace_node, step_data, step_source

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


#: accelerate's methods that wrap what they are given (`prepare_optimizer` wraps one optimizer)
_PREPARES = ("prepare", "prepare_optimizer")


def _not_wrapped(ctx: ModuleContext, opt: str, scope: Scope, before: int) -> Optional[str]:
    """Why accelerate did not wrap the optimizer `opt` read in `scope` at order `before`: "" when
    it is built here from a torch optimizer class and never passed to `prepare`; the class name
    when what `prepare` was given is an object of a class of this file that no torch optimizer is
    a base of (a container of optimizers); None when it may be wrapped (or nothing is known).
    Read from the bindings of `opt` before the step (for `self.x`, all its class's): the last
    one for a plain name in the same scope, every one otherwise."""
    from amplint.model import dotted_name, self_bindings

    if opt.split(".", 1)[0] in scope.params:
        return None
    if opt.startswith("self."):
        bindings = self_bindings(ctx, opt, scope)
    else:
        bindings = _plain_bindings(ctx, opt, scope)
        earlier = [a for a in bindings if a.scope is scope and a.order < before]
        bindings = earlier[-1:] if earlier else bindings
    if not bindings:
        return None
    prepared = [a for a in bindings if _prepare_call(ctx, a.value) is not None]
    if not prepared:
        built = all(_torch_optimizer_call(ctx, a.value) for a in bindings)
        return "" if built and not _named_in_prepare(ctx, opt) else None
    if len(prepared) != len(bindings):
        return None
    classes = set()
    for a in prepared:
        passed = _prepared_argument(ctx, a)
        name = dotted_name(passed) if passed is not None else None
        if name is None:
            return None
        cls = _container_class(ctx, name, a)
        if cls is None or _named_in_prepare(ctx, name + "."):
            return None  # maybe a torch optimizer, or its inner optimizers are prepared one by one
        classes.add(cls)
    return classes.pop() if len(classes) == 1 else None


def _plain_bindings(ctx: ModuleContext, name: str, scope: Scope) -> List[Assignment]:
    own = [a for a in ctx.assignments_to(name) if a.scope is scope]
    return own or [a for a in ctx.assignments_to(name) if a.scope.is_module]


def _prepare_call(ctx: ModuleContext, value: cst.BaseExpression) -> Optional[cst.Call]:
    import libcst as cst

    from amplint.model import dotted_name

    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _PREPARES:
        receiver = dotted_name(value.func.value)
        if receiver is not None and not ctx.imports.is_imported(receiver.split(".")[0]):
            return value
    return None


def _torch_optimizer_call(ctx: ModuleContext, value: cst.BaseExpression) -> bool:
    import libcst as cst

    from amplint.model import optimizer_classes

    if not isinstance(value, cst.Call):
        return False
    info = ctx.call_info(value)
    return info is not None and bool(optimizer_classes(ctx, info))


def _named_in_prepare(ctx: ModuleContext, name: str) -> bool:
    """Whether any `x.prepare(...)` call of the file names `name` (or, for `name` ending in a
    dot, an attribute of it: `opt.optimizers[k]`) among its arguments."""
    import libcst as cst

    from amplint.model import descendants, dotted_name

    for call in ctx.calls:
        if call.method not in _PREPARES:
            continue
        for arg in call.node.args:
            for n in descendants(arg.value):
                spelled = dotted_name(n) if isinstance(n, (cst.Name, cst.Attribute)) else None
                if spelled and (spelled == name or (name.endswith(".") and spelled.startswith(name))):
                    return True
    return False


def _prepared_argument(ctx: ModuleContext, a: Assignment) -> Optional[cst.BaseExpression]:
    """What `prepare` was given for the target of `a`: the only argument, or for `m, opt =
    accelerator.prepare(m, opt)` the argument in the target's position."""
    import libcst as cst

    from amplint.model import dotted_name

    call = _prepare_call(ctx, a.value)
    if call is None or any(arg.star or arg.keyword is not None for arg in call.args):
        return None
    args = [arg.value for arg in call.args]
    if not a.unpacked:
        return args[0] if len(args) == 1 else None
    targets = getattr(a.node, "targets", None)
    target = targets[0].target if targets and len(targets) == 1 else None
    if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != len(args):
        return None
    for element, arg in zip(target.elements, args):
        if dotted_name(element.value) == a.target:
            return arg
    return None


def _container_class(ctx: ModuleContext, name: str, prepared: Assignment) -> Optional[str]:
    """The class of this file that every assignment of `name` before the `prepare` constructs, when
    neither it nor any class it derives from is a torch optimizer or a class from elsewhere."""
    import libcst as cst

    before = [a for a in ctx.assignments_to(name) if a.scope is prepared.scope and a.order < prepared.order and not a.unpacked]
    if not before:
        return None
    names = set()
    for a in before:
        if not isinstance(a.value, cst.Call) or not isinstance(a.value.func, cst.Name):
            return None
        names.add(a.value.func.value)
    if len(names) != 1:
        return None
    cls = names.pop()
    return cls if _plain_class(ctx, cls, 0) else None


def _plain_class(ctx: ModuleContext, name: str, depth: int) -> bool:
    """A class defined in this file whose bases are only `object` or such classes."""
    from amplint.model import dotted_name

    node = next((c for c in ctx.classes if c.name.value == name), None)
    if node is None or depth > 5 or ctx.imports.is_imported(name):
        return False
    for base in node.bases:
        spelled = dotted_name(base.value)
        if base.keyword is not None or spelled is None:
            return False
        if spelled != "object" and not _plain_class(ctx, spelled, depth + 1):
            return False
    return True


def _project_container(project: Project, path: str, func: str, opt: str, same_file: bool = False):
    """((path, row) of the class, its name) when every value `opt` may hold in `func` is an
    instance of one project class of another file (`same_file`: or of this one) that neither
    derives from a class outside the project (a torch optimizer, or anything unknown) nor from
    one the model cannot resolve."""
    types = project.name_types(path, func, opt)
    if not types or any(t[0] != "I" for t in types):
        return None
    classes = {(t[1], t[2]) for t in types}
    if len(classes) != 1:
        return None
    where, cls = classes.pop()
    if where == path and not same_file:
        return None  # a class of the step's own file: `check`'s
    for p, c in project.mro(where, cls):
        info = project.summaries[p]["classes"][c]
        for base in info["bases"]:
            if base == "object":
                continue
            if not base or not any(t[0] == "C" for t in project.name_types(p, "<module>", base)):
                return None
    return (where, project.summaries[where]["classes"][cls]["line"]), cls


def _last_backward(scope: Scope, step: Event) -> Optional[Event]:
    """The last backward of any kind that can run before `step` in the same pass."""
    from amplint.model import events_before, exclusive

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
        from amplint.model import exclusive

        return any(last > backward.order and exclusive(path, step.path) for path, _, _, last in self.places.values())

    def earlier_through(self, scaler: Optional[str], step: Event) -> bool:
        """A step through `scaler` before `step` that can run with it (another optimizer)."""
        from amplint.model import exclusive

        return any(
            key == scaler and first < step.order and not exclusive(path, step.path)
            for path, key, first, _ in self.places.values()
        )


def _is_enabled_torch_scaler(ctx: ModuleContext, key: Optional[str], scope: Scope) -> bool:
    """A torch GradScaler that may be enabled: built here by `GradScaler(...)`,
    or passed in, and never assigned from anything else in this file (for
    `self.scaler` read in `scope`: by its class or a base, not an unrelated class)."""
    import libcst as cst

    from amplint.model import is_grad_scaler_call, sees_self_of, self_bindings

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

