"""AMP401 fp16-checkpoint."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

from amplint.model import Diagnostic, Invalid, Project, ProjectCall, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import CallInfo, LowPrecisionCast, ModuleContext, descendants, dotted_name, sees_self_of


_CAST_METHODS = ("half", "to", "type")
_LOADS = ("load_state_dict", "load_checkpoint", "load_weights")


class Fp16Checkpoint(Rule):
    """
    ## What it does
    Flags `torch.save` of the `state_dict()` of a model converted to fp16
    (`.half()`, `.to(torch.float16)`, `.type(torch.HalfTensor)`) in the same
    file, directly or inside a checkpoint dict, when no fp32 copy of the
    weights is saved or loaded from a checkpoint in that file.

    ## Why is this bad?
    The checkpoint keeps only what fp16 represents: every weight rounded to
    11 significant bits (up to 2^-11, about 4.9e-4 relative;
    amplint measured a 1.1e-4 absolute error on a Linear's weights), and every value
    above 65504 already turned into `inf` when the model was cast.
    Loading it into an fp32 model raises nothing and leaves the model fp32,
    so the lost precision is invisible and never comes back. Resumed
    training, fine-tuning and evaluation all start from the rounded weights.
    Autocast never needs this: it keeps the parameters fp32, so an AMP
    checkpoint is fp32.

    ## Example
    ```python
    model = Net().cuda().half()
    ...
    torch.save(model.state_dict(), "model.pt")
    ```

    ## Use instead
    ```python
    model = Net().cuda()          # keep fp32 weights; autocast does the fp16 math
    ...
    torch.save(model.state_dict(), "model.pt")
    # or, for a deployment artifact, save both
    torch.save(model.state_dict(), "model_fp32.pt")
    torch.save(copy.deepcopy(model).half().state_dict(), "model_fp16.pt")
    ```

    ## Fix safety
    No fix: where the fp32 weights should come from is a design decision.

    ## Verification
    `amplint --verify` runs the statement that made the model fp16 on a tiny
    model, builds what the flagged `torch.save(...)` writes, saves it, loads
    it back with `weights_only=True` and reports the dtypes it holds and their
    error against the fp32 weights before the cast.

    ## Notes
    Silent when the file also saves an fp32 `state_dict` (an inference copy
    exported next to the real checkpoint), when the fp16 model's weights were
    loaded from a checkpoint in the same file (an export script: the fp32
    original is on disk), when the model is cast back with `.float()` before
    the save, and for bf16: bf16 also rounds (8 significant bits) but keeps
    fp32's range, and bf16 checkpoints are usually deliberate. Models loaded
    with `from_pretrained(torch_dtype=torch.float16)` are not flagged: their
    weights are typically fp16 at the source already.

    The save may sit in a function of a script that reads the script's own
    module-level model (`def save_model(path): torch.save({"weights":
    model.state_dict(), ...}, path)`) when the script calls it after the cast.

    Also flags a model cast to fp16 in place to be saved and cast back after
    the save, in a file that trains (`self.vae = self.vae.to("cpu",
    dtype=torch.float16)`, `self.vae.save_pretrained(path)`, `self.vae =
    self.vae.to(self.device, dtype=self.torch_dtype)`): `.to()` rounds the
    parameters themselves (the optimizer holds the same `Parameter`s), and the
    cast back restores the dtype, not the lost bits, so every save rounds the
    weights training goes on from; and the fp16 save is what a resume loads.
    Reported at the cast, with the save and the cast back as related sites. The
    save may be any call named for saving that is a method of the model or is
    given it or its `state_dict()` (`save_pretrained`, `torch.save`,
    `save_file`). The dtype cast back to may be decided at run time
    (`dtype=self.torch_dtype`, a config option): the finding stands, since the
    cast away from fp16 says the model is not fp16 and an fp32 model is
    rounded; silent when the file spells that dtype's only candidates and fp32
    is not one of them (bf16 -> fp16 -> bf16 keeps every bf16 value inside
    fp16's range), and for a copy cast to fp16 (`deepcopy(m).half()` under
    another name).

    Also flags a checkpoint dict that holds an optimizer's `state_dict()` (a
    checkpoint to resume from) and stores the model as a module cast to fp16
    right there (`"model": deepcopy(model).half()`): resuming loads the
    rounded weights and trains on from them; also for a state dict cast
    entry by entry (`state_dict = {k: v.half().cpu() for k, v in
    model.state_dict().items()}`, then `{"model": state_dict, "optimizer":
    optimizer.state_dict()}`). The save may be `torch.save` or a helper
    named for saving that is given the dict (`save_checkpoint(ckpt, is_best,
    save_dir)`). One finding per dict, at its first save, with
    its other saves as related sites. Silent for an fp16 module or state dict
    saved without optimizer state (an export).

    Across files (the project model): also flags `torch.save` of the
    `state_dict()` of a model that another file made fp16 -- a builder that
    returns `model.half()`, a `model.half()` in place, a
    `convert_weights(model)` helper, a library loader of the table in AMP201's
    notes (`clip.load(name, device="cuda")`) -- saved directly, in a dict or
    through one local name, by a trainer function or class that received it.
    One finding per file, at its first such save, with the cast and the other
    saves as related locations. Silent when the file saves another
    `state_dict` that is not known to be fp16 (an fp32 copy, an EMA model),
    and when the model is cast back with `.float()` in the saving function.

    ## References
    - amplint's evidence page: `amplint --explain AMP401` (docs/evidence.md#amp401)
    - https://pytorch.org/docs/stable/notes/amp_examples.html
    """

    code = "AMP401"
    name = "fp16-checkpoint"
    severity = Severity.WARNING
    message = "checkpoint of an fp16 model"
    triggers = ("half", "Half", "float16", "fp16")  # .half(), .to(torch.float16 / "fp16"), .type(HalfTensor)
    requires = (("save",),)  # it saves a `.state_dict()`, or a model it casts there and back
    gate_check = "amplint.core.gates:fp16_checkpoint_io"  # torch.save (or an alias), or a save between casts

    VALID = [
        Valid(
            """
