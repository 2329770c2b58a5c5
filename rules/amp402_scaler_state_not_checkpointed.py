"""AMP402 scaler-state-not-checkpointed."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from amplint.model import RESUMED, Diagnostic, Invalid, Project, ProjectCall, Related, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import CallInfo, ModuleContext, Path


class ScalerStateNotCheckpointed(Rule):
    """
    ## What it does
    Flags a resume checkpoint (a `torch.save` of a dict holding an optimizer's
    `state_dict()` and at least one more entry, usually the model's) written
    while an enabled `GradScaler` is in use in the file, when the scaler's
    `state_dict()` is saved nowhere. It also flags a resume that restores an
    optimizer with `optimizer.load_state_dict(...)` in a file that never calls
    `scaler.load_state_dict(...)`. timm's `NativeScaler()` counts as such a
    scaler (its `__init__` builds an enabled GradScaler, and its `state_dict()`
    / `load_state_dict()` carry that scaler's state) in a file building no
    GradScaler of its own: `loss_scaler = NativeScaler()` handed to the
    training loop, and a checkpoint without `loss_scaler.state_dict()`.

    ## Why is this bad?
    The scaler's state is the learned loss scale plus the growth tracker
    (`scale`, `growth_factor`, `backoff_factor`, `growth_interval`,
    `_growth_tracker`). A resumed run without it restarts
    at the initial scale, 65536 by default, and only comes down by halving
    (backoff 0.5) on steps whose gradients overflow, and every such step is
    skipped: a run that had settled at a scale of 2048 throws away 5
    optimizer steps (65536 / 2048 = 2^5) after every resume, and its growth
    counter restarts from 0. Resumed runs then differ from
    uninterrupted ones.

    ## Example
    ```python
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
        "last.pt",
    )
    ```

    ## Use instead
    ```python
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "epoch": epoch,
        },
        "last.pt",
    )
    # on resume
    scaler.load_state_dict(checkpoint["scaler"])
    ```

    ## Fix safety
    No fix: the key has to match the loading code, which may live elsewhere.

    ## Verification
    `amplint --verify` trains a tiny model with `GradScaler` until its scale
    settles, then builds what the flagged save writes (or runs the flagged
    resume on that run's full checkpoint) and reports whether the scaler
    state is in it (restored), the scale before and after the resume and
    the skipped steps.

    ## Notes
    One finding per file: the scaler is missing from every checkpoint alike
    and one added `scaler.state_dict()` silences them all, so the finding sits
    at the first save and lists the other saves ("also saved at 468, 470")
    and the resume ("restored without it") as related locations (SARIF
    `relatedLocations`, JSON `related`). A resume alone is reported at the
    resume. A scaler every constructor of which builds it anew per epoch or
    iteration (AMP107's finding: a local of `_train_epoch`) is left alone: its
    scale restarts at every epoch whether a checkpoint holds it or not, and
    the fix is AMP107's (one bug, one finding).

    Also flags a scaler that is restored (`scaler.load_state_dict(...)`, or
    rebound from a `restore`/`load`/`resume` helper it was passed:
    `model, opt, self.scaler = self.restore_model(path, model, opt,
    self.scaler)`) and then, in the same block, replaced by a fresh
    `GradScaler()`: the restored scale is thrown away on every resume. Reported
    at the new `GradScaler()`, with the restore as a related location; silent
    when the fresh scaler is built in another branch, before the restore, or in
    another function (a trainer whose `__init__` calls `_setup_components()`,
    which builds `self.scaler`, and then `load_checkpoint()`, which restores it:
    the methods' text order is not the order they run in).

    A checkpoint folder written one file per piece, the Hugging Face Trainer's
    layout, counts as one checkpoint: `torch.save(optimizer.state_dict(),
    os.path.join(output_dir, "optimizer.pt"))` beside another piece saved in
    the same function (a scheduler's or the model's `state_dict()` by
    `torch.save`, or `self.save_model(output_dir)`), as in a Trainer subclass
    that overrides `_save_checkpoint` and steps the Trainer's `self.scaler`.
    An optimizer's state saved alone is not followed. When the file also
    restores the optimizer from such a folder without the scaler, the finding
    stays at that resume.

    The save may go through a function named for saving that is given the
    dict (`utils.save_on_master(state, path)`, `save_checkpoint(state, path)`,
    `xm.save(...)`), or the checkpoint's pieces as separate arguments
    (`save_checkpoint(dir, step, model.state_dict(), optimizer.state_dict(),
    meta)`: an optimizer's `state_dict()` and another `state_dict()` or dict);
    not a method of an object that may hold the scaler
    (`trainer.save_checkpoint(...)`); a helper given only keywords is given the
    dict that one of them holds (`misc.save_model(model="G", step=step,
    states=g_states)`). The resume may restore what a helper
    named for loading returned (`_, optimizer_data, _ =
    load_checkpoint(dir, step)`, then `optimizer.load_state_dict(optimizer_data)`).

    A checkpointer counts as a resume checkpoint too: an fvcore / detectron2
    `Checkpointer(model, save_dir, optimizer=optimizer)` (or a class named
    `...Checkpointer`) saves and resumes the `state_dict()` of what it is
    registered with; when that is optimizers and schedulers only, it is
    reported at its constructor (silent when it is also given another object,
    such as detectron2's `trainer=`, whose state may hold the scaler). The
    trainer itself is followed when it is an instance of a class of the file
    that builds and steps its own GradScaler (`self.grad_scaler =
    GradScaler()` when `amp`) and inherits its `state_dict()` from
    detectron2's `SimpleTrainer` (directly or through classes of the file,
    none defining `state_dict`): that state holds the optimizer and the
    iteration but no scaler, so `DetectionCheckpointer(model, out_dir,
    trainer=trainer)` resumes every run at the initial scale (detrex's
    `projects/*/train_net.py`). Silent for an `AMPTrainer` base (its state
    holds `grad_scaler`), a trainer with its own `state_dict`, one handed a
    scaler, and a base the file does not know.

    A checkpoint written once, after the training (in no loop, after the
function's loop), is silent when nothing in the project resumes: no file
(`.py` or notebook) restores an optimizer (`optimizer.load_state_dict(`)
or names a resume, a restore or a checkpoint load (`args.resume`,
`load_checkpoint(`); the lost scale matters only to a run that resumes.
A checkpoint saved in the loop, or one the project can resume from, is
reported.

Silent for the checkpoint of a loop no scaler takes part in: the saved
    optimizer is a local the saving function builds and steps unscaled
    (`loss.backward()`, `optimizer.step()`), and the function names no scaler
    (an fp32 classifier trained beside the file's scaled GAN loop).

    Silent when any `<scaler>.state_dict()` is called anywhere in the file
    (under any key: `"scaler"`, `"amp"`, `"grad_scaler"`, or added to the dict
    later), for weights-only exports (no optimizer state in the checkpoint),
    for framework checkpoints (`accelerator.save_state`,
    `trainer.save_checkpoint`), and when every scaler is built with
    `enabled=False`. A scaler whose `enabled=` is decided at run time counts
    as enabled: the fp16 runs need its state. Silent too when the scaler only
    ever scales bf16: every autocast region of the file (the loop's, for a
    helper's save) that may be on is a torch autocast of bf16, and the file
    spells fp16 nowhere (no `float16`, `half`, `fp16`, not even in a comment).
    bf16 has fp32's exponent range, so the scale never has to come down and a
    resume that restarts it at 65536 skips no step (Bert-VITS2's
    `GradScaler(enabled=hps.train.bf16_run)`). A region whose `dtype=` is a
    config's property (`config.model_dtype.autocast_dtype`, read there or passed
    to the parameter of the file's function holding the region by every call of
    it in the file) counts as bf16 when every definition of that property in
    the project maps only to bf16 or fp32 (an Enum's `{BFLOAT16:
    torch.bfloat16, FLOAT32: torch.float32}[self]`) and no other file calls
    that function (dinov3's segmentation `train_step`).

    Across files: also flags a call to a checkpoint helper in another module
    (`save_checkpoint(dir, epoch, model, optimizer)`) that saves an
    optimizer's state and no scaler, made by code that owns an enabled
    GradScaler and passes it no scaler in any argument; the message names the
    helper's `torch.save`, which may be a wrapper of its module named for saving
    that hands its first parameter to `torch.save` (`my_save(state, path)`: a
    `torch.save` to a temporary name, then a move). The resume side likewise: a helper in another module
    that `torch.load`s and restores the optimizer (`load_checkpoint(path,
    model, optimizer)`) but no scaler, called by a loop that owns one, passes
    it none and never calls its `load_state_dict` itself. One bug, one
    finding: when the same scaler's state is also missing from the saves
    (through a helper or the loop's own `torch.save`), the resume call is a
    related location of that finding ("restored without it").

    A GradScaler kept inside a project class that wraps an optimizer (its
    `__init__` builds `self._scaler = GradScaler(enabled=use_amp)`, its methods
    step `self._opt` through it, and it has no `state_dict` of its own) is
    flagged where a resume checkpoint saves the state of such an optimizer: the
    wrapped optimizer's own `state_dict()` (`agent.wm.opt._opt.state_dict()`),
    or a project helper named for optimizer state that calls `state_dict()` and
    is given an object holding the wrapper in its attributes (a few levels down:
    `collect_optim_state_dict(agent)`, the agent's world model holding the
    wrapper), in a file that also restores optimizer state after a `torch.load`;
    reported at the helper's call, or at the `torch.save`. A save in the file of
    the class itself is judged by the per-file check above. Silent when anything in the project reads that scaler's state (or any
    `scaler` state, or checkpoints with `save_state`), when the scaler is built
    with `enabled=False`, and when nothing the helper is given holds the wrapper.

    And a resume checkpoint saved by a loop that owns no GradScaler while a
    function it calls builds one of its own (`scaler =
    GradScaler(enabled=args.amp)` in `train_one_epoch`, neither returned nor
    kept in an attribute): no save the loop makes can hold that scaler's
    state (the scaler is also rebuilt per call: AMP107). The save may go
    through a helper named for saving (`utils.save_on_master(weights, path)`)
    when the dict it is given holds an optimizer's state. Reported at the
    loop's first such save, with the scaler's constructor, the other saves
    and the loop's resume as related sites.

    accelerate builds the GradScaler itself for `Accelerator(mixed_precision="fp16")`
    and saves it only in `accelerator.save_state(...)`: a resume checkpoint written
    by hand instead (a `torch.save` of a dict holding an optimizer's state, in the
    loop or through a save helper in another module, the dict spelled at once or
    built entry by entry: `state["optimizer"] = optimizer.state_dict()`) by a loop
    that calls `accelerator.backward`/`prepare`/`unwrap_model` on such an
    Accelerator, with a resume in the same file that restores the optimizer from it
    (`optimizer.load_state_dict` after a `torch.load`, or a load helper given the
    optimizer that restores no scaler), is flagged at the loop's first save, with
    the helper's `torch.save`, the Accelerator, where fp16 is chosen and the resume
    as related sites. fp16 is known when `mixed_precision` is the literal, or reads
    a config loaded at run time (`config = read_config(args.config)`,
    `Config.fromfile(...)`) whose key every Python config module of the project
    (mmcv / mmengine style: settings, no `def` or `class`) sets to "fp16"; or an
    argparse option whose literal choices include "fp16". Precision first: when
    fp16 is only one of the choices (an option's `choices=["no", "fp16", "bf16"]`,
    configs disagreeing) the finding is an info naming the choice (`when the
    config's mixed_precision is fp16: ...`). An option that defaults to "fp16"
    (REPA's `--mixed-precision`, `default="fp16"`) makes the default run fp16: a
    warning, unless a command the project ships passes the script another value
    (`--mixed-precision="bf16"`). An FSDP plugin keeps the scaler
    (accelerate builds a `ShardedGradScaler`); a DeepSpeed or Megatron-LM plugin,
    `cpu=True` or `**kwargs` leave it unknown: silent. Silent too when the file
    also checkpoints with `accelerator.save_state` / `load_state` or touches a
    scaler's `state_dict`, when nothing resumes the optimizer (a weights load:
    `load_checkpoint(path, model)`), for bf16 or `"no"`, and when the precision
    comes only from an accelerate config the code never reads (the user's own
    `accelerate config`, outside the project).

    The launcher counts: `accelerate launch --mixed_precision=fp16 train.py` in a
    command the project ships (a shell script, a Makefile, a README command
    block) hands fp16 to every `Accelerator(...)` of the process that is built
    without `mixed_precision`, in the script or in a project module it imports
    (a trainer class keeping `self.accelerator = Accelerator(...)`, also with a
    `**accelerate_kwargs` parameter that defaults to an empty dict and that no
    call in the launched files passes). The save may be `accelerator.save(state,
    path)` (a `torch.save` of what it is given). `accelerate launch --config_file
    configs/ddp_fp16.yaml train.py` counts the same way when the YAML is a file
    of the project reading as accelerate's config: its `mixed_precision: fp16`
    (the command line's `--mixed_precision` wins over it, as in accelerate) with
    a `distributed_type` that is no plugin (`MULTI_GPU`, `NO`; `FSDP` keeps the
    scaler). Commands that state no precision decide nothing; DeepSpeed,
    Megatron-LM, a YAML outside the project (the user's own) or one that does
    not parse leave it unknown (silent); when another command of the script states
    bf16 or "no", the finding is an info (`when launched with --mixed_precision
    fp16: ...`). The launch command (or the YAML's `mixed_precision` line) is a
    related site ("fp16 chosen here").
    The checkpoint may be a holder class's, written attribute by attribute: a
    `TrainState` whose `__init__` keeps the optimizer (`self.optimizer =
    optimizer`) and whose `save` runs `for key, val in self.__dict__.items():
    torch.save(val.state_dict(), ...)` (its `load` the same with
    `val.load_state_dict(...)`), saved and resumed (`state.resume(root)`) by the
    fp16 Accelerator's loop (U-ViT). One finding, at the holder's `torch.save`,
    for every loop using it; silent when the holder also keeps a scaler
    attribute, and under a bf16 launch.
    Silent when the optimizer checkpointed is a project container of optimizers
    (a `MultiOptimizer` class with no torch base): `prepare` returns it
    unwrapped, accelerate never steps or updates its scaler, and a scale that
    never moves has nothing to lose (AMP102 reports the steps on scaled
    gradients).

    Lightning Fabric builds the GradScaler itself for `Fabric(precision="16-mixed")`
    (also `"16"`), in its precision plugin, and scales every `fabric.backward(loss)`
    with it: a resume checkpoint the file writes by hand (a `torch.save` of a dict
    holding an optimizer's state) and resumes from (`optimizer.load_state_dict` after
    a `torch.load`) while that Fabric steps the loss is flagged at the first save,
    with the Fabric and the resume as related sites. The precision may be given
    through the Fabric's `**fabric_kwargs` (`fabric_kwargs.update(precision="16-mixed")`
    or `fabric_kwargs["precision"] = "16-mixed"` before the constructor, in the same
    function): fp16 is then chosen at run time (a flag, a caller's kwargs), and the
    finding is an info (`when the Fabric's precision is 16-mixed: ...`). Silent when the
    file touches a scaler's or the precision plugin's `state_dict`, for `"bf16-mixed"` and
    `"32-true"`, a CPU accelerator, `plugins=` or an FSDP / DeepSpeed strategy (their own
    precision plugins), an export of the weights alone, and when nothing in the file
    resumes the optimizer.

    Fabric's own checkpoint does not hold that scaler either: `fabric.save(path, state)`
    stores the `state_dict()` of the modules, optimizers and Stateful objects in `state`
    and the other entries as they are, nothing more (lightning 2.6.6,
    `lightning/fabric/strategies/strategy.py`: `Strategy.save_checkpoint` ->
    `_convert_stateful_objects_in_state`, inherited by the single-device and DDP
    strategies; `fabric.load` restores only the keys of `state`), while the Trainer's
    `_CheckpointConnector.dump_checkpoint` adds the precision plugin's `state_dict()`.
    Measured on CPU with a `MixedPrecision("16-mixed")` plugin: a run settled at a scale
    of 8192 resumes from `{"model", "optimizer", "step"}` at 65536. The precision plugin
    is Stateful (`MixedPrecision.state_dict()` returns the scaler's), so the fix is
    `state["precision"] = fabric.strategy.precision` before both calls (the same run then
    resumes at 8192). A `fabric.save` of a dict (spelled in the call, or bound once in
    its function and not filled in elsewhere) holding an optimizer and naming no scaler
    or precision plugin is flagged, when the file also calls `fabric.load` and every
    Fabric of the file is such a literal fp16 one (`"16-mixed"`, `"16"`, `16`) on the
    default or a DDP strategy. Silent for bf16 / 32, a precision read at run time
    (`**fabric_kwargs` included), DeepSpeed (its engine checkpoint keeps DeepSpeed's own
    loss scaler) and FSDP, and a state the rule cannot see whole (a parameter, `**other`,
    `state.update(...)`). FSDP loses the scaler the same way (its `FSDPPrecision` keeps a
    `ShardedGradScaler`, `state_dict()` is the scaler's; `FSDPStrategy.save_checkpoint`
    saves only the state's entries), but the fix above does not restore it under FSDP's
    default `state_dict_type="sharded"`: `FSDPStrategy.load_checkpoint` assigns the saved
    dict to `state["precision"]` instead of calling the plugin's `load_state_dict`
    (measured: 8192 saved, resumed at 65536), so `strategy="fsdp"` and a plain
    `FSDPStrategy(...)` stay silent. With a literal `FSDPStrategy(state_dict_type="full")`
    (in the call, or bound once to a name in its function) `fabric.load` restores a Stateful
    entry through `load_state_dict` (measured: resumed at 8192 with the plugin, 65536
    without), so such a Fabric is flagged like a plain one.

    apex's `amp.initialize(model, optimizer, opt_level="O2")` (or `"O1"`,
    apex's default; `loss_scale` absent or `"dynamic"`) keeps the same kind
    of dynamic loss scaler inside the `amp` module, saved only by
    `amp.state_dict()` and restored by `amp.load_state_dict(...)`: a resume
    checkpoint of that file without it is flagged the same way (also when
    `amp.initialize` sits behind a flag, as a scaler with a run-time
    `enabled=` counts). Silent for `opt_level="O0"`/`"O3"` and a numeric
    `loss_scale` (a static scale has nothing to learn), and for a level read
    at run time.

    A helper optimizer class (OpenNMT's `Optimizer`) that builds its own
    GradScaler (`self._scaler = GradScaler(...)`, or on the instance a
    classmethod builds), scales and steps with it, and defines a
    `state_dict()` / `load_state_dict()` pair that carries the wrapped
    optimizer's state but not the scaler's is flagged at its `state_dict`: that
    pair is what its users checkpoint and resume. Silent when the scaler is
    handed in (its owner may checkpoint it) or when any method of the class
    touches the scaler's `state_dict` / `load_state_dict`.

    The pair may be inherited: a wrapper that builds and steps its own scaler
    (`self._grad_scaler = GradScaler()`, stepped as `self.scaler.step(...)`
    through a property returning it) and defines neither method, on a project
    base whose `state_dict()` returns the wrapped optimizer's
    (fairseq's `AMPOptimizer` on `FairseqOptimizer`: `return
    self.optimizer.state_dict()`), is flagged at its class, with the inherited
    pair as related sites. Silent when the base's pair names a scaler, when
    anything in the project reads the scaler's state, and for a base outside
    the project (torch's or a library's).

    ## References
    - amplint's evidence page: `amplint --explain AMP402` (docs/evidence.md#amp402)
    - https://pytorch.org/docs/stable/notes/amp_examples.html#saving-resuming
    """

    code = "AMP402"
    name = "scaler-state-not-checkpointed"
    severity = Severity.WARNING
    message = "GradScaler state is not checkpointed"
    # a scaler (GradScaler(...), `x.scale(`, `unscale_`, a *scaler* parameter, apex's amp) and torch.save / torch.load
    triggers = ("GradScaler", "unscale_", "scaler", "Scaler", "SCALER", "scale(", "scale (", "apex", "Fabric")
    requires = (("save", "load", "restore", "resume"),)
    gate_check = "amplint.core.gates:scaler_checkpoint_io"

    VALID = [
        Valid(
            """
import torch
from timm.utils import NativeScaler
from engine import train_one_epoch


def main(args, model, optimizer, loader):
    loss_scaler = NativeScaler()
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, loss_scaler)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": loss_scaler.state_dict(), "epoch": epoch}, "checkpoint.pth")
""",
            "timm's NativeScaler saved with its state_dict()",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
torch.save(
    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()},
    "last.pt",
)
""",
            "the scaler is saved",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
torch.save(model.state_dict(), "weights.pt")
""",
            "a weights-only export",
        ),
        Valid(
            """
import torch
from project.checkpoints import save_checkpoint
scaler = torch.amp.GradScaler("cuda")
save_checkpoint(out_dir, step, model.state_dict(), {"step": step, "config": config})
""",
            "a save helper given the weights and metadata but no optimizer state: an export",
        ),
        Valid(
            """
from accelerate import Accelerator
import torch
accelerator = Accelerator(mixed_precision="fp16")
scaler = torch.cuda.amp.GradScaler()
accelerator.save_state("ckpt/")
""",
            "accelerate saves the scaler in save_state",
        ),
        Valid(
            """
import torch
scaler = torch.cuda.amp.GradScaler(enabled=False)
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
optimizer.load_state_dict(ckpt["optimizer"])
""",
            "a disabled scaler has no state",
        ),
        Valid(
            """
import torch
from torch.cuda.amp import GradScaler

class Trainer:
    def __init__(self):
        self.grad_scaler = GradScaler()

    def save_checkpoint(self, path):
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        state["amp"] = self.grad_scaler.state_dict()
        torch.save(state, path)

    def resume(self, path):
        state = torch.load(path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.grad_scaler.load_state_dict(state["amp"])
""",
            "saved under another key, added after the dict is built; loaded on resume",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x)
loss.backward()
optimizer.step()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
            "no GradScaler at all (bf16)",
        ),
        Valid(
            """
import torch


class AcceleratedOptimizer:
    def __init__(self, optimizer, scaler=None):
        self.optimizer = optimizer
        self.scaler = scaler
        state_dict = move_to_device(self.optimizer.state_dict(), "cuda")
        self.optimizer.load_state_dict(state_dict)

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def step(self):
        self.scaler.step(self.optimizer)
""",
            "a wrapper moving or delegating optimizer state is not a resume (accelerate's AcceleratedOptimizer)",
        ),
        Valid(
            """
import torch


def setup(args, model, optimizer):
    scaler = torch.cuda.amp.GradScaler()
    if args.resume:
        checkpoint = torch.load(args.resume)
        optimizer.load_state_dict(checkpoint["optimizer"])
        scaler.load_state_dict(checkpoint["scaler"])
    else:
        scaler = torch.cuda.amp.GradScaler(init_scale=2.0**10)
    torch.save({"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, "ckpt.pt")
    return scaler
""",
            "the fresh scaler is built only where nothing was restored (another branch)",
        ),
        Valid(
            """
import torch
from detectron2.checkpoint import DetectionCheckpointer


class Trainer:
    def __init__(self, model, optimizer):
        self.grad_scaler = torch.cuda.amp.GradScaler()
        self.checkpointer = DetectionCheckpointer(model, "out", optimizer=optimizer, trainer=self)

    def step(self, loss):
        self.grad_scaler.scale(loss).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
""",
            "the checkpointer is also given an object (the trainer) whose state may hold the scaler",
        ),
        Valid(
            """
from torch.cuda.amp import GradScaler
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.engine import SimpleTrainer, hooks

class Trainer(SimpleTrainer):
    def __init__(self, model, loader, optimizer, amp=False):
        super().__init__(model, loader, optimizer)
        if amp:
            grad_scaler = GradScaler()
            self.grad_scaler = grad_scaler
        self.amp = amp

    def run_step(self):
        losses = sum(self.model(next(self._data_loader_iter)).values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()

    def state_dict(self):
        ret = super().state_dict()
        if self.amp:
            ret["grad_scaler"] = self.grad_scaler.state_dict()
        return ret

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        if self.amp:
            self.grad_scaler.load_state_dict(state_dict["grad_scaler"])


def do_train(args, cfg, model, optim, loader):
    trainer = Trainer(model, loader, optim, amp=cfg.train.amp.enabled)
    checkpointer = DetectionCheckpointer(model, cfg.train.output_dir, trainer=trainer)
    trainer.register_hooks([hooks.PeriodicCheckpointer(checkpointer, period=5000)])
    checkpointer.resume_or_load(cfg.train.init_checkpoint, resume=args.resume)
    trainer.train(trainer.iter + 1 if args.resume else 0, cfg.train.max_iter)
""",
            "a trainer whose state_dict adds its scaler's (detrex's tools/train_net.py)",
        ),
        Valid(
            """
from torch.cuda.amp import GradScaler
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.engine import AMPTrainer, hooks

class Trainer(AMPTrainer):
    def __init__(self, model, loader, optimizer, amp=False):
        super().__init__(model, loader, optimizer)
        if amp:
            grad_scaler = GradScaler()
            self.grad_scaler = grad_scaler
        self.amp = amp

    def run_step(self):
        losses = sum(self.model(next(self._data_loader_iter)).values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()


def do_train(args, cfg, model, optim, loader):
    trainer = Trainer(model, loader, optim, amp=cfg.train.amp.enabled)
    checkpointer = DetectionCheckpointer(model, cfg.train.output_dir, trainer=trainer)
    trainer.register_hooks([hooks.PeriodicCheckpointer(checkpointer, period=5000)])
    checkpointer.resume_or_load(cfg.train.init_checkpoint, resume=args.resume)
    trainer.train(trainer.iter + 1 if args.resume else 0, cfg.train.max_iter)
""",
            "detectron2's AMPTrainer base saves `grad_scaler` in its state_dict",
        ),
        Valid(
            """
from torch.cuda.amp import GradScaler
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.engine import SimpleTrainer, hooks

class Trainer(SimpleTrainer):
    def __init__(self, model, loader, optimizer, amp=False, grad_scaler=None):
        super().__init__(model, loader, optimizer)
        if amp:
            grad_scaler = GradScaler()
            self.grad_scaler = grad_scaler
        self.amp = amp

    def run_step(self):
        losses = sum(self.model(next(self._data_loader_iter)).values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()


def do_train(args, cfg, model, optim, loader):
    trainer = Trainer(model, loader, optim, amp=cfg.train.amp.enabled, grad_scaler=scaler)
    checkpointer = DetectionCheckpointer(model, cfg.train.output_dir, trainer=trainer)
    trainer.register_hooks([hooks.PeriodicCheckpointer(checkpointer, period=5000)])
    checkpointer.resume_or_load(cfg.train.init_checkpoint, resume=args.resume)
    trainer.train(trainer.iter + 1 if args.resume else 0, cfg.train.max_iter)
""",
            "the trainer is handed a scaler: its owner may checkpoint it",
        ),
        Valid(
            """
import torch
from apex import amp

model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "amp": amp.state_dict()}, "last.pt")
""",
            "apex amp's loss scalers are saved with amp.state_dict()",
        ),
        Valid(
            """
import torch
from apex import amp

model, optimizer = amp.initialize(model, optimizer, opt_level="O2", loss_scale=128.0)
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
            "a static apex loss scale has no state to lose",
        ),
        Valid(
            """
import torch
from apex import amp

model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
            "the apex opt level is decided at run time (O0/O3 scale statically)",
        ),
        Valid(
            """
import torch


class Trainer:
    def __init__(self, model, optimizer, amp_enabled):
        self.model, self.optimizer, self.amp_enabled = model, optimizer, amp_enabled
        self._setup_components()
        self.load_checkpoint()

    def save_checkpoint(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scaler": self.scaler.state_dict()}, path)

    def load_checkpoint(self, path="last.pt"):
        checkpoint = torch.load(path)
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scaler.load_state_dict(checkpoint["scaler"])

    def _setup_components(self):
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_enabled)
""",
            "built by one method before another restores it (sam2's trainer): the text order of methods is not their run order",
        ),
        Valid(
            """
import torch
from utils import save_checkpoint


def train(model, optimizer, loader, args):
    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    for epoch in range(args.epochs):
        for x, y in loader:
            with torch.autocast("cuda", enabled=args.fp16):
                loss = model(x, y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    save_checkpoint({"epoch": args.epochs, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, "final.pt")
""",
            "the last checkpoint, written once after training, in a project that never resumes (restores no optimizer)",
        ),
        Valid(
            """
import torch


class Trainer:
    def _train_epoch(self, train_data):
        scaler = torch.amp.GradScaler("cuda")
        for batch in train_data:
            self.optimizer.zero_grad()
            with torch.autocast("cuda"):
                loss = self.model(batch)
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)
            scaler.update()

    def _save_checkpoint(self, epoch, path):
        torch.save({"epoch": epoch, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, path)

    def fit(self, train_data, epochs, path):
        for epoch in range(epochs):
            self._train_epoch(train_data)
            self._save_checkpoint(epoch, path)
""",
            "the scaler is rebuilt every epoch (AMP107's finding): its state restarts at each epoch whether saved or not",
        ),
        Valid(
            """
import torch


class Optimizer:
    def __init__(self, optimizer, amp):
        self._optimizer = optimizer
        self._step = 0
        self._scaler = torch.amp.GradScaler("cuda", enabled=amp)

    def backward(self, loss):
        self._scaler.scale(loss).backward()

    def step(self):
        self._scaler.step(self._optimizer)
        self._scaler.update()
        self._step += 1

    def state_dict(self):
        return {"step": self._step, "optimizer": self._optimizer.state_dict(), "scaler": self._scaler.state_dict()}

    def load_state_dict(self, state_dict):
        self._step = state_dict["step"]
        self._optimizer.load_state_dict(state_dict["optimizer"])
        self._scaler.load_state_dict(state_dict["scaler"])
""",
            "a helper optimizer class whose state_dict round-trips its own scaler",
        ),
        Valid(
            """
import torch


class ScaledOptimizer:
    def __init__(self, optimizer, scaler):
        self.optimizer = optimizer
        self.scaler = scaler

    def step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict["optimizer"])
""",
            "the scaler is handed in: its owner keeps (and may checkpoint) it",
        ),
        Valid(
            """
import os
import torch
from transformers import Trainer


class CLTrainer(Trainer):
    def _save_checkpoint(self, model, trial, metrics=None):
        output_dir = os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}")
        self.save_model(output_dir)
        torch.save(self.optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
        torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, "scheduler.pt"))
        if self.use_amp:
            torch.save(self.scaler.state_dict(), os.path.join(output_dir, "scaler.pt"))

    def optimizer_step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            "a checkpoint folder, one file per piece, with the scaler's",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    scaler.scale(model(x, y)).backward()
    scaler.step(optimizer)
    scaler.update()
torch.save(optimizer.state_dict(), "optimizer.pt")
""",
            "an optimizer's state saved alone, no other piece of a checkpoint beside it: not followed",
        ),
        Valid(
            """
import torch
from utils import save_checkpoint


def train(model, optimizer, loader, hps):
    scaler = torch.amp.GradScaler("cuda", enabled=hps.train.bf16_run)
    for epoch in range(hps.train.epochs):
        for x, y in loader:
            with torch.autocast("cuda", enabled=hps.train.bf16_run, dtype=torch.bfloat16):
                loss = model(x, y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        save_checkpoint({"epoch": epoch, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
            "the scaler only ever scales bf16 (every region bf16, no fp16 in the file): its scale never has to come down",
        ),
        Valid(
            """
import torch
from utils import misc


class Worker:
    def __init__(self, cfg):
        self.scaler = torch.cuda.amp.GradScaler()
        self.optimizer = cfg.optimizer

    def train_step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def train_classifier(self, model, loader, epochs):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
            misc.save_model_c({"state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, epoch)
""",
            "a classifier's own loop beside the scaled one: its local optimizer is stepped unscaled and the loop "
            "names no scaler, so no scaler state belongs in its checkpoint",
        ),
        Valid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="16-mixed")
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0, "precision": fabric.strategy.precision}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            "the precision plugin (Stateful: its scaler's state) is in the state fabric.save and fabric.load are given",
        ),
        Valid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="bf16-mixed")
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            "fabric.save of a bf16-mixed Fabric: no GradScaler to save",
        ),
        Valid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision=args.precision)
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            "fabric.save of a Fabric whose precision is chosen at run time",
        ),
        Valid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="16-mixed", strategy="fsdp")
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            "FSDP's sharded fabric.load does not restore a precision plugin in the state: no fix to offer, silent",
        ),
        Valid(
            """
import torch
from lightning import Fabric
from lightning.fabric.strategies import FSDPStrategy


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="16-mixed", strategy=FSDPStrategy(state_dict_type="full"))
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0, "precision": fabric.strategy.precision}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            "a full FSDP checkpoint holds the precision plugin and fabric.load restores it through load_state_dict",
        ),
        Valid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="16-mixed", strategy="deepspeed")
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            "DeepSpeed keeps its loss scaler in its own engine checkpoint, which fabric.save writes",
        ),
        Valid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="16-mixed")
    model, optimizer = fabric.setup(model, optimizer)
    precision = fabric.strategy.precision
    if args.resume:
        state = torch.load(args.resume)
        optimizer.load_state_dict(state["optimizer"])
        precision.load_state_dict(state["precision"])
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "precision": precision.state_dict()}, "last.pt")
""",
            "the precision plugin's state (its scaler's) is saved with the checkpoint",
        ),
        Valid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="bf16-mixed")
    model, optimizer = fabric.setup(model, optimizer)
    if args.resume:
        optimizer.load_state_dict(torch.load(args.resume)["optimizer"])
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
            "a bf16-mixed Fabric builds no GradScaler",
        ),
        Valid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader):
    fabric = Fabric(accelerator="cuda", precision="16-mixed")
    model, optimizer = fabric.setup(model, optimizer)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
    torch.save(model.state_dict(), "weights.pt")
""",
            "an export of the weights is not a resumable checkpoint",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from timm.utils import NativeScaler
from engine import train_one_epoch


def main(args, model, optimizer, loader):
    loss_scaler = NativeScaler()
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, loss_scaler)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "checkpoint.pth")
""",
            line=10,
            why="timm's NativeScaler holds an enabled GradScaler: its state_dict() is missing from the checkpoint",
        ),
        Invalid(
            """
import torch
from utils import misc


class Worker:
    def __init__(self, cfg):
        self.scaler = torch.cuda.amp.GradScaler()
        self.optimizer = cfg.optimizer

    def train_step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def save(self, model, step):
        states = {"state_dict": model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": step}
        misc.save_model(model="G", step=step, ckpt_dir="ckpt", states=states)

    def load(self, path):
        self.optimizer.load_state_dict(torch.load(path)["optimizer"])
""",
            line=17,
            why="a save helper given the checkpoint dict by keyword: the scaled optimizer's state goes in, the scaler's does not",
        ),
        Invalid(
            """
import torch
from utils import misc


class Worker:
    def __init__(self, cfg):
        self.scaler = torch.cuda.amp.GradScaler()

    def train_classifier(self, model, loader, epochs):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                self.scaler.scale(loss).backward()
                self.scaler.step(optimizer)
                self.scaler.update()
            misc.save_model_c({"state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, epoch)
""",
            line=17,
            why="the same local optimizer, but its own loop steps it through the scaler",
        ),
        Invalid(
            """
import torch
from utils import save_checkpoint


def train(model, optimizer, loader, args):
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
    amp_dtype = torch.bfloat16 if args.bf16 else torch.float16
    for epoch in range(args.epochs):
        for x, y in loader:
            with torch.autocast("cuda", enabled=args.amp, dtype=torch.bfloat16):
                loss = model(x, y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        save_checkpoint({"epoch": epoch, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
            line=16,
            why="a bf16 region, but the file runs fp16 too (`torch.float16`): the scaler's state matters there",
        ),
        Invalid(
            """
import torch
from utils import save_checkpoint


def train(model, optimizer, loader, args):
    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    for epoch in range(args.epochs):
        for x, y in loader:
            with torch.autocast("cuda", enabled=args.fp16):
                loss = model(x, y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        save_checkpoint({"epoch": epoch, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
            line=15,
            why="saved every epoch: a checkpoint to resume from, whatever resumes it",
        ),
        Invalid(
            """
import torch
from utils import save_checkpoint


def train(model, optimizer, loader, args):
    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    if args.resume:
        optimizer.load_state_dict(torch.load(args.resume)["optimizer"])
    for epoch in range(args.epochs):
        for x, y in loader:
            with torch.autocast("cuda", enabled=args.fp16):
                loss = model(x, y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    save_checkpoint({"epoch": args.epochs, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, "final.pt")
""",
            line=17,
            why="the final checkpoint is what `--resume` restores the optimizer from",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for epoch in range(epochs):
    train_one_epoch(model, optimizer, scaler)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "last.pt")
""",
            line=5,
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import GradScaler, autocast


class Trainer:
    def __init__(self, model, optimizer, args):
        self.model = model
        self.optimizer = optimizer
        self.scaler = GradScaler(enabled=args.fp16)

    def save_checkpoint(self, path):
        checkpoint = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict(),
        }
        torch.save(checkpoint, path)

    def load_checkpoint(self, path):
        checkpoint = torch.load(path, map_location="cpu")
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
""",
            line=17,
            count=1,
            why="one finding: the resume that restores the optimizer alone is its related site",
        ),
        Invalid(
            """
import torch

scaler = torch.amp.GradScaler("cuda")


def save(model, optimizer, epoch, best):
    ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
    torch.save(ckpt, "last.pt")
    if best:
        torch.save(ckpt, "best.pt")
    if epoch % 10 == 0:
        torch.save(ckpt, f"epoch_{epoch}.pt")
""",
            line=8,
            count=1,
            why="one bug, one finding: the other saves of the same checkpoint are related sites",
        ),
        Invalid(
            """
import torch as th
from torch import amp

def train(model, opt, loader, resume=None):
    scaler = amp.GradScaler()
    if resume:
        ckpt = th.load(resume)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
    for x, y in loader:
        with amp.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
""",
            line=9,
        ),
        Invalid(
            """
import torch


class Trainer:
    def __init__(self, args, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.cuda.amp.GradScaler()
        if args.restore_path:
            (self.model, self.optimizer, self.scaler) = self.restore_model(args.restore_path, self.model, self.optimizer, self.scaler)
            self.scaler = torch.cuda.amp.GradScaler()

    def restore_model(self, path, model, optimizer, scaler):
        checkpoint = torch.load(path)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scaler.load_state_dict(checkpoint["scaler"])
        return model, optimizer, scaler
""",
            line=10,
            why="the restored scaler is replaced by a fresh one right after the restore",
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.engine import SimpleTrainer, hooks

class Trainer(SimpleTrainer):
    def __init__(self, model, loader, optimizer, amp=False):
        super().__init__(model, loader, optimizer)
        if amp:
            grad_scaler = GradScaler()
            self.grad_scaler = grad_scaler
        self.amp = amp

    def run_step(self):
        losses = sum(self.model(next(self._data_loader_iter)).values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()


def do_train(args, cfg, model, optim, loader):
    trainer = Trainer(model, loader, optim, amp=cfg.train.amp.enabled)
    checkpointer = DetectionCheckpointer(model, cfg.train.output_dir, trainer=trainer)
    trainer.register_hooks([hooks.PeriodicCheckpointer(checkpointer, period=5000)])
    checkpointer.resume_or_load(cfg.train.init_checkpoint, resume=args.resume)
    trainer.train(trainer.iter + 1 if args.resume else 0, cfg.train.max_iter)
""",
            line=23,
            why="a SimpleTrainer subclass that builds and steps its own GradScaler and inherits a state_dict holding the optimizer only:"
            " the checkpointer given trainer= never saves the scale (detrex's projects/*/train_net.py)",
        ),
        Invalid(
            """
from fvcore.common.checkpoint import Checkpointer, PeriodicCheckpointer


def do_train(cfg, model, optimizer, loader, resume):
    fp16_scaler = model.fp16_scaler
    checkpointer = Checkpointer(model, cfg.output_dir, optimizer=optimizer, save_to_disk=True)
    start = checkpointer.resume_or_load(cfg.weights, resume=resume).get("iteration", -1) + 1
    periodic = PeriodicCheckpointer(checkpointer, period=1000)
    for iteration, batch in enumerate(loader, start):
        loss = model(batch)
        fp16_scaler.scale(loss).backward()
        fp16_scaler.step(optimizer)
        fp16_scaler.update()
        periodic.step(iteration)
""",
            line=6,
            why="an fvcore checkpointer registered with the optimizer alone: its checkpoints never hold the scaler",
        ),
        Invalid(
            """
import torch
import util.misc as utils


def main(args, model, optimizer, loader):
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, scaler)
        utils.save_on_master({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "ckpt.pth")
""",
            line=9,
            why="saved through a helper named for saving, given the resume dict the loop built",
        ),
        Invalid(
            """
import torch


def save_checkpoint(model, optimizer, iteration, path):
    torch.save({"iteration": iteration, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def train(hparams, model):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    if hparams.fp16_run:
        from apex import amp
        model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
""",
            line=5,
            why="apex O2's dynamic loss scale lives in the amp module: amp.state_dict() is saved nowhere",
        ),
        Invalid(
            """
import torch
from apex import amp

model, optimizer = amp.initialize(model, optimizer)
checkpoint = torch.load("last.pt")
model.load_state_dict(checkpoint["model"])
optimizer.load_state_dict(checkpoint["optimizer"])
""",
            line=7,
            why="a resume under apex's default O1 that never calls amp.load_state_dict",
        ),
        Invalid(
            """
import torch
from project.checkpoints import load_checkpoint, save_checkpoint

if resuming:
    model_data, optimizer_data, meta = load_checkpoint(checkpoint_dir, args.resume_from_step)
optimizer = torch.optim.AdamW(model.parameters())
if resuming:
    optimizer.load_state_dict(optimizer_data)
scaler = torch.amp.GradScaler() if dtype == torch.float16 else None
for step in range(num_steps):
    loss = model(next(loader))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    if step % save_every == 0:
        save_checkpoint(checkpoint_dir, step, model.state_dict(), optimizer.state_dict(), {"step": step})
""",
            line=16,
            why="a save helper handed the checkpoint's pieces (model and optimizer state), none of them the scaler's; "
            "the resume restores the optimizer from a load helper's result (a related site)",
        ),
        Invalid(
            """
import torch


class Optimizer:
    def __init__(self, optimizer, max_grad_norm=0.0):
        self._optimizer = optimizer
        self._training_step = 1
        self._scaler = None

    @classmethod
    def from_opt(cls, optimizer, opt):
        wrapper = cls(optimizer, opt.max_grad_norm)
        if opt.model_dtype == "fp16":
            wrapper._scaler = torch.amp.GradScaler("cuda")
        return wrapper

    def backward(self, loss):
        self._scaler.scale(loss).backward()

    def step(self):
        self._scaler.unscale_(self._optimizer)
        self._scaler.step(self._optimizer)
        self._scaler.update()
        self._training_step += 1

    def state_dict(self):
        return {"training_step": self._training_step, "optimizer": self._optimizer.state_dict()}

    def load_state_dict(self, state_dict):
        self._training_step = state_dict["training_step"]
        self._optimizer.load_state_dict(state_dict["optimizer"])
""",
            line=26,
            why="a helper optimizer class that builds and steps its own scaler: its state_dict/load_state_dict pair, what "
            "its users checkpoint and resume, carries the optimizer's state but not the scaler's",
        ),
        Invalid(
            """
import os
import torch
from transformers import Trainer


class CLTrainer(Trainer):
    def _save_checkpoint(self, model, trial, metrics=None):
        output_dir = os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}")
        self.save_model(output_dir)
        torch.save(self.optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
        torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, "scheduler.pt"))
        self.state.save_to_json(os.path.join(output_dir, "trainer_state.json"))

    def optimizer_step(self):
        if self.use_amp:
            self.scaler.unscale_(self.optimizer)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
""",
            line=10,
            why="a Hugging Face-style checkpoint folder (one file per piece: the model, optimizer.pt, scheduler.pt) "
            "written by an overridden _save_checkpoint that leaves out the Trainer's scaler",
        ),
        Invalid(
            """
import os
import torch


class Trainer:
    def _save_checkpoint(self, output_dir):
        self.save_model(output_dir)
        torch.save(self.optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
        torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, "scheduler.pt"))

    def _load_optimizer_and_scheduler(self, checkpoint):
        self.optimizer.load_state_dict(torch.load(os.path.join(checkpoint, "optimizer.pt")))
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(checkpoint, "scheduler.pt")))

    def optimizer_step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            line=12,
            why="the folder's pieces are read back by a resume in the same file: reported at that resume",
        ),
        Invalid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="16-mixed")
    model, optimizer = fabric.setup(model, optimizer)
    if args.resume:
        state = torch.load(args.resume)
        optimizer.load_state_dict(state["optimizer"])
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, "last.pt")
""",
            line=14,
            why="Fabric's 16-mixed precision keeps a GradScaler; the hand-written resume checkpoint leaves its scale out",
        ),
        Invalid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision="16-mixed")
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            line=15,
            why="fabric.save stores only the state's modules, optimizers and Stateful objects: the precision plugin's "
            "GradScaler is left out, and the resume restarts at the initial scale",
        ),
        Invalid(
            """
import torch
from lightning import Fabric


def train(model, optimizer, loader, args):
    fabric = Fabric(accelerator="cuda", precision=16, strategy="ddp")
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            line=15,
            why="`16` is Lightning's alias of 16-mixed; DDP saves through the same Strategy.save_checkpoint",
        ),
        Invalid(
            """
import torch
from lightning import Fabric
from lightning.fabric.strategies import FSDPStrategy


def train(model, optimizer, loader, args):
    strategy = FSDPStrategy(state_dict_type="full")
    fabric = Fabric(accelerator="cuda", precision="16-mixed", strategy=strategy)
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    if args.resume:
        fabric.load(args.resume, state)
    for step, batch in enumerate(loader):
        fabric.backward(model(batch).mean())
        optimizer.step()
        state["step"] = step
        fabric.save("last.ckpt", state)
""",
            line=17,
            why="FSDPPrecision's ShardedGradScaler is not saved by FSDPStrategy.save_checkpoint either; a full "
            "checkpoint restores it once the plugin is in the state",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        yield from self._apex(ctx)
        yield from self._fabric(ctx)
        wrapped = list(self._wrapper_state(ctx))
        yield from wrapped
        live = _live_scalers(ctx)
        if wrapped:  # one bug, one finding: a save of the wrapper's state misses the scaler its state_dict() leaves out
            attributes = {d.data["scaler"].rsplit(".", 1)[-1] for d in wrapped}
            live = [key for key in live if key.rsplit(".", 1)[-1] not in attributes]
        if live:
            from amplint.model import rebuilt_scalers

            rebuilt = rebuilt_scalers(ctx)  # one bug, one finding: AMP107's; its state restarts every epoch anyway
            live = [key for key in live if key not in rebuilt]
        if not live and not wrapped and not ctx.scalers:
            live = _timm_scalers(ctx)  # timm's NativeScaler: a GradScaler always on, with its state_dict()
        if not live:
            return
        from amplint.model import scales_bf16_unless_property

        # bf16 unless a config property maps to fp16: the findings hold only if the project's property may
        unless = scales_bf16_unless_property(ctx)
        for found in self._checkpoints(ctx, live):
            if unless is not None:
                found = replace(found, condition=_unless_bf16(found.condition, unless))
            yield found

    def _checkpoints(self, ctx: ModuleContext, live: List[str]) -> Iterator[Diagnostic]:
        """The file's GradScaler findings: a restored scaler replaced, the saves and the resume."""
        yield from self._replaced_after_restore(ctx, live)
        scaler = live[0]
        saves: List[Tuple[CallInfo, str]] = []
        trainers: List[Tuple[CallInfo, str, cst.ClassDef, str]] = []
        if not _scaler_call(ctx, "state_dict"):
            for call in [*ctx.calls_to("torch.save"), *_save_helper_calls(ctx)]:
                optimizer = _resume_checkpoint(ctx, call)
                if optimizer is not None and not _scalerless_loop(ctx, call, optimizer):
                    saves.append((call, optimizer))
            saves.sort(key=lambda found: found[0].order)
            saves.extend(_checkpointers(ctx))
            trainers = _scalerless_trainer_checkpointers(ctx)
            saves.extend((call, held) for call, held, _, _ in trainers)
        resume = None
        if not _scaler_call(ctx, "load_state_dict"):
            loads = ctx.calls_to("torch.load")
            resume = next(
                (
                    call
                    for call in ctx.method_calls("load_state_dict")
                    if ctx.is_optimizer(call.receiver_dotted) and not call.qualnames and _from_checkpoint(ctx, call, loads)
                ),
                None,
            )  # the first one: the scaler is missing from every resume path alike
        if resume is not None:  # a folder's optimizer.pt pieces: the resume that reads them back is where it is reported
            saves = [(call, optimizer) for call, optimizer in saves if not _folder_piece(call)]
        # one bug, one finding: the scaler is missing from the file's checkpoints, reported at the
        # first save (where its state is added) with the other saves and the resume as related sites
        related = [ctx.related(call.node, "also saved") for call, _ in saves[1:]]
        if saves:
            if resume is not None:
                related.append(ctx.related(resume.node, "restored without it"))
            held = next(((cls, owned) for call, _, cls, owned in trainers if call is saves[0][0]), None)
            if held is not None:
                found = self._trainer_saved(ctx, saves[0][0], saves[0][1], held[0], held[1], related)
            else:
                found = self._saved(ctx, saves[0][0], scaler, saves[0][1], related)
            if resume is None and not ctx.calls_to("torch.load") and all(_final_save(ctx, call) for call, _ in saves):
                found = replace(found, condition=RESUMED)  # written once, at the end: harmless unless something resumes from it
            yield found
        elif resume is not None:
            yield self._loaded(ctx, resume, scaler)

    def _wrapper_state(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """A helper optimizer class that builds and steps its own GradScaler (`self._scaler`) and
        round-trips its state through its own `state_dict()` / `load_state_dict()` pair (what its
        users checkpoint and resume), both carrying the wrapped optimizer's state and neither the
        scaler's. Reported at `state_dict`."""
        import libcst as cst

        for cls, methods in _classes(ctx).items():
            save, load = methods.get("state_dict"), methods.get("load_state_dict")
            if save is None or load is None:
                continue
            saved = [c for c in save.calls if c.method == "state_dict" and (c.receiver_dotted or "").startswith("self.")]
            if not saved:
                continue
            for scaler in _owned_scalers(ctx, cls, methods):
                if any(f"{scaler}.state_dict" in ctx.code_for(m.node) or f"{scaler}.load_state_dict" in ctx.code_for(m.node)
                       for m in methods.values()) or scaler in ctx.code_for(save.node) or scaler in ctx.code_for(load.node):
                    continue
                optimizer = saved[0].receiver_dotted
                node = save.node.name if isinstance(save.node, cst.FunctionDef) else save.node
                message = f"`{cls.name.value}.state_dict()` saves `{optimizer}` but not `{scaler}`, which it steps with"
                help = f"Add `{scaler}.state_dict()` to it and restore it in `load_state_dict` with `{scaler}.load_state_dict(...)`"
                data = {"scaler": scaler, "optimizer": optimizer, "snippet": ctx.code_for(saved[0].statement), "side": "save",
                        "bug": scaler}
                related = [ctx.related(load.node.name, "restored without it")] if isinstance(load.node, cst.FunctionDef) else []
                yield ctx.diagnostic(self, node, message, data=data, related=related, help=help)
                break

    def _apex(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """apex `amp.initialize(...)` with a dynamic loss scale, and a resume checkpoint of the file
        without `amp.state_dict()`: apex keeps its loss scalers (scale, unskipped steps) in the
        `amp` module, not in the optimizer, and restores them only by `amp.load_state_dict(...)`
        ("To properly save and load your amp training, we introduce amp.state_dict()", apex's
        README). One finding per file, as for a GradScaler: at the first save, the other saves and
        the resume as related sites; a resume alone at the resume."""
        initialize = next((c for c in ctx.calls_to("apex.amp.initialize") if _apex_scales_dynamically(c)), None)
        if initialize is None:
            return
        saves: List[CallInfo] = []
        if not ctx.calls_to("apex.amp.state_dict"):
            saves = [c for c in [*ctx.calls_to("torch.save"), *_save_helper_calls(ctx)] if _resume_checkpoint(ctx, c)]
            saves.sort(key=lambda c: c.order)
        resume = None
        if not ctx.calls_to("apex.amp.load_state_dict"):
            loads = ctx.calls_to("torch.load")
            resume = next((c for c in ctx.method_calls("load_state_dict")
                           if ctx.is_optimizer(c.receiver_dotted) and not c.qualnames and _from_checkpoint(ctx, c, loads)), None)
        if resume is not None:
            saves = [c for c in saves if not _folder_piece(c)]
        related = [ctx.related(initialize.node, "apex amp's dynamic loss scale set up here")]
        if saves:
            optimizer = _resume_checkpoint(ctx, saves[0])
            related += [ctx.related(c.node, "also saved") for c in saves[1:]]
            if resume is not None:
                related.append(ctx.related(resume.node, "restored without it"))
            message = f"This checkpoint saves `{optimizer}` but not apex's `amp.state_dict()` (the dynamic loss scale)"
            data = {"scaler": "amp", "optimizer": optimizer, "snippet": ctx.code_for(saves[0].node), "side": "save",
                    "bug": "amp", "mechanism": "apex"}
            yield ctx.diagnostic(self, saves[0].node, message, data=data, related=related,
                                 help="Save `amp.state_dict()` with it and restore it with `amp.load_state_dict(...)` after `amp.initialize`")
        elif resume is not None:
            message = f"The resume restores `{resume.receiver_dotted}` but not apex amp's loss scale (`amp.load_state_dict`)"
            data = {"scaler": "amp", "optimizer": resume.receiver_dotted, "snippet": ctx.code_for(resume.node),
                    "side": "load", "bug": "amp", "mechanism": "apex"}
            yield ctx.diagnostic(self, resume.node, message, data=data, related=related,
                                 help="Call `amp.load_state_dict(...)` with the saved `amp.state_dict()` after `amp.initialize`")

    def _fabric(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """Lightning `Fabric(precision="16-mixed")` builds a GradScaler in its precision plugin
        and scales every `fabric.backward(loss)` with it; a resume checkpoint the file writes by
        hand (`torch.save` of a dict with the optimizer's state) and resumes from
        (`optimizer.load_state_dict` after a `torch.load`) leaves that scale out. One finding per
        file, at its first save; an info when fp16 is chosen at run time (a `**fabric_kwargs`
        given the precision behind a flag). Silent when the file also checkpoints with
        `fabric.save` / `fabric.load` or touches any `state_dict` of a scaler or precision plugin."""
        from amplint.model import fp16_fabrics, fsdp_full_fabrics

        backward = ctx.method_calls("backward")
        fabrics = [(call, chosen, names) for call, chosen, names in fp16_fabrics(ctx)
                   if any(c.receiver_dotted in names for c in backward)]
        full = [(call, chosen, names) for call, chosen, names in fsdp_full_fabrics(ctx)
                if any(c.receiver_dotted in names for c in backward)]
        if not fabrics and not full:
            return
        held = set().union(*(names for _, _, names in fabrics + full))
        if any("scaler" in (c.receiver_dotted or "").lower() or "precision" in (c.receiver_dotted or "").lower()
               for c in ctx.method_calls("state_dict", "load_state_dict")):
            return
        if any(c.receiver_dotted in held for c in ctx.method_calls("save", "load", "load_raw")):
            yield from self._fabric_save(ctx, sorted(fabrics + full, key=lambda f: f[0].order))
            return
        if not fabrics:
            return  # a hand-written checkpoint under FSDP: not measured, left out
        saves = [(c, o) for c in ctx.calls_to("torch.save") for o in [_resume_checkpoint(ctx, c)] if o is not None]
        loads = ctx.calls_to("torch.load")
        resume = next((c for c in ctx.method_calls("load_state_dict")
                       if ctx.is_optimizer(c.receiver_dotted) and not c.qualnames and _from_checkpoint(ctx, c, loads)), None)
        if not saves or resume is None:
            return  # nothing resumes from it here: an export, or a resume the file does not show
        saves.sort(key=lambda found: found[0].order)
        first, optimizer = saves[0]
        ctor, chosen, _ = fabrics[0]
        related = [ctx.related(ctor.node, "this Fabric builds the GradScaler (16-mixed)")]
        if chosen is not None:
            related.append(ctx.related(chosen, "fp16 chosen here"))
        related += [ctx.related(c.node, "also saved") for c, _ in saves[1:]]
        related.append(ctx.related(resume.node, "restored without it"))
        message = f"This checkpoint saves `{optimizer}` but not the GradScaler of Fabric's 16-mixed precision"
        if chosen is not None:
            message = f"when Fabric is 16-mixed: this checkpoint saves `{optimizer}` but not Fabric's GradScaler"
        data = {"scaler": "fabric.strategy.precision.scaler", "optimizer": optimizer, "snippet": ctx.code_for(first.node),
                "side": "save", "bug": "fabric", "mechanism": "fabric"}
        yield ctx.diagnostic(
            self, first.node, message, data=data, related=related, severity=Severity.INFO if chosen is not None else None,
            help="Save `fabric.strategy.precision.state_dict()` (the scaler's state) with it and restore it with "
            "`fabric.strategy.precision.load_state_dict(...)` on resume",
        )

    def _fabric_save(self, ctx: ModuleContext, fabrics: list) -> Iterator[Diagnostic]:
        """`fabric.save(path, state)` stores the `state_dict()` of the modules, optimizers and
        Stateful objects in `state` and nothing else (lightning 2.6.6,
        `fabric/strategies/strategy.py`: `Strategy.save_checkpoint` ->
        `_convert_stateful_objects_in_state`; FSDP's `save_checkpoint` alike), never the
        precision plugin's GradScaler, which the Trainer's checkpoint connector does save. Flagged
        at the first `fabric.save` of a dict (spelled there or bound once in that function) that
        holds an optimizer and names no scaler or precision plugin, in a file that also resumes
        with `fabric.load`, when every Fabric of the file is a literal 16-mixed one on a plain
        strategy or on `FSDPStrategy(state_dict_type="full")` (DeepSpeed keeps its scaler in its
        engine checkpoint; FSDP's sharded `load_checkpoint` never restores the plugin, so the help
        would not hold there: both left out)."""
        from amplint.model import FABRICS

        literal = [(call, names) for call, chosen, names in fabrics if chosen is None]
        if not literal or len(literal) != len(ctx.calls_to(*FABRICS)):
            return  # another Fabric of the file may be the one saving (bf16, run-time precision)

        def holds(call) -> bool:  # a plain name only in the constructor's function, an attribute anywhere
            return any(call.receiver_dotted in names and ("." in call.receiver_dotted or call.scope is ctor.scope)
                       for ctor, names in literal)

        resumes = [c for c in ctx.method_calls("load", "load_raw") if holds(c)]
        if not resumes:
            return  # nothing in the file resumes from it
        for save in sorted((c for c in ctx.method_calls("save") if holds(c)), key=lambda c: c.order):
            optimizer = self._fabric_state_optimizer(ctx, save)
            if optimizer is None:
                continue
            ctor = literal[0][0]
            related = [ctx.related(ctor.node, "this Fabric builds the GradScaler (16-mixed)")]
            related += [ctx.related(c.node, "restored without it") for c in resumes]
            data = {"scaler": "fabric.strategy.precision.scaler", "optimizer": optimizer,
                    "snippet": ctx.code_for(save.node), "side": "save", "bug": "fabric_save", "mechanism": "fabric"}
            yield ctx.diagnostic(
                self, save.node, f"fabric.save stores `{optimizer}` but not the GradScaler of Fabric's 16-mixed precision",
                data=data, related=related,
                help='Add `"precision": fabric.strategy.precision` (Stateful: its scaler\'s state) to the state '
                "given to fabric.save and fabric.load",
            )
            return

    @staticmethod
    def _fabric_state_optimizer(ctx: ModuleContext, save) -> Optional[str]:
        """The optimizer held by the dict `fabric.save` is given, when that dict (a literal, or a
        name bound once to one in the save's function) has another entry and names no scaler or
        precision plugin, in its entries or in what the function adds to it; else None."""
        import libcst as cst

        from amplint.model import literal_string

        state = save.arg(1, "state")
        name = None
        if isinstance(state, cst.Name):
            name = state.value
            bound = [a for a in ctx.assignments if a.scope is save.scope and a.target == name]
            if len(bound) != 1 or not isinstance(bound[0].value, cst.Dict):
                return None
            state = bound[0].value
        if not isinstance(state, cst.Dict) or len(state.elements) < 2:
            return None
        if any(not isinstance(e, cst.DictElement) for e in state.elements):
            return None  # `**other`: anything may be in it
        if any(w in ctx.code_for(state).lower() for w in ("scaler", "precision")):
            return None
        if name is not None:
            for a in ctx.assignments:
                text = ctx.code_for(a.node).lower()
                if a.scope is save.scope and text.startswith(name.lower() + "[") and ("scaler" in text or "precision" in text):
                    return None
            for c in ctx.method_calls("update", "setdefault", "__setitem__"):
                if c.scope is save.scope and c.receiver_dotted == name:
                    return None  # filled in where the rule does not follow
        for e in state.elements:
            value = ctx.code_for(e.value)
            key = literal_string(e.key)
            if ctx.is_optimizer(value) or (key is not None and "optim" in key.lower() and isinstance(e.value, (cst.Name, cst.Attribute))):
                return value
        return None

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """Checkpoint helpers in another module: one that saves the optimizer but not the
        GradScaler the calling loop owns and never passes to it (`save_checkpoint(model,
        optimizer, ...)`), and one that resumes the optimizer but never restores that scaler
        (`load_checkpoint(path, model, optimizer)`). One bug, one finding: a resume of the same
        scaler joins the save's finding as a related site."""
        saves: Dict[Tuple[str, str], Diagnostic] = {}
        resumes: List[Tuple[ProjectCall, str, str, ProjectCall]] = []
        for call in project.calls():
            last = call.record["f"].rsplit(".", 1)[-1].lower()
            if "load" in last or "resume" in last or "restore" in last:
                resumes.extend(self._resume(project, call))
            elif "save" in last or "checkpoint" in last or "ckpt" in last:  # a helper is named for what it does
                for found in self._save(project, call):
                    saves.setdefault((call.path, found.data["scaler"]), found)
        for call, scaler, helper, restored in resumes:
            joined = saves.get((call.path, scaler))
            if joined is not None:
                joined.related = (*joined.related, project.site(call, "restored without it"))
                continue
            message = f"`{helper}` resumes `{restored.record['f'][: -len('.load_state_dict')]}` but not `{scaler}`, and this call does not pass it"
            cause = project.related(restored.path, restored.row, "restored here without the scaler")
            data = {"scaler": scaler, "side": "load", "helper": helper, "bug": scaler, "as_related": "restored without it"}
            yield project.diagnostic(self, call, message, data=data, related=(cause,),
                                     help=f"Restore it with `{scaler}.load_state_dict(...)` after the call, or pass `{scaler}` in")
        yield from saves.values()
        yield from self._scaler_out_of_reach(project)
        yield from self._accelerate_checkpoints(project)
        inherited = list(self._inherited_state(project))
        yield from (d for d, _ in inherited)
        yield from self._wrapped_scalers(project, {key for _, key in inherited})

    def _inherited_state(self, project: Project) -> Iterator[Tuple[Diagnostic, Tuple[str, str]]]:
        """A project optimizer wrapper that builds its own enabled GradScaler (`self._grad_scaler =
        GradScaler(...)`), steps a wrapped optimizer through it (`self.scaler.step(self.fp32_optimizer)`,
        directly or through a property returning it) and defines no `state_dict` of its own: the
        `state_dict()` / `load_state_dict()` pair it inherits from a project base (fairseq's
        `FairseqOptimizer`: `return self.optimizer.state_dict()`) is what its users checkpoint and
        resume, and carries the optimizer's state but not the scaler's. Reported at the class,
        with the inherited pair as related sites; with the class's key, so that the holder check
        (`_wrapped_scalers`) does not report the same scaler again."""
        for path, summary in sorted(project.summaries.items()):
            functions = summary["functions"]
            for cls, info in summary["classes"].items():
                if f"{cls}.state_dict" in functions or f"{cls}.load_state_dict" in functions:
                    continue  # its own pair: the per-file check (`_wrapper_state`) judges it
                scaler = _stepping_scaler(project, path, cls, info)
                if scaler is None:
                    continue
                attr, names = scaler
                pair = _inherited_pair(project, path, cls)
                if pair is None:
                    continue
                base_path, base, save, load = pair
                if _touches_scaler_state(project, path, cls, names):
                    continue
                optimizer = next(r["f"][: -len(".state_dict")] for r in save["calls"]
                                 if r["f"].startswith("self.") and r["f"].endswith(".state_dict"))
                message = f"`{cls}` inherits `{base}.state_dict()`, which leaves out `self.{attr}`"
                help = (f"Override `state_dict` / `load_state_dict` in `{cls}` to add `self.{attr}.state_dict()` "
                        f"and restore it with `self.{attr}.load_state_dict(...)`")
                related = (project.related(base_path, save["line"], "the inherited state_dict, without the scaler"),
                           project.related(base_path, load["line"], "restored without it"))
                data = {"scaler": f"{cls}.{attr}", "optimizer": optimizer, "side": "save", "bug": f"{cls}.{attr}",
                        "mechanism": "inherited"}
                row = info["line"]
                site = ProjectCall(path, "<module>", {"r": row, "c": 1, "er": row, "ec": 7 + len(cls)})
                yield project.diagnostic(self, site, message, data=data, related=related, help=help), (path, cls)

    def _wrapped_scalers(self, project: Project, reported_classes: Optional[set] = None) -> Iterator[Diagnostic]:
        """A GradScaler kept inside a project class that wraps an optimizer (`self._scaler =
        GradScaler(...)` and `self._scaler.step(self._opt)` in its methods, no `state_dict` of its
        own), whose instances a model or trainer holds as attributes; a resume checkpoint saves
        the optimizers' state of such a holder (`holder.opt._opt.state_dict()`, or a project
        helper named for optimizer state that is given the holder and calls `state_dict()`:
        `collect_optim_state_dict(agent)`) while nothing in the project ever reads the scaler's
        state. One finding per wrapper class, at the first such piece of a checkpoint."""
        wrapped = {k: v for k, v in _scaler_wrappers(project).items() if k not in (reported_classes or ())}
        if not wrapped:
            return
        reported: set = set()
        for path, qual, info in list(project.functions()):
            for record in info["calls"]:
                call = ProjectCall(path, qual, record)
                if not record["a"] or not project.is_save(call):
                    continue
                saved = record["a"][0]
                if saved and "n" in saved:
                    saved = next((r for r in reversed(info["locals"].get(saved["n"], ())) if r and "d" in r), None)
                if not saved or "d" not in saved or len(saved["d"]) < 2 or _mentions_scaler(saved):
                    continue
                if not _resumes(project, path):
                    continue
                for value in saved["d"].values():
                    found = _holds_wrapped_optimizer(project, path, qual, value, wrapped)
                    if found is None or found in reported or found[0] == path:
                        continue  # a save in the scaler's own file is the per-file check's
                    reported.add(found)
                    cls_path, cls, attr, row = found[0], found[1], wrapped[found][0], wrapped[found][1]
                    piece = record  # the checkpoint; a helper gathering the optimizers' state is the site itself
                    if not value["c"].endswith(".state_dict"):
                        piece = next((r for r in info["calls"] if r["f"] == value["c"] and r["r"] >= record["r"] - 64
                                      and r["a"] == value["a"] and r["k"] == value["k"]), record)
                    message = f"This checkpoint saves `{cls}`'s optimizer but not its GradScaler `{attr}`"
                    related = [project.related(cls_path, row, f"`{cls}` keeps its own GradScaler here")]
                    if piece is not record:
                        related.append(project.site(call, "saved here"))
                    data = {"scaler": f"{cls}.{attr}", "side": "save", "bug": f"{cls}.{attr}", "as_related": "also saved",
                            "mechanism": "wrapper"}
                    yield project.diagnostic(
                        self, ProjectCall(path, qual, piece), message, data=data, related=tuple(related),
                        help=f"Give `{cls}` a `state_dict()` / `load_state_dict()` that include `{attr}.state_dict()`, "
                        "and save and restore that with the checkpoint",
                    )

    def _accelerate_checkpoints(self, project: Project) -> Iterator[Diagnostic]:
        """A resume checkpoint written by hand (`torch.save` of a dict with an optimizer's state,
        here or through a save helper in another module) by a loop whose `Accelerator` builds
        the GradScaler itself (`mixed_precision="fp16"`, an option or a config whose shipped
        values are fp16: `accelerate_hooks.project_scaling_accelerator`), when no scaler state
        is saved and the file resumes the optimizer from such a checkpoint (here, or through a
        load helper that restores no scaler). Silent where the file also uses accelerate's own
        `save_state` / `load_state` or touches the scaler's `state_dict`, and where nothing
        resumes. One finding per file, at its first save; a run-time choice of fp16 is an info."""
        from amplint.model import project_scaling_accelerator

        held_saves: Dict[Tuple[str, int], ProjectCall] = {}  # a holder class's own save (`attribute_state`)
        holders: Dict[Tuple[str, int], List[Tuple[ProjectCall, Any, List[ProjectCall]]]] = {}
        for path, summary in sorted(project.summaries.items()):
            if "acc" not in summary and not _reads_accelerator(summary):
                continue
            functions = summary["functions"]
            if _handles_scaler_state(functions):
                continue
            saves: List[Tuple[ProjectCall, Any, Optional[ProjectCall]]] = []  # (save site, scaling, the helper's torch.save)
            resumes: List[ProjectCall] = []
            for qual, info in functions.items():
                scaling = None
                for name in _accelerator_names(info):
                    scaling = project_scaling_accelerator(project, path, qual, name, scaler=True)
                    if scaling is not None:
                        break
                if _scale_owners(project, ProjectCall(path, qual, {})):
                    continue  # a scaler of its own: the checks above judge its saves
                own = project.saved_checkpoint((path, qual)) if scaling is not None else None
                if own is not None and not _mentions_scaler(own[1]) and not _saves_unwrapped(project, path, qual, own[1]):
                    saves.append((own[0], scaling, None))
                restored = project.restored_checkpoint((path, qual))
                if restored is not None:
                    resumes.append(restored)
                for record in info["calls"]:
                    last = record["f"].rsplit(".", 1)[-1].lower()
                    call = ProjectCall(path, qual, record)
                    if _passes_scaler(call) or record["f"].startswith("self."):
                        continue
                    if any(w in last for w in _RESTORE_WORDS):
                        if "load_state" in last:
                            continue
                        if not _passes_optimizer(project, call) and not _holder_method(project, call):
                            continue  # `load_checkpoint(path, model)`: the weights alone
                        for key in project.callees(call):
                            if key[0] != path and _restores_optimizer(project, key):
                                resumes.append(call)
                                break
                    elif scaling is not None and any(w in last for w in ("save", "checkpoint", "ckpt")):
                        if any(ref and "n" in ref and "optim" in ref["n"].lower() and _container_optimizer(project, path, qual, ref["n"])
                               for ref in (*record["a"], *record["k"].values())):
                            continue  # accelerate never steps its scaler for a container: a scale that never moves
                        for key in project.callees(call):
                            saved = project.saved_checkpoint(key)
                            if saved is not None and (key[0] != path or saved[1].get("held")) and not _mentions_scaler(saved[1]):
                                saves.append((call, scaling, saved[0]))
                                if saved[1].get("held"):
                                    held_saves.setdefault((saved[0].path, saved[0].row), saved[0])
                                break
            if not saves or not resumes:
                continue
            saves.sort(key=lambda found: found[0].record["r"])
            first, scaling, inner = saves[0]
            if inner is not None and (inner.path, inner.row) in held_saves:
                holders.setdefault((inner.path, inner.row), []).append((first, scaling, resumes))
                continue  # the holder's method is the one place every loop's checkpoint misses the scaler
            related = []
            if inner is not None:
                related.append(project.related(inner.path, inner.row, "saved here without the scaler"))
            related += [project.site(c, "also saved") for c, _, _ in saves[1:]]
            related.append(project.related(scaling.path, scaling.row, "this Accelerator builds the GradScaler (fp16)"))
            if scaling.option:
                related.append(project.related(scaling.option[0], scaling.option[1], "fp16 chosen here"))
            related += [project.site(c, "restored without it") for c in sorted(resumes, key=lambda c: (c.path, c.record["r"]))[:3]]
            helper = first.record["f"].rsplit(".", 1)[-1]
            message = f"{scaling.prefix()}This checkpoint saves the optimizer but not the GradScaler accelerate builds (`accelerator.scaler`)"
            data = {"scaler": "accelerator.scaler", "side": "save", "helper": helper, "bug": "accelerator.scaler",
                    "as_related": "also saved", "mechanism": "accelerate"}
            yield project.diagnostic(
                self, first, message, data=data, related=tuple(related), severity=Severity.INFO if scaling.runtime else None,
                help="Checkpoint with `accelerator.save_state(dir)` / `accelerator.load_state(dir)`, or save "
                "`accelerator.scaler.state_dict()` with it and restore it on resume" + scaling.runs(),
            )
        for site, loops in sorted(holders.items()):
            yield self._held_checkpoint(project, held_saves[site], loops)

    def _held_checkpoint(self, project: Project, inner: ProjectCall, loops: List[Tuple[ProjectCall, Any, List[ProjectCall]]]) -> Diagnostic:
        """One finding at a holder class's save (`TrainState.save`, writing each attribute's
        `state_dict()`), for every fp16 Accelerator's loop that checkpoints through it: the fix
        belongs in the holder (or in `save_state`), and one added scaler silences every loop.
        A warning when any loop's fp16 is certain, else an info naming the choice."""
        loops = sorted(loops, key=lambda found: (found[1].runtime, found[0].path, found[0].record["r"]))
        first, scaling, resumes = loops[0]
        cls = inner.func.split(".", 1)[0]
        related = [project.related(first.path, first.row, "saved here by a loop whose Accelerator is fp16")]
        related.append(project.related(scaling.path, scaling.row, "this Accelerator builds the GradScaler (fp16)"))
        if scaling.option:
            related.append(project.related(scaling.option[0], scaling.option[1], "fp16 chosen here"))
        related += [project.related(c.path, c.row, "restored without it") for c in sorted(resumes, key=lambda c: (c.path, c.record["r"]))[:2]]
        related += [project.related(c.path, c.row, "also saved through it") for c, _, _ in loops[1:4]]
        message = f"{scaling.prefix()}`{cls}` saves the optimizer but not the GradScaler accelerate builds"
        data = {"scaler": "accelerator.scaler", "side": "save", "helper": inner.func, "bug": "accelerator.scaler",
                "as_related": "also saved", "mechanism": "accelerate"}
        return project.diagnostic(
            self, inner, message, data=data, related=tuple(related), severity=Severity.INFO if scaling.runtime else None,
            help=f"Checkpoint with `accelerator.save_state(dir)` / `load_state(dir)`, or give `{cls}` "
            "`accelerator.scaler` to save and restore with the rest" + scaling.runs(),
        )

    def _scaler_out_of_reach(self, project: Project) -> Iterator[Diagnostic]:
        """A resume checkpoint saved by a loop that owns no GradScaler while a function it calls
        builds one of its own (`scaler = GradScaler(enabled=args.amp)` inside `train_one_epoch`,
        never returned): no save the loop makes can hold that scaler's state. One finding per
        saving function, at its first such save, the others and its resume as related sites."""
        for key, scaler, built in _private_scalers(project):
            for caller in project.callers(key):
                if caller.path == key[0] and caller.func == key[1]:
                    continue
                info = project.function((caller.path, caller.func))
                if info is None or _scale_owners(project, caller):
                    continue  # the loop scales a loss itself: the checks above judge its saves
                saves = [r for r in info["calls"] if _saves_resume_dict(info, r)]
                if not saves or any(_mentions_scaler(a) for r in saves for a in (*r["a"], *r["k"].values())):
                    continue
                helper = key[1].rsplit(".", 1)[-1]
                first = ProjectCall(caller.path, caller.func, saves[0])
                message = f"This resume checkpoint cannot hold the GradScaler that `{helper}` builds for itself"
                related = [project.related(key[0], built, f"`{scaler}` built here, inside `{helper}`")]
                related += [project.site(ProjectCall(caller.path, caller.func, r), "also saved") for r in saves[1:]]
                resume = next((r for r in info["calls"] if r["f"].endswith(".load_state_dict")
                               and project._optimizer_name((caller.path, caller.func), r["f"][: -len(".load_state_dict")])), None)
                if resume is not None:
                    related.append(project.site(ProjectCall(caller.path, caller.func, resume), "restored without it"))
                data = {"scaler": scaler, "side": "save", "helper": helper, "bug": scaler, "as_related": "also saved"}
                yield project.diagnostic(
                    self, first, message, data=data, related=tuple(related),
                    help=f"Build the GradScaler here, pass it to `{helper}`, and save `scaler.state_dict()` with the checkpoint",
                )
                return  # one caller's saves judged: the same scaler, one finding

    def _save(self, project: Project, call: ProjectCall) -> Iterator[Diagnostic]:
        if not _scale_owners(project, call):
            return  # no scaler here to leave out: resolve (and load) nothing
        scaler = None
        for key in project.callees(call):
            saved = project.saved_checkpoint(key) if key[0] != call.path else None
            if saved is None or _mentions_scaler(saved[1]):
                continue
            scaler = scaler or _live_scaler(project, call, "state_dict")
            if scaler is None or _passes_scaler(call):
                return
            helper = key[1].rsplit(".", 1)[-1]
            message = f"`{helper}` leaves out `{scaler}.state_dict()`, and this call does not pass it"
            cause = project.related(saved[0].path, saved[0].row, "saved here without the scaler")
            yield project.diagnostic(self, call, message, data={"scaler": scaler, "side": "save", "helper": helper, "bug": scaler, "as_related": "also saved"}, related=(cause,),
                                     help=f"Save `{scaler}.state_dict()` with it and restore it with `{scaler}.load_state_dict(...)`")
            return

    def _resume(self, project: Project, call: ProjectCall) -> Iterator[Tuple[ProjectCall, str, str, ProjectCall]]:
        if not _scale_owners(project, call):
            return  # no scaler here to restore: resolve (and load) nothing
        for key in project.callees(call):
            restored = project.restored_checkpoint(key) if key[0] != call.path else None
            if restored is None:
                continue
            scaler = _live_scaler(project, call, "load_state_dict")
            if scaler is not None and not _passes_scaler(call):
                yield call, scaler, key[1].rsplit(".", 1)[-1], restored
            return

    def _replaced_after_restore(self, ctx: ModuleContext, live: List[str]) -> Iterator[Diagnostic]:
        """A scaler restored from a checkpoint (`scaler.load_state_dict(...)`, or rebound from a
        restore helper it was passed to) and then replaced by a fresh `GradScaler()` that runs
        whenever the restore ran (its control flow encloses the restore's): the restored loss
        scale is thrown away on every resume."""
        from amplint.model import path_contains

        for key in live:
            restores = _restores(ctx, key)
            if not restores:
                continue
            for constructor in (ctx.scalers[key].constructors if key in ctx.scalers else ()):
                restore = next(
                    # in one function: source order is run order there. Across functions (a trainer's
                    # `_setup_components` building `self.scaler`, its `load_checkpoint` restoring it)
                    # it is the callers' order, which the file's text order does not give
                    (r for r in reversed(restores) if r[3] is constructor.scope and r[1] < constructor.order and path_contains(constructor.path, r[2])),
                    None,
                )
                if restore is None:
                    continue
                message = f"This fresh GradScaler replaces the `{key}` just restored: every resume restarts the loss scale"
                data = {"scaler": key, "optimizer": _restored_optimizer(ctx, restore[0]), "side": "load",
                        "snippet": ctx.code_for(constructor.node), "bug": key}
                yield ctx.diagnostic(self, constructor.node, message, data=data,
                                     related=[ctx.related(restore[0], "restored here")],
                                     help=f"Drop the new `GradScaler()` after the restore, or build it before restoring `{key}`")

    def _saved(self, ctx: ModuleContext, call: CallInfo, scaler: str, optimizer: str, related: List[Related]) -> Diagnostic:
        message = f"This checkpoint saves `{optimizer}` but not `{scaler}.state_dict()`"
        help = f"Save `{scaler}.state_dict()` and restore it with `{scaler}.load_state_dict(...)`"
        if _is_checkpointer(call):
            message = f"This checkpointer saves and resumes `{optimizer}` but not `{scaler}`"
            help = f"Register the scaler with it: `{(call.dotted or 'Checkpointer').rsplit('.', 1)[-1]}(..., {_kwarg(scaler)}={scaler})`"
        data = {"scaler": scaler, "optimizer": optimizer, "snippet": ctx.code_for(call.node), "side": "save", "bug": scaler}
        return ctx.diagnostic(self, call.node, message, data=data, related=related, help=help)

    def _trainer_saved(self, ctx: ModuleContext, call: CallInfo, held: str, cls: cst.ClassDef, scaler: str,
                       related: List[Related]) -> Diagnostic:
        name = cls.name.value
        message = f"This checkpointer saves `{held}.state_dict()`, which `{name}` inherits without `{scaler}`"
        help = f"Give `{name}` a `state_dict()` / `load_state_dict()` that add `{scaler}.state_dict()` to its base's"
        data = {"scaler": f"{name}.{scaler.rsplit('.', 1)[-1]}", "optimizer": held, "snippet": ctx.code_for(call.node),
                "side": "save", "bug": scaler, "mechanism": "trainer"}
        related = [*related, ctx.related(cls.name, f"`{name}` steps `{scaler}` and has no `state_dict` of its own")]
        return ctx.diagnostic(self, call.node, message, data=data, related=related, help=help)

    def _loaded(self, ctx: ModuleContext, call: CallInfo, scaler: str) -> Diagnostic:
        message = f"The resume restores `{call.receiver_dotted}` but not `{scaler}`'s loss scale"
        help = f"Call `{scaler}.load_state_dict(...)` with the saved scaler state"
        data = {"scaler": scaler, "optimizer": call.receiver_dotted, "snippet": ctx.code_for(call.node), "side": "load", "bug": scaler}
        return ctx.diagnostic(self, call.node, message, data=data, help=help)


def _classes(ctx: ModuleContext) -> Dict[cst.ClassDef, Dict[str, Any]]:
    """Each class of the file with its methods by name (their scopes)."""
    import libcst as cst

    out: Dict[cst.ClassDef, Dict[str, Any]] = {}
    for scope in ctx.scopes:
        if scope.cls is not None and isinstance(scope.node, cst.FunctionDef) and (scope.parent is None or scope.parent.cls is None):
            out.setdefault(scope.cls, {})[scope.name] = scope
    return out


def _owned_scalers(ctx: ModuleContext, cls: cst.ClassDef, methods: Dict[str, Any]) -> List[str]:
    """The `self.X` GradScalers the class's methods scale or step with and the class builds itself, with
    an enabled not `False` (`self.X = GradScaler(...)`, or `obj.X = GradScaler()` on the instance a
    classmethod builds): not one handed in, whose owner may checkpoint it."""
    used = {e.scaler for s in methods.values() for e in s.events if e.scaler and e.scaler.startswith("self.")
            and e.kind in ("scaled_backward", "scaler_step")}
    owned = []
    for scaler in sorted(used):
        attribute = scaler.rsplit(".", 1)[-1]
        for key, info in ctx.scalers.items():
            if info.enabled is False or key.rsplit(".", 1)[-1] != attribute or "." not in key:
                continue
            if any(c.scope.cls is cls for c in info.constructors):
                owned.append(scaler)
                break
    return owned


def _final_save(ctx: ModuleContext, call: CallInfo) -> bool:
    """The save runs once, after the training: in no loop, in a function that runs a loop before
    it (a `train()` that saves the last checkpoint after its epochs). Not a checkpointer (it saves
    and resumes as the training goes)."""
    if _is_checkpointer(call) or any(f.kind in ("loop", "loop-else") for f in call.path):
        return False
    return any(
        c.scope is call.scope and c.order < call.order and any(f.kind == "loop" for f in c.path) for c in ctx.calls
    )


#: accelerate methods a training loop calls on its Accelerator
_ACCELERATOR_METHODS = ("backward", "prepare", "unwrap_model", "accumulate", "clip_grad_norm_", "autocast")


def _accelerator_names(info: Dict) -> List[str]:
    """The plain names (or `self.` attributes) a function calls accelerate's training methods on
    (`accelerator.backward(loss)`, `self.accelerator.unwrap_model(self.model)`)."""
    out: List[str] = []
    for record in info["calls"]:
        head, _, method = record["f"].rpartition(".")
        plain = head and ("." not in head or (head.startswith("self.") and head.count(".") == 1))
        if method in _ACCELERATOR_METHODS and plain and head not in out:
            out.append(head)
    return out


def _saves_unwrapped(project: Project, path: str, qual: str, saved: Dict) -> bool:
    """The checkpoint's optimizer state is that of a project container of optimizers
    (`_container_optimizer`): accelerate's `prepare` returns it unwrapped, so the GradScaler it
    builds is never stepped nor updated and its scale never moves (AMP102 reports the steps)."""
    owners = [v["c"][: -len(".state_dict")] for v in (saved.get("d") or {}).values()
              if v and "c" in v and v["c"].endswith(".state_dict") and "optim" in v["c"].lower()]
    return bool(owners) and all(_container_optimizer(project, path, qual, o) for o in owners)


def _container_optimizer(project: Project, path: str, qual: str, spelled: str) -> bool:
    """Every value `spelled` may hold in `qual` is an instance of one project class whose bases
    are all project classes (or `object`): no `torch.optim.Optimizer` (a `MultiOptimizer`)."""
    types = project.name_types(path, qual, spelled)
    if not types or any(t[0] != "I" for t in types) or len({(t[1], t[2]) for t in types}) != 1:
        return False
    where, cls = next(iter(types))[1:3]
    for p, c in project.mro(where, cls):
        for base in project.summaries[p]["classes"][c]["bases"]:
            if base == "object":
                continue
            if not base or not any(t[0] == "C" for t in project.name_types(p, "<module>", base)):
                return False
    return True


def _passes_optimizer(project: Project, call: ProjectCall) -> bool:
    """Some argument of the call is an optimizer (by its name or what its call sites bind it to)."""
    for ref in (*call.record["a"], *call.record["k"].values()):
        if ref and "n" in ref and project._optimizer_name((call.path, call.func), ref["n"]):
            return True
    return False


def _holder_method(project: Project, call: ProjectCall) -> bool:
    """`train_state.resume(path)`: a method of a project class checkpointing its instance
    attribute by attribute, the optimizer among them (`Project.attribute_state`): it restores
    the optimizer it holds without being handed one."""
    if call.record["f"].startswith("self.") or "." not in call.record["f"]:
        return False
    return any(key[1].count(".") == 1 and project.holds_optimizer(key[0], key[1].split(".", 1)[0]) for key in project.callees(call))


def _restores_optimizer(project: Project, key: Tuple[str, str]) -> bool:
    """The function resumes an optimizer without the scaler (`Project.restored_checkpoint`),
    itself or through a method of its own class it calls (`self.load(path)` in `resume`)."""
    if project.restored_checkpoint(key) is not None:
        return True
    info = project.function(key)
    if info is None or not info.get("cls"):
        return False
    for record in info["calls"]:
        if record["f"].startswith("self.") and record["f"].count(".") == 1:
            for inner in project.callees(ProjectCall(key[0], key[1], record)):
                if inner != key and inner[0] == key[0] and project.restored_checkpoint(inner) is not None:
                    return True
    return False


def _reads_accelerator(summary: Dict) -> bool:
    return any(r["f"].endswith(".backward") for f in summary["functions"].values() for r in f["calls"])


def _handles_scaler_state(functions: Dict) -> bool:
    """The file checkpoints through accelerate (`save_state` / `load_state`, which hold the scaler)
    or reads or restores a scaler's state itself."""
    for info in functions.values():
        for record in info["calls"]:
            f = record["f"]
            last = f.rsplit(".", 1)[-1]
            if last in ("save_state", "load_state") or (last in ("state_dict", "load_state_dict") and "scaler" in f.lower()):
                return True
    return False


def _private_scalers(project: Project) -> Iterator[Tuple[Tuple[str, str], str, int]]:
    """(function, local name, row) of each GradScaler a function of the loaded files builds in a
    local, scales a loss with, and keeps to itself (it neither returns it nor binds it to an
    attribute), with `enabled=` absent or not a visible literal False."""
    for path, qual, info in list(project.functions()):
        if qual == "<module>":
            continue
        for name, refs in info["locals"].items():
            ref = refs[-1] if refs else None
            if not ref or not ref.get("c", "").endswith("GradScaler") or len(refs) != 1:
                continue
            ctor = next((r for r in info["calls"] if r["f"] == ref["c"] and r["a"] == ref["a"] and r["k"] == ref["k"]), None)
            if ctor is None or project.grad_scaler(ProjectCall(path, qual, ctor)) is None:
                continue
            if "enabled" in ref["k"] and not (ref["k"]["enabled"] or {}).get("n"):
                continue  # `enabled=False` or an expression the summary does not keep: not known to be on
            if not any(r["f"] == f"{name}.scale" for r in info["calls"]):
                continue
            if any(r and r.get("n") == name for r in info["returns"]) or _bound_to_attribute(project, path, qual, name):
                continue
            yield (path, qual), name, ctor["r"]


def _bound_to_attribute(project: Project, path: str, qual: str, name: str) -> bool:
    """`self.scaler = scaler` (or any class attribute bound to the name) in the function."""
    for cls in project.summaries[path]["classes"].values():
        for where, ref in (r for refs in cls["attrs"].values() for r in refs):
            if where == qual and ref and ref.get("n") == name:
                return True
    return False


def _scaler_wrappers(project: Project) -> Dict[Tuple[str, str], Tuple[str, int]]:
    """(file, class) -> (attribute, row) of each project class that builds an enabled GradScaler
    in an attribute (`self._scaler = GradScaler(enabled=use_amp)`: not a literal False) and steps
    an optimizer through it in its own methods (`self._scaler.step(self._opt)`), and whose state
    nothing in the project reads: no `<...>.<attribute>.state_dict()` call, no `state_dict`
    method of the class, no `scaler` state read or `save_state` anywhere."""
    out: Dict[Tuple[str, str], Tuple[str, int]] = {}
    for path, summary in list(project.summaries.items()):
        for cls, info in summary["classes"].items():
            if f"{cls}.state_dict" in summary["functions"]:
                continue
            for attr, refs in info["attrs"].items():
                built = [(func, ref) for func, ref in refs if ref and ref.get("c", "").endswith("GradScaler")]
                if not built or len(built) != len(refs):
                    continue
                func, ref = built[0]
                method = summary["functions"].get(func)
                ctor = next((r for r in (method or {}).get("calls", ()) if r["f"] == ref["c"] and r["a"] == ref["a"] and r["k"] == ref["k"]), None)
                if ctor is None or project.grad_scaler(ProjectCall(path, func, ctor)) is None:
                    continue
                enabled = ref["k"].get("enabled", {"n": "?"})
                if not enabled or "n" not in enabled:
                    continue  # `enabled=False` (or an expression the summary does not keep): not known to be on
                steps = any(
                    r["f"] == f"self.{attr}.step" and r["a"] and (r["a"][0] or {}).get("n", "").startswith("self.")
                    for q, g in summary["functions"].items() if q.startswith(cls + ".") for r in g["calls"]
                )
                if steps:
                    out[(path, cls)] = (attr, ctor["r"])
    if not out:
        return out
    for summary in list(project.summaries.values()):
        if _handles_scaler_state(summary["functions"]):
            return {}
        for info in summary["functions"].values():
            for record in info["calls"]:
                if any(record["f"].endswith(f".{attr}.state_dict") for attr, _ in out.values()):
                    return {}
    return out


def _stepping_scaler(project: Project, path: str, cls: str, info: Dict[str, Any]) -> Optional[Tuple[str, set]]:
    """(attribute, the names it is reached by) of the GradScaler the project class `cls` builds in
    an attribute with an `enabled=` that is not a literal False (`self._grad_scaler = GradScaler()`)
    and steps an optimizer attribute through in its own methods (`self._grad_scaler.step(self.opt)`,
    or `self.scaler.step(...)` through a property `scaler` returning it). None otherwise."""
    functions = project.summaries[path]["functions"]
    for attr, refs in info["attrs"].items():
        built = [(func, ref) for func, ref in refs if ref and ref.get("c", "").endswith("GradScaler")]
        if not built or len(built) != len(refs):
            continue
        func, ref = built[0]
        ctor = next((r for r in (functions.get(func) or {}).get("calls", ())
                     if r["f"] == ref["c"] and r["a"] == ref["a"] and r["k"] == ref["k"]), None)
        if ctor is None or project.grad_scaler(ProjectCall(path, func, ctor)) is None:
            continue
        enabled = ref["k"].get("enabled", {"n": "?"})
        if not enabled or "n" not in enabled:
            continue  # `enabled=False` (or an expression the summary does not keep): not known to be on
        names = {attr}
        for qual, method in functions.items():
            if qual.startswith(cls + ".") and qual.count(".") == 1 and "property" in method.get("decorators", ()) \
                    and method.get("returns") == [{"n": f"self.{attr}"}]:
                names.add(qual.split(".", 1)[1])
        steps = any(
            r["f"] in {f"self.{n}.step" for n in names} and r["a"] and (r["a"][0] or {}).get("n", "").startswith("self.")
            for q, g in functions.items() if q.startswith(cls + ".") for r in g["calls"]
        )
        if steps:
            return attr, names
    return None


def _inherited_pair(project: Project, path: str, cls: str) -> Optional[Tuple[str, str, Dict[str, Any], Dict[str, Any]]]:
    """(file, base, its state_dict, its load_state_dict) of the project base class `cls` inherits
    both from, the first of its MRO defining `state_dict`, when that pair carries an optimizer
    attribute's state (`return self.optimizer.state_dict()`) and names no scaler. None when a base
    outside the project may define them instead (an external base before or beside it)."""
    if project.external_bases(path, cls):
        return None  # a torch or library base: what its state_dict holds is not the project's to read
    for base_path, base in project.mro(path, cls)[1:]:
        functions = project.summaries[base_path]["functions"]
        save, load = functions.get(f"{base}.state_dict"), functions.get(f"{base}.load_state_dict")
        if save is None and load is None:
            continue
        if save is None or load is None or _mentions_scaler(save) or _mentions_scaler(load):
            return None
        if not any(r["f"].startswith("self.") and r["f"].endswith(".state_dict") for r in save["calls"]):
            return None
        return base_path, base, save, load
    return None


def _touches_scaler_state(project: Project, path: str, cls: str, names: set) -> bool:
    """Anything in the project reads or restores the state of the class's scaler
    (`<...>.<name>.state_dict()` / `.load_state_dict(...)` for any name it is reached by), or a
    method of the class or its bases reads a scaler's state."""
    ends = {f".{n}.{m}" for n in names for m in ("state_dict", "load_state_dict")}
    mine = {f"{c}." for _, c in project.mro(path, cls)}
    for file, summary in project.summaries.items():
        for qual, info in summary["functions"].items():
            for record in info["calls"]:
                f = record["f"]
                if any(f.endswith(e) for e in ends):
                    return True
                if any(qual.startswith(c) for c in mine) and f.rsplit(".", 1)[-1] in ("state_dict", "load_state_dict") \
                        and "scaler" in f.lower():
                    return True
    return False


def _resumes(project: Project, path: str) -> bool:
    """The file restores optimizer state after a `torch.load`: `optimizer.load_state_dict(...)` or
    a helper named for loading optimizer state (`load_optim_state_dict(agent, ckpt[...])`)."""
    loads = restores = False
    for qual, info in project.summaries[path]["functions"].items():
        for record in info["calls"]:
            f = record["f"]
            last = f.rsplit(".", 1)[-1].lower()
            if (f == "load" or f.endswith(".load")) and any(t == ("X", "torch.load") for t in project.resolve_call(ProjectCall(path, qual, record))):
                loads = True
            elif ("load" in last and "optim" in last) or (last == "load_state_dict" and project._optimizer_name((path, qual), f[: -len(".load_state_dict")])):
                restores = True
    return loads and restores


def _holds_wrapped_optimizer(project: Project, path: str, qual: str, value: Any, wrapped: Dict) -> Optional[Tuple[str, str]]:
    """The scaler-wrapping class (`_scaler_wrappers`) whose optimizer state a checkpoint entry
    saves: `<x>.<attr>.state_dict()` where `x` is an instance of the class, or a call of a
    project helper named for optimizer state (`collect_optim_state_dict(agent)`) that calls
    `state_dict()` itself and is given an object holding an instance of the class in its
    attributes (a few levels down: the agent's world model's optimizer)."""
    if not value or "c" not in value:
        return None
    spelled = value["c"]
    if spelled.endswith(".state_dict") and not value["a"]:
        owner = spelled[: -len(".state_dict")]
        head = owner.rpartition(".")[0]
        if head:
            for t in project.name_types(path, qual, head):
                if t[0] == "I" and (t[1], t[2]) in wrapped:
                    return (t[1], t[2])
        return None
    last = spelled.rsplit(".", 1)[-1].lower()
    if "optim" not in last or not value["a"]:
        return None
    helpers = [t for t in project.name_types(path, qual, spelled) if t[0] == "F"]
    collects = any(
        r["f"].endswith(".state_dict") for t in helpers for r in (project.function((t[1], t[2])) or {}).get("calls", ())
    )
    if not collects:
        return None
    for arg in value["a"]:
        if arg and "n" in arg:
            found = _holder_of(project, project.name_types(path, qual, arg["n"]), wrapped)
            if found is not None:
                return found
    return None


def _holder_of(project: Project, types: Any, wrapped: Dict, depth: int = 4) -> Optional[Tuple[str, str]]:
    """The scaler-wrapping class an instance among `types` is, or holds in its attributes
    (breadth first, `depth` levels)."""
    seen: set = set()
    frontier = [t for t in types if t[0] == "I"]
    for _ in range(depth + 1):
        following = []
        for t in frontier:
            key = (t[1], t[2])
            if key in wrapped:
                return key
            if key in seen:
                continue
            seen.add(key)
            for p, c in project.mro(t[1], t[2]):
                for attr in project.summaries[p]["classes"][c]["attrs"]:
                    following.extend(u for u in project.attribute(t, attr) if u[0] == "I")
        frontier = following
    return None


def _saves_resume_dict(info: Dict, record: Dict) -> bool:
    """A call named for saving (`torch.save`, `utils.save_on_master`, `save_checkpoint`) whose
    first argument is a dict -- spelled there or bound to a local -- holding an optimizer's
    `state_dict()` and at least one more entry: a checkpoint to resume from."""
    last = record["f"].rsplit(".", 1)[-1].lower()
    if "save" not in last or not record["a"]:
        return False
    saved = record["a"][0]
    if saved and "n" in saved:
        saved = next((r for r in reversed(info["locals"].get(saved["n"], ())) if r and "d" in r), None)
    if not saved or "d" not in saved or len(saved["d"]) < 2:
        return False
    return any(v and "c" in v and v["c"].endswith(".state_dict") and "optim" in v["c"].lower() for v in saved["d"].values())


def _mentions_scaler(ref) -> bool:
    """Whether a summarised value names a scaler anywhere (`scaler`, `self.scaler.state_dict()`, a dict key)."""
    return "scaler" in json.dumps(ref).lower()


def _scale_owners(project: Project, call) -> List[str]:
    """What the function holding `call` (or its class) calls `.scale(...)` on, when its name
    says scaler (`scaler`, `self.grad_scaler`): read from the summary, nothing resolved."""
    info = project.function((call.path, call.func))
    if info is None:
        return []
    scope = [info]
    if info["cls"]:
        scope = [f for q, f in project.summaries[call.path]["functions"].items() if q.startswith(info["cls"] + ".")]
    return [r["f"][: -len(".scale")] for f in scope for r in f["calls"] if r["f"].endswith(".scale") and "scaler" in r["f"].lower()]


def _passes_scaler(call: ProjectCall) -> bool:
    return any(_mentions_scaler(a) for a in (*call.record["a"], *call.record["k"].values()))


def _live_scaler(project: Project, call, method: str) -> Optional[str]:
    """The enabled GradScaler the function holding `call` (or its class) builds or is given and
    uses (`.scale(...)`), unless its file calls that scaler's `method` (`state_dict` for the
    save side, `load_state_dict` for the resume) somewhere itself."""
    info = project.function((call.path, call.func))
    if info is None or project.summaries[call.path].get("b16"):
        return None  # its file scales only bf16 (`scales_only_bf16`): the scale carries nothing
    for owner in _scale_owners(project, call):
        if any(r["f"] == f"{owner}.{method}" for g in project.summaries[call.path]["functions"].values() for r in g["calls"]):
            return None
        types = project.name_types(call.path, call.func, owner)
        if any(t[0] == "R" and "GradScaler" in t[1] for t in types) or owner.split(".")[-1] in info["params"]:
            return owner
    return None


#: what a helper that restores state from a checkpoint is called
_RESTORE_WORDS = ("load", "restore", "resume")


def _restores(ctx: ModuleContext, key: str) -> List[Tuple[cst.CSTNode, int, Path, Any]]:
    """(statement, order, control flow, scope) where the scaler `key` gets a checkpoint's state: `key.load_state_dict(...)`,
    or `key` (alone or in a tuple) assigned from a restore helper that was passed `key` itself
    (`model, opt, self.scaler = self.restore_model(path, model, opt, self.scaler)`; a helper is
    named for what it does: load, restore, resume)."""
    import libcst as cst

    from amplint.model import dotted_name

    out = [(c.statement, c.order, c.path, c.scope) for c in ctx.method_calls("load_state_dict") if c.receiver_dotted == key]
    for a in ctx.assignments_to(key):
        value = a.value
        if not isinstance(value, cst.Call):
            continue
        helper = (dotted_name(value.func) or "").rsplit(".", 1)[-1].lower()
        if any(w in helper for w in _RESTORE_WORDS) and any(dotted_name(arg.value) == key for arg in value.args):
            out.append((a.statement or a.node, a.order, a.path, a.scope))
    return sorted(out, key=lambda r: r[1])


def _restored_optimizer(ctx: ModuleContext, statement: cst.CSTNode) -> Optional[str]:
    """The optimizer the restore statement also hands over (`restore_model(path, model, opt, scaler)`)."""
    import libcst as cst

    from amplint.model import descendants, dotted_name

    for node in descendants(statement):
        if isinstance(node, cst.Arg):
            name = dotted_name(node.value)
            if name is not None and ctx.is_optimizer(name):
                return name
    return None


def _live_scalers(ctx: ModuleContext) -> List[str]:
    """Scalers of this file that may be enabled and are built or used here; none when they
    scale only bf16 (`scales_only_bf16`: a scale that never has to come down loses nothing)."""
    from amplint.model import scales_only_bf16

    if scales_only_bf16(ctx):
        return []
    used = {e.scaler for s in ctx.scopes for e in s.events if e.scaler}
    return [
        key
        for key, info in ctx.scalers.items()
        if info.enabled is not False and (info.constructors or key in used)
    ]


#: timm's loss scaler (`timm.utils.NativeScaler`): its `__init__` builds an enabled GradScaler, whose
#: state its `state_dict()` / `load_state_dict()` round-trip
_TIMM_SCALERS = frozenset(("timm.utils.NativeScaler", "timm.utils.cuda.NativeScaler"))


def _timm_scalers(ctx: ModuleContext) -> List[str]:
    """The names the file binds to a timm `NativeScaler()` (`loss_scaler = NativeScaler()`), in a
    file with no torch GradScaler of its own; none when the file scales only bf16."""
    from amplint.model import scales_only_bf16

    import libcst as cst

    if scales_only_bf16(ctx):
        return []
    out: List[str] = []
    for a in ctx.assignments:
        if a.unpacked or not isinstance(a.value, cst.Call):
            continue
        info = ctx.call_info(a.value)
        if info is not None and info.calls_any(_TIMM_SCALERS) and a.target not in out:
            out.append(a.target)
    return out


def _save_helper_calls(ctx: ModuleContext) -> List[CallInfo]:
    """Calls of a helper named for saving that is a function, not a method of an object that may
    hold the scaler: `utils.save_on_master(state, path)` (a module's), `save_checkpoint(state)`
    (imported, or defined in this file), `xm.save(...)`; not torch's own `torch.save` (asked
    for apart), nor `trainer.save_checkpoint(...)` / `accelerator.save_state(...)`. What they
    are given is judged as `torch.save`'s argument is."""
    from amplint.model import dotted_name

    out = []
    for call in ctx.calls:
        last = (call.dotted or "").rsplit(".", 1)[-1].lower()
        if "save" not in last or "save_state" in last or call.calls_any(("torch.save",)) or not call.node.args:
            continue
        root = (call.dotted or "").split(".", 1)[0]
        if call.method is not None and not ctx.imports.is_imported(root):
            continue
        if any(_is_scaler_name(ctx, dotted_name(a.value)) for a in call.node.args[1:]):
            continue  # `save_checkpoint(state, path, scaler=scaler)`: the helper may save it
        out.append(call)
    return out


def _is_checkpointer(call: CallInfo) -> bool:
    """A checkpointer constructor (fvcore / detectron2 `Checkpointer`, `DetectionCheckpointer`, a
    project's subclass named so): it saves and resumes the `state_dict()` of what it is given."""
    return (call.dotted or "").rsplit(".", 1)[-1].endswith("Checkpointer")


def _kwarg(scaler: str) -> str:
    """A keyword for registering `scaler` (`self.fp16_scaler` -> `fp16_scaler`)."""
    return scaler.rsplit(".", 1)[-1]


def _checkpointers(ctx: ModuleContext) -> List[Tuple[CallInfo, str]]:
    """`Checkpointer(model, save_dir, optimizer=optimizer, ...)`: (the call, the optimizer) when every
    object registered as a checkpointable (keyword arguments other than the checkpointer's own
    settings) is an optimizer or a scheduler: nothing it saves can hold the scaler (a `trainer=`
    object, as detectron2 registers, may)."""
    from amplint.model import dotted_name

    out = []
    for call in ctx.calls:
        if not _is_checkpointer(call) or any(a.star for a in call.node.args):
            continue
        optimizer = None
        holds_other = False
        for arg in call.node.args:
            if arg.keyword is None or arg.keyword.value in _CHECKPOINTER_SETTINGS:
                continue
            name = dotted_name(arg.value)
            last = (name or "").rsplit(".", 1)[-1].lower()
            if name is not None and ctx.is_optimizer(name):
                optimizer = optimizer or name
            elif not any(w in last for w in ("sched", "lr")):
                holds_other = True
        if optimizer is not None and not holds_other:
            out.append((call, optimizer))
    return out


#: framework trainer bases whose `state_dict()` holds the optimizer's state (and the iteration)
#: but no GradScaler's: detectron2's SimpleTrainer (its AMPTrainer adds `grad_scaler`, and is not here)
_SCALERLESS_TRAINERS = frozenset((
    "detectron2.engine.SimpleTrainer", "detectron2.engine.train_loop.SimpleTrainer",
))


def _scalerless_trainer_checkpointers(ctx: ModuleContext) -> List[Tuple[CallInfo, str, cst.ClassDef, str]]:
    """`DetectionCheckpointer(model, out_dir, trainer=trainer)` where `trainer` is an instance of a
    class of this file that builds and steps its own GradScaler (`self.grad_scaler`) and inherits
    its `state_dict()` from a framework trainer that saves the optimizer and no scaler
    (`_SCALERLESS_TRAINERS`, through classes of the file, none defining `state_dict`): the
    checkpointer saves and resumes `trainer.state_dict()`, which leaves the scaler out. (the call,
    the checkpointable, the class, the scaler); silent when anything else the checkpointer is given
    may hold the scaler, or the instance is handed a scaler (its owner may checkpoint it)."""
    from amplint.model import dotted_name

    classes = {cls.name.value: (cls, methods) for cls, methods in _classes(ctx).items()}
    out = []
    for call in ctx.calls:
        if not _is_checkpointer(call) or any(a.star for a in call.node.args):
            continue
        found = None
        for arg in call.node.args:
            if arg.keyword is None or arg.keyword.value in _CHECKPOINTER_SETTINGS:
                continue
            name = dotted_name(arg.value)
            last = (name or "").rsplit(".", 1)[-1].lower()
            if name is not None and (ctx.is_optimizer(name) or any(w in last for w in ("sched", "lr"))):
                continue
            held = _scalerless_trainer(ctx, call, name, classes) if name is not None else None
            if held is None or found is not None:
                found = None
                break
            found = (name, *held)
        if found is not None:
            out.append((call, *found))
    return out


def _scalerless_trainer(ctx: ModuleContext, call: CallInfo, name: str,
                        classes: Dict[str, Tuple[cst.ClassDef, Dict[str, Any]]]) -> Optional[Tuple[cst.ClassDef, str]]:
    """(the class, its scaler) when `name` in `call`'s scope is an instance of such a class: `self`
    in one of its methods, or a local last bound to `Cls(...)` given no scaler."""
    import libcst as cst

    from amplint.model import dotted_name

    cls_name = None
    if name == "self" and call.scope.cls is not None:
        cls_name = call.scope.cls.name.value
    elif "." not in name:
        bound = ctx.assigned_before(name, call)
        value = bound[-1].value if bound else None
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
            if any(a.star or _is_scaler_name(ctx, dotted_name(a.value)) or (a.keyword is not None and "scaler" in a.keyword.value)
                   for a in value.args):
                return None  # handed a scaler: its owner may checkpoint it
            cls_name = value.func.value
    if cls_name not in classes:
        return None
    cls, methods = classes[cls_name]
    if not _inherits_scalerless_state(ctx, cls, classes, set()):
        return None
    owned = _owned_scalers(ctx, cls, methods) or _built_and_stepped(ctx, cls, methods)
    return (cls, owned[0]) if owned else None


def _built_and_stepped(ctx: ModuleContext, cls: cst.ClassDef, methods: Dict[str, Any]) -> List[str]:
    """`self.X` the class's methods scale or step with, bound from a GradScaler the class builds
    in a local first (`grad_scaler = GradScaler()`, then `self.grad_scaler = grad_scaler`)."""
    import libcst as cst

    used = sorted({e.scaler for m in methods.values() for e in m.events if e.scaler and e.scaler.startswith("self.")
                   and e.kind in ("scaled_backward", "scaler_step")})
    out = []
    for scaler in used:
        for method in methods.values():
            for a in ctx.assignments_to(scaler):
                if a.scope is not method or not isinstance(a.value, cst.Name):
                    continue
                info = ctx.scalers.get(a.value.value)
                if info is not None and info.enabled is not False and any(c.scope is method for c in info.constructors):
                    out.append(scaler)
    return sorted(set(out))


def _inherits_scalerless_state(ctx: ModuleContext, cls: cst.ClassDef, classes: Dict[str, Tuple[cst.ClassDef, Dict[str, Any]]],
                               seen: set) -> bool:
    """Neither `cls` nor a class of the file it derives from defines `state_dict`, and its bases
    reach a `_SCALERLESS_TRAINERS` trainer (every base known: a class of the file or one of those)."""
    name = cls.name.value
    if name in seen or "state_dict" in classes.get(name, (None, {}))[1] or "load_state_dict" in classes.get(name, (None, {}))[1]:
        return False
    seen.add(name)
    if not cls.bases:
        return False
    reached = False
    for base in cls.bases:
        if base.keyword is not None:
            return False
        spelled = ctx.code_for(base.value)
        if spelled in classes and classes[spelled][0] is not cls:
            if not _inherits_scalerless_state(ctx, classes[spelled][0], classes, seen):
                return False
            reached = True
        elif ctx.imports.qualnames(base.value) and ctx.imports.qualnames(base.value) <= _SCALERLESS_TRAINERS:
            reached = True
        else:
            return False
    return reached


#: keyword arguments of fvcore's Checkpointer that are settings, not checkpointables
_CHECKPOINTER_SETTINGS = frozenset(("save_dir", "save_to_disk"))


def _from_checkpoint(ctx: ModuleContext, call: CallInfo, loads: List[CallInfo]) -> bool:
    """`opt.load_state_dict(ckpt["optimizer"])` in a function that `torch.load`s, or of what a
    helper named for loading a checkpoint returned (`_, opt_state, _ = load_checkpoint(dir,
    step)`, then `opt.load_state_dict(opt_state)`): a resume, not a device move or a wrapper
    delegating `load_state_dict`."""
    if call.scope.name == "load_state_dict":
        return False
    return any(load.scope is call.scope and load.order < call.order for load in loads) or any(
        load.node is call.arg(0, "state_dict") for load in loads
    ) or _loaded_by_helper(ctx, call)


def _loaded_by_helper(ctx: ModuleContext, call: CallInfo) -> bool:
    """The state `call` restores (`x`, `x["optimizer"]`, `x.get(...)`) is a local last bound, in
    `call`'s scope before it, from a call of a function named for loading (`load_checkpoint(...)`,
    `utils.load_ckpt(...)`; not `load_state_dict`), alone or tuple-unpacked."""
    import libcst as cst

    from amplint.model import dotted_name

    state = call.arg(0, "state_dict")
    while isinstance(state, cst.Subscript) or (
        isinstance(state, cst.Call) and isinstance(state.func, cst.Attribute) and state.func.attr.value == "get"
    ):
        state = state.value if isinstance(state, cst.Subscript) else state.func.value
    if not isinstance(state, cst.Name):
        return False
    bound = [a for a in ctx.assignments_to(state.value, call.scope) if a.scope is call.scope and a.order < call.order]
    if not bound or not isinstance(bound[-1].value, cst.Call):
        return False
    helper = (dotted_name(bound[-1].value.func) or "").rsplit(".", 1)[-1].lower()
    return "load" in helper and "load_state_dict" not in helper


#: apex `amp.initialize(models, optimizers, enabled, opt_level, ...)`: opt levels whose default
#: loss scale is "dynamic" (O0 and O3 default to a static 1.0); "O1" is apex's default level
_APEX_DYNAMIC_LEVELS = ("O1", "O2")


def _apex_scales_dynamically(call: CallInfo) -> bool:
    """An apex `amp.initialize(...)` that certainly keeps a dynamic loss scaler: `enabled` not a
    literal False, `opt_level` absent or a literal O1/O2, `loss_scale` absent or "dynamic". A
    level or scale read from the arguments is decided at run time: not counted."""
    from amplint.model import literal_bool, literal_string

    if any(a.star for a in call.node.args):
        return False
    enabled = call.arg(2, "enabled")
    if enabled is not None and literal_bool(enabled) is False:
        return False
    level = call.arg(3, "opt_level")
    if level is not None and literal_string(level) not in _APEX_DYNAMIC_LEVELS:
        return False
    scale = call.arg(None, "loss_scale")
    return scale is None or literal_string(scale) == "dynamic"


def _given_pieces(ctx: ModuleContext, call: CallInfo) -> Optional[str]:
    """A save helper handed the checkpoint's pieces as arguments rather than one dict
    (`save_checkpoint(dir, step, model.state_dict(), optimizer.state_dict(), meta)`): the
    optimizer whose `state_dict()` is one argument, when another argument is a `state_dict()` or
    a dict literal too (directly or through one local name bound before the call). What the
    helper writes is what it is given; none of it is the scaler's."""
    import libcst as cst

    from amplint.model import dotted_name

    optimizer = None
    others = 0
    for arg in call.node.args:
        if arg.star:
            return None
        value = arg.value
        if isinstance(value, cst.Name):
            found = ctx.assigned_before(value.value, call)
            value = found[-1].value if found else value
        if isinstance(value, (cst.Dict,)) or (isinstance(value, cst.Call) and dotted_name(value.func) == "dict"):
            others += 1
        elif isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "state_dict":
            receiver = dotted_name(value.func.value)
            if _is_scaler_name(ctx, receiver):
                return None
            if optimizer is None and ctx.is_optimizer(receiver):
                optimizer = receiver
            else:
                others += 1
    return optimizer if optimizer is not None and others >= 1 else None


def _is_scaler_name(ctx: ModuleContext, key: Optional[str]) -> bool:
    if not key:
        return False
    return key in ctx.scalers or "scaler" in key.rsplit(".", 1)[-1].lower()


def _scaler_call(ctx: ModuleContext, method: str) -> bool:
    return any(_is_scaler_name(ctx, c.receiver_dotted) for c in ctx.method_calls(method))


#: methods that write a model's weights into a checkpoint folder (Hugging Face's Trainer and models)
_MODEL_SAVES = ("save_model", "save_pretrained")


def _folder_piece(call: CallInfo) -> bool:
    """`torch.save(x.state_dict(), path)`: one piece of a checkpoint folder (`_piece_of_a_folder`)."""
    import libcst as cst

    obj = call.arg(0, "obj")
    return (call.calls_any(("torch.save",)) and isinstance(obj, cst.Call) and isinstance(obj.func, cst.Attribute)
            and obj.func.attr.value == "state_dict")


def _piece_of_a_folder(ctx: ModuleContext, call: CallInfo, obj: Any) -> Optional[str]:
    """`torch.save(optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))` beside another
    piece of the same checkpoint folder saved in the same function (a scheduler's or model's
    `state_dict()` by `torch.save`, or `self.save_model(output_dir)`): the Hugging Face Trainer's
    checkpoint layout, one file per piece. The optimizer, or None."""
    import libcst as cst

    from amplint.model import dotted_name

    if not (isinstance(obj, cst.Call) and isinstance(obj.func, cst.Attribute) and obj.func.attr.value == "state_dict"):
        return None
    optimizer = dotted_name(obj.func.value)
    if optimizer is None or not ctx.is_optimizer(optimizer):
        return None
    for other in call.scope.calls:
        if other is call:
            continue
        if other.method in _MODEL_SAVES:
            return optimizer
        if other.calls_any(("torch.save",)):
            piece = other.arg(0, "obj")
            if isinstance(piece, cst.Call) and isinstance(piece.func, cst.Attribute) and piece.func.attr.value == "state_dict":
                receiver = dotted_name(piece.func.value)
                if receiver is not None and receiver != optimizer and not ctx.is_optimizer(receiver) and not _is_scaler_name(ctx, receiver):
                    return optimizer
    return None


def _resume_checkpoint(ctx: ModuleContext, call: CallInfo) -> Optional[str]:
    """The optimizer whose state the saved dict holds, when it is a resume checkpoint."""
    import libcst as cst

    from amplint.model import descendants, dotted_name

    obj = call.arg(0, "obj")
    if isinstance(obj, cst.Name):
        found = ctx.assigned_before(obj.value, call)
        obj = found[-1].value if found else None
    if isinstance(obj, cst.Call) and dotted_name(obj.func) == "dict":
        entries = len(obj.args)
    elif isinstance(obj, cst.Dict):
        entries = len(obj.elements)
    elif not call.calls_any(("torch.save",)):
        given = _keyword_dict(ctx, call)
        if given is None:
            return _given_pieces(ctx, call)
        obj = given
        entries = len(obj.elements) if isinstance(obj, cst.Dict) else len(obj.args)
    else:
        return _piece_of_a_folder(ctx, call, obj)
    optimizer = None
    for node in descendants(obj):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict":
            receiver = dotted_name(node.func.value)
            if _is_scaler_name(ctx, receiver):
                return None
            if optimizer is None and ctx.is_optimizer(receiver):
                optimizer = receiver
        elif _is_scaler_name(ctx, dotted_name(node)) and isinstance(node, (cst.Name, cst.Attribute)):
            return None  # the scaler object itself is pickled
    return optimizer if optimizer is not None and entries >= 2 else None


def _keyword_dict(ctx: ModuleContext, call: CallInfo) -> Optional[Any]:
    """The dict a save helper is given by keyword when it is given nothing positionally
    (`misc.save_model(model="G", step=step, ckpt_dir=d, states=g_states)`, `g_states` a dict
    literal bound before the call) that holds an optimizer's `state_dict()`: what the helper
    writes, judged as `torch.save`'s argument is. None when the helper is given anything
    positionally, or no keyword holds such a dict (the pieces given apart: `_given_pieces`)."""
    import libcst as cst

    from amplint.model import descendants, dotted_name

    if any(arg.keyword is None for arg in call.node.args):
        return None
    for arg in call.node.args:
        value = arg.value
        if isinstance(value, cst.Name):
            found = ctx.assigned_before(value.value, call)
            value = found[-1].value if found else None
        if not (isinstance(value, cst.Dict) or (isinstance(value, cst.Call) and dotted_name(value.func) == "dict")):
            continue
        if any(
            isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict"
            and ctx.is_optimizer(dotted_name(node.func.value))
            for node in descendants(value)
        ):
            return value
    return None


def _scalerless_loop(ctx: ModuleContext, call: CallInfo, optimizer: str) -> bool:
    """The checkpoint is of a training loop no scaler takes part in: the saved optimizer is a local
    the saving function builds itself (`optimizer = torch.optim.SGD(...)`) and steps unscaled
    (`loss.backward()`, `optimizer.step()`), and the function names no scaler at all (no
    `scaler.scale`/`step`/`update`, no `if self.scaler`): an fp32 classifier trained beside the
    file's mixed-precision GAN loop. No scaler ever held that optimizer's steps, so no scaler
    state belongs in its checkpoint. A parameter or attribute optimizer is not followed (another
    function may step it through the scaler)."""
    import libcst as cst

    from amplint.model import descendants, dotted_name

    scope = call.scope
    if scope.is_module or "." in optimizer or optimizer in scope.params:
        return False
    info = ctx.optimizers.get(optimizer)
    if info is None or not any(c.scope is scope for c in info.constructors):
        return False
    events = scope.events
    if any(e.scaler for e in events) or any(e.kind == "scaled_backward" for e in events):
        return False
    if not any(e.kind == "optimizer_step" and e.optimizer == optimizer for e in events):
        return False
    if not any(e.kind == "backward" for e in events):
        return False
    for node in descendants(scope.node):
        if isinstance(node, (cst.Name, cst.Attribute)) and _is_scaler_name(ctx, dotted_name(node)):
            return False
    return True


def _unless_bf16(condition: Optional[str], spec: str) -> str:
    """`condition` (None: none) also needing the project's dtype property `spec` to reach fp16."""
    from amplint.model import DTYPE_PROPERTY_MAY_FP16, with_requirement

    if condition is None:
        return f"{DTYPE_PROPERTY_MAY_FP16}={spec}"
    return with_requirement(condition, DTYPE_PROPERTY_MAY_FP16, spec)
