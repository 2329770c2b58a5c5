"""AMP201 half-model-training."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

from amplint.model import Diagnostic, Invalid, Project, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    from amplint.model import CallInfo, LowPrecisionCast, ModuleContext


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
    file that returns its argument's `.parameters()` (`Adam(trainable(model))`),
    or through param groups whose `params` are names bound to them
    (`norm = [p for k, p in model.named_parameters() if "norm" in k]`, then
    `SGD([dict(params=norm, lr=lr_b), dict(params=other)])`).

    The cast may be made by a builder of the same file: a module-level
    function every `return` of which hands back the cast module (`def
    make_net(): net = net.half().cuda(); ...; return net`, or `return
    net.half()`), or the `__init__`
    of a class that casts itself (`for mod in self.modules(): mod.half()`);
    the optimizer is then built on a local bound to its result (`model =
    make_net()`, `torch.compile(CifarNet().cuda())`), or on a parameter of
    the optimizer's function that every call of it in the file passes such a
    local, or hands on a parameter of its own that every call of it passes
    one in turn (`setup(net)` calling `make_optimizer(net)`, three functions
    deep at most); a call may pass another builder's module cast to the same
    dtype (a tutorial's TE model and its HF baseline), one passing anything
    else keeps the rule silent. A loader's dtype may come from a dict it is
    unpacked from (`from_pretrained(path, **load_kwargs)`, `load_kwargs =
    {"torch_dtype": torch.float16}` with that key stored nowhere else).
    An optimizer a helper returns is silent where a call of the helper binds
    it to a name handed to a master-weight wrapper (`optimizer =
    build_adamw(model)`, then `accelerator.prepare(optimizer)` for AMP206). Putting the norm layers back to float (`for mod in net.modules():
    if isinstance(mod, BatchNorm): mod.float()`) leaves the conv and linear
    weights fp16: still flagged; a whole `net.float()` after the cast is not.
    Freezing one tensor named by its attribute (`net[0].weight.requires_grad
    = False`, a fixed whitening filter) is not a frozen base.

    A cast whose dtype is picked at run time among literals the file spells,
    float16 one of them (`weight_dtype = torch.float16 if args.fp16 else
    torch.float32`, a dict of dtypes subscripted by a flag,
    `from_pretrained(..., torch_dtype=dtype)` with such a `dtype`), counts at
    the same severity, as AMP105 counts a region that may be fp16: the code
    offers that path, and on it the optimizer updates fp16 weights (the
    message says "may make the model fp16"). A dtype handed in by a caller
    or read from a config is not followed. So does an optimizer class picked
    at run time through a local name every binding of which is an optimizer
    class (`optimizer_class = bnb.optim.AdamW8bit` behind `--use_8bit_adam`,
    else `torch.optim.AdamW`). A cast back to fp32 made once the training
    loop that steps the optimizer is over (`if args.upcast_before_saving:
    model.to(torch.float32)` after it) does not undo the cast; one inside
    that loop does.

    Silent for inference copies (`model.half().eval()`, an EMA or export
    copy nobody optimizes), for `x.half().float()` rounding tricks, for tensors
    (only `.parameters()` of the converted object count as evidence), for
    master-weight schemes (the optimizer gets fp32 copies, keeps them itself,
    as TransformerEngine's `FusedAdam(..., master_weights=True)` does, or is
    handed to apex `FP16_Optimizer`/`amp.initialize` or DeepSpeed,
    positionally, by keyword or in a tuple, or the module sharded by
    Megatron-FSDP's `fully_shard`, whose default policy keeps fp32 main
    parameters: as in AMP206), for a cast module that is frozen, in part or
    whole or through a module holding it (`requires_grad_(False)`, `for p in
    m.parameters(): p.requires_grad = False`: trainable adapters may be fp32),
    and for files whose freezes cannot be tied to a module (a helper freezing
    what it is passed); freezing another module only (a frozen loss network
    cast with the trained one) does not silence it, nor does freezing a part
    of a module cast in place once the optimizer holds its parameters
    (`vae.encoder.requires_grad_(False)`, `AdamW(vae.parameters())`, then
    `vae.to(dtype=weight_dtype)`: every parameter it holds is converted;
    a part put back to fp32 after the cast, `disc.heads.float()`, keeps it
    silent). Silent also when the name is
    rebound (`model = get_peft_model(model, config)`) on every path from the
    cast to the optimizer's constructor (a rebind behind a flag, `if
    args.use_peft: model = get_peft_model(model, cfg)`, leaves the path where
    the fp16 model itself is optimized; one on both sides of an if/else
    does not; adapters added in place after the cast, `unet.add_adapter(lora_config)`,
    are what the optimizer then trains: silent as for a rebind; so is a
    cast followed by a check that raises unless the module is fp32 (`if
    unwrap_model(controlnet).dtype != torch.float32: raise ValueError(...)`:
    a low-precision run stops there);
    `DDP(model)`, `nn.DataParallel(model)` and `torch.compile(model)`
    hand the optimizer the model's own parameters and are not rebinds), and
    for bf16 parameters (AMP206 reports those). In the test suite of a vendored
    library copy (its own `setup.py` and license, `third_party/apex/tests/`)
    the finding is `info`, as every rule's is (docs/configuration.md): a
    numerics test's single step is not the project's training. Nor in a
    test function (`test*`, at module level or in a `Test*` / `TestCase`
    class) that builds the optimizer, steps it with no `step` or `backward`
    in a loop, and asserts: one step to compare state afterwards (an EMA of
    fp16 weights, an optimizer's `state_dict` round trip) trains nothing. A
    test that steps in a loop trains fp16 weights and is still flagged.

    Across files: also flags an optimizer built on a module that a builder,
    loader or `convert_weights(model)`-style helper in another file made fp16
    (in place, through `model.apply(...)`, or by returning `model.half()`);
    the message names where. A builder every `return` of which is a tuple
    spelled in place (`return model, model_cfg`, open_clip's factories)
    hands back each element to the name unpacked at its position: `model,
    cfg = build_net(...)` binds the cast module, while `model, index =
    build(...)` with only `index` cast stays silent (a `return` of another
    shape leaves which element is which unknown: silent). A cast
    under an `if` of its function (`if precision == "fp16":
    convert_weights_to_fp16(model)`, a `--precision` choice) is one path of
    a run-time choice: the message quotes the test ("made fp16 when
    `precision == "fp16"`"). Another instance of the same class that was not
    cast stays silent. A cast decided at run time (`model.to(dtype)`) is not
    followed across files. A builder in another file that loads
    `X.from_pretrained(..., torch_dtype=...)` with a dtype that may be float16
    (a literal, or a name bound to float16 among other dtypes: behind a flag)
    counts as such a cast; silent when the optimizer's function or the
    loader's calls `requires_grad_(...)` (a frozen base, trainable parts that
    may be fp32). The optimizer may be a project class deriving from
    `torch.optim.Optimizer` (`FP16FusedAdam(model.parameters(), ...)`, made
    fp16 by `model.apply(fn)` with `fn` setting `l.w.data = l.w.data.half()`)
    when its methods, its project bases' included, copy no tensor (no
    `.clone()`, `.copy_()`, `.detach()`, `.float()` or `.to(...)` on a name,
    a subscript of its state such as `state["exp_avg"].float()` aside, and
    nothing named `master` or `fp32`): it then steps the fp16 parameters
    themselves. One that copies may keep fp32 master weights and stays
    silent; its own name (`FP16Adam`) is not read as a master-weight wrapper.

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
    modules, `named_parameters()` loops, a method named for parameters), or
    on the `.parameters()` of the module it is given and never rebinds
    (`optimizer = setup_optimizer(unet, args)` after `unet = unet.to(device,
    dtype=weight_dtype)`, a `--mixed_precision` choice of the same file,
    diffusers' pytorch_xla example), in the same file or another. Same
    "may make the model fp16" message. Silent when a value on the way is read
    from anything else (an argument, a config), for a module frozen with
    `requires_grad_(False)`, for a cast before the optimizer of a module
    frozen or trained by a run-time flag (`requires_grad_(train_unet)`: the
    cast may be the frozen path's), when the name is rebound between the cast
    and the optimizer (accelerate's `prepare` keeps the module), with no
    `optimizer.step()` after a cast made once the optimizer exists, and when
    the optimizer is handed to a master-weight wrapper.

    A helper that casts the module it is given in place counts too when the
    training loop goes on training that module: `evaluate(model, ...)`, called
    in the loop that also runs `train_one_epoch(model, ..., optimizer)` (a
    function given the module and a torch optimizer the loop's function builds,
    which runs the one and steps the other) or steps that optimizer itself,
    runs `model.half()` on its parameter (`if args.fp16_eval:`) and never
    `model.float()`: `Module.half()` changes the caller's module, so the next
    pass trains fp16 parameters. Reported at the helper's cast, the loop's two
    calls as related locations. Silent when the helper evaluates a copy
    (`model = copy.deepcopy(model)`), casts back before it returns, or steps an
    optimizer itself; when it is called after the loop (an export once training
    is over); when the loop's function casts the module back, freezes it, hands
    its optimizer to a master-weight wrapper, or builds the optimizer on another
    module's `.parameters()` (a teacher the training step runs but does not train).

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
import copy
import unittest
import torch


class TestEMA(unittest.TestCase):
    def test_ema_tracks_fp16_weights(self):
        model = Net().cuda().half()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        before = copy.deepcopy(model.state_dict())
        model(torch.randn(4, 8).cuda().half()).sum().backward()
        optimizer.step()
        for key, value in model.state_dict().items():
            self.assertFalse(torch.equal(value, before[key]))
""",
            "a test that steps once to compare state afterwards (an EMA, a state_dict round trip): no training",
        ),
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
            "bf16 parameters: AMP206's",
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
import transformer_engine.pytorch as te
model = Net().cuda()
for m in model.modules():
    if isinstance(m, torch.nn.Conv2d):
        m.half()