import copy
import torch
torch.save(model.state_dict(), "model_fp32.pt")
export = copy.deepcopy(model).half().eval()
torch.save(export.state_dict(), "model_fp16.pt")
""",
            "an inference copy exported next to the fp32 weights",
        ),
        Valid(
            """
import torch
model = Net()
model.load_state_dict(torch.load("best_fp32.pt"))
model.half()
torch.save(model.state_dict(), "best_fp16.pt")
""",
            "an export script: the fp32 weights come from a checkpoint on disk",
        ),
        Valid(
            """
import torch
model = Net().cuda()
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(x)
torch.save(model.state_dict(), "model.pt")
""",
            "autocast keeps the parameters fp32",
        ),
        Valid(
            """
import torch
model = Net().to(torch.bfloat16)
torch.save(model.state_dict(), "model.pt")
""",
            "bf16 keeps fp32's range",
        ),
        Valid(
            """
import torch
model = Net().half()
evaluate(model)
model.float()
torch.save(model.state_dict(), "model.pt")
""",
            "cast back to fp32 before saving",
        ),
        Valid(
            """
import torch

class Exporter:
    def __init__(self, net):
        self.model = net.half()

class Trainer:
    def __init__(self, net):
        self.model = net

    def save(self, path):
        torch.save(self.model.state_dict(), path)
""",
            "`self.model` of another class: `Trainer` saves fp32 weights",
        ),
        Valid(
            """
import copy
import torch
torch.save({"model": copy.deepcopy(model).half(), "names": names}, "export_fp16.pt")
""",
            "an fp16 export without optimizer state: nothing resumes from it",
        ),
        Valid(
            """
import copy
import torch

