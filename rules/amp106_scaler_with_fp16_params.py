"""AMP106 scaler-with-fp16-params."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import GRAD_SCALERS, Diagnostic, Invalid, Project, ProjectCall, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import CallInfo, Event, LowPrecisionCast, ModuleContext

#: wrappers that keep the wrapped module's parameters (and their dtype)
_WRAPPERS = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.compile",
)
#: methods that return the same module with the same parameter dtype
_SAME_DTYPE_METHODS = ("cuda", "to", "train", "eval", "cpu", "requires_grad_", "half")


class ScalerWithFp16Params(Rule):
    """
    ## What it does
    Flags `scaler.step(optimizer)` / `scaler.unscale_(optimizer)` where the
    optimizer updates the parameters of a model converted to fp16 by
    `.half()`, `.to(torch.float16)` or `from_pretrained(torch_dtype=torch.float16)`,
    and, for a CUDA GradScaler, of a model converted to bf16. Across files
    (the project model) also when a submodule of the optimized model is the
    low-precision part: its class's `__init__` builds `self.decoder =
    Decoder(...)` from another module, whose `__init__` builds `self.cond =
    TextConditioner(...)`, which loads `self.encoder = ...from_pretrained(...)
    .to(torch.float16)` (up to four attribute levels down), or when the whole
    model was cast in another file.

    ## Why is this bad?
    GradScaler keeps fp32 master copies of nothing: it unscales the
    parameters' `.grad` in place and refuses fp16 gradients. The first
    `unscale_`/`step` raises `ValueError: Attempting to unscale FP16 gradients.`
    Mixed precision means fp32 parameters with autocast
    choosing fp16 per op; `.half()` on the trained model is pure fp16 training,
    where updates round away and Adam's eps is 0.

    bf16 parameters pass that check, but CUDA's unscale kernel is built for
    fp32 and fp16 only (`AT_DISPATCH_FLOATING_TYPES_AND_HALF` in
    `AmpKernels.cu`): on a GPU the first `unscale_`/`step` raises
    `NotImplementedError: "_amp_foreach_non_finite_check_and_unscale_cuda" not
    implemented for 'BFloat16'` (measured on an H200, torch 2.11+cu130). The CPU
    kernel accepts bf16, which is why amplint's measurement on CPU saw no error.
    bf16 needs no loss scaling anyway: drop the scaler.

    ## Example
    ```python
    model = Net().cuda().half()
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    ...
    scaler.step(optimizer)
    ```

    ## Use instead
    ```python
    model = Net().cuda()  # fp32 parameters
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    ...
    scaler.step(optimizer)
    ```

    ## Fix safety
    No fix: removing the cast changes memory use and the input dtypes the
    model expects.

    ## Verification
    `amplint --verify` runs the flagged cast on a tiny model, takes one
    scaled step with a real GradScaler and reports the exception `step`
    raises.

    ## Notes
    bf16 parameters are flagged only when the scaler is a CUDA one
    (`GradScaler()`, `GradScaler("cuda")`, `torch.cuda.amp.GradScaler`); a CPU
    scaler, or one whose device is chosen at run time, accepts or may accept
    them. Silent for fp16
    modules the optimizer does not update (a frozen `vae.half()` next to
    `AdamW(unet.parameters())`, or `requires_grad_(False)`), for optimizers
    over a `requires_grad` filter (trainable adapters are often fp32), for a
    model cast back with `.float()`, for master-weight schemes (the optimizer
    holds fp32 copies), and when the scaler is built with `enabled=False`.

    Across files the optimizer and the scaler are read where the step is:
    locals of its function, or `self.optimizer` / `self.scaler` bound in its
    class (every binding a torch optimizer constructor over `m.parameters()`,
    every one of the scaler a torch GradScaler not built with a literal
    `enabled=`). A submodule counts only when nothing in its class freezes it:
    a `requires_grad_(...)` in the binding's chain
    (`from_pretrained(name).requires_grad_(False).to(torch.float16)`) or a
    freeze in `__init__` (`self.encoder.requires_grad_(False)`, also with a
    run-time argument) keeps it silent, as does a submodule kept out of the
    module's attributes. One finding per optimizer and function, at the first
    `unscale_`/`step`, with the cast as related location. A framework's own
    scaler (Lightning's `"16-mixed"` plugin, the Hugging Face Trainer) is not
    followed here, with one accelerate shape as the exception:

    accelerate builds a GradScaler when it runs fp16, and the prepared
    optimizer's `step()` (and `accelerator.clip_grad_norm_`) unscales with it.
    Flagged, at the cast: `net.to(dtype=weight_dtype)` where every float16
    binding of `weight_dtype` seen before it is taken under `if
    accelerator.mixed_precision == "fp16":` (or `torch.float16 if ... == "fp16"
    else ...`; `args.mixed_precision` counts when it is what the file's
    `Accelerator(mixed_precision=...)` gets; a float16 taken under `if
    accelerator.state.deepspeed_plugin:` is DeepSpeed's run, with no
    GradScaler), so the weights are fp16 exactly on the run that scales; the cast is on no `if` branch, and `net`'s own
    parameters (no `requires_grad` filter) are those of an optimizer built in
    the same function, handed to `prepare` and stepped after the cast. An
    error when the Accelerator's precision is `"fp16"` in the code, a warning
    ("when accelerate runs fp16") when it is decided at run time. Silent when
    the module is frozen (`requires_grad_(False)`), cast back
    (`cast_training_params(net, dtype=torch.float32)`, `.float()`), given
    adapters after the cast (`add_adapter`, `get_peft_model`), when an
    `Accelerator` of the file adds a DeepSpeed / FSDP / Megatron-LM plugin or
    unpacks `**kwargs`, and for a weight dtype chosen apart from accelerate's
    precision (AMP201 covers that fp16 training).

    A warning too, at the test, for the fp32 upcast of adapters keyed on the
    script's option rather than on accelerate's precision: the frozen `unet` is
    cast to such a `weight_dtype` (or loaded with `torch_dtype=weight_dtype`),
    `unet.add_adapter(...)` then gives it adapters of the layers' dtype (peft
    moves them to the base layer's dtype; only `get_peft_model` upcasts), and
    the one upcast before the first `backward` is under `if
    args.mixed_precision == "fp16":`, where `args.mixed_precision` is what
    `Accelerator(mixed_precision=...)` gets and the file's `add_argument`
    gives it no default (`args` bound to `parser.parse_args()`, or to a call
    of a function of the file that returns it). An explicit value wins in accelerate, but None lets
    it read `ACCELERATE_MIXED_PRECISION`, which `accelerate launch
    --mixed_precision fp16` and accelerate's config file set: on that run the
    upcast is skipped and the GradScaler meets fp16 adapter gradients. Silent
    when the option has a default or is required or assigned, when the
    parser is not in the file, when an upcast runs outside that test (on
    every run, or keyed on `accelerator.mixed_precision`), and when the
    adapter is added on one branch only:

    ```python
    parser.add_argument("--mixed_precision", default=None, choices=["no", "fp16", "bf16"])
    ...
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    unet.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(lora_config)
    if args.mixed_precision == "fp16":  # AMP106 (warning): use accelerator.mixed_precision
        cast_training_params(unet, dtype=torch.float32)
    ```

    ## References
    - amplint's evidence page: `amplint --explain AMP106` (docs/evidence.md#amp106)
    - https://pytorch.org/docs/stable/amp.html#torch.autocast
    """

    code = "AMP106"
    name = "scaler-with-fp16-params"
    severity = Severity.ERROR
    message = "GradScaler used on fp16 parameters (or bf16 ones on CUDA)"
    triggers = ("half(", "float16", "torch.half", "fp16", "Half")
    # a scaler's unscale_/step, and a scaler: GradScaler(...), `x.scale(loss)`, `unscale_`, a *scaler* parameter
    # ... or an accelerate `Accelerator` (its GradScaler under fp16: `_accelerate_casts`)
    requires = (("unscale_", "step"), ("GradScaler", "unscale_", "scaler", "Scaler", "SCALER", "scale(", "scale (", "Accelerator"))
    gate_check = "amplint.core.gates:scaler_stepped"

    VALID = [
        Valid(
            """
import torch
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            "fp32 parameters under fp16 autocast",
        ),
        Valid(
            """
import torch
vae = AutoencoderKL.from_pretrained(path, subfolder="vae", torch_dtype=torch.float16)
vae.requires_grad_(False)
unet = UNet2DConditionModel.from_pretrained(path, subfolder="unet")
optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5)
scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    with torch.autocast("cuda"):
        latents = vae.encode(batch["pixels"].half()).latent_dist.sample()
        loss = unet(latents, batch["t"]).sample.pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            "a frozen fp16 VAE next to an fp32 UNet (diffusers fine-tuning)",
        ),
        Valid(
            """
import torch
model = Net().to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cpu")
scaler.scale(model(x).float().mean()).backward()
scaler.step(optimizer)
scaler.update()
""",
            "bf16 parameters and a CPU scaler: the CPU unscale kernel accepts bf16",
        ),
        Valid(
            """
import torch
model = Net().cuda().to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler(args.device)
scaler.scale(model(x).float().mean()).backward()
scaler.step(optimizer)
scaler.update()
""",
            "bf16 parameters and a scaler whose device is chosen at run time",
        ),
        Valid(
            """
import torch
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float16)
model = get_peft_model(model, lora_config)
optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, model.parameters()), lr=2e-4)
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
""",
            "LoRA adapters on an fp16 base: only trainable (fp32) parameters are optimized",
        ),
        Valid(
            """
import torch
model = Net().half()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda", enabled=False)
scaler.scale(loss).backward()
scaler.step(optimizer)
""",
            "a disabled scaler does not unscale",
        ),
        Valid(
            """
import torch
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    scaler.scale(loss_fn(model, batch)).backward()
    scaler.step(optimizer)
    scaler.update()
export = model.half().eval()
torch.onnx.export(export, x, "model.onnx")
""",
            "an fp16 inference copy made after training",
        ),
        Valid(
            """
import torch

class Exporter:
    def __init__(self, net):
        self.model = net.half()

class Trainer:
    def __init__(self):
        self.optimizer = torch.optim.AdamW(self.model.parameters())
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, x):
        self.scaler.scale(self.model(x).float().mean()).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            "`self.model` of another class: the one `Trainer` optimizes is not cast here",
        ),
        Valid(
            """
import torch

class Inference:
    def __init__(self, net):
        self.model = net.half()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.0)

class Trainer:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            "`self.optimizer` of another class: `Trainer`'s own is passed in",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator
from diffusers.training_utils import cast_training_params


def main(args):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float32
    if accelerator.mixed_precision == "fp16":
        weight_dtype = torch.float16
    unet.requires_grad_(False)
    vae.requires_grad_(False)
    unet.to(accelerator.device, dtype=weight_dtype)
    vae.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(lora_config)
    if args.mixed_precision == "fp16":
        cast_training_params(unet, dtype=torch.float32)
    lora_layers = filter(lambda p: p.requires_grad, unet.parameters())
    optimizer = torch.optim.AdamW(lora_layers, lr=1e-4)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for batch in loader:
        accelerator.backward(unet(batch).mean())
        optimizer.step()


def full_finetune(args):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    vae.to(accelerator.device, dtype=weight_dtype)
    if not args.train_text_encoder:
        text_encoder.to(accelerator.device, dtype=weight_dtype)
    params = itertools.chain(unet.parameters(), text_encoder.parameters()) if args.train_text_encoder else unet.parameters()
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    unet, optimizer = accelerator.prepare(unet, optimizer)
    for batch in loader:
        accelerator.backward(unet(batch).mean())
        optimizer.step()


def own_choice(args):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float16 if args.half_weights else torch.float32
    model.to(dtype=weight_dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in loader:
        accelerator.backward(model(batch).mean())
        optimizer.step()
""",
            "LoRA on a frozen fp16 unet (adapters fp32), frozen modules cast, a text encoder cast only when it is not trained, "
            "a weight dtype chosen apart from accelerate's precision (AMP201's)",
        ),
        Valid(
            """
import argparse
import torch
from accelerate import Accelerator
from diffusers.training_utils import cast_training_params


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16"])
    args = parser.parse_args()
    return args


def main(args):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    unet.requires_grad_(False)
    unet.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(lora_config)
    if accelerator.mixed_precision in ["fp16", "bf16"]:
        cast_training_params(unet, dtype=torch.float32)
    optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, unet.parameters()))
    unet, optimizer = accelerator.prepare(unet, optimizer)
    for batch in loader:
        accelerator.backward(unet(batch).mean())
        optimizer.step()
""",
            "the adapters' fp32 upcast keyed on accelerate's own precision, however fp16 was chosen",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
model = Net().cuda().half()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x.half()), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            line=9,
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import GradScaler
from transformers import AutoModelForSequenceClassification

class Trainer:
    def __init__(self, name):
        self.model = AutoModelForSequenceClassification.from_pretrained(name, torch_dtype=torch.float16)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=2e-5)
        self.scaler = GradScaler()

    def training_step(self, batch):
        self.scaler.scale(self.model(**batch).loss).backward()
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            line=13,
        ),
        Invalid(
            """
import torch as T
def main(args):
    model = build_model()
    model.to(device, dtype=T.float16)
    model = T.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = T.optim.SGD([{"params": model.parameters(), "lr": 0.1}])
    scaler = T.amp.GradScaler(enabled=args.amp)
    for x, y in loader:
        scaler.scale(crit(model(x), y)).backward()
        scaler.step(opt)
        scaler.update()
""",
            line=10,
            why="cast in place, then wrapped by DDP; enabled decided at run time but the cast is unconditional",
        ),
        Invalid(
            """
import torch
model = Net().cuda().to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")
scaler.scale(model(x).float().mean()).backward()
scaler.step(optimizer)
scaler.update()
""",
            line=6,
            why="bf16 parameters and a CUDA scaler: CUDA's unscale kernel has no bf16 version",
        ),
        Invalid(
            """
import torch

class Base:
    def __init__(self, net):
        self.model = net.half()

class Trainer(Base):
    def __init__(self, net):
        super().__init__(net)
        self.optimizer = torch.optim.AdamW(self.model.parameters())
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, x):
        self.scaler.scale(self.model(x).float().mean()).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            line=15,
            why="`self.model` cast by a base class defined in the file",
        ),
        Invalid(
            """
import torch
from accelerate import Accelerator


def main(args):
    accelerator = Accelerator(mixed_precision="fp16")
    net = Generator(lora_rank=8)
    disc = Discriminator().cuda()
    params = [p for n, p in net.unet.named_parameters() if "lora" in n]
    params = params + list(net.vae.decoder.skip_conv.parameters())
    optimizer = torch.optim.AdamW(params, lr=5e-6)
    optimizer_disc = torch.optim.AdamW(disc.parameters(), lr=5e-6)
    net, disc, optimizer, optimizer_disc, loader = accelerator.prepare(net, disc, optimizer, optimizer_disc, loader)
    weight_dtype = torch.float32
    if accelerator.mixed_precision == "fp16":
        weight_dtype = torch.float16
    elif accelerator.mixed_precision == "bf16":
        weight_dtype = torch.bfloat16
    net.to(dtype=weight_dtype)
    disc.to(dtype=weight_dtype)
    for batch in loader:
        loss = net(batch).mean()
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad()
        loss_d = disc(net(batch)).mean()
        accelerator.backward(loss_d)
        optimizer_disc.step()
""",
            line=19,
            count=2,
            why="weight_dtype is fp16 exactly when accelerate runs fp16 with its GradScaler, and the trained modules are cast to it",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        yield from self._accelerate_casts(ctx)
        yield from self._option_keyed_upcasts(ctx)
        casts = [c for c in ctx.low_precision_casts if c.dtype in ("fp16", "bf16") and c.subject]
        if not casts:
            return
        done: Set[str] = set()
        for scope in ctx.scopes:
            for event in scope.events:
                if event.kind not in ("unscale", "scaler_step") or not event.optimizer or event.optimizer in done:
                    continue
                info = ctx.scaler(event.scaler)
                if info is None or info.enabled is False:
                    continue
                usable = [c for c in casts if c.dtype == "fp16" or info.device == "cuda"]
                found = _low_precision_module(ctx, event, usable, info.enabled)
                if found is not None:
                    done.add(event.optimizer)
                    yield self._diagnostic(ctx, event, *found)

    def _accelerate_casts(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """`net.to(dtype=weight_dtype)` where `weight_dtype` is fp16 exactly when accelerate runs
        fp16 (`if accelerator.mixed_precision == "fp16": weight_dtype = torch.float16`), `net`'s
        own parameters are those of an optimizer the accelerator prepares and steps: on that run
        accelerate's GradScaler unscales fp16 gradients, which raises."""
        from amplint.model import ACCELERATORS, cast_subjects, choice_casts, dtype_choices, not_a_training_conversion

        if not any(c.calls_any(ACCELERATORS) for c in ctx.calls):
            return
        for cast in choice_casts(ctx, lambda dtypes: "fp16" in dtypes, "fp16"):
            if cast.call.method != "to" or any(f.kind in ("if", "else") for f in cast.call.path):
                continue  # a cast on one branch: perhaps the frozen path's (`if not args.train_text_encoder:`)
            if not_a_training_conversion(ctx, cast):
                continue
            dtype_node = next(
                (a.value for a in cast.call.node.args if (a.keyword is None or a.keyword.value == "dtype")
                 and "fp16" in dtype_choices(ctx, a.value, cast.call.scope, cast.call.order)), None,
            )  # `unet.to(accelerator.device, dtype=weight_dtype)`: the dtype, not the device
            chosen = _fp16_with_accelerate(ctx, dtype_node, cast.call)
            if chosen is None:
                continue
            accelerator, certain = chosen
            subjects = cast_subjects(ctx, cast)
            found = _accelerated_optimizer(ctx, cast, subjects)
            if found is None:
                continue
            subject = min(subjects, key=lambda s: (len(s), s))  # not the set's hash order
            name = ctx.code_for(dtype_node)
            message = f"`{accelerator}`'s GradScaler raises on the fp16 gradients of `{subject}`"
            if not certain:
                message = "when accelerate runs fp16, " + message
            data = {"optimizer": found, "module": subject, "cast_row": ctx.position(cast.call.node)[0].row, "dtype": "fp16",
                    "weight_dtype": name, "accelerator": accelerator}
            help = f"Keep the trained parameters fp32 (cast only the frozen modules to `{name}`)"
            # an accelerate precision fixed to "fp16" in the code raises on every run; one decided
            # at run time (an option, `accelerate launch`/config) only on the fp16 run
            yield ctx.diagnostic(self, cast.call.node, message, data=data, help=help, severity=None if certain else Severity.WARNING)

    def _option_keyed_upcasts(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """`if args.mixed_precision == "fp16": cast_training_params(unet, dtype=torch.float32)`,
        the fp32 upcast of adapters added to `unet` after it was cast to a weight dtype that is
        fp16 exactly when accelerate runs fp16: `args.mixed_precision` is what the Accelerator
        gets, but its default None lets accelerate take fp16 from `accelerate launch
        --mixed_precision fp16` or its config file, and on that run the adapters stay fp16
        under accelerate's GradScaler."""
        from amplint.model import ACCELERATORS, cast_subjects, choice_casts, not_a_training_conversion

        if not any(c.calls_any(ACCELERATORS) for c in ctx.calls) or not _plain_accelerators(ctx):
            return
        options = _unset_options(ctx)
        if not options:
            return
        done: Set[int] = set()
        for cast in choice_casts(ctx, lambda dtypes: "fp16" in dtypes, "fp16"):
            if any(f.kind in ("if", "else") for f in cast.call.path) or not_a_training_conversion(ctx, cast):
                continue
            dtype_node = _chosen_dtype(ctx, cast.call)
            if dtype_node is None or _fp16_with_accelerate(ctx, dtype_node, cast.call, via_option=False) is None:
                continue
            scope = cast.call.scope
            subjects = cast_subjects(ctx, cast)
            later = sorted((c for c in ctx.calls if c.scope is scope and c.order > cast.call.order), key=lambda c: c.order)
            adapter = next(
                (c for c in later if c.method in ("add_adapter", "inject_adapter") and c.receiver_dotted in subjects
                 and not any(f.kind in ("if", "else") for f in c.path)), None,
            )  # an adapter on every run, which takes the (fp16) dtype of the layer it wraps
            if adapter is None or id(adapter.node) in done:
                continue
            backward = next((c for c in later if c.method == "backward" and c.order > adapter.order), None)
            if backward is None or not any(c.method == "prepare" for c in later) or not any(
                c.method == "step" and c.order > backward.order for c in later
            ):
                continue  # no prepared training step here (the optimizer class may be chosen: `optimizer_cls(...)`)
            upcasts = [c for c in later if adapter.order < c.order < backward.order and _upcasts(ctx, c, subjects)]
            guards = [_option_guard(c, options) for c in upcasts]
            if not upcasts or any(g is None for g in guards):
                continue  # none (another shape), or one that runs whatever the option says
            done.add(id(adapter.node))
            test = guards[0]
            option = next(o for o in options if o in ctx.code_for(test))
            subject = adapter.receiver_dotted
            message = f"`{option}` is None when accelerate launch/config picks fp16: the adapters stay fp16"
            help = f"Test `accelerator.mixed_precision` (set however fp16 is chosen) before upcasting `{subject}`'s adapters"
            data = {"module": subject, "option": option, "cast_row": ctx.position(cast.call.node)[0].row,
                    "adapter_row": ctx.position(adapter.node)[0].row, "dtype": "fp16"}
            related = (ctx.related(cast.call.node, "cast to the weight dtype here"), ctx.related(adapter.node, "adapter added here"))
            yield ctx.diagnostic(self, test, message, data=data, help=help, related=related, severity=Severity.WARNING)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """`scaler.step(optimizer)` / `scaler.unscale_(optimizer)` where the optimizer updates a
        model one of whose submodules, built in its class's `__init__` (in any file of the
        project, a few levels down: `self.decoder = Decoder()` whose `self.cond =
        TextConditioner()` casts `self.encoder` to fp16), holds low-precision parameters; or a
        whole model cast in another file. Same-file whole-model casts are `check`'s."""
        done: Set[Tuple[str, str, str]] = set()  # one finding per optimizer per function, as `check`
        for call in sorted(project.calls(), key=lambda c: (c.path, c.func, c.row)):
            f = call.record["f"]
            if not f.endswith((".step", ".unscale_")) or not call.record["a"]:
                continue
            first = call.record["a"][0]
            if not first or "n" not in first or (call.path, call.func, first["n"]) in done:
                continue
            scaler = _project_scaler(project, call, f.rsplit(".", 1)[0])
            if scaler is None:
                continue
            for ctor in _optimizer_ctors(project, call, first["n"]):
                found = _cast_submodule(project, ctor, scaler, call.path)
                if found is not None:
                    done.add((call.path, call.func, first["n"]))
                    yield self._project_diagnostic(project, call, first["n"], *found)
                    break

    def _project_diagnostic(self, project: Project, call: ProjectCall, optimizer: str, module: str, t: tuple, dtype: str) -> Diagnostic:
        site = t[-1]
        scaler, _, method = call.record["f"].rpartition(".")
        fails = "raises" if dtype == "fp16" else "raises on CUDA"
        message = f"`{scaler}.{method}` {fails} on the {dtype} gradients of `{module}`"
        help = "Keep the parameters fp32 and let autocast run the ops in fp16" if dtype == "fp16" else "Drop the scaler: bf16 needs no loss scaling"
        data = {"optimizer": optimizer, "module": module, "cast_at": project.where(*site), "dtype": dtype}
        related = (project.related(site[0], site[1], f"made {dtype} here"),)
        return project.diagnostic(self, call, message, data=data, related=related, help=help)

    def _diagnostic(self, ctx: ModuleContext, event: Event, cast: LowPrecisionCast, module: str) -> Diagnostic:
        row = ctx.position(cast.call.node)[0].row
        method = cast.call.method or (cast.call.dotted or "").rsplit(".", 1)[-1]
        torch_name = "float16" if cast.dtype == "fp16" else "bfloat16"
        how = {"half": ".half()", "to": f".to({torch_name})", "type": f".type({torch_name})"}.get(
            method, f"{method}(torch_dtype={torch_name})"
        )
        call = "step" if event.kind == "scaler_step" else "unscale_"
        fails = "raises" if cast.dtype == "fp16" else "raises on CUDA"
        message = f"`{event.scaler}.{call}` {fails} on the {cast.dtype} gradients of `{module}` (`{how}`)"
        if cast.dtype == "fp16":
            help = "Keep the parameters fp32 and let autocast run the ops in fp16"
        else:
            help = "Drop the scaler: bf16 needs no loss scaling"
        data = {"optimizer": event.optimizer, "module": module, "cast_row": row, "dtype": cast.dtype}
        return ctx.diagnostic(self, event.call.node, message, data=data, help=help)


def _mixed_precision_fp16(test: Optional["cst.CSTNode"]) -> Optional[str]:
    """`X.mixed_precision == "fp16"` (either side): the `X.mixed_precision` spelled, else None."""
    import libcst as cst

    from amplint.model import dotted_name, literal_string

    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.Equal):
        return None
    for side, other in ((test.left, target.comparator), (target.comparator, test.left)):
        spelled = dotted_name(side)
        if spelled and spelled.endswith(".mixed_precision") and literal_string(other) == "fp16":
            return spelled
    return None


def _fp16_with_accelerate(
    ctx: ModuleContext, node: Optional["cst.BaseExpression"], cast: "CallInfo", via_option: bool = True
) -> Optional[Tuple[str, bool]]:
    """(the accelerator as spelled, whether its precision is "fp16" in the code) whose fp16 mode is the one binding of the name `node` to
    float16 seen before `cast`: the binding sits under `if accelerator.mixed_precision ==
    "fp16":` (or is `torch.float16 if ... == "fp16" else ...`), where `accelerator` is an
    accelerate `Accelerator` that may run fp16, or `args.mixed_precision` is what an
    `Accelerator(mixed_precision=...)` of the file is given. None otherwise: a weight dtype
    chosen apart from accelerate (`--weight_dtype`) may be fp16 on a run with no scaler."""
    import libcst as cst

    from amplint.model import ACCELERATORS, accelerator_precision

    if not isinstance(node, cst.Name):
        return None
    bindings = [
        a for a in ctx.assignments_to(node.value)
        if not a.unpacked and a.order < cast.order and (a.scope is cast.scope or a.scope.is_module)
    ]
    spelled = None
    for a in bindings:
        if any(f.kind == "if" and _deepspeed_test(f.test) for f in a.path):
            continue  # accelerate runs DeepSpeed there: its engine scales, no GradScaler is built
        if isinstance(a.value, cst.IfExp) and ctx.dtype_of(a.value.body) == "fp16":
            test = _mixed_precision_fp16(a.value.test)
        elif ctx.dtype_of(a.value) == "fp16":
            frame = next((f for f in reversed(a.path) if f.kind == "if"), None)
            test = _mixed_precision_fp16(frame.test) if frame is not None else None
        else:
            continue
        if test is None:
            return None  # float16 on some other condition too
        spelled = test
    if spelled is None:
        return None
    owner = spelled[: -len(".mixed_precision")]
    precisions = accelerator_precision(ctx, owner, cast.scope)
    if precisions is not None:
        if precisions & {"fp16", "runtime"} and _plain_accelerators(ctx):
            return owner, precisions == {"fp16"}
        return None
    if not via_option:
        return None
    for call in ctx.calls:  # `args.mixed_precision`, handed to the Accelerator
        if call.calls_any(ACCELERATORS):
            given = call.arg(None, "mixed_precision")
            if given is not None and ctx.code_for(given) == spelled and _plain_accelerators(ctx):
                return "Accelerator", False
    return None


def _unset_options(ctx: ModuleContext) -> Set[str]:
    """The options (`args.mixed_precision`) a file's `Accelerator(mixed_precision=...)` gets whose
    argparse default is None (no `default=`, or `default=None`) and that are not required nor
    assigned in the file: accelerate then takes its precision from `accelerate launch
    --mixed_precision` or its config file, and the option stays None on such an fp16 run."""
    import libcst as cst

    from amplint.model import ACCELERATORS, literal_bool, option_read

    out: Set[str] = set()
    for call in ctx.calls:
        if not call.calls_any(ACCELERATORS):
            continue
        given = call.arg(None, "mixed_precision")
        option = option_read(ctx, given) if given is not None else None
        if option is None and given is not None:
            option = _returned_option(ctx, given)
        if option is None or "fp16" not in option.choices:
            continue
        spelled = ctx.code_for(given)
        if any(a.target == spelled for a in ctx.assignments):
            continue  # `args.mixed_precision = ...` somewhere: perhaps filled in from accelerate's
        defined = [c for c in ctx.calls if c.method == "add_argument" and ctx.position(c.node)[0].row == option.row]
        if len(defined) != 1:
            continue
        default, required = defined[0].arg(None, "default"), defined[0].arg(None, "required")
        if required is not None and literal_bool(required) is not False:
            continue
        if default is None or (isinstance(default, cst.Name) and default.value == "None"):
            out.add(spelled)
    return out


def _returned_option(ctx: ModuleContext, node: "cst.BaseExpression") -> Optional[Any]:
    """The option `args.mixed_precision` reads when `args` is bound only to calls of a function of
    the file that returns `parser.parse_args()` itself (`def get_args(): ... return
    parser.parse_args()`, `args = get_args()`), and the file defines that option once."""
    import libcst as cst

    from amplint.model import dotted_name, options

    if not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name):
        return None
    bound = [a for a in ctx.assignments if a.target == node.value.value]
    if not bound:
        return None
    for a in bound:
        func = dotted_name(a.value.func) if isinstance(a.value, cst.Call) and not a.unpacked else None
        scope = ctx.scope_named(func) if func and "." not in func else None
        if scope is None or not scope.returns or any(
            not (isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and v.func.attr.value == "parse_args")
            for v, _ in scope.returns
        ):
            return None
    found = options(ctx).get(node.attr.value)
    return found[0] if found and len(found) == 1 else None


def _chosen_dtype(ctx: ModuleContext, call: "CallInfo") -> Optional["cst.BaseExpression"]:
    """The run-time dtype argument of a cast (`unet.to(accelerator.device, dtype=weight_dtype)`,
    `from_pretrained(..., torch_dtype=weight_dtype)`), None when it has none."""
    from amplint.model import dtype_choices

    if call.method in ("to", "type"):
        keys: Tuple[Optional[str], ...] = (None, "dtype")
    else:
        keys = ("torch_dtype", "dtype")
    for a in call.node.args:
        key = a.keyword.value if a.keyword is not None else None
        if key in keys and (key is not None or call.method in ("to", "type")):
            if "fp16" in dtype_choices(ctx, a.value, call.scope, call.order):
                return a.value
    return None


def _upcasts(ctx: ModuleContext, call: "CallInfo", subjects: Set[str]) -> bool:
    """An fp32 cast of trainable parameters: diffusers' `cast_training_params(...)` (fp32 unless
    another dtype is given), `unet.float()` / `unet.to(torch.float32)`, or `param.to(torch.float32)`
    in a loop over some module's `.parameters()`."""
    import libcst as cst

    from amplint.model import fp32_cast

    if (call.dotted or "").rsplit(".", 1)[-1] == "cast_training_params":
        dtype = call.arg(1, "dtype")
        return dtype is None or ctx.dtype_of(dtype) == "fp32"
    if not fp32_cast(ctx, call.node):
        return False
    receiver = call.receiver_dotted or ""
    if receiver in subjects:
        return True
    for frame in call.path:
        loop = frame.node
        if frame.kind == "loop" and isinstance(loop, cst.For) and isinstance(loop.target, cst.Name) and loop.target.value == receiver:
            it = loop.iter
            if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value == "parameters":
                return True
    return False


def _option_guard(call: "CallInfo", options: Set[str]) -> Optional["cst.CSTNode"]:
    """The test `args.mixed_precision == "fp16"` of the innermost `if` around `call` that reads one
    of `options`; None when no such `if` holds it (the upcast runs on the option's None too)."""
    for frame in reversed(call.path):
        if frame.kind == "if" and _mixed_precision_fp16(frame.test) in options:
            return frame.test
    return None


def _deepspeed_test(test: Optional["cst.CSTNode"]) -> bool:
    """`if accelerator.state.deepspeed_plugin:` (`... is not None`), `if accelerator.distributed_type
    == DistributedType.DEEPSPEED:`: the branch accelerate takes under DeepSpeed."""
    import libcst as cst

    from amplint.model import dotted_name

    spelled = dotted_name(test) if isinstance(test, (cst.Name, cst.Attribute)) else None
    if spelled is not None:
        return spelled.endswith(".deepspeed_plugin")
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    left, (target,) = dotted_name(test.left) or "", test.comparisons
    right = dotted_name(target.comparator) or ""
    if left.endswith(".deepspeed_plugin"):
        return isinstance(target.operator, cst.IsNot) and right == "None"
    return left.endswith(".distributed_type") and isinstance(target.operator, cst.Equal) and right.endswith("DistributedType.DEEPSPEED")


#: `Accelerator(...)` arguments that put DeepSpeed, FSDP or Megatron-LM behind `prepare` (their own scaling)
_PLUGIN_ARGUMENTS = ("deepspeed_plugin", "fsdp_plugin", "megatron_lm_plugin", "deepspeed_plugins")


def _plain_accelerators(ctx: ModuleContext) -> bool:
    """Each `Accelerator(...)` of the file adds no plugin in code and unpacks no `**kwargs`."""
    from amplint.model import ACCELERATORS

    for call in ctx.calls:
        if call.calls_any(ACCELERATORS):
            if any(a.star for a in call.node.args) or any(call.arg(None, k) is not None for k in _PLUGIN_ARGUMENTS):
                return False
    return True


#: calls after a cast that give the module trainable parameters of their own dtype, or cast its
#: trainable ones back (diffusers' `cast_training_params(unet, dtype=torch.float32)`, peft adapters)
_ADAPTER_METHODS = ("add_adapter", "add_weighted_adapter", "inject_adapter", "load_adapter")


def _accelerated_optimizer(ctx: ModuleContext, cast: LowPrecisionCast, subjects: Set[str]) -> Optional[str]:
    """The optimizer (as bound) built in the cast's scope on the subjects' own parameters (no
    `requires_grad` filter: those are adapter setups whose trainable part may be fp32), handed to
    an accelerator's `prepare` and stepped after the cast; None when the subjects are frozen,
    cast back, or given adapters after the cast."""
    from amplint.model import dotted_name, is_optimizer_class, references_parameters

    if any(_frozen(ctx, s) for s in subjects):
        return None
    for call in ctx.calls:
        if call.scope is not cast.call.scope or call.order <= cast.call.order:
            continue
        receiver = call.receiver_dotted or ""
        touches = any(receiver == s or receiver.startswith(s + ".") for s in subjects)
        if touches and (call.method in _ADAPTER_METHODS or call.method == "float"):
            return None
        passed = [dotted_name(a.value) for a in call.node.args]
        if any(p in subjects for p in passed if p) and any(ctx.dtype_of(a.value) == "fp32" for a in call.node.args):
            return None  # `cast_training_params(unet, dtype=torch.float32)`
        if any(p in subjects for p in passed if p) and (call.dotted or "").endswith("get_peft_model"):
            return None
    for ctor in ctx.calls:
        if ctor.scope is not cast.call.scope or not ctor.qualname or not is_optimizer_class(ctor.qualname):
            continue
        params = ctor.arg(0, "params")
        if params is None or "requires_grad" in ctx.code_for(params) or not references_parameters(ctx, params, subjects, ctor):
            continue
        key = next((a.target for a in ctx.assignments if not a.unpacked and a.value is ctor.node), None)
        if key is None:
            continue
        prepared = any(
            c.method == "prepare" and any(dotted_name(a.value) == key for a in c.node.args)
            for c in ctx.calls if c.scope is ctor.scope and c.order > ctor.order
        )
        stepped = any(
            c.method == "step" and c.receiver_dotted == key and c.order > cast.call.order
            for c in ctx.calls if c.scope is ctor.scope
        )
        if prepared and stepped:
            return key
    return None


def _low_precision_module(
    ctx: ModuleContext, event: Event, casts: List[LowPrecisionCast], scaler_enabled: Optional[bool]
) -> Optional[Tuple[LowPrecisionCast, str]]:
    from amplint.model import exclusive, sees_self_of

    opt = ctx.optimizers.get(event.optimizer or "")
    if opt is None:
        return None
    for ctor in opt.constructors:
        if opt.key.startswith("self.") and not sees_self_of(ctx, event.call.scope, ctor.scope):
            continue  # another class's `self.optimizer`
        params = ctor.arg(0, "params")
        if params is None or "requires_grad" in ctx.code_for(params):
            continue
        for module in _modules(ctx, params):
            for name in _aliases(ctx, module, ctor):
                for cast in casts:
                    if cast.subject != name or cast.call.order > event.order:
                        continue
                    if name.startswith("self.") and not sees_self_of(ctx, ctor.scope, cast.call.scope):
                        continue  # another class's `self.model`
                    if cast.call.scope is event.call.scope and exclusive(cast.call.path, event.call.path):
                        continue
                    if scaler_enabled is None and any(f.kind in ("if", "else") for f in cast.call.path):
                        continue  # both decided at run time: perhaps never together
                    if _undone(ctx, name, cast, event) or _frozen(ctx, name):
                        continue
                    return cast, module
    return None


def _modules(ctx: ModuleContext, params: cst.BaseExpression) -> List[str]:
    """`model.parameters()` / `self.model.named_parameters()` receivers inside the params expression."""
    found: List[str] = []
    for node in _calls_in(params):
        info = ctx.call_info(node)
        if info is not None and info.method in ("parameters", "named_parameters") and info.receiver_dotted:
            found.append(info.receiver_dotted)
    return found


def _calls_in(node: "cst.CSTNode") -> Iterator["cst.Call"]:
    """The calls in `node`, outermost first (what a visitor's `visit_Call` meets, in its order);
    a plain walk: a visitor class defined per call would hold its closure in a reference cycle."""
    import libcst as cst

    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call):
            yield current
        stack.extend(reversed(current.children))


def _aliases(ctx: ModuleContext, module: str, ctor: CallInfo) -> List[str]:
    """`module` and the name it was assigned from (`self.model = model`)."""
    import libcst as cst

    names = [module]
    for a in ctx.assignments_to(module):
        if a.order < ctor.order and isinstance(a.value, cst.Name):
            names.append(a.value.value)
    return names


def _undone(ctx: ModuleContext, name: str, cast: LowPrecisionCast, event: Event) -> bool:
    """Between the cast and the step, `name` is cast back to fp32 or rebound to something else."""
    import libcst as cst

    for call in ctx.method_calls("float", "to", "type"):
        if cast.call.order < call.order < event.order and call.receiver_dotted == name:
            if call.method == "float" or any(ctx.dtype_of(a.value) == "fp32" for a in call.node.args):
                return True
    for a in ctx.assignments_to(name):
        if not (cast.call.order < a.order < event.order) or a is cast.assignment:
            continue
        if not _keeps_dtype(ctx, name, a.value):
            return True
    return False


def _keeps_dtype(ctx: ModuleContext, name: str, value: cst.BaseExpression) -> bool:
    import libcst as cst

    if isinstance(value, cst.Call):
        info = ctx.call_info(value)
        if info is not None and info.calls_any(_WRAPPERS) and any(
            isinstance(arg.value, (cst.Name, cst.Attribute)) and ctx.code_for(arg.value) == name for arg in value.args
        ):
            return True
        node: cst.BaseExpression = value
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value not in _SAME_DTYPE_METHODS:
                return False
            if node.func.attr.value == "to" and any(ctx.dtype_of(a.value) == "fp32" for a in node.args):
                return False
            node = node.func.value
        return ctx.code_for(node) == name
    return False


def _frozen(ctx: ModuleContext, name: str) -> bool:
    for call in ctx.method_calls("requires_grad_"):
        if call.receiver_dotted == name and call.node.args and ctx.code_for(call.node.args[0].value) == "False":
            return True
    return False


# --- the project half: submodules built in other files


#: how many attribute levels below the optimized model `_cast_submodule` looks
_SUBMODULE_DEPTH = 4


def _project_scaler(project: "Project", call: "ProjectCall", receiver: str) -> Optional[str]:
    """"cuda" / "cpu" / "" (device not known) when `receiver` in the call's function is a torch
    GradScaler not built with `enabled=False`; None when it is not one."""
    types = project.name_types(call.path, call.func, receiver)
    scalers = [t for t in types if t[0] == "R" and t[1] in GRAD_SCALERS]
    if not scalers or len(scalers) < len(types):
        return None
    device = ""
    for ref in _bindings(project, call, receiver):
        if ref.get("c", "").rsplit(".", 1)[-1] != "GradScaler":
            continue
        keywords = ref.get("k", {})
        if "enabled" in keywords and (keywords["enabled"] is None or keywords["enabled"].get("v") in (False, 0)):
            return None  # `enabled=False` (a bool literal the summary keeps as None): scales nothing
        if "cuda.amp" in ref["c"]:
            device = "cuda"
        else:
            where = ref.get("k", {}).get("device") or (ref.get("a") or [None])[0]
            device = "cuda" if where is None else (where.get("s") or "") if isinstance(where, dict) else ""
    return device


def _bindings(project: "Project", call: "ProjectCall", name: str) -> List[Dict[str, Any]]:
    """The value refs `name` is bound to where the call's function can see it: its locals, or
    for `self.x` the attribute bindings of its class (and project bases)."""
    info = project.function((call.path, call.func))
    if info is None:
        return []
    if name.startswith("self.") and name.count(".") == 1 and info["cls"]:
        out: List[Dict[str, Any]] = []
        for p, c in project.mro(call.path, info["cls"]):
            for func, ref in project.summaries[p]["classes"][c]["attrs"].get(name[5:], ()):
                if ref:
                    out.append({**ref, "_at": (p, func)})
        return out
    return [{**ref, "_at": (call.path, call.func)} for ref in info["locals"].get(name, ()) if ref]


def _optimizer_ctors(project: "Project", call: "ProjectCall", name: str) -> List["ProjectCall"]:
    """The torch optimizer constructors `name` is bound to (as project calls, for
    `Project.updated_modules`); none when a binding is anything else."""
    out = []
    for ref in _bindings(project, call, name):
        if "c" not in ref:
            return []
        path, func = ref["_at"]
        record = {k: v for k, v in ref.items() if k != "_at"}
        record.setdefault("f", ref["c"])
        record.setdefault("r", call.record["r"])
        ctor = ProjectCall(path, func, record)
        if project.optimizer_class(ctor) is None or project.master_weights(ctor):
            return []
        params = record["a"][0] if record.get("a") else record.get("k", {}).get("params")
        if not params or params.get("c") in ("filter",) or "requires_grad" in repr(params):
            return []  # trainable parameters only: adapters are often fp32
        out.append(ctor)
    return out


def _cast_submodule(project: "Project", ctor: "ProjectCall", device: str, step_path: str) -> Optional[Tuple[str, tuple, str]]:
    """(dotted module, its type, dtype) of the first low-precision module among the parameters
    the optimizer updates: a submodule its class builds in `__init__` (any file), or the model
    itself when cast in another file than the step's."""
    dtypes = ("fp16", "bf16") if device == "cuda" else ("fp16",)
    owner = ctor.record["a"][0]["c"] if ctor.record.get("a") and "c" in ctor.record["a"][0] else ""
    top = owner.rsplit(".", 1)[0] if owner.endswith((".parameters", ".named_parameters")) else "model"
    for t in sorted(project.updated_modules(ctor), key=repr):
        if t[0] in ("I", "R") and t[-2] in dtypes:
            if t[-1] and t[-1][0] != step_path:
                return top, t, t[-2]
            continue
        found = _submodule(project, t, dtypes, top, 0)
        if found is not None:
            return found
    return None


def _submodule(project: "Project", t: tuple, dtypes: Tuple[str, ...], spelled: str, depth: int) -> Optional[Tuple[str, tuple, str]]:
    if t[0] != "I" or depth >= _SUBMODULE_DEPTH:
        return None
    for p, c in project.mro(t[1], t[2]):
        info = project.summaries[p]["classes"][c]
        init = project.function((p, f"{c}.__init__")) or {}
        frozen = set(init.get("fz", ())) | set(init.get("fv", ()))
        for attr in sorted(info["attrs"]):
            refs = info["attrs"][attr]
            if f"self.{attr}" in frozen or any(r and "requires_grad_" in r.get("m", ()) for _, r in refs):
                continue  # frozen (or frozen at run time): not what the optimizer updates
            for u in sorted(project.attribute(t, attr), key=repr):
                name = f"{spelled}.{attr}"
                if u[0] in ("I", "R") and u[-2] in dtypes and u[-1]:
                    return name, u, u[-2]
                found = _submodule(project, u, dtypes, name, depth + 1)
                if found is not None:
                    return found
    return None