optimizer = te.optimizers.FusedAdam(model.parameters(), lr=1e-3, master_weights=True)
""",
            "the blind drill (TransformerEngine): `FusedAdam(master_weights=True)` keeps fp32 master weights",
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
        Valid(
            """
import torch
from torch import nn


def make_net():
    net = nn.Sequential(nn.Conv2d(3, 24, 2), nn.BatchNorm2d(24), nn.Flatten(), nn.LazyLinear(10))
    net = net.half().cuda()
    return net.float()


def main(loader):
    model = make_net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
""",
            "a builder that casts and hands back an fp32 module (`return net.float()`)",
        ),
        Valid(
            """
import torch


def build(cfg):
    return Net(cfg).cuda().half().eval()


teacher = build(cfg)
student = Net(cfg).cuda()
optimizer = torch.optim.Adam(student.parameters(), lr=1e-3)
""",
            "an inference builder (`.half().eval()`), and the optimizer is another module's",
        ),
        Valid(
            """
import torch
from torch import nn


def make_net():
    net = nn.Sequential(nn.Conv2d(3, 24, 2), nn.BatchNorm2d(24))
    net = net.half().cuda()
    return net


def main(loader):
    teacher = make_net().eval()
    student = nn.Sequential(nn.Conv2d(3, 24, 2)).cuda()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    for x in loader:
        loss = (student(x) - teacher(x.half()).float()).pow(2).mean()
        loss.backward()
        optimizer.step()