class Trainer:
    def save(self, path):
        half = copy.deepcopy(self.vae).to("cpu", dtype=torch.float16)
        half.save_pretrained(path)
        self.vae = self.vae.to(self.device, dtype=self.torch_dtype)

    def step(self, loss):
        loss.backward()
        self.optimizer.step()
""",
            "an fp16 copy is saved; the live model is left as it is",
        ),
        Valid(
            """
import torch

class Trainer:
    def __init__(self, unet):
        self.weight_dtype = torch.bfloat16
        self.unet = unet.to(self.weight_dtype)

    def save(self, path):
        self.unet.half()
        self.unet.save_pretrained(path)
        self.unet.to(dtype=self.weight_dtype)

    def step(self, loss):
        loss.backward()
""",
            "a bf16 model round-tripped through fp16 keeps every value (bf16's 8 bits fit in fp16's 11)",
        ),
        Valid(
            """
import torch

def export(model, path):
    state_dict = {k: v.half().cpu() for k, v in model.state_dict().items()}
    torch.save({"model": state_dict, "config": model.config}, path)
""",
            "a state dict cast entry by entry and saved without optimizer state: an export",
        ),
        Valid(
            """
import torch

def checkpoint(model, optimizer, path):
    state_dict = {k: v.cpu() for k, v in model.state_dict().items()}
    torch.save({"model": state_dict, "optimizer": optimizer.state_dict()}, path)
""",
            "a state dict moved entry by entry, not cast: fp32 weights",
        ),
        Valid(
            """
from copy import deepcopy
from .utils import save_checkpoint

class Trainer:
    def after_epoch(self):
        self.optimizer.step()
        ckpt = {"model": deepcopy(self.model).half(), "names": self.names}
        save_checkpoint(ckpt, self.is_best, self.save_dir)
