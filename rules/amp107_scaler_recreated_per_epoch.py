"""AMP107 scaler-recreated-per-epoch."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

from amplint.model import Diagnostic, Invalid, Project, ProjectCall, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    from amplint.model import CallInfo, ModuleContext


class ScalerRecreatedPerEpoch(Rule):
    """
    ## What it does
    Flags `GradScaler(...)` constructed inside the training loop, or inside a
    function that runs once per epoch (`train_one_epoch(...)` called from
    `for epoch in ...`), while the optimizer lives on across iterations.

    ## Why is this bad?
    The scale is learned state: it starts at `init_scale` (65536), halves on
    every step whose gradients overflow (that step is skipped) and doubles
    after 2000 clean steps. A new scaler each epoch throws
    that away: every epoch restarts at 65536 and pays one skipped optimizer
    step per halving again, any growth is lost, and the scale is not the one
    a checkpoint's `scaler.state_dict()` would restore. Built on every step,
    the scale never leaves 65536: if the gradients overflow there, every step
    is skipped and the model never trains.

    ## Example
    ```python
    def train_one_epoch(model, loader, optimizer):
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            ...

    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer)
    ```

    ## Use instead
    ```python
    def train_one_epoch(model, loader, optimizer, scaler):
        for x, y in loader:
            ...

    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer, scaler)
    ```

    ## Fix safety
    No fix: the scaler has to be created by the caller and passed in.

    ## Verification
    `amplint --verify` calls the function that builds the scaler twice, as
    one call per epoch, with gradients that overflow at 65536, and reports
    how many scalers it stepped and the second one's restart at 65536 and
    skipped steps.

    ## Notes
    Silent when the optimizer is built in the same loop or function (a new
    run per iteration: hyper-parameter sweeps, cross-validation folds), when
    the construction is conditional (`if scaler is None:`, `if epoch == 0:`),
    for a scaler built once in `main()` and passed in, for `self.scaler` built
    in `__init__`, and for `enabled=False`. The AMP switch is no such condition: `if amp:
    scaler = GradScaler()` (a flag, `amp` or `args.amp`, that also gates the
    scaler's use or an autocast in the function) builds a scaler on every
    call whenever AMP is on, like `GradScaler(enabled=amp)`; so does a
    configuration attribute compared with a string (`if cfg.amp and
    cfg.dtype == "float16":`) when the same test, however it is wrapped
    over lines, gates the scaler's use too.

    Across files: also flags a function that builds its own GradScaler when
    another file calls it inside a loop; the message names that call.

    ## References
    - amplint's evidence page: `amplint --explain AMP107` (docs/evidence.md#amp107)
    - https://pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training
    """

    code = "AMP107"
    name = "scaler-recreated-per-epoch"
    severity = Severity.WARNING
    message = "GradScaler re-created every epoch"
    triggers = ("GradScaler",)

    VALID = [
        Valid(
            """
import torch
def train_one_epoch(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

def main(model, loader, optimizer, epochs):
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer, scaler)
""",
            "built once in main() and passed in",
        ),
        Valid(
            """
from torch.cuda.amp import GradScaler

class Trainer:
    def __init__(self, model, optimizer):
        self.optimizer = optimizer
        self.scaler = GradScaler()

    def train_epoch(self, loader):
        for batch in loader:
            self.scaler.scale(self.model(**batch).loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
""",
            "self.scaler built in __init__",
        ),
        Valid(
            """
import torch
for lr in (1e-4, 3e-4, 1e-3):
    model = Net().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for x, y in loader:
            scaler.scale(model(x, y)).backward()
            scaler.step(optimizer)
            scaler.update()
""",
            "a sweep: a new model, optimizer and scaler per run",
        ),
        Valid(
            """
import torch
scaler = None
for epoch in range(epochs):
    if scaler is None:
        scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        scaler.scale(model(x, y)).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            "built lazily, once",
        ),
        Valid(
            """
import torch
def train_one_epoch(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    for x, y in loader:
        scaler.scale(model(x, y)).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            "a disabled scaler has no state to lose",
        ),
        Valid(
            """
import torch
def run_fold(fold, data):
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(10):
        for x, y in data[fold]:
            scaler.scale(model(x, y)).backward()
            scaler.step(optimizer)
            scaler.update()

for fold in range(5):
    run_fold(fold, data)
""",
            "cross-validation: each fold is a new run with its own optimizer",
        ),
        Valid(
            """
import torch
def train(hyp, opt, device):
    model = Model(opt.cfg).to(device)
    optimizer = smart_optimizer(model, opt.optimizer, hyp["lr0"])
    scaler = torch.cuda.amp.GradScaler(enabled=amp)
    for epoch in range(start_epoch, epochs):
        for i, (imgs, targets) in enumerate(train_loader):
            with torch.cuda.amp.autocast(amp):
                loss = compute_loss(model(imgs), targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

for _ in range(opt.evolve):
    hyp = mutate(hyp)
    results = train(hyp.copy(), opt, device)
""",
            "yolov5's hyper-parameter evolution: each call of train() is a whole run",
        ),
        Valid(
            """
import torch
for epoch in range(start_epoch, epochs):
    if epoch == start_epoch and args.amp:
        scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", enabled=args.amp):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            "built once, in the first epoch: a comparison is no AMP switch",
        ),
        Valid(
            """
import torch
def fit_one_epoch(model, loader, optimizer, warm):
    if warm:
        scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

for epoch in range(epochs):
    fit_one_epoch(model, loader, optimizer, warm=epoch == 0)
""",
            "the flag gates only the constructor, not the scaler's use: a build-once switch, not AMP's",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for epoch in range(epochs):
    if cfg.schedule == "restart":
        scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            "a configuration test around the constructor alone: a chosen restart, not the AMP switch",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch

def train_one_epoch(model, loader, optimizer, epoch):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

def main(model, loader, optimizer, args):
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, epoch)
""",
            line=4,
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler as Scaler

model = build().cuda()
optimizer = torch.optim.AdamW(model.parameters())
for epoch in range(num_epochs):
    scaler = Scaler()
    for step, batch in enumerate(loader):
        scaler.scale(model(**batch).loss / accum).backward()
        if (step + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
""",
            line=6,
        ),
        Invalid(
            """
from torch import amp

class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def train_epoch(self, loader):
        self.scaler = amp.GradScaler("cuda")
        for batch in loader:
            self.scaler.scale(self.model(**batch).loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            self.train_epoch(loader)
""",
            line=9,
        ),
        Invalid(
            """
import torch
def train_one_epoch(model, loader, optimizer, device):
    scaler = torch.amp.GradScaler(device)
    for images, targets in loader:
        with torch.autocast(device):
            loss = model(images, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            line=3,
            why="a per-epoch function (by name and shape) with no caller in this file",
        ),
        Invalid(
            """
import torch
for x, y in loader:
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            line=3,
            why="built on every step",
        ),
        Invalid(
            """
import torch
def fit_one_epoch(model, loader, optimizer, amp=False):
    if amp:
        scaler = torch.amp.GradScaler("cuda")
    for images, targets in loader:
        optimizer.zero_grad()
        if amp:
            with torch.amp.autocast("cuda"):
                loss = model(images, targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            model(images, targets).backward()
            optimizer.step()

def main(args):
    for epoch in range(args.epochs):
        fit_one_epoch(model, loader, optimizer, amp=args.amp)
""",
            line=4,
            why="`if amp:` is `GradScaler(enabled=amp)` spelled as a branch: the same switch gates the scaler's use",
        ),
        Invalid(
            """
import torch
from torch.amp import GradScaler

def train(cfg, policy, loss_fn, loader):
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    for step, batch in enumerate(loader):
        with torch.autocast("cuda", enabled=cfg.mixed_precision, dtype=getattr(torch, cfg.torch_dtype)):
            loss = loss_fn(batch)
        if cfg.mixed_precision and cfg.torch_dtype == "float16":
            scaler = GradScaler(enabled=True)
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (step + 1) % cfg.accumulation == 0:
            if (
                cfg.mixed_precision
                and cfg.torch_dtype == "float16"
            ):
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
""",
            line=10,
            why="the fp16 path's switch, a flag and a dtype setting, gates the constructor and the scaler's use alike",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        from amplint.model import is_grad_scaler_call, rebuilt_per_iteration

        for call in ctx.calls:
            if not is_grad_scaler_call(call) or _disabled(ctx, call):
                continue
            found = rebuilt_per_iteration(ctx, call)
            if found is not None:
                yield self._diagnostic(ctx, call, *found)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """A function that builds its own GradScaler, called in a loop from another file."""
        for call in project.calls():
            if call.func == "<module>" or call.record.get("l") or call.record.get("i") or project.grad_scaler(call) is None:
                continue  # module level, a loop its own file shows (`check`), or conditional (`if scaler is None:`)
            enabled = call.record["k"].get("enabled") or {}
            if enabled.get("n") == "False" or call.func.rsplit(".", 1)[-1] == "__init__" or _builds_an_optimizer(project, call.path, call.func):
                continue  # a whole run per call (sweeps, folds) builds its optimizer too
            for caller in project.callers((call.path, call.func)):
                if caller.path == call.path or not caller.record.get("l") or _builds_an_optimizer(project, caller.path, caller.func, loop=True):
                    continue
                name = call.func.rsplit(".", 1)[-1]
                message = f"`GradScaler(...)` is rebuilt on each call of `{name}` (called in a loop): its scale never settles"
                cause = project.related(caller.path, caller.row, "called in a loop here")
                yield project.diagnostic(self, call, message, data={"where": project.where(caller.path, caller.row), "per_step": False}, related=(cause,),
                                         help="Create the scaler once and pass it in")
                break

    def _diagnostic(self, ctx: ModuleContext, call: CallInfo, where: str, per_step: bool) -> Diagnostic:
        every = "training step" if per_step else "epoch"
        message = f"`GradScaler(...)` is rebuilt every {every} ({where}): its loss scale never settles"
        help = "Create the scaler once, before the loop" if per_step else "Create the scaler once and pass it in"
        data = {"where": where, "per_step": per_step}
        switch = _switch_parameter(call)
        if switch is not None:  # `if amp:` of a parameter: the verifier calls the function with it on
            data["switch"] = switch
        return ctx.diagnostic(self, call.node, message, data=data, help=help)


def _switch_parameter(call: CallInfo) -> Optional[str]:
    """The parameter an `if NAME:` around the constructor tests (the AMP switch, `if amp:`), or None."""
    import libcst as cst

    for frame in call.path:
        if frame.kind == "if" and isinstance(frame.test, cst.Name) and frame.test.value in call.scope.params:
            return frame.test.value
    return None


def _builds_an_optimizer(project: Project, path: str, func: str, loop: bool = False) -> bool:
    """Whether a project function builds an optimizer (in a loop body, with `loop`) or has one `prepare`d."""
    info = project.function((path, func))
    for record in info["calls"] if info is not None else ():
        if loop and not record.get("l"):
            continue
        if record["f"].endswith(".prepare") or project.optimizer_class(ProjectCall(path, func, record)) is not None:
            return True
    return False


def _disabled(ctx: ModuleContext, call: CallInfo) -> bool:
    from amplint.model import literal_bool

    for key, info in ctx.scalers.items():
        if any(c is call for c in info.constructors):
            return info.enabled is False
    return literal_bool(call.arg(None, "enabled")) is False