""",
            "the builder's fp16 module is an inference teacher; the optimized student is another module",
        ),
        Valid(
            """
import torch
from torch import nn
model = nn.Sequential(nn.Conv2d(3, 24, 2), nn.BatchNorm2d(24)).cuda()
for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.float()
for p in model.parameters():
    p.requires_grad = False
model.half()
head = nn.Linear(24, 10).cuda()
optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
""",
            "a whole base frozen in a loop (not one named tensor): the trained head is another module",
        ),
        Valid(
            """
import torch
weight_dtype = torch.float16 if args.mixed_precision == "fp16" else torch.float32
disc = Discriminator().cuda()
disc.backbone.requires_grad_(False)
disc.to(dtype=weight_dtype)
optimizer = torch.optim.AdamW(disc.parameters(), lr=1e-4)
for batch in loader:
    disc(batch).mean().backward()
    optimizer.step()
""",
            "part of the cast module is frozen before the optimizer: its trainable parts may be kept fp32",
        ),
        Valid(
            """
import torch
weight_dtype = torch.float16 if args.mixed_precision == "fp16" else torch.float32
disc = Discriminator().cuda()
disc.backbone.requires_grad_(False)
optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, disc.parameters()), lr=1e-4)
disc.to(dtype=weight_dtype)
disc.heads.float()
for batch in loader:
    disc(batch).mean().backward()
    optimizer.step()