""",
            "a helper saves an fp16 copy without optimizer state: an export",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
model = Net().cuda().half()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = criterion(model(x.half()), y)
    loss.backward()
    optimizer.step()
torch.save(model.state_dict(), "model.pt")
""",
            line=8,
        ),
        Invalid(
            """
import torch as th


class Trainer:
    def __init__(self, model, cfg):
        self.model = model.to(device="cuda", dtype=th.float16)
        self.optimizer = th.optim.AdamW(self.model.parameters(), lr=cfg.lr)

    def save_checkpoint(self, path, epoch):
        th.save(
            {"epoch": epoch, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()},
            path,
        )
""",
            line=10,
        ),
        Invalid(
            """
from torch import float16, save

def export(model, path):
    model = model.to(float16)
    state = model.state_dict()
    save(state, path)
""",
            line=6,
        ),
        Invalid(
            """
import torch
torch.save(model.half().state_dict(), "model_fp16.pt")
""",
            line=2,
        ),
        Invalid(
            """
import torch

class Base:
    def __init__(self, net):
        self.model = net.half()

class Trainer(Base):
    def save(self, path):
        torch.save(self.model.state_dict(), path)
""",
            line=9,
            why="`self.model` cast by a base class defined in the file",
        ),
        Invalid(
            """
from copy import deepcopy
import torch

def train(model, optimizer, epochs, last, best):
    for epoch in range(epochs):
        fit(model, optimizer)
        ckpt = {"epoch": epoch, "model": deepcopy(model).half(), "optimizer": optimizer.state_dict()}
        torch.save(ckpt, last)
        torch.save(ckpt, best)
""",
            line=8,
            why="a resume checkpoint holding an fp16 copy of the module (the second save is a related site)",
        ),
        Invalid(
            """
import torch

dalle = DALLE(vae=vae)
if args.fp16:
    dalle = dalle.half()
opt = torch.optim.Adam(dalle.parameters(), lr=3e-4)


def save_model(path, epoch):
    torch.save({"epoch": epoch, "weights": dalle.state_dict(), "opt_state": opt.state_dict()}, path)


for epoch in range(epochs):
    train_epoch(dalle, opt)
    save_model("dalle.pt", epoch)
""",
            line=10,
            why="a script's save function reads the global model, cast at module level before the script calls it",
        ),
        Invalid(
            """
import torch

class TrainVAE:
    def save(self, path):
        self.vae = self.vae.to("cpu", dtype=torch.float16)
        self.vae.save_pretrained(path)
        self.vae = self.vae.to(self.device, dtype=self.torch_dtype)

    def run(self, loader, optimizer):
        for batch in loader:
            loss = self.vae(batch).sum()
            loss.backward()
            optimizer.step()
            self.save("last")
""",
            line=5,
            why="the live model is cast to fp16 for the save and back: training goes on from the rounded weights",
        ),
        Invalid(
            """
import torch

def train(model, optimizer, loader, path):
    for epoch in range(10):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        model.half()
        torch.save(model.state_dict(), path)
        model.float()
""",
            line=8,
            why="`torch.save` between the casts: one finding, at the cast, with the save as a related site",
        ),
        Invalid(
            """
import torch

def lm_checkpoint(model, optimizer, epoch, path):
    state_dict = model.state_dict()
    state_dict = {k: v.half().cpu() for k, v in state_dict.items()}
    torch.save(state_dict, path + ".weights")
    resume = {"model": state_dict, "optimizer": optimizer.state_dict(), "epoch": epoch}
    torch.save(resume, path + ".resume")
""",
            line=8,
            why="a resume checkpoint holding a state dict cast to fp16 entry by entry",
        ),
        Invalid(
            """
from copy import deepcopy
from .utils import save_checkpoint

class Trainer:
    def after_epoch(self):
        self.optimizer.step()
        ckpt = {"model": deepcopy(self.model).half(), "optimizer": self.optimizer.state_dict(), "epoch": self.epoch}
        save_checkpoint(ckpt, self.is_best, self.save_dir, model_name="last_ckpt")
""",
            line=8,
            why="the resume checkpoint is written by a project helper named for saving",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        casts = [c for c in ctx.low_precision_casts if c.dtype == "fp16" and c.call.method in _CAST_METHODS]
        if not casts:
            return
        covered = set()
        for cast, save, back in _round_trips(ctx, casts):
            covered.add(id(save.node))
            yield self._round_trip(ctx, cast, save, back)
        saves = [s for s in ctx.calls_to("torch.save") if id(s.node) not in covered]
        found: List[Tuple[CallInfo, str, Optional[LowPrecisionCast]]] = []
        fp32_saved = False
        for save in saves:
            for receiver, node in _saved_state_dicts(ctx, save):
                if _not_weights(ctx, receiver):
                    continue
                cast = _fp16_cast(ctx, casts, save, receiver, node)
                if cast is False:
                    fp32_saved = True
                else:
                    found.append((save, receiver or ctx.code_for(node.func.value), cast))
        if fp32_saved:
            return
        for save, model, cast in found:
            if cast is not None and _loaded_from_checkpoint(ctx, cast):
                continue
            yield self._diagnostic(ctx, save, model, cast)
        if not found:
            yield from self._fp16_copies(ctx, casts, saves + _helper_saves(ctx, covered))

    def _fp16_copies(self, ctx: ModuleContext, casts, saves: List[CallInfo]) -> Iterator[Diagnostic]:
        """A resume checkpoint (it holds an optimizer's state) that stores the model as an fp16
        copy of the module (`"model": deepcopy(model).half()`) and no fp32 weights: resuming
        trains on from the rounded weights. One finding per checkpoint dict, at its first save,
        the other saves of it as related sites."""
        by_dict: Dict[int, List[CallInfo]] = {}
        copies: Dict[int, cst.CSTNode] = {}
        for save in saves:
            saved = _saved_dict(ctx, save)
            if saved is None:
                continue
            copy = _fp16_module_copy(ctx, casts, saved, save)
            if copy is not None:
                by_dict.setdefault(id(saved), []).append(save)
                copies[id(saved)] = copy
        for key, found in by_dict.items():
            save, copy = found[0], ctx.code_for(copies[key])
            message = f"This resume checkpoint saves `{copy}`: a resumed run trains on from fp16-rounded weights"
            if not any(w in copy for w in ("half", "float16", "fp16")):  # `"model": state_dict`, cast on an earlier line
                message = f"This resume checkpoint saves `{copy}`, cast to fp16: a resumed run trains on from rounded weights"
            related = [ctx.related(other.node, "also saved") for other in found[1:]]
            data = {"snippet": ctx.code_for(save.node), "model": copy, "dtype": "fp16"}
            cast = _assigned(ctx, copies[key], save)
            if cast is not None and cast is not copies[key]:  # `ema = deepcopy(ema).half()` before the save
                data["cast_row"] = ctx.position(cast)[0].row
            yield ctx.diagnostic(self, save.node, message, data=data, related=related,
                                 help="Save the fp32 weights in the checkpoint; export an fp16 copy separately")

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """`torch.save` of the state_dict of a model that another file made fp16 (a builder, a
        loader, `convert_weights(model)`); same-file casts are `check`'s. As there: silent when
        the file also saves a state_dict that is not fp16 (an fp32 copy next to the export)."""
        by_file: Dict[str, List[Tuple[ProjectCall, str, Tuple[str, Tuple[str, int]]]]] = {}
        fp32_saved = set()
        for call in project.calls():
            if not project.is_save(call):
                continue
            for owner in project.saved_state_dicts(call):
                if _not_model(owner):
                    continue
                modules = project.fp16_modules(project.name_types(call.path, call.func, owner))
                if not modules:
                    fp32_saved.add(call.path)  # unknown or fp32: the file keeps other weights too
                elif modules[0][1] and (modules[0][1][0] != call.path or project.loaded_at(modules[0][1])):
                    by_file.setdefault(call.path, []).append((call, owner, modules[0]))
        for path, found in by_file.items():
            if path in fp32_saved:
                continue
            call, owner, (cls, site) = found[0]
            message = f"`torch.save` writes the fp16 weights of `{owner}`, a `{cls}` made fp16 elsewhere"
            related = [project.related(*site, "made fp16 here")]
            related += [project.related(c.path, c.row, "also saved") for c, _, _ in found[1:]]
            data = {"model": owner, "dtype": "fp16", "cast_at": project.where(*site)}
            yield project.diagnostic(self, call, message, data=data, related=tuple(related),
                                     help="Save fp32 weights: keep the model fp32 and use autocast")

    def _round_trip(self, ctx: ModuleContext, cast: LowPrecisionCast, save: CallInfo, back: CallInfo) -> Diagnostic:
        model = cast.subject
        message = f"`{model}` is cast to fp16 in place to be saved: the training goes on from fp16-rounded weights"
        related = [ctx.related(save.node, "saved in fp16 here"), ctx.related(back.node, "cast back here: the rounding stays")]
        # the verifier runs the cast (`cast_row`) and what the save writes (`snippet`), as for any finding
        data = {"snippet": ctx.code_for(save.node), "model": model, "dtype": "fp16", "shape": "round-trip",
                "cast_row": ctx.position(cast.call.node)[0].row, "back_row": ctx.position(back.node)[0].row}
        return ctx.diagnostic(self, cast.call.node, message, data=data, related=related,
                              help=f"Save an fp16 copy (`copy.deepcopy({model}).half()`) and leave `{model}` as it is")

    def _diagnostic(self, ctx: ModuleContext, save: CallInfo, model: str, cast: Optional[LowPrecisionCast]) -> Diagnostic:
        message = f"`torch.save` writes the fp16 weights of `{model}`; the lost precision cannot be recovered"
        help = "Save fp32 weights: keep the model fp32 and use autocast"
        data = {"snippet": ctx.code_for(save.node), "model": model, "dtype": "fp16"}
        if cast is not None:  # where the weights were made fp16: the verifier runs that statement
            data["cast_row"] = ctx.position(cast.call.node)[0].row
        return ctx.diagnostic(self, save.node, message, data=data, help=help)


def _round_trips(ctx: ModuleContext, casts) -> Iterator[Tuple[LowPrecisionCast, CallInfo, CallInfo]]:
    """(cast, save, cast back): in one function of a file that trains (a backward or an optimizer
    step somewhere in it), a model cast to fp16 in place (`m.half()` as a statement, `self.vae =
    self.vae.to("cpu", dtype=torch.float16)`), then saved (`m.save_pretrained(...)`,
    `torch.save(m.state_dict(), ...)`, `save_file(m.state_dict(), ...)`), then cast back to a dtype
    that may be fp32 (`.float()`, `.to(dtype=torch.float32)`, or one the file does not spell:
    `.to(self.device, dtype=self.torch_dtype)`): the live weights keep the rounding. Silent when
    the dtype cast back to can only be bf16 (bf16 -> fp16 -> bf16 keeps every bf16 value in fp16's
    range), and for a copy (`half = deepcopy(m).half()`: another name)."""
    from amplint.model import exclusive

    if not _trains(ctx):
        return
    for cast in casts:
        model = cast.subject
        if model is None or not _in_place(ctx, cast):
            continue
        later = [c for c in ctx.calls if c.scope is cast.call.scope and c.order > cast.call.order]
        back = next((c for c in later if c.receiver_dotted == model and _casts_back(ctx, c)
                     and not exclusive(cast.call.path, c.path)), None)
        if back is None:
            continue
        save = next((c for c in later if c.order < back.order and _saves(ctx, c, model)
                     and not exclusive(cast.call.path, c.path)), None)
        if save is not None:
            yield cast, save, back


def _trains(ctx: ModuleContext) -> bool:
    kinds = ("backward", "scaled_backward", "framework_backward", "optimizer_step", "scaler_step")
    return any(e.kind in kinds for scope in ctx.scopes for e in scope.events)


def _in_place(ctx: ModuleContext, cast: LowPrecisionCast) -> bool:
    """`m.half()` / `m.to(torch.float16)` as a statement of its own (a module casts in place), or
    `m = m.to(...)`: the name keeps the cast object either way."""
    import libcst as cst

    if cast.assignment is not None:
        return cast.assignment.target == cast.call.receiver_dotted and cast.assignment.value is cast.call.node
    statement = cast.call.statement
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and statement.body[0].value is cast.call.node
    )


