"""AMP201 half-model-training."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import Diagnostic, Invalid, Project, Rule, Severity, Valid, torchapi

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import CallInfo, LowPrecisionCast, ModuleContext, Scope

#: callees that keep fp32 master weights for the optimizer they are given
#: (apex FP16_Optimizer / amp.initialize, DeepSpeed, fairseq's FP16Optimizer...)
_MASTER_WRAPPER = re.compile(r"fp16|master|initialize|mixedprecision", re.IGNORECASE)
_INIT_SCOPES = ("__init__", "<module>", "setup", "build", "build_model")


class HalfModelTraining(Rule):
    """
    ## What it does
    Flags `.half()`, `.to(torch.float16)` and `from_pretrained(...,
    torch_dtype=torch.float16)` on a module whose parameters an optimizer is
    then built on (`Adam(model.parameters())`, `filter(..., model.parameters())`,
    param groups of its submodules) and steps, with no fp32 master copy.

    ## Why is this bad?
    The optimizer then updates fp16 weights in place. fp16 has 10 mantissa
    bits: near 1.0 representable values are 9.8e-4 apart, so small updates
    round away. Adam's
    default `eps=1e-8` is below fp16's smallest subnormal and becomes 0, so
    `grad / (sqrt(v) + eps)` divides by zero once `v` underflows: in E30 the
    parameters were `-inf` after one step with gradients of 1e-5. A GradScaler
    refuses fp16 gradients outright (AMP106). Autocast keeps parameters,
    gradients and optimizer state in fp32 and avoids all of this.

    ## Example
    ```python
    model = Net().cuda().half()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ```

    ## Use instead
    ```python
    model = Net().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    ```

    ## Fix safety
    No fix is offered: moving to autocast also needs a GradScaler and input
    changes, which a human has to make.

    ## Verification
    `amplint --verify` runs the statement that made the model fp16 (the
    flagged cast, or across files the builder's or loader's line with that
    file's helpers) on a tiny model, builds the user's optimizer over it and
    steps it once with small gradients: updates lost to rounding and
    non-finite parameters against the same optimizer on fp32 copies. A
    library loader (`clip.load`) is not run: the verdict then says so.

    ## Notes
    The parameters may reach the optimizer through a function of the same
    file that returns its argument's `.parameters()` (`Adam(trainable(model))`).

    A cast whose dtype is picked at run time among literals the file spells,
    float16 one of them (`weight_dtype = torch.float16 if args.fp16 else
    torch.float32`, a dict of dtypes subscripted by a flag,
    `from_pretrained(..., torch_dtype=dtype)` with such a `dtype`), counts at
    the same severity, as AMP105 counts a region that may be fp16: the code
    offers that path, and on it the optimizer updates fp16 weights (the
    message says "may make the model fp16"). A dtype handed in by a caller
    or read from a config is not followed.

    Silent for inference copies (`model.half().eval()`, an EMA or export
    copy nobody optimizes), for `x.half().float()` rounding tricks, for tensors
    (only `.parameters()` of the converted object count as evidence), for
    master-weight schemes (the optimizer gets fp32 copies, or is handed to
    apex `FP16_Optimizer`/`amp.initialize` or DeepSpeed), for files that
    freeze parameters (trainable adapters may be fp32), when the name is
    rebound (`model = get_peft_model(model, config)`) on every path from the
    cast to the optimizer's constructor (a rebind behind a flag, `if
    args.use_peft: model = get_peft_model(model, cfg)`, leaves the path where
    the fp16 model itself is optimized; one on both sides of an if/else
    does not), and for bf16 (wide range; not this rule).

    Across files: also flags an optimizer built on a module that a builder,
    loader or `convert_weights(model)`-style helper in another file made fp16
    (in place, through `model.apply(...)`, or by returning `model.half()`);
    the message names where. Another instance of the same class that was not
    cast stays silent. A cast decided at run time (`model.to(dtype)`) is not
    followed across files. A builder in another file that loads
    `X.from_pretrained(..., torch_dtype=...)` with a dtype that may be float16
    (a literal, or a name bound to float16 among other dtypes: behind a flag)
    counts as such a cast; silent when the optimizer's function or the
    loader's calls `requires_grad_(...)` (a frozen base, trainable parts that
    may be fp32).

    A run-time dtype picked in another file counts too: `weight_dtype,
    save_dtype = utils.prepare_dtype(args)` where every value the project
    function returns in that position is a dtype literal (`torch.float16`,
    `torch.bfloat16`, `torch.float32`, through its local names), float16 one
    of them, then `unet.to(weight_dtype)` (or `unet = unet.to(...)`) on a module whose parameters an
    optimizer gets. So does an optimizer built by a project helper that
    constructs a torch optimizer class (one of those it may pick) on the
    parameters it is given (`utils.get_optimizer(args, trainable_params)`),
    with `trainable_params` collected from the module (`.parameters()`,
    `list`/`itertools.chain` of them, `append`/`extend` over a list of
    modules, `named_parameters()` loops, a method named for parameters). Same
    "may make the model fp16" message. Silent when a value on the way is read
    from anything else (an argument, a config), for a module frozen with
    `requires_grad_(False)`, for a cast before the optimizer of a module
    frozen or trained by a run-time flag (`requires_grad_(train_unet)`: the
    cast may be the frozen path's), when the name is rebound between the cast
    and the optimizer (accelerate's `prepare` keeps the module), with no
    `optimizer.step()` after a cast made once the optimizer exists, and when
    the optimizer is handed to a master-weight wrapper.

    Library loaders that return fp16 weights count as a cast, in the same
    file too, only where their source makes it certain (one table,
    `amplint/model/project/loaders.py`; also used by AMP302 and AMP401):

    | loader | fp16 weights when | fp32 when |
    |---|---|---|
    | OpenAI `clip.load(name, device)` | `device` is a literal CUDA device (`"cuda"`, `"cuda:1"`, `torch.device("cuda")`): `build_model` runs `convert_weights` | `device="cpu"` (the loader calls `model.float()`) |
    | `open_clip.create_model` / `create_model_and_transforms` / `create_model_from_pretrained` | `precision="fp16"` or `"pure_fp16"` | the default `"fp32"`, `"amp"` |

    A device or precision decided at run time (`device=device`, the default
    `"cuda" if torch.cuda.is_available() else "cpu"`) is not guessed, and a
    `model.float()` after the load keeps it silent.

    ## References
    - amplint's evidence page: `amplint --explain AMP201` (docs/evidence.md#amp201)
    - https://pytorch.org/docs/stable/amp.html#torch.autocast ("do not call `.half()` on your model")
    """

    code = "AMP201"
    name = "half-model-training"
    severity = Severity.WARNING
    message = "optimizer updates an fp16 model without fp32 master weights"
    triggers = ("half", "Half", "float16", "fp16")
    requires = (("optim",),)  # an optimizer class: its module path says optim (`torch.optim.AdamW`)
    # ...called through that path or imported on a line naming it; "optimizer" in prose is neither
    gate_check = "amplint.core.gates:optimizer_class_used"

    VALID = [
        Valid(
            """
import torch
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
train(model, optimizer)
model.half().eval()
torch.onnx.export(model, dummy.half(), "model.onnx")
""",
            "an inference conversion after training",
        ),
        Valid(
            """
import copy
import torch
model = Net().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
ema = copy.deepcopy(model).half()
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
torch.save(ema.state_dict(), "ema.pt")
""",
            "an EMA copy for saving: nothing optimizes it",
        ),
        Valid(
            """
import torch
model = Net().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    x = x.half().float()  # simulate fp16 input rounding
    loss = model(x).mean()
    loss.backward()
    optimizer.step()
""",
            "a rounding trick on a tensor, converted back",
        ),
        Valid(
            """
import torch
model = Net().cuda().half()
master = [p.detach().clone().float().requires_grad_() for p in model.parameters()]
optimizer = torch.optim.SGD(master, lr=0.1)
""",
            "a master-weight scheme: the optimizer updates fp32 copies",
        ),
        Valid(
            """
import torch
model = Net().cuda().to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
""",
            "bf16 parameters: not this rule",
        ),
        Valid(
            """
import torch
model = Net().cuda()
optimizer = torch.optim.Adam(model.parameters())
for x, y in loader:
    x = x.half()
    loss = model(x).float().mean()
    loss.backward()
    optimizer.step()
""",
            "a tensor converted, not the optimized module",
        ),
        Valid(
            """
import torch
from apex.fp16_utils import FP16_Optimizer
model = Net().cuda().half()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
""",
            "apex FP16_Optimizer keeps fp32 master weights",
        ),
        Valid(
            """
import torch
from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float16)
model = get_peft_model(model, LoraConfig(r=8))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
""",
            "the name is rebound to a PEFT model (adapters are kept fp32) before the optimizer",
        ),
        Valid(
            """
import torch
from transformers import AutoModelForCausalLM
from peft import PeftModel, get_peft_model
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float16)
if args.peft_checkpoint:
    model = PeftModel.from_pretrained(model, args.peft_checkpoint, is_trainable=True)
else:
    model = get_peft_model(model, peft_config)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
""",
            "rebound to a PEFT model on both sides of an if/else: on every path",
        ),
        Valid(
            """
import torch
model = Net().cuda().half()
for p in model.parameters():
    p.requires_grad = False
model.head = torch.nn.Linear(512, 10).cuda()
optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=0.1)
""",
            "a frozen fp16 backbone with an fp32 trainable head",
        ),
        Valid(
            """
import torch
teacher = Teacher().cuda()
student = Student().cuda()
optimizer = torch.optim.AdamW(student.parameters())
with torch.no_grad():
    teacher = teacher.half()
""",
            "an inference-only teacher; the optimized student stays fp32",
        ),
        Valid(
            """
import torch


def master_params(model):
    return [p.detach().clone().float().requires_grad_() for p in model.parameters()]


model = Net().cuda().half()
optimizer = torch.optim.SGD(master_params(model), lr=0.1)
""",
            "a helper hands the optimizer fp32 copies of the fp16 parameters",
        ),
        Valid(
            """
import torch
dtype = torch.bfloat16 if args.bf16 else torch.float32
model = Net().cuda().to(dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
""",
            "a run-time dtype whose literal candidates do not include float16",
        ),
        Valid(
            """
import torch
def train(model, dtype, loader):
    model.to(dtype)
    optimizer = torch.optim.AdamW(model.parameters())
    for x in loader:
        model(x).mean().backward()
        optimizer.step()
""",
            "a dtype handed in by the caller: no candidate the file spells",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
model = Net().cuda().half()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for x, y in loader:
    loss = criterion(model(x.cuda().half()), y.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
""",
            line=2,
        ),
        Invalid(
            """
import torch
from torch.optim import AdamW
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float16).to("cuda")
optimizer = AdamW(model.parameters(), lr=2e-5)
""",
            line=4,
        ),
        Invalid(
            """
import torch.optim as optim

class Trainer:
    def __init__(self, model, lr):
        self.model = model.cuda().half()
        self.lr = lr

    def configure_optimizer(self):
        self.optimizer = optim.Adam(filter(lambda p: p.requires_grad, self.model.parameters()), lr=self.lr)

    def step(self, loss):
        loss.backward()
        self.optimizer.step()
""",
            line=5,
        ),
        Invalid(
            """
import torch
def main(args):
    model = build_model(args)
    if args.fp16:
        model.half()
    groups = [
        {"params": model.backbone.parameters(), "lr": args.lr * 0.1},
        {"params": model.head.parameters()},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.lr)
    return model, optimizer
""",
            line=5,
        ),
        Invalid(
            """
from torch import float16, optim
optimizer = optim.SGD(net.parameters(), lr=0.01)
net.to("cuda", float16)
for epoch in range(10):
    for x, y in loader:
        optimizer.zero_grad()
        criterion(net(x), y).backward()
        optimizer.step()
""",
            line=3,
            why="converted after the optimizer was built, before it steps: the same Parameter objects become fp16",
        ),
        Invalid(
            """
import torch
from torch.optim import Adam


def get_trainable_params(model):
    return [params for params in model.parameters() if params.requires_grad]


dalle = DALLE(vae=vae)
if args.fp16:
    dalle = dalle.half()
dalle = dalle.cuda()
opt = Adam(get_trainable_params(dalle), lr=3e-4)
""",
            line=11,
            why="a helper of the file passes the fp16 model's own parameters to the optimizer",
        ),
        Invalid(
            """
import torch
weight_dtype = torch.float32
if args.mixed_precision == "fp16":
    weight_dtype = torch.float16
elif args.mixed_precision == "bf16":
    weight_dtype = torch.bfloat16
optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5)
if args.full_fp16:
    unet.to(weight_dtype)
for batch in loader:
    loss = unet(batch).mean()
    loss.backward()
    optimizer.step()
""",
            line=9,
            why="the dtype is picked at run time among literals, float16 one of them: on that path the weights are fp16",
        ),
        Invalid(
            """
import torch
from transformers import AutoModelForCausalLM
dtype = torch.float16 if args.fp16 else torch.float32
model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
""",
            line=4,
            why="loaded fp16 behind a flag (issue 22 shape 10, in one file)",
        ),
        Invalid(
            """
import torch
from transformers import LlamaForCausalLM
from peft import get_peft_model
model = LlamaForCausalLM.from_pretrained(cfg.model, torch_dtype=torch.float16 if cfg.use_fp16 else "auto")
if cfg.use_peft:
    model = get_peft_model(model, peft_config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
""",
            line=4,
            why="the PEFT rebind is behind a flag: without it the fp16 model itself reaches the optimizer",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        ctors = [c for c in ctx.calls if c.qualname and torchapi.is_optimizer_class(c.qualname)]
        if not ctors or _freezes(ctx):
            return
        chosen = _choice_casts(ctx)
        casts = [c for c in ctx.low_precision_casts if c.dtype == "fp16"] + chosen
        if not casts:
            return
        for cast in casts:
            if _not_a_training_conversion(ctx, cast):
                continue
            subjects = _subjects(ctx, cast)
            for ctor in ctors:
                key = _assigned_key(ctx, ctor)
                if self._updates(ctx, cast, subjects, ctor, key):
                    yield self._diagnostic(ctx, cast, ctor, chosen=cast in chosen)
                    break

    def _updates(self, ctx: ModuleContext, cast: LowPrecisionCast, subjects: Set[str], ctor: CallInfo, key: Optional[str]) -> bool:
        from amplint.model import exclusive

        if not subjects or exclusive(cast.call.path, ctor.path):
            return False
        if not _in_reach(cast.call.scope, ctor.scope, subjects):
            return False
        params = ctor.arg(0, "params")
        if params is None or not _references_parameters(ctx, params, subjects, ctor):
            return False
        if cast.call.order < ctor.order:
            if _rebound_between(ctx, subjects, cast, ctor):
                return False
        elif not (key and _stepped_after(ctx, key, cast.call)):
            return False
        if _reverted_later(ctx, subjects, cast.call):
            return False
        if key and _master_wrapped(ctx, key):
            return False
        return True

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """An optimizer built on a module that another file made fp16 (a builder, a loader,
        a `convert_weights(model)` helper); same-file casts are `check`'s."""
        for call in project.calls():
            q = project.optimizer_class(call)
            if q is None:
                continue
            if project.master_weights(call):
                continue  # apex / DeepSpeed / FP16_Optimizer keep fp32 master weights
            for name, site in project.fp16_modules(project.updated_modules(call), pretrained=True):
                pretrained = (project.loaded_at(site) or "").endswith("from_pretrained(...)") if site else False
                if not site or (site[0] == call.path and (pretrained or not project.loaded_at(site))):
                    continue  # same-file casts and `from_pretrained` loads are `check`'s
                if pretrained and _freezes_around(project, call, site):
                    continue  # a frozen fp16 base whose trainable part may be fp32 (adapters, a new head)
                opt = q.rsplit(".", 1)[-1]
                message = f"`{opt}` updates the parameters of a `{name}` made fp16, with no fp32 master copy"
                data = {"optimizer": opt, "optimizer_class": q, "dtype": "fp16", "device": None, "cast_at": project.where(*site)}
                yield project.diagnostic(self, call, message, data=data, related=(project.related(*site, "made fp16 here"),),
                                         help="Keep the model fp32 and use `torch.autocast` (with a GradScaler for fp16)")
                break
        yield from self._chosen_across_files(project)

    def _chosen_across_files(self, project: Project) -> Iterator[Diagnostic]:
        """`unet.to(weight_dtype)` where `weight_dtype` comes from a project function that picks
        it among dtype literals, float16 one of them (`train_util.prepare_dtype(args)`), or the
        optimizer from a project helper constructing a torch optimizer on the parameters it is
        given (`train_util.get_optimizer(args, trainable_params)`): what one file cannot see."""
        from amplint.model import optimizer_builds, project_dtype_choices

        for path, qual, info in list(project.functions()):
            if "dc" not in info or qual == "<module>":
                continue
            builds = None
            found = []  # (cast record, dtype name, choice, build)
            for subject, name, row in info["dc"]:
                choice = project_dtype_choices(project, path, qual, name)
                if choice is None or "fp16" not in choice[0]:
                    continue
                if builds is None:
                    builds = optimizer_builds(project, path, qual)
                cast = {subject, *info.get("lv", {}).get(subject, ())}  # `for te in text_encoders: te.to(d)`
                build = next((b for b in builds if any(m == c or m.startswith(c + ".") for m in b.modules for c in cast)), None)
                if build is None or (not choice[1] and build.helper is None):
                    continue  # nothing picked in another file: the per-file check's
                if subject in info.get("fz", ()) or _cast_back(info, subject, row):
                    continue
                low, high = sorted((row, build.call.row))
                if any(low < r < high for r in info.get("rb", {}).get(subject, ())):
                    continue  # `del unet; unet = unet_lllite` between the cast and the optimizer
                if subject in info.get("fv", ()) and row < build.call.row:
                    continue  # `m.requires_grad_(train_m)`: before the optimizer, maybe the frozen path's cast
                if row > build.call.row and not _steps_after(info, row):
                    continue
                if _master_passed(info, build):
                    continue
                record = next((r for r in info["calls"] if r["r"] == row and r["f"] == f"{subject}.to"), None)
                if record is not None:
                    found.append((record, name, choice, build))
            if not found:
                continue
            record, name, choice, build = found[0]
            from amplint.model import ProjectCall

            cast = ProjectCall(path, qual, record)
            helper = build.call.record["f"].rsplit(".", 1)[-1] if build.helper else build.optimizer.rsplit(".", 1)[-1]
            message = f"`{record['f']}({name})` may make the model fp16: `{helper}` has no fp32 master copy"
            if len(message) >= 100:
                message = f"`{record['f']}(...)` may make the model fp16, with no fp32 master copy"
            related = []
            for site in choice[1][:1]:
                related.append(project.related(*site, "picks the dtype, float16 among its choices"))
            related.append(project.site(build.call, "the optimizer is built on its parameters here"))
            for other, *_ in found[1:4]:
                related.append(project.site(ProjectCall(path, qual, other), "also cast here"))
            data = {
                "optimizer": build.optimizer.rsplit(".", 1)[-1],
                "optimizer_class": build.optimizer,
                "dtype": "fp16",
                "device": None,
                "subject": record["f"][: -len(".to")],
            }
            yield project.diagnostic(self, cast, message, data=data, related=tuple(related),
                                     help="Keep the model fp32 and use `torch.autocast` (with a GradScaler for fp16)")

    def _diagnostic(self, ctx: ModuleContext, cast: LowPrecisionCast, ctor: CallInfo, chosen: bool = False) -> Diagnostic:
        from amplint.model import literal_number

        opt = (ctor.qualname or "optimizer").rsplit(".", 1)[-1]
        what = _describe(ctx, cast, chosen)
        message = f"{what}: `{opt}` updates fp16 parameters with no fp32 master copy"
        if chosen:  # the dtype is picked at run time among literals, float16 one of them
            message = f"{what} may make the model fp16: `{opt}` then has no fp32 master copy"
        help = "Keep the model fp32 and use `torch.autocast` (with a GradScaler for fp16)"
        data = {
            "optimizer": opt,
            "optimizer_class": ctor.qualname,
            "lr": literal_number(ctor.arg(1, "lr")),
            "eps": literal_number(ctor.arg(None, "eps")),
            "dtype": "fp16",
            "device": None,  # where the cast module runs is not known statically
            "subject": cast.subject,
            "snippet": ctx.code_for(ctor.node),  # the optimizer's constructor, which the verifier runs
        }
        return ctx.diagnostic(self, cast.call.node, message, data=data, help=help)


# --------------------------------------------------------------------------- helpers


def _freezes_around(project: Project, call, site) -> bool:
    """`requires_grad_(...)` called in the function building the optimizer or in the one loading
    the model (the summaries keep calls, not `p.requires_grad = False` assignments: a call is
    what they can tell)."""
    functions = [project.function((call.path, call.func))]
    loader = next(
        (info for path, _, info in project.functions() if path == site[0] and any(r["r"] == site[1] for r in info["calls"])),
        None,
    )
    functions.append(loader)
    return any(r["f"].endswith("requires_grad_") for info in functions if info for r in info["calls"])


def _cast_back(info, subject: str, row: int) -> bool:
    """`subject.float()` / `.to(torch.float32)` later in the function (the summary's casts)."""
    return any(name == subject and dtype == "fp32" and r > row for name, dtype, r in info["casts"])


def _steps_after(info, row: int) -> bool:
    """An optimizer `step()` after the cast in the same function (the training loop)."""
    return any(r["r"] > row and r["f"].endswith(".step") and "optim" in r["f"].lower() for r in info["calls"])


def _master_passed(info, build) -> bool:
    """The function hands the optimizer it built to something that keeps fp32 master weights."""
    spelled = build.call.record["f"]
    names = {n for n, refs in info["locals"].items() if any(r and r.get("c") == spelled for r in refs)}
    names |= {n for n, refs in info.get("ue", {}).items() if any(c.get("c") == spelled for _, c in refs)}
    for r in info["calls"]:
        if r["f"] and _MASTER_WRAPPER.search(r["f"]) and any(a and a.get("n") in names for a in [*r["a"], *r["k"].values()]):
            return True
    return False


def _choice_casts(ctx: ModuleContext) -> List[LowPrecisionCast]:
    """Casts whose dtype is picked at run time among literals the file spells, float16 one of
    them: `model.to(weight_dtype)` with `weight_dtype = torch.float16 if args.fp16 else
    torch.float32`, `from_pretrained(..., torch_dtype=dtype)` likewise (`dtype_choices`)."""
    from amplint.model import LowPrecisionCast, call_chain, dtype_choices

    out: List[LowPrecisionCast] = []
    by_node = None
    for call in ctx.calls:
        if call.method in ("to", "type"):
            args = [a.value for a in call.node.args if a.keyword is None or a.keyword.value == "dtype"]
        elif call.method == "from_pretrained" or (call.dotted or "").endswith("from_pretrained"):
            args = [a.value for a in call.node.args if a.keyword is not None and a.keyword.value in ("torch_dtype", "dtype")]
        else:
            continue
        if not args or any(ctx.dtype_of(a) is not None for a in args):
            continue  # no dtype argument, or a literal one (`low_precision_casts` has those)
        if not any("fp16" in dtype_choices(ctx, a, call.scope, call.order) for a in args):
            continue
        if by_node is None:
            by_node = {c: a for a in ctx.assignments if not a.unpacked for c in call_chain(a.value)}
        assignment = by_node.get(call.node)
        subject = assignment.target if assignment is not None else call.receiver_dotted
        out.append(LowPrecisionCast(call=call, dtype="fp16", subject=subject, assignment=assignment))
    return out


def _describe(ctx: ModuleContext, cast: LowPrecisionCast, chosen: bool = False) -> str:
    node = cast.call.node
    if cast.call.method == "from_pretrained" or (cast.call.dotted or "").endswith("from_pretrained"):
        if chosen:
            dtype = cast.call.arg(None, "torch_dtype") or cast.call.arg(None, "dtype")
            spelled = ctx.code_for(dtype) if dtype is not None else "..."
            if len(spelled) > 30 or "\n" in spelled:  # a flag's if/else: the message stays one short sentence
                spelled = "..."
            return f"`from_pretrained(..., torch_dtype={spelled})`"
        return "`from_pretrained(..., torch_dtype=float16)`"
    text = ctx.code_for(node)
    if len(text) > 40 or "\n" in text:
        text = f"{cast.subject or ''}.{cast.call.method}(...)"
    return f"`{text}`"


def _chain_root(ctx: ModuleContext, node: cst.CSTNode) -> Optional[str]:
    """`model` for `model.cuda().half()`; None for `Net().half()` or `copy.deepcopy(m).half()`."""
    import libcst as cst

    from amplint.model import dotted_name

    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        node = node.func.value
    name = dotted_name(node)
    if name is None or ctx.imports.is_imported(name.split(".")[0]):
        return None
    return name


def _subjects(ctx: ModuleContext, cast: LowPrecisionCast) -> Set[str]:
    out = set()
    if cast.subject and not ctx.imports.is_imported(cast.subject.split(".")[0]):
        out.add(cast.subject)
    if cast.call.method in ("half", "to", "type"):  # Module.half()/to() convert in place
        root = _chain_root(ctx, cast.call.node)
        if root:
            out.add(root)
    return out


def _outer_methods(ctx: ModuleContext, node: cst.Call) -> List[Tuple[str, cst.Call]]:
    """Methods chained after `node`: `.eval()` in `model.half().eval()`."""
    import libcst as cst

    out = []
    current: cst.CSTNode = node
    while True:
        parent = ctx.parent(current)
        if not isinstance(parent, cst.Attribute) or parent.value is not current:
            return out
        call = ctx.parent(parent)
        if not isinstance(call, cst.Call) or call.func is not parent:
            return out
        out.append((parent.attr.value, call))
        current = call


def _not_a_training_conversion(ctx: ModuleContext, cast: LowPrecisionCast) -> bool:
    """Inference or rounding shapes: `.half().eval()`, `.eval().half()`, `.half().float()`."""
    import libcst as cst

    from amplint.model import call_chain, fp32_cast, literal_bool

    after = _outer_methods(ctx, cast.call.node)
    for method, call in after:
        if method == "eval" or method == "double" or fp32_cast(ctx, call):
            return True
        if method == "requires_grad_" and literal_bool(call.args[0].value if call.args else None) is False:
            return True
    before = list(call_chain(cast.call.node))[1:]
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "eval" for c in before)


def _assigned_key(ctx: ModuleContext, ctor: CallInfo) -> Optional[str]:
    for a in ctx.assignments:
        if not a.unpacked and a.value is ctor.node:
            return a.target
    return None


def _in_reach(cast_scope: Scope, ctor_scope: Scope, subjects: Set[str]) -> bool:
    """The optimizer's scope sees the object the cast converted, and the cast runs first
    (same scope, or a constructor-like scope of the same class, or module level)."""
    if cast_scope is ctor_scope:
        return True
    if cast_scope.name not in _INIT_SCOPES:
        return False
    if cast_scope.cls is not None and cast_scope.cls is ctor_scope.cls and any(s.startswith("self.") for s in subjects):
        return True
    if cast_scope.is_module:
        return not any(s.split(".")[0] in ctor_scope.params for s in subjects)
    return False


def _matches(receiver: Optional[str], subjects: Set[str]) -> bool:
    return receiver is not None and any(receiver == s or receiver.startswith(s + ".") for s in subjects)


def _refs(ctx: ModuleContext, node: cst.CSTNode, subjects: Set[str]) -> Tuple[bool, bool]:
    """(a subject's `.parameters()` is called, an fp32 cast is made) anywhere in `node`."""
    import libcst as cst

    from amplint.model import descendants, dotted_name, fp32_cast

    parameters = fp32 = False
    for n in descendants(node):
        if not isinstance(n, cst.Call):
            continue
        if isinstance(n.func, cst.Attribute) and n.func.attr.value in ("parameters", "named_parameters"):
            if _matches(dotted_name(n.func.value), subjects):
                parameters = True
        if fp32_cast(ctx, n):
            fp32 = True
    return parameters, fp32


def _references_parameters(ctx: ModuleContext, params: cst.BaseExpression, subjects: Set[str], ctor: CallInfo) -> bool:
    """`params` holds the subjects' own parameters (not fp32 copies of them), directly or through one name."""
    import libcst as cst

    from amplint.model import assignment_before

    parameters, fp32 = _refs(ctx, params, subjects)
    if fp32:
        return False
    if parameters:
        return True
    if isinstance(params, cst.Call) and _helper_returns_parameters(ctx, params, subjects, ctor):
        return True
    if isinstance(params, cst.Name):
        a = assignment_before(ctx, params.value, ctor.scope, ctor.statement, ctor.order)
        if a is not None and not a.unpacked:
            parameters, fp32 = _refs(ctx, a.value, subjects)
            return parameters and not fp32
    return False


def _helper_returns_parameters(ctx: ModuleContext, params: cst.Call, subjects: Set[str], ctor: CallInfo) -> bool:
    """`Adam(get_trainable_params(model))`: a function of this file, passed a subject, returns
    its parameter's own parameters (`[p for p in model.parameters() if p.requires_grad]`),
    not fp32 copies of them."""
    import libcst as cst

    from amplint.model import descendants, dotted_name

    info = ctx.call_info(params)
    callee = ctx.callee(info) if info is not None else None
    if callee is None or not isinstance(callee.node, cst.FunctionDef):
        return False
    names = list(callee.params)
    if callee.cls is not None and names and info is not None and info.receiver_dotted == "self":
        names = names[1:]  # `self.trainable(model)`: the first parameter is the instance
    passed = set()
    for i, arg in enumerate(a for a in params.args if not a.star):
        if not _matches(dotted_name(arg.value), subjects):
            continue
        if arg.keyword is not None:
            passed.add(arg.keyword.value)
        elif i < len(names):
            passed.add(names[i])
    if not passed:
        return False
    returns = [n for n in descendants(callee.node.body) if isinstance(n, cst.Return) and n.value is not None]
    for ret in returns:
        parameters, fp32 = _refs(ctx, ret.value, passed)
        if parameters and not fp32:
            return True
    return False


def _rebound_between(ctx: ModuleContext, subjects: Set[str], cast: LowPrecisionCast, ctor: CallInfo) -> bool:
    """A subject is assigned something other than itself (`model = get_peft_model(model)`)
    between the cast and the optimizer, on every way from one to the other: a rebind only
    behind a flag (`if args.use_peft: model = get_peft_model(model, cfg)`) leaves the other
    path, where the fp16 model itself reaches the optimizer, as the code offers it; an
    if/else (or if/elif/else) rebinding it on each side covers every path."""
    rebinds = []
    for s in subjects:
        for a in ctx.assignments_to(s):
            if a is cast.assignment or not (cast.call.order < a.order < ctor.order):
                continue
            if a.scope is not ctor.scope and a.scope is not cast.call.scope:
                continue
            if _chain_root(ctx, a.value) != s:
                rebinds.append(_branches_beyond(a.path, ctor.path))
    return _covers(rebinds)


def _branches_beyond(path, base) -> tuple:
    """The if/else frames of `path` past its common prefix with `base` (where the optimizer is
    built): the branches that decide whether the statement runs on the way to it. Loops and
    try blocks are not counted as branches (a rebind in them is taken to run)."""
    common = 0
    while common < min(len(path), len(base)) and path[common].node is base[common].node and path[common].kind == base[common].kind:
        common += 1
    return tuple(f for f in path[common:] if f.kind in ("if", "else"))


def _covers(paths: List[tuple]) -> bool:
    """Whether statements at these branch paths run on every path: one of them unconditionally,
    or both sides of one `if` covered in turn."""
    if any(not p for p in paths):
        return True
    sides: Dict[int, Dict[str, List[tuple]]] = {}
    for p in paths:
        sides.setdefault(id(p[0].node), {}).setdefault(p[0].kind, []).append(p[1:])
    return any("if" in s and "else" in s and _covers(s["if"]) and _covers(s["else"]) for s in sides.values())


def _stepped_after(ctx: ModuleContext, key: str, cast: CallInfo) -> bool:
    from amplint.model import dotted_name

    for call in ctx.method_calls("step"):
        if call.scope is not cast.scope or call.order <= cast.order:
            continue
        if call.receiver_dotted == key:
            return True
        arg = call.arg(0, "optimizer")
        if arg is not None and dotted_name(arg) == key:
            return True
    return False


def _reverted_later(ctx: ModuleContext, subjects: Set[str], cast: CallInfo) -> bool:
    """`model.float()` / `model.to(torch.float32)` later in the same scope."""
    from amplint.model import fp32_cast

    for call in ctx.calls:
        if call.scope is cast.scope and call.order > cast.order and fp32_cast(ctx, call.node):
            if _chain_root(ctx, call.node) in subjects:
                return True
    return False


def _master_wrapped(ctx: ModuleContext, key: str) -> bool:
    """The optimizer is handed to something that keeps fp32 master weights."""
    from amplint.model import dotted_name

    for call in ctx.calls:
        callee = call.dotted or min(call.qualnames, default="")
        if not _MASTER_WRAPPER.search(callee):
            continue
        if any(dotted_name(a.value) == key for a in call.node.args):
            return True
    return False


def _freezes(ctx: ModuleContext) -> bool:
    """`p.requires_grad = False` or `.requires_grad_(False)` anywhere in the file."""
    from amplint.model import literal_bool

    for a in ctx.assignments:
        if a.target.endswith("requires_grad") and literal_bool(a.value) is False:
            return True
    for call in ctx.method_calls("requires_grad_"):
        if literal_bool(call.arg(0, "requires_grad")) is False:
            return True
    return False