""",
            "a part frozen, and after the cast a part put back to fp32: the trained part may be that one",
        ),
        Valid(
            """
import torch
weight_dtype = torch.float32
if accelerator.mixed_precision == "fp16":
    weight_dtype = torch.float16
controlnet.requires_grad_(True)
controlnet.to(accelerator.device, dtype=weight_dtype)
if accelerator.unwrap_model(controlnet).dtype != torch.float32:
    raise ValueError("trainable models must start in full float32 precision")
optimizer = torch.optim.AdamW(controlnet.parameters(), lr=1e-5)
""",
            "the script stops unless the cast module is fp32: a low-precision run never reaches the optimizer",
        ),
        Valid(
            """
import torch
weight_dtype = torch.float32
if accelerator.mixed_precision == "fp16":
    weight_dtype = torch.float16
prior = WuerstchenPrior.from_pretrained(path, subfolder="prior")
prior.to(accelerator.device, dtype=weight_dtype)
prior.add_adapter(LoraConfig(r=4, target_modules=["to_q", "to_v"]))
optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, prior.parameters()), lr=1e-4)
""",
            "an adapter added after the cast: the optimizer trains its parameters, made in a dtype the library picks",
        ),
        Valid(
            """
import torch
weight_dtype = torch.float16 if args.fp16 else torch.float32
model = Net().cuda().to(weight_dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for epoch in range(epochs):
    for batch in loader:
        model(batch).mean().backward()
        optimizer.step()
    model.float()
""",
            "put back to fp32 inside the epoch loop: the next epochs train fp32 weights",
        ),
        Valid(
            """
import torch


def freeze(module):
    for p in module.parameters():
        p.requires_grad = False


model = Net().cuda()
freeze(model.encoder)
model.half()
model.head.float()
optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, model.parameters()), lr=1e-4)
""",
            "a helper freezes what its caller passes: which module cannot be told, the file freezes",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
import bitsandbytes as bnb
weight_dtype = torch.float32
if accelerator.mixed_precision == "fp16":
    weight_dtype = torch.float16
vae.requires_grad_(True)
if args.decoder_only:
    vae.encoder.requires_grad_(False)
if args.use_8bit_adam:
    optimizer_class = bnb.optim.AdamW8bit
else:
    optimizer_class = torch.optim.AdamW
optimizer = optimizer_class(filter(lambda p: p.requires_grad, vae.parameters()), lr=4.5e-6)
vae, optimizer = accelerator.prepare(vae, optimizer)
vae.to(accelerator.device, dtype=weight_dtype)
for batch in loader:
    accelerator.backward(vae(batch).sample.mean())
    optimizer.step()
""",
            line=15,
            why="diffusers' train_autoencoderkl.py: the optimizer (a class picked at run time) holds the trained "
                "parameters, then the whole vae is cast in place; freezing its encoder keeps no trained part fp32",
        ),
        Invalid(
            """
import torch
import bitsandbytes as bnb
weight_dtype = torch.float32
if accelerator.mixed_precision == "fp16":
    weight_dtype = torch.float16
transformer.requires_grad_(True)
transformer.to(accelerator.device, dtype=weight_dtype)
if args.use_8bit_adam:
    optimizer_class = bnb.optim.AdamW8bit
else:
    optimizer_class = torch.optim.AdamW
optimizer_G = optimizer_class(transformer.parameters(), lr=1e-5)
for step in range(args.max_train_steps):
    transformer(batch).mean().backward()
    optimizer_G.step()
if args.upcast_before_saving:
    transformer.to(torch.float32)
transformer.save_pretrained(args.output_dir)
""",
            line=7,
            why="diffusers' SANA-Sprint script: put back to fp32 only once the training loop is over, to save",
        ),
        Invalid(
            """
import torch


def test_fp16_sgd_converges():
    model = Net().cuda().half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in batches():
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1
""",
            line=5,
            why="the test steps in a loop: it trains the fp16 weights (the VALID twin steps once)",
        ),
        Invalid(
            """
import torch


def step_once(x):
    model = Net().cuda().half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model(x).sum().backward()
    optimizer.step()
    assert model.weight.dtype == torch.float16
    return model
""",
            line=5,
            why="no test function: a single step of a helper may be any training's",
        ),
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
        Invalid(
            """
import torch
from torch import nn


def make_net():
    net = nn.Sequential(nn.Conv2d(3, 24, 2, bias=True), nn.BatchNorm2d(24), nn.Flatten(), nn.LazyLinear(10))
    net[0].weight.requires_grad = False
    net = net.half().cuda()
    for mod in net.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.float()
    return net


def main(loader, lr):
    model = make_net()
    norm = [p for k, p in model.named_parameters() if "1." in k and p.requires_grad]
    other = [p for k, p in model.named_parameters() if "1." not in k and p.requires_grad]
    groups = [dict(params=norm, lr=lr * 64), dict(params=other, lr=lr)]
    optimizer = torch.optim.SGD(groups, momentum=0.9, nesterov=True)
    for x, y in loader:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
""",
            line=8,
            why="a builder of the file casts the whole net (its BatchNorm put back to float: the conv and linear weights stay fp16)",
        ),
        Invalid(
            """
import torch


def build(cfg):
    return Net(cfg).cuda().half()


model = build(cfg)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
""",
            line=5,
            why="the builder returns the cast itself",
        ),
        Invalid(
            """
import torch
from torch import nn


class CifarNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.whiten = nn.Conv2d(3, 24, 2)
        self.whiten.weight.requires_grad = False
        self.norm = nn.BatchNorm2d(24)
        self.head = nn.Linear(24, 10, bias=False)
        for mod in self.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.float()
            else:
                mod.half()


def train(model, loader):
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for x, y in loader:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


net = torch.compile(CifarNet().cuda())
train(net, loader)
""",
            line=16,
            why="the class casts its own submodules in `__init__`; the file's only call of `train` passes an instance",
        ),
        Invalid(
            """
import torch
weight_dtype = torch.float32
if accelerator.mixed_precision == "fp16":
    weight_dtype = torch.float16
net = Net().cuda()
net.train()
clip_model = load_clip().cuda()
clip_model.requires_grad_(False)
optimizer = torch.optim.AdamW(net.parameters(), lr=5e-6)
net.to(dtype=weight_dtype)
clip_model.to(dtype=weight_dtype)
for batch in loader:
    loss = (clip_model(net(batch)) - 1).pow(2).mean()
    loss.backward()
    optimizer.step()
""",
            line=10,
            why="only another module (a frozen loss network) is frozen: the trained `net` is cast with it",
        ),
        Invalid(
            """
import torch


def make_net():
    net = Net().cuda().half()
    return net


def make_optimizer(net, lr):
    return torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)


def setup(net, lr):
    return net, make_optimizer(net, lr)


def main(loader):
    net = make_net()
    net, optimizer = setup(net, 0.1)
    for x, y in loader:
        criterion(net(x), y).backward()
        optimizer.step()
""",
            line=5,
            why="the builder's fp16 module is handed through `setup` to the optimizer's helper",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        from amplint.model import trained_casts

        for found in trained_casts(ctx, "fp16"):
            if _one_step_test(found.ctor):
                continue  # a state check after one step (an EMA, a state_dict round trip): no training
            yield self._diagnostic(ctx, found.cast, found.ctor, chosen=found.chosen, built=found.built, klass=found.optimizer_class)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """An optimizer built on a module that another file made fp16 (a builder, a loader,
        a `convert_weights(model)` helper); same-file casts are `check`'s."""
        from amplint.model import cast_modules

        for found in cast_modules(project, "fp16", project_optimizers=True):
            opt = found.optimizer.rsplit(".", 1)[-1]
            made = f"made fp16 when `{found.condition}`" if found.condition else "made fp16"
            message = f"`{opt}` updates the parameters of a `{found.name}` {made}, with no fp32 master copy"
            if len(message) >= 100:
                message = f"`{opt}` updates a `{found.name}` {made}, with no fp32 master copy"
            data = {"optimizer": opt, "optimizer_class": found.optimizer, "dtype": "fp16", "device": None, "cast_at": project.where(*found.site)}
            if found.condition:
                data["condition"] = found.condition
            yield project.diagnostic(self, found.call, message, data=data, related=(project.related(*found.site, "made fp16 here"),),
                                     help="Keep the model fp32 and use `torch.autocast` (with a GradScaler for fp16)")
        yield from self._chosen_across_files(project)
        yield from self._evaluated_in_place(project)

    def _evaluated_in_place(self, project: Project) -> Iterator[Diagnostic]:
        """`evaluate(model, ...)` called by the training loop casts its parameter in place
        (`if args.fp16_eval: model.half()`) and never back: the loop's next pass trains the
        fp16 module (same file or another; the per-file check sees neither half)."""
        from amplint.model import evaluated_casts

        for found in evaluated_casts(project, "fp16"):
            opt = found.optimizer.rsplit(".", 1)[-1]
            spelled = found.cast.record["f"]
            spelled = f"{spelled}()" if spelled.endswith(".half") else f"{spelled}(...)"
            message = f"`{spelled}` in `{found.helper_name}` makes the trained `{found.name}` fp16: `{opt}` then has no fp32 master copy"
            if len(message) >= 100:
                message = f"`{found.helper_name}` makes the trained `{found.name}` fp16 in place: `{opt}` then has no fp32 master copy"
            related = (
                project.related(found.helper.path, found.helper.row, f"the training loop passes `{found.name}` here"),
                project.related(found.train.path, found.train.row, "and trains it here, after the cast on the next pass"),
            )
            data = {"optimizer": opt, "optimizer_class": found.optimizer, "dtype": "fp16", "device": None,
                    "subject": found.name, "cast_at": project.where(found.cast.path, found.cast.row)}
            yield project.diagnostic(self, found.cast, message, data=data, related=related,
                                     help="Evaluate a copy (`copy.deepcopy(model).half()`), or cast the model back with `model.float()` before training goes on")

    def _chosen_across_files(self, project: Project) -> Iterator[Diagnostic]:
        """`unet.to(weight_dtype)` where `weight_dtype` comes from a project function that picks
        it among dtype literals, float16 one of them (`train_util.prepare_dtype(args)`), or the
        optimizer from a project helper constructing a torch optimizer on the parameters it is
        given (`train_util.get_optimizer(args, trainable_params)`): what one file cannot see."""
        from amplint.model import ProjectCall, chosen_casts

        for found in chosen_casts(project, lambda dtypes: "fp16" in dtypes):
            record, name, build = found.record, found.name, found.build
            cast = ProjectCall(found.path, found.qual, record)
            helper = build.call.record["f"].rsplit(".", 1)[-1] if build.helper else build.optimizer.rsplit(".", 1)[-1]
            message = f"`{record['f']}({name})` may make the model fp16: `{helper}` has no fp32 master copy"
            if len(message) >= 100:
                message = f"`{record['f']}(...)` may make the model fp16, with no fp32 master copy"
            related = []
            for site in found.choice[1][:1]:
                related.append(project.related(*site, "picks the dtype, float16 among its choices"))
            related.append(project.site(build.call, "the optimizer is built on its parameters here"))
            for other in found.more[:3]:
                related.append(project.site(ProjectCall(found.path, found.qual, other), "also cast here"))
            data = {
                "optimizer": build.optimizer.rsplit(".", 1)[-1],
                "optimizer_class": build.optimizer,
                "dtype": "fp16",
                "device": None,
                "subject": record["f"][: -len(".to")],
            }
            yield project.diagnostic(self, cast, message, data=data, related=tuple(related),
                                     help="Keep the model fp32 and use `torch.autocast` (with a GradScaler for fp16)")

    def _diagnostic(
        self, ctx: ModuleContext, cast: LowPrecisionCast, ctor: CallInfo, chosen: bool = False, built: bool = False,
        klass: Optional[str] = None,
    ) -> Diagnostic:
        from amplint.model import describe_cast, literal_number

        klass = klass or ctor.qualname  # a class picked at run time: the candidate the rule knows
        opt = (klass or "optimizer").rsplit(".", 1)[-1]
        what = describe_cast(ctx, cast, chosen)
        message = f"{what}: `{opt}` updates fp16 parameters with no fp32 master copy"
        if chosen:  # the dtype is picked at run time among literals, float16 one of them
            message = f"{what} may make the model fp16: `{opt}` then has no fp32 master copy"
        help = "Keep the model fp32 and use `torch.autocast` (with a GradScaler for fp16)"
        data = {
            "optimizer": opt,
            "optimizer_class": klass,
            "lr": literal_number(ctor.arg(1, "lr")),
            "eps": literal_number(ctor.arg(None, "eps")),
            "dtype": "fp16",
            "device": None,  # where the cast module runs is not known statically
            "subject": cast.subject,
            "snippet": ctx.code_for(ctor.node),  # the optimizer's constructor, which the verifier runs
        }
        related = (ctx.related(ctor.node, "the optimizer is built on its result here"),) if built else ()
        return ctx.diagnostic(self, cast.call.node, message, data=data, help=help, related=related)


def _one_step_test(ctor: "CallInfo") -> bool:
    """The optimizer is built in a test function (`test*`, at module level or a method of a
    `Test*` / `*TestCase` class) that asserts and whose body (its nested functions included)
    calls no `step` or `backward` inside a loop: it steps once to check state, not to train."""
    import libcst as cst

    from amplint.model import descendants

    scope = ctor.scope
    node = scope.node
    if not isinstance(node, cst.FunctionDef) or not node.name.value.startswith("test"):
        return False
    if scope.parent is None or not scope.parent.is_module:
        return False  # a nested function: a helper of something else
    if scope.cls is not None:
        bases = [b.value for b in scope.cls.bases]
        named = scope.cls.name.value.startswith("Test") or any(
            (b.attr.value if isinstance(b, cst.Attribute) else getattr(b, "value", "")).endswith("TestCase") for b in bases
        )
        if not named:
            return False
    asserts = False
    for sub in descendants(node):
        if isinstance(sub, (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            if any(_steps(c) for c in descendants(sub)):
                return False
        elif isinstance(sub, cst.Assert) or (isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute)
                                             and sub.func.attr.value.startswith("assert")):
            asserts = True
    return asserts


def _steps(node: "object") -> bool:
    import libcst as cst

    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in ("step", "backward")