def _casts_back(ctx: ModuleContext, call: CallInfo) -> bool:
    """`m.float()`, or `m.to(...)`/`m.type(...)` to a dtype that may be fp32: spelled fp32, picked
    from literals that include fp32, or not spelled at all (`dtype=self.torch_dtype`). A
    positional argument counts only when it is a dtype (a literal, a name holding one, a name
    saying dtype), not a device (`m.to(rank)`)."""
    from amplint.model import dotted_name, dtype_choices, is_device_expr

    if call.method == "float":
        return not call.node.args
    if call.method not in ("to", "type"):
        return False
    target = call.arg(None, "dtype")
    if target is None:
        for arg in call.node.args:
            if arg.keyword is not None or is_device_expr(ctx, arg.value):
                continue
            spelled = (dotted_name(arg.value) or "").rsplit(".", 1)[-1].lower()
            if ctx.dtype_of(arg.value) is not None or dtype_choices(ctx, arg.value, call.scope, call.order) or "dtype" in spelled:
                target = arg.value
                break
    if target is None:
        return False
    known = ctx.dtype_of(target)
    if known is not None:
        return known == "fp32"
    choices = dtype_choices(ctx, target, call.scope, call.order)
    return not choices or "fp32" in choices


def _saves(ctx: ModuleContext, call: CallInfo, model: str) -> bool:
    """A call named for saving that writes `model`: its method (`model.save_pretrained(...)`), or
    given `model` or `model.state_dict()` (`torch.save(model.state_dict(), path)`)."""
    import libcst as cst

    from amplint.model import dotted_name

    if "save" not in (call.dotted or call.method or "").rsplit(".", 1)[-1].lower():
        return False
    if call.receiver_dotted == model:
        return True
    for arg in call.node.args:
        value = arg.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "state_dict":
            value = value.func.value
        if dotted_name(value) == model:
            return True
    return False


