"""AMP303 bce-under-autocast."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from amplint.model import Diagnostic, Invalid, Project, ProjectCall, Rule, Severity, Valid, Witness, chain_text, dispatch_view

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import AutocastRegion, CallInfo, ModuleContext, Scope

_BCE_FUNCTIONS = frozenset({"torch.nn.functional.binary_cross_entropy"})
_BCE_MODULES = frozenset({"torch.nn.BCELoss", "torch.nn.modules.loss.BCELoss", "torch.nn.modules.BCELoss"})
_SIGMOIDS = frozenset({"torch.sigmoid", "torch.nn.functional.sigmoid", "torch.special.expit"})
#: autocast devices with the BCE ban; None: decided at run time
_BANNED_DEVICES = ("cuda", "xpu", None)
#: how the dispatch view reached a class (`DispatchView.origin`): in the message, and at its site
_ORIGIN_HOW = {"registry": "via registry `{name}`", "getattr": "via `getattr({name}, ...)`", "declared": "as a `{name}`"}
_ORIGIN_NOTES = {
    "registry": "`{cls}` is registered to `{name}` here",
    "getattr": "`{cls}` is one of what `getattr({name}, ...)` may pick",
    "declared": "`{cls}` derives from `{name}`, the class declared for it",
}


class BceUnderAutocast(Rule):
    """
    ## What it does
    Flags `torch.nn.functional.binary_cross_entropy` and calls of
    `torch.nn.BCELoss` instances made inside a CUDA (or XPU, or
    unknown-device) autocast region, directly or through a function of the
    same file called from inside the region.

    ## Why is this bad?
    Autocast bans BCE on CUDA and XPU, for fp16 and bf16 alike. The first
    forward raises:

    ```
    RuntimeError: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.
    Many models use a sigmoid layer right before the binary cross entropy layer.
    In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits
    or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are
    safe to autocast.
    ```

    BCE's backward can produce gradients fp16 cannot represent, and casting
    its input to fp32 does not help because the cast is reversed in backward.
    Code that passes its CPU tests (CPU autocast allows BCE and returns fp32)
    crashes on the GPU.

    ## Example
    ```python
    with torch.autocast("cuda"):
        logits = model(x)
        loss = F.binary_cross_entropy(torch.sigmoid(logits), y)
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        logits = model(x)
        loss = F.binary_cross_entropy_with_logits(logits, y)
    ```
    or, when only probabilities are available, compute the loss outside the
    region or in a nested `torch.autocast("cuda", enabled=False)` on
    `probs.float()`.

    ## Fix safety
    Unsafe: when the sigmoid is visible in the call
    (`F.binary_cross_entropy(torch.sigmoid(z), y)`, `z.sigmoid()`,
    `F.sigmoid(z)`), rewrites it to `F.binary_cross_entropy_with_logits(z, y)`
    with the other arguments unchanged. For an `nn.BCELoss()` instance built
    with no arguments (or only `reduction=`), the call becomes
    `torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction=...)`.
    The result is mathematically the same loss, computed more stably, so
    values can differ in the last bits (and no longer clamp log to -100).

    ## Verification
    `amplint --verify` runs the flagged call (across files too, with the
    loss module's `self.X = ...` from its `__init__`) under an autocast that
    reaches the `AutocastCUDA` kernel (on a CPU-only machine by redispatch:
    the ban is CUDA's; CPU autocast allows BCE) and reports the RuntimeError.

    ## Notes
    Silent inside a nested `autocast(enabled=False)`, under CPU autocast
    (BCE is on the CPU fp32 list and runs), under MPS autocast (no rule), and
    for `binary_cross_entropy_with_logits` / `BCEWithLogitsLoss`.

    Across files (the project model): also flags BCE in a loss module or
    helper that runs under autocast only because of another file -- a
    trainer that autocasts the model whose head calls it, a Lightning
    `Trainer(precision="16-mixed")` running `training_step`, an
    `Accelerator(mixed_precision=...)` that `prepare`d the model, an autocast
    kept in an attribute or `partial` (`with self.amp_autocast():`), or a
    project decorator that enters autocast, or a lambda kept in a name or an
    attribute (`self.loss_fn = lambda *a, **k: F.binary_cross_entropy(*a,
    **k)`: its body runs where it is called, not where it is made; one called
    only after the region stays silent). The message names the region and
    the chain of calls. Here the rule over-approximates on purpose: the ban
    raises on every call, whatever the dtype, so any one path in is enough.

    That includes a model or loss picked by name at run time, which no other
    rule follows (the project model's dispatch view): a call through a
    registry reaches every class registered to it -- `MODELS.build(cfg)` and
    `@MODELS.register_module()` (mmengine), `REG.get(name)(cfg)` and
    `@REG.register()` (detectron2, BasicSR), `MODELS[args.arch]()` on a dict
    of classes or one a `@register_model("unet")` decorator fills (also a
    decorator a factory made for the registry, `register_loss =
    make_register(LOSSES)`), a `model_func` the trainer is handed, a factory
    whose `super().__init__(LOSSES)` gives it its registry;
    `getattr(models, cfg.name)(...)` reaches every class and function the
    project module exports, also of a module imported by name
    (`getattr(importlib.import_module("pkg.models." + name), name)`, the
    name joined or formatted: every module of the package it starts in; a
    name that spells no package reaches nothing); an attribute or return declared with a project
    class (`pipeline: Pipeline`, `def module_wrapper(m) -> Model`, a property
    returning one) reaches that class and every project class deriving from
    it. Only the registry a call names is followed: a BCE loss registered to
    `LOSSES` is not reported because a region builds from `MODELS`, nor is a
    class nothing registers. One registry object holding a mapping per kind
    (MMF's `registry`) is followed per kind: `registry.get_loss_class(name)`
    reaches what `@registry.register_loss("bce")` registered, never a BCE
    metric `@registry.register_metric(...)` put in another mapping. On the
    way there the view also follows an attribute a mixin reads and never
    binds (`self.model` in a training-loop mixin: what each project class
    deriving from it binds), the `__call__` a project base class defines
    for a model whose own class defines `forward` (MMF's `BaseModel.__call__`
    computing the losses), and a container filled by `append` and called in
    a loop (`self.losses.append(MMFLoss(cfg))`, `for loss in self.losses:`).
    Flagged, the losses in another file from the trainer and its mixin:

    ```python
    @registry.register_loss("bce")
    class BinaryCrossEntropyLoss(nn.Module):
        def forward(self, scores, targets):
            return F.binary_cross_entropy(scores, targets)  # AMP303

    class Losses(nn.Module):
        def __init__(self, names):
            super().__init__()
            self.losses = nn.ModuleList()
            for name in names:
                self.losses.append(registry.get_loss_class(name)())

        def forward(self, scores, targets):
            total = 0
            for loss in self.losses:
                total = total + loss(scores, targets)
            return total

    class TrainingLoopMixin:
        def _forward(self, batch):
            with torch.autocast("cuda", enabled=self.config.fp16):
                return self.criterion(self.model(batch["x"]), batch["y"])

    class Trainer(TrainingLoopMixin):
        def __init__(self, config, model):
            self.config, self.model = config, model
            self.criterion = Losses(config.losses)
    ```

    Such a finding names the class, how it was
    reached, and has as related sites the region, each call of the chain
    and the registration (or the subclass). An autocast whose `enabled=` is
    a run-time flag (`enabled=config.mixed_precision`, `enabled=args.amp`)
    counts: the flag is a precision path the project offers, and turning it
    on raises on the first step.

    ## References
    - amplint's evidence page: `amplint --explain AMP303` (docs/evidence.md#amp303)
    - https://pytorch.org/docs/stable/amp.html#prefer-binary-cross-entropy-with-logits-over-binary-cross-entropy
    """

    code = "AMP303"
    name = "bce-under-autocast"
    severity = Severity.ERROR
    message = "binary_cross_entropy raises under CUDA autocast"
    triggers = ("binary_cross_entropy", "BCELoss")
    requires = (("autocast",),)  # the region (its own or its callers') is in this file

    VALID = [
        Valid(
            """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    logits = model(x)
    loss = F.binary_cross_entropy_with_logits(logits, y)
""",
            "the _with_logits form is safe to autocast",
        ),
        Valid(
            """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    probs = torch.sigmoid(model(x))
    with torch.autocast("cuda", enabled=False):
        loss = F.binary_cross_entropy(probs.float(), y)
""",
            "inside a nested autocast(enabled=False)",
        ),
        Valid(
            """
import torch
from torch import nn
criterion = nn.BCELoss()
with torch.autocast("cpu", dtype=torch.bfloat16):
    probs = model(x)
    loss = criterion(probs, y)
""",
            "CPU autocast runs BCE in fp32",
        ),
        Valid(
            """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    probs = torch.sigmoid(model(x))
loss = F.binary_cross_entropy(probs.float(), y)
""",
            "the loss is computed after the region",
        ),
        Valid(
            """
import torch
from torch import nn
criterion = nn.BCEWithLogitsLoss()
with torch.autocast("mps"):
    loss = nn.BCELoss()(model(x), y)
with torch.autocast("cuda"):
    loss = criterion(model(x), y)
""",
            "MPS has no autocast rule for BCE; BCEWithLogitsLoss is safe",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    logits = model(x)
    loss = F.binary_cross_entropy(torch.sigmoid(logits), y, reduction="sum")
""",
            line=5,
            fixed="""
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    logits = model(x)
    loss = F.binary_cross_entropy_with_logits(logits, y, reduction="sum")
""",
        ),
        Invalid(
            """
import torch
from torch import nn
from torch.cuda.amp import autocast, GradScaler


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.criterion = nn.BCELoss()
        self.scaler = GradScaler()

    def train_step(self, batch):
        with autocast():
            logits = self.model(batch["x"])
            loss = self.criterion(logits.sigmoid(), batch["y"])
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            line=16,
            fixed="""
import torch
from torch import nn
from torch.cuda.amp import autocast, GradScaler


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.criterion = nn.BCELoss()
        self.scaler = GradScaler()

    def train_step(self, batch):
        with autocast():
            logits = self.model(batch["x"])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["y"])
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
        ),
        Invalid(
            """
import torch
from torch.nn.functional import binary_cross_entropy as bce

def compute_loss(probs, target, mask):
    return (bce(probs, target, reduction="none") * mask).mean()

for step, batch in enumerate(loader):
    with torch.amp.autocast(device_type="cuda", enabled=args.amp):
        probs = model(batch.x)
        if step % 2 == 0:
            loss = compute_loss(probs, batch.y, batch.mask)
""",
            line=5,
        ),
        Invalid(
            """
from accelerate import Accelerator
import torch

accelerator = Accelerator(mixed_precision="fp16")
loss_fn = torch.nn.BCELoss(reduction="mean").to(accelerator.device)
for batch in loader:
    with accelerator.autocast():
        out = model(batch["x"])
        loss = loss_fn(out, batch["y"])
    accelerator.backward(loss)
""",
            line=9,
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        instances = _bce_instances(ctx)
        for call in ctx.calls:
            function, ctor = _bce_call(ctx, call, instances)
            if function is None:
                continue
            region, via = _effective_region(ctx, call)
            if region is None:
                continue
            yield self._diagnostic(ctx, call, function, ctor, region, via)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """BCE in a function that runs under autocast only through a call from
        another file, a framework's precision setting, an autocast held in an
        attribute or `partial`, or a project decorator."""
        pending: List[Tuple[ProjectCall, str]] = []
        for call in project.calls():
            shown = _project_bce(project, call)
            if shown is None:
                continue
            own = project.region_of(call)
            if own is not None and own.kind != "held":
                continue  # a region its own file shows decides (check above)
            witnesses = [Witness(own, ())] if own is not None else project.autocast_witnesses((call.path, call.func))
            for witness in witnesses:
                region = witness.region
                if region.enabled is False or region.device not in _BANNED_DEVICES:
                    continue
                message = f"`{shown}` raises under {project.named(region)}"
                data = {"function": "binary_cross_entropy" if shown.startswith("F.") else "BCELoss", "device": region.device, "dtype": region.dtype}
                yield project.diagnostic(self, call, message, data=data, related=(project.entered(region, witness.chain),), help=_PROJECT_HELP)
                break
            else:
                if own is None:
                    pending.append((call, shown))
        if pending:
            yield from self._dispatched(project, pending)

    def _dispatched(self, project: Project, pending: List[Tuple[ProjectCall, str]]) -> Iterator[Diagnostic]:
        """BCE that only a call through a registry, `getattr` on a module or a declared base
        class leads to from an autocast region (the project model's dispatch view): every
        class such a call can reach counts, since the ban raises whichever one runs."""
        view = dispatch_view(project)
        if view is None:
            return
        view.reached()  # loads the modules autocast regions lead to, through the dispatches too
        for call, shown in pending:
            for witness in view.autocast_witnesses((call.path, call.func)):
                region = witness.region
                if region.enabled is False or region.device not in _BANNED_DEVICES:
                    continue
                yield self._dispatch_diagnostic(project, view, call, shown, witness)
                break

    def _dispatch_diagnostic(self, project: Project, view: Any, call: ProjectCall, shown: str, witness: Witness) -> Diagnostic:
        """One finding per BCE call: the message names the class the dispatch picked nearest the
        loss and how; the region, each call of the chain and each dispatch are related sites."""
        region, steps = witness.region, list(witness.chain)
        related = [project.related(region.path, region.row, "autocast entered here")]
        calls = [view.entering_call(region, steps[0])] + [view.call_from(a, b) for a, b in zip(steps, steps[1:])]
        picked: Optional[Tuple[Tuple[str, str, str, int], str]] = None
        for made, step in zip(calls, steps):
            if made is not None:
                note = f"calls `{_display(step)}`"
                related.append(project.related(made.path, made.row, note) if made.path != call.path else project.site(made, note))
            found = view.origin(step)
            if found is not None and found[0][0] == "declared" and found[0][1] == found[1]:
                found = None  # the declared class itself: plainly resolved, nothing dispatched
            if found is not None and (picked is None or found != picked):
                (kind, name, where, row), cls = found
                related.append(project.related(where, row, _ORIGIN_NOTES[kind].format(cls=cls, name=name)))
                picked = found
        device = {"cuda": "CUDA ", "xpu": "XPU "}.get(region.device or "", "")
        if picked is None:  # followed without a dispatch (a property, a call's result): the plain message
            message = f"`{shown}` raises under {device}autocast (via {chain_text(witness.chain)})"
        else:
            (kind, name, _, _), cls = picked
            how = _ORIGIN_HOW[kind].format(name=name)
            message = f"`{shown}` raises under {device}autocast (`{cls}`, {how})"
            if len(message) >= 100:  # a long class name: the region, a related site, names the device
                message = f"`{shown}` raises under autocast (`{cls}`, {how})"
            if len(message) >= 100:
                message = f"`{shown}` raises under autocast (`{cls}`)"
        data = {
            "function": "binary_cross_entropy" if shown.startswith("F.") else "BCELoss",
            "device": region.device, "dtype": region.dtype, "dispatch": picked[0][0] if picked else None,
        }
        help = "Pass logits to `binary_cross_entropy_with_logits` / `BCEWithLogitsLoss` (drop the sigmoid)"
        return project.diagnostic(self, call, message, data=data, related=tuple(related), help=help)

    def _diagnostic(
        self,
        ctx: ModuleContext,
        call: CallInfo,
        function: str,
        ctor: Optional[CallInfo],
        region: AutocastRegion,
        via: Optional[CallInfo],
    ) -> Diagnostic:
        where = {"cuda": "CUDA autocast", "xpu": "XPU autocast"}.get(region.device or "", "autocast")
        if via is not None:
            where += f" (through `{via.dotted or 'a call'}`)"
        shown = "F.binary_cross_entropy" if function == "binary_cross_entropy" else "nn.BCELoss"
        message = f"`{shown}` under {where} raises: it is unsafe to autocast"
        help = "Pass logits to `binary_cross_entropy_with_logits` / `BCEWithLogitsLoss` (drop the sigmoid)"
        data = {
            "snippet": ctx.code_for(call.node),
            "function": function,
            "device": region.device,
            "dtype": region.dtype,
        }
        return ctx.diagnostic(self, call.node, message, fix=_fix(ctx, call, function, ctor), data=data, help=help)


#: the advice of a finding whose autocast another file (or a framework) enters: the loss may be
#: called with probabilities elsewhere too, so both ways out are named
_PROJECT_HELP = (
    "Pass logits to `binary_cross_entropy_with_logits` / `BCEWithLogitsLoss` (drop the sigmoid), "
    "or compute it in fp32 under `autocast(enabled=False)`"
)


# --------------------------------------------------------------------------- detection


def _bce_instances(ctx: ModuleContext) -> Dict[str, CallInfo]:
    """Names/attributes only ever bound to `nn.BCELoss(...)` -> the constructor."""
    import libcst as cst

    out: Dict[str, CallInfo] = {}
    rebound = set()
    for a in ctx.assignments:
        value = a.value
        # `nn.BCELoss().cuda()`, `nn.BCELoss().to(device)`
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("cuda", "to"):
            if not isinstance(value.func.value, cst.Call):
                break
            value = value.func.value
        info = ctx.call_info(value) if isinstance(value, cst.Call) else None
        if info is not None and not a.unpacked and info.calls_any(_BCE_MODULES):
            out.setdefault(a.target, info)
        else:
            rebound.add(a.target)
    return {k: v for k, v in out.items() if k not in rebound}


def _bce_call(ctx: ModuleContext, call: CallInfo, instances: Dict[str, CallInfo]) -> Tuple[Optional[str], Optional[CallInfo]]:
    import libcst as cst

    if call.calls_any(_BCE_FUNCTIONS):
        return "binary_cross_entropy", None
    if call.dotted is not None and call.dotted in instances:
        return "BCELoss", instances[call.dotted]
    func = call.node.func
    if isinstance(func, cst.Call):
        inner = ctx.call_info(func)
        if inner is not None and inner.calls_any(_BCE_MODULES):
            return "BCELoss", inner
    return None, None


def _banned(region: Optional[AutocastRegion]) -> bool:
    return region is not None and region.enabled is not False and region.device in _BANNED_DEVICES


def _effective_region(ctx: ModuleContext, call: CallInfo) -> Tuple[Optional[AutocastRegion], Optional[CallInfo]]:
    """The autocast region the call runs under: its own, or (one level) its function's callers'."""
    if call.region is not None:
        return (call.region, None) if _banned(call.region) else (None, None)
    scope = call.scope
    if scope.is_module:
        return None, None
    for caller in _callers(ctx, scope):
        if _banned(caller.region):
            return caller.region, caller
    return None, None


def _callers(ctx: ModuleContext, scope: Scope) -> List[CallInfo]:
    if scope.cls is not None:
        return [c for c in ctx.method_calls(scope.name) if c.receiver_dotted == "self" and c.scope.cls is scope.cls]
    if scope.parent is not None and scope.parent.is_module:
        return [c for c in ctx.calls if c.dotted == scope.name and not c.qualnames]
    return []


def _display(key: Tuple[str, str]) -> str:
    return key[1] if key[1] != "<module>" else key[0].rsplit("/", 1)[-1]


def _project_bce(project: Project, call: ProjectCall) -> Optional[str]:
    """How to name the BCE a project call runs (None: not BCE). Only calls that may be BCE by
    their spelling are resolved: `...binary_cross_entropy(...)`, `nn.BCELoss()(...)`, or a
    name some file binds to a `BCELoss(...)`."""
    f = call.record["f"]
    last = f.rsplit(".", 1)[-1]
    if not (
        last == "binary_cross_entropy"
        or (not f and "BCELoss" in str(call.record.get("fv")))
        or (last and last in project.names_bound_to("BCELoss"))
    ):
        return None
    for t in project.resolve_call(call):
        if t[0] == "X" and t[1] in _BCE_FUNCTIONS:
            return "F.binary_cross_entropy"
        if t[0] == "R" and t[1] in _BCE_MODULES:
            return "nn.BCELoss"
    return None


# --------------------------------------------------------------------------- fix


def _logits_of(ctx: ModuleContext, node: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """`z` for `torch.sigmoid(z)`, `F.sigmoid(z)`, `z.sigmoid()`."""
    import libcst as cst

    if not isinstance(node, cst.Call):
        return None
    if ctx.qualnames(node.func) & _SIGMOIDS:
        if len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star:
            return node.args[0].value
        return None
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value == "sigmoid" and not node.args and not ctx.qualnames(func):
        return func.value
    return None


def _fix(ctx: ModuleContext, call: CallInfo, function: str, ctor: Optional[CallInfo]):
    import libcst as cst

    from amplint.model import literal_string, make_fix, replace_node

    probs = call.arg(0, "input")
    logits = _logits_of(ctx, probs)
    if logits is None:
        return None
    torch_name = ctx.imports.bound_name("torch")
    if function == "binary_cross_entropy":
        func = call.node.func
        edits = [replace_node(ctx, probs, ctx.code_for(logits))]
        if isinstance(func, cst.Attribute):
            edits.append(replace_node(ctx, func.attr, "binary_cross_entropy_with_logits"))
        elif torch_name is not None:
            edits.append(replace_node(ctx, func, f"{torch_name}.nn.functional.binary_cross_entropy_with_logits"))
        else:
            return None
        return make_fix("Use `binary_cross_entropy_with_logits` on the logits", edits, safe=False)
    # an nn.BCELoss() instance: expressible only when built without weight/legacy arguments
    if torch_name is None or ctor is None:
        return None
    args = call.node.args
    if len(args) != 2 or any(a.keyword is not None or a.star for a in args):
        return None
    extra = ""
    for arg in ctor.node.args:
        if arg.keyword is None or arg.keyword.value != "reduction" or literal_string(arg.value) is None:
            return None
        extra = f", reduction={ctx.code_for(arg.value)}"
    text = (
        f"{torch_name}.nn.functional.binary_cross_entropy_with_logits("
        f"{ctx.code_for(logits)}, {ctx.code_for(args[1].value)}{extra})"
    )
    return make_fix("Use `binary_cross_entropy_with_logits` on the logits", [replace_node(ctx, call.node, text)], safe=False)