def _not_model(owner: str) -> bool:
    """Optimizer, scheduler and scaler state, by the spelling (the project model's view)."""
    last = owner.rsplit(".", 1)[-1].lower()
    return any(w in last for w in ("optim", "sched", "scaler")) or last in ("opt",)


def _not_weights(ctx: ModuleContext, receiver: Optional[str]) -> bool:
    """Optimizer, scheduler and scaler state: not a model's weights."""
    if receiver is None:
        return False
    last = receiver.rsplit(".", 1)[-1].lower()
    return ctx.is_optimizer(receiver) or "sched" in last or "scaler" in last


def _saved_state_dicts(ctx: ModuleContext, save: CallInfo) -> Iterator[Tuple[Optional[str], cst.Call]]:
    """(receiver, call) for every `<x>.state_dict()` in what `save` writes (following one local name)."""
    import libcst as cst

    from amplint.model import descendants, dotted_name
    obj = save.arg(0, "obj")
    nodes = [obj] if obj is not None else []
    if isinstance(obj, cst.Name):
        found = ctx.assigned_before(obj.value, save)
        nodes = [found[-1].value] if found else []
    for node in nodes:
        for n in descendants(node):
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "state_dict":
                if not n.args:
                    yield dotted_name(n.func.value), n


def _saved_dict(ctx: ModuleContext, save: CallInfo) -> Optional[cst.Dict]:
    """The dict literal `save` writes, directly or through one local name assigned before it."""
    import libcst as cst

    obj = _assigned(ctx, save.arg(0, "obj"), save)
    return obj if isinstance(obj, cst.Dict) else None


def _fp16_module_copy(ctx: ModuleContext, casts, saved: cst.Dict, save: CallInfo) -> Optional[cst.CSTNode]:
    """The value of `saved` that is a module cast to fp16 for the save (`deepcopy(model).half()`,
    directly or through one local name assigned before the save), when another value holds an
    optimizer's `state_dict()` (a checkpoint to resume from)."""
    import libcst as cst

    from amplint.model import descendants, dotted_name

    copy = None
    resumes = False
    for element in saved.elements:
        value = getattr(element, "value", None)
        if value is None:
            continue
        if copy is None and _cast_chain(ctx, casts, _assigned(ctx, value, save)):
            copy = value
            continue
        for n in descendants(value):
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "state_dict" and not n.args:
                receiver = dotted_name(n.func.value)
                resumes = resumes or (receiver is not None and ctx.is_optimizer(receiver))
    return copy if resumes else None


def _assigned(ctx: ModuleContext, value: Optional[cst.CSTNode], save: CallInfo) -> Optional[cst.CSTNode]:
    """`value`, or for a local name the value last assigned to it before `save` in its scope."""
    import libcst as cst

    if not isinstance(value, cst.Name):
        return value
    found = ctx.assigned_before(value.value, save)
    return found[-1].value if found else None


def _cast_chain(ctx: ModuleContext, casts, node: Optional[cst.CSTNode]) -> bool:
    """Whether `node` is a method chain with an fp16 cast in it (`deepcopy(m).half().to(memory_format=...)`),
    or a state dict cast entry by entry (`{k: v.half().cpu() for k, v in sd.items()}`: each
    value of an `.items()` loop cast to fp16)."""
    import libcst as cst

    if isinstance(node, cst.DictComp):
        loop = node.for_in
        target = loop.target
        names = [e.value for e in target.elements] if isinstance(target, cst.Tuple) else []
        it = loop.iter
        if (
            loop.inner_for_in is None and len(names) == 2 and isinstance(names[1], cst.Name)
            and isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value == "items"
            and _chain_root_name(node.value) == names[1].value
        ):
            node = node.value
        else:
            return False
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        info = ctx.call_info(node)
        if info is not None and any(c.call is info for c in casts):
            return True
        node = node.func.value
    return False


def _helper_saves(ctx: ModuleContext, covered) -> List[CallInfo]:
    """Calls named for saving other than `torch.save` that are given a local name first
    (`save_checkpoint(ckpt, is_best, save_dir)`): a project helper writing the checkpoint dict."""
    import libcst as cst

    out = []
    for call in ctx.calls:
        last = (call.dotted or call.method or "").rsplit(".", 1)[-1].lower()
        if "save" not in last or "torch.save" in call.qualnames or id(call.node) in covered:
            continue
        first = call.node.args[0] if call.node.args else None
        if first is not None and first.keyword is None and not first.star and isinstance(first.value, cst.Name):
            out.append(call)
    return out


def _chain_root_name(node: cst.CSTNode) -> Optional[str]:
    """`v` for `v.half().cpu()`."""
    import libcst as cst

    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        node = node.func.value
    return node.value if isinstance(node, cst.Name) else None


def _fp16_cast(ctx: ModuleContext, casts, save: CallInfo, receiver: Optional[str], node: cst.Call):
    """The cast that made `receiver` fp16 at `save`; None if fp16 by a visible `.half()` chain; False if fp32."""
    import libcst as cst

    from amplint.model import sees_self_of
    inner = node.func.value
    if isinstance(inner, cst.Call):
        info = ctx.call_info(inner)
        if info is not None and any(c.call is info for c in casts):
            return None
        return False
    if receiver is None:
        return False
    for cast in reversed(casts):
        if cast.subject != receiver:
            continue
        if receiver.startswith("self."):
            if sees_self_of(ctx, save.scope, cast.call.scope):  # not another class's `self.model`
                return cast
            continue
        same_scope = cast.call.scope is save.scope and cast.call.order < save.order
        if (same_scope or (cast.call.scope.is_module and save.scope.is_module)) and not _cast_back(ctx, receiver, cast, save):
            return cast
        if cast.call.scope.is_module and _saves_global_after(ctx, save, receiver, cast) and not _cast_back(ctx, receiver, cast, save):
            return cast
    return False


def _saves_global_after(ctx: ModuleContext, save: CallInfo, receiver: str, cast: LowPrecisionCast) -> bool:
    """`save` sits in a module-level function that reads the script's global `receiver` (neither
    a parameter nor assigned there) and that the script calls after the module-level cast
    (`def save_model(path): torch.save({"weights": model.state_dict(), ...})`, run per epoch)."""
    scope = save.scope
    if scope.is_module or scope.cls is not None or scope.parent is None or not scope.parent.is_module:
        return False
    root = receiver.split(".", 1)[0]
    if root in scope.params or any(a.scope is scope for a in ctx.assignments_to(root)):
        return False
    return any(c.scope.is_module and c.order > cast.call.order for c in ctx.callers(scope))


def _cast_back(ctx: ModuleContext, receiver: str, cast: LowPrecisionCast, save: CallInfo) -> bool:
    for call in ctx.method_calls("float", "to", "type"):
        if call.receiver_dotted == receiver and cast.call.order < call.order < save.order:
            if call.method == "float" or any(ctx.dtype_of(a.value) == "fp32" for a in call.node.args):
                return True
    return False


def _loaded_from_checkpoint(ctx: ModuleContext, cast: LowPrecisionCast) -> bool:
    """Weights restored from a file before the cast: an export of an fp32 original."""
    subject = cast.subject
    receiver = cast.call.receiver_dotted
    for call in ctx.method_calls(*_LOADS):
        if call.receiver_dotted in (subject, receiver) and call.order < cast.call.order:
            return True
    return False
