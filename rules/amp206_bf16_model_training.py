"""AMP206 bf16-model-training."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, FrozenSet, Iterator, Optional

from amplint.model import Diagnostic, Invalid, Project, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    from amplint.model import CallInfo, LowPrecisionCast, ModuleContext

#: what may keep fp32 master weights for (or swap) the optimizer it is handed, beyond AMP201's
#: wrappers: DeepSpeed; accelerate's `prepare` and Fabric's `setup`, behind which the launch
#: configuration may put DeepSpeed or FSDP (both keep fp32 masters); a `Trainer` given
#: `optimizers=(...)`, whose arguments may name a DeepSpeed config; ColossalAI's `booster.boost`,
#: whose plugin (ZeRO, Gemini, hybrid parallel under fp16/bf16) may keep fp32 master weights
_WRAPPER = re.compile(
    r"fp16|master|initialize|mixedprecision|deepspeed|(?:^|\.)prepare$|(?:^|\.)setup(?:_optimizers)?$"
    r"|\.boost$|(?-i:Trainer)$",
    re.IGNORECASE,
)
_HELP = (
    "Keep the parameters fp32 and train under `torch.autocast(..., dtype=torch.bfloat16)`, or use an "
    "optimizer with fp32 master weights, Kahan summation or stochastic rounding"
)


def _bf16_choice(dtypes: FrozenSet[str]) -> bool:
    """A run-time dtype that may be bf16; one that may also be fp16 is AMP201's (its cast line
    gets one finding, about the worse of the two)."""
    return "bf16" in dtypes and "fp16" not in dtypes


def _torch_optimizer(qualname: str) -> bool:
    from amplint.model import is_torch_optimizer_class

    return is_torch_optimizer_class(qualname)


class Bf16ModelTraining(Rule):
    """
    ## What it does
    Flags `.bfloat16()`, `.to(torch.bfloat16)` and `from_pretrained(...,
    torch_dtype=torch.bfloat16)` on a module whose parameters a `torch.optim`
    optimizer is then built on and steps, with no fp32 master copy: pure bf16
    training. AMP201 is the same shape in fp16.

    ## Why is this bad?
    The optimizer writes each update into the bf16 weight itself, and bf16
    keeps 8 significant bits: next to 1.0 the representable values are
    1 - 2^-8 and 1 + 2^-7. An update smaller than half that spacing (2^-9 of
    the weight just below 1.0, about 1/512 to 1/256 of a weight in general)
    rounds back to the old value, on every step. Adam's step is about `lr`
    whatever the gradient, so with `lr=1e-4` a weight of 1.0 (every LayerNorm
    weight at initialization) never moves: in the measurement 100 AdamW steps
    left bf16 weights of 1.0 exactly 1.0 while fp32 copies moved by 0.0101,
    with the for-loop, foreach and fused implementations alike. Weights large
    against `lr` (norm gains, embeddings, late in a decaying schedule)
    stop training while the loss still looks fine. `torch.optim` keeps its
    state in the parameters' dtype too (bf16 `exp_avg`, `exp_avg_sq`).

    ## Example
    ```python
    model = GPT(config).cuda().to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ```

    ## Use instead
    ```python
    model = GPT(config).cuda()  # fp32 master weights
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    ```
    Or keep the bf16 weights and use an optimizer that compensates the
    rounding: Kahan summation (optimi's optimizers do it for bf16 parameters
    by default), stochastic rounding (torchao's `_AdamW(...,
    bf16_stochastic_round=True)`), or a 16-bit mantissa buffer beside each
    weight.

    ## Fix safety
    No fix is offered: moving to autocast doubles the weights' memory, and
    an optimizer with compensation is a new dependency; a human chooses.

    ## Verification
    `amplint --verify` runs the statement that made the model bf16 on a tiny
    model, builds the user's optimizer over it and steps it once with small
    gradients: updates lost to bf16 rounding against the same optimizer on
    fp32 copies. The tiny model's weights are small (at most 0.35), so where
    its updates all survive the same optimizer constructor also runs 100
    steps on a bf16 `LayerNorm` (weight 1.0) against an fp32 twin. Where
    that code cannot run, the reference experiment runs
    the finding's optimizer class and learning rate on weights of 1.0 for 100
    steps, bf16 against fp32.

    ## Notes
    Pure bf16 training is sometimes chosen on purpose, to halve the weights'
    memory; the lost updates are still certain for every weight whose update
    is below half its bf16 spacing, so the finding stands as a warning:
    silence it with `# noqa: AMP206` where the trade-off is meant.

    Only `torch.optim` classes are flagged (every one of them, foreach, loop
    or fused, writes a rounded update into the bf16 weight). Silent for other
    optimizers, whose update amplint does not know: a project's own optimizer
    class, optimi (Kahan summation for bf16 parameters by default), torchao
    (stochastic rounding with `bf16_stochastic_round=True`), bitsandbytes,
    apex, Hugging Face's Adafactor. Silent too when the optimizer is handed
    to something that keeps fp32 master weights or may do so depending on
    how the job is launched: DeepSpeed (`deepspeed.initialize`), apex,
    accelerate's `prepare` (a DeepSpeed or FSDP launch config keeps fp32
    masters; accelerate upcasts FSDP1 shards to fp32 under mixed
    precision), Lightning Fabric's `setup`, ColossalAI's `booster.boost`
    (its plugin, ZeRO, Gemini or hybrid parallel under fp16/bf16, keeps
    fp32 master weights; which plugin is the launch's; the optimizer may
    be built inside the call, `boost(net, torch.optim.SGD(...))`), a
    Hugging Face `Trainer` given `optimizers=(...)`; for a module wrapped
    in an FSDP mixed-precision policy (AMP804 reports that); and for a module
    (or parts of it, `model.fc1`, each `layer` of `for layer in model.layers`)
    sharded before the optimizer by Megatron-FSDP's `fully_shard`, whose
    `MixedPrecisionPolicy` keeps fp32 main parameters by default (the
    optimizer steps those, the bf16 weights are synced from them): a policy
    with `main_params_dtype` bf16 or None (the module's weights are the main
    weights) keeps the finding; one whose dtype the file does not show is
    taken to keep fp32. accelerate's
    `prepare` stops being that excuse where the project ships a launch
    command for the script (a shell script, a Makefile, a README command
    block) that rules DeepSpeed and FSDP out: `accelerate launch
    --mixed_precision bf16 --num_processes 1 train.py`, a process layout
    given and no `--use_deepspeed`, `--use_fsdp`, `--deepspeed_config_file`
    (accelerate's own default config, outside the project, may add either
    when no layout is given), or `--config_file` naming an accelerate YAML
    of the project whose `distributed_type` is no plugin (`MULTI_GPU`,
    `NO`; a YAML outside the project is not known), with the script's
    `Accelerator(...)` adding no plugin in code (a `deepspeed_plugin=` name
    bound to None on some path counts as the run without it) and freezing no
    parameter (reading `p.requires_grad` freezes nothing). A `torchrun` or
    `python` command counts too: without accelerate's launcher nothing
    outside the code hands `Accelerator()` a plugin. The script may import
    the optimizer's module (a tutorial's `run.py` importing `utils.py`), when
    every launch reaching it rules the plugins out; a notebook's command
    blocks are launch commands (its Markdown cells' fences, `!torchrun ...`).
    The optimizer may be a helper's that its caller prepares (`optimizer =
    build_adamw(model)`, its parameters `[p for p in model.parameters() if
    p.requires_grad]`). Reported at the optimizer, with the launcher as a related
    site; optimizer parameter groups from a project helper given the model
    (`get_optimizer_grouped_parameters(model, wd)`) are the model's. A model handed
    to a `Trainer` that builds its own optimizer is not followed.

    As in AMP201: silent for inference copies (`model.bfloat16().eval()`),
    for casts undone (`.bfloat16().float()`, a later `model.float()`), for
    a cast module frozen in part or whole, or files whose freezes cannot be
    tied to a module (trainable adapters may be fp32; one named tensor
    frozen, `conv.weight.requires_grad = False`, is no frozen base), when the
    name is rebound on every path from the cast to the optimizer
    (`model = get_peft_model(model, config)`: PEFT upcasts bf16 LoRA
    adapters to fp32 by default, `autocast_adapter_dtype=True`);
    `DDP(model)`, `nn.DataParallel(model)` and `torch.compile(model)` are not
    rebinds (their parameters are the model's). A dtype picked at run time
    among literals the file spells counts when bf16 is among them and
    float16 is not (with float16 among them it is AMP201's finding); a dtype
    read from a config or handed in by a caller is not followed. A cast back
    under an `if` testing that very dtype is fp32 (`if load_dtype ==
    torch.float32: model.to(dtype=torch.float32)`) never runs on the bf16
    path: it does not undo the cast; one behind another flag does. As in
    AMP201, the cast may be a builder's of the same file (`def
    build_model(): ...; return model.to(torch.bfloat16)`, its result bound to a name,
    or a class casting itself in `__init__`), with the optimizer built on
    its result in another function, or handed on to it through other functions
    (`wrap(model)` calling `build_adamw(model)`), each call passing a bf16
    builder's module; a helper returning the optimizer to a caller that hands
    it to `prepare` is silent as above. Across files, as AMP201: a builder, loader or `from_pretrained(...,
    torch_dtype=torch.bfloat16)` in another file, and a dtype picked by a
    project helper (`weight_dtype = utils.prepare_dtype(args)`).

    ## References
    - amplint's evidence page: `amplint --explain AMP206` (docs/evidence.md#amp206)
    - https://pytorch.org/docs/stable/amp.html#torch.autocast ("You should not call `half()` or `bfloat16()` on your model(s) or inputs when using autocasting")
    - https://github.com/arogozhnikov/adamw_bfloat16 (the "stale weights" of bf16 training, and its remedies)
    """

    code = "AMP206"
    name = "bf16-model-training"
    severity = Severity.WARNING
    message = "optimizer updates a bf16 model without fp32 master weights"
    triggers = ("bfloat16", "bf16")
    requires = (("optim",),)  # an optimizer class: its module path says optim (`torch.optim.AdamW`)
    gate_check = "amplint.core.gates:optimizer_class_used"

    VALID = [
        Valid(
            """
import torch
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
            "bf16 autocast: the parameters and the optimizer state stay fp32",
        ),
        Valid(
            """
import torch
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
train(model, optimizer)
model.bfloat16().eval()
torch.save(model.state_dict(), "model_bf16.pt")
""",
            "an inference conversion after training",
        ),
        Valid(
            """
import torch
import optimi
model = Net().cuda().to(torch.bfloat16)
optimizer = optimi.AdamW(model.parameters(), lr=1e-4)
""",
            "optimi's optimizers use Kahan summation for bf16 parameters",
        ),
        Valid(
            """
import torch
from torchao.optim import _AdamW
model = Net().cuda().bfloat16()
optimizer = _AdamW(model.parameters(), lr=1e-4, bf16_stochastic_round=True)
""",
            "stochastic rounding: the expected update survives",
        ),
        Valid(
            """
import torch
from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=8))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
""",
            "a frozen bf16 base: the PEFT model's trainable adapters are fp32",
        ),
        Valid(
            """
import torch
model = Net().cuda().bfloat16()
for p in model.parameters():
    p.requires_grad = False
model.head = torch.nn.Linear(512, 10).cuda()
optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=0.1)
""",
            "a frozen bf16 backbone with an fp32 trainable head",
        ),
        Valid(
            """
import torch
import deepspeed
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config="ds_bf16.json")
""",
            "DeepSpeed's bf16 optimizer keeps fp32 master weights for the client optimizer",
        ),
        Valid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="bf16")
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
model, optimizer = accelerator.prepare(model, optimizer)
""",
            "accelerate's launch config may put DeepSpeed or FSDP (fp32 masters) behind `prepare`",
        ),
        Valid(
            """
import torch
from colossalai.booster import Booster
from colossalai.booster.plugin import LowLevelZeroPlugin
booster = Booster(plugin=LowLevelZeroPlugin(precision="bf16"))
model = GPT(config).cuda().to(torch.bfloat16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, _, _, _ = booster.boost(model, optimizer)
""",
            "ColossalAI's `boost`: the plugin (ZeRO, Gemini, hybrid parallel) may keep fp32 master weights",
        ),
        Valid(
            """
import torch
from colossalai.booster import Booster
booster = Booster(plugin=plugin)
net = GPT(config).cuda().to(torch.bfloat16)
model, optimizer, _, _, _ = booster.boost(net, torch.optim.SGD(net.parameters(), lr=0.1))
optimizer.step()
""",
            "the optimizer built inside `boost(...)`: the plugin decides the master weights at run time",
        ),
        Valid(
            """
import torch
model = Net().cuda().half()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
""",
            "fp16 parameters: AMP201's",
        ),
        Valid(
            """
import torch
dtype = torch.float16 if args.fp16 else torch.bfloat16
model = Net().cuda().to(dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
""",
            "a run-time choice that may be fp16: AMP201 reports this cast",
        ),
        Valid(
            """
import torch
class Lion(torch.optim.Optimizer):
    ...

model = Net().cuda().bfloat16()
optimizer = Lion(model.parameters(), lr=1e-4)
""",
            "a project's own optimizer: its update may compensate",
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


def build_model(config):
    model = GPT(config).cuda()
    model = model.to(torch.bfloat16)
    return model


def main(config, loader):
    model = build_model(config)
    model = get_peft_model(model, lora_config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
""",
            "the builder's bf16 model is rebound to a PEFT model before the optimizer",
        ),
        Valid(
            """
import torch
from megatron_fsdp.experimental import fully_shard, fully_shard_optimizer

model = TinyModel().to(device="cuda", dtype=torch.bfloat16)
fully_shard(model.fc1, mesh=mesh, placements=placements)
fully_shard(model.fc2, mesh=mesh, placements=placements)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
fully_shard_optimizer(optimizer)
""",
            "the blind drill (Megatron-LM): Megatron-FSDP's default policy keeps fp32 main parameters",
        ),
        Valid(
            """
import torch
from transformers import AutoModelForCausalLM


def load(path, full_precision):
    kwargs = {"torch_dtype": torch.bfloat16}
    if full_precision:
        kwargs["torch_dtype"] = torch.float32
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


model = load("gpt2", True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
""",
            "the unpacked dict's dtype is stored again behind a flag: which one loads is decided at run time",
        ),
        Valid(
            """
import torch
from torch.optim import AdamW


def init_model():
    return Net().to(device="cuda", dtype=torch.bfloat16)


def build_adamw(model, lr):
    return AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)


def wrap(model, accelerator, lr):
    optimizer = build_adamw(model, lr)
    return accelerator.prepare(model, optimizer)


def run(accelerator, loader):
    model, optimizer = wrap(init_model(), accelerator, 1e-5)
""",
            "the helper's optimizer is handed to accelerate's `prepare` by its caller (a DeepSpeed or FSDP launch keeps fp32 masters)",
        ),
        Valid(
            """
import torch
from torch.optim import AdamW


def init_model():
    model = Net().to(device="cuda", dtype=torch.bfloat16)
    return model


def build_adamw(model, lr):
    return AdamW(model.parameters(), lr=lr)


def wrap(model, lr):
    optimizer = build_adamw(model, lr)
    return model, optimizer


def run(loader):
    model = init_model()
    model, optimizer = wrap(model, 1e-5)
    train(model, optimizer, loader)


def run_fp32(loader):
    model, optimizer = wrap(Net().cuda(), 1e-5)
    train(model, optimizer, loader)


def train(model, optimizer, loader):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
""",
            "the helper's module is handed through `wrap`, but one call passes an fp32 module: which one it trains is the caller's",
        ),
        Valid(
            """
import torch
from transformers import AutoModelForCausalLM
load_dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
model = AutoModelForCausalLM.from_pretrained(path, dtype=load_dtype)
if args.full_precision:
    model.to(dtype=torch.float32)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
""",
            "a cast back behind a flag of its own: which dtype trains is decided at run time",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from transformers import AutoModelForCausalLM
load_dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
model = AutoModelForCausalLM.from_pretrained(path, dtype=load_dtype)
if load_dtype == torch.float32:
    model.to(dtype=torch.float32)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
""",
            line=4,
            why="diffusers' train_llada2.py: the cast back runs only where the dtype was fp32 already, never on the bf16 path",
        ),
        Invalid(
            """
import torch


def build_model(config):
    model = GPT(config).cuda()
    model = model.to(torch.bfloat16)
    return model


def main(config, loader):
    model = torch.compile(build_model(config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for x, y in loader:
        model(x, y).backward()
        optimizer.step()
""",
            line=6,
            why="a builder of the file returns the bf16 model the optimizer is built on",
        ),
        Invalid(
            """
import torch
model = GPT(config).cuda().to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
for x, y in loader:
    loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""",
            line=2,
        ),
        Invalid(
            """
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16).to("cuda")
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
""",
            line=3,
        ),
        Invalid(
            """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = Transformer(args).bfloat16().cuda()
model = DDP(model, device_ids=[local_rank])
model = torch.compile(model)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
""",
            line=3,
            why="DDP and torch.compile hand the optimizer the bf16 model's own parameters",
        ),
        Invalid(
            """
import torch
def main(cfg):
    model = build_model(cfg)
    if cfg.pure_bf16:
        model.to(torch.bfloat16)
    if cfg.use_peft:
        model = get_peft_model(model, peft_config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    train(model, optimizer)
""",
            line=5,
            why="the PEFT rebind is behind a flag: without it the bf16 model itself is optimized",
        ),
        Invalid(
            """
import torch
dtype = torch.bfloat16 if args.bf16 else torch.float32
model = Net().cuda().to(dtype)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
""",
            line=3,
            why="the dtype is picked at run time among literals, bf16 one of them (fp16 not)",
        ),
        Invalid(
            """
import torch
from megatron_fsdp import MixedPrecisionPolicy
from megatron_fsdp.experimental import fully_shard, fully_shard_optimizer

dtype = torch.bfloat16
model = MultiChildModel(dim=4096).to(dtype=dtype)
policy = MixedPrecisionPolicy(main_params_dtype=dtype, main_grads_dtype=dtype)
for layer in model.layers:
    fully_shard(layer, mesh=mesh, placements=placements, mixed_precision_policy=policy)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
fully_shard_optimizer(optimizer)
""",
            line=6,
            why="Megatron-FSDP told to keep bf16 main parameters: SGD steps bf16 weights",
        ),
        Invalid(
            """
import torch
from torch.optim import AdamW
from transformers import AutoModelForCausalLM


def init_te_model(path):
    model = TEModel.from_config(path).to(device="cuda", dtype=torch.bfloat16)
    return model


def init_baseline_model(path):
    load_kwargs = {"torch_dtype": torch.bfloat16}
    load_kwargs["device_map"] = "auto"
    model = AutoModelForCausalLM.from_pretrained(path, **load_kwargs)
    return model


def build_adamw(model, lr):
    params = [p for p in model.parameters() if p.requires_grad]
    return AdamW(params=params, lr=lr)


def wrap(model, lr):
    optimizer = build_adamw(model, lr)
    return model, optimizer


def finetune(model, optimizer, loader):
    for x in loader:
        model(x).loss.backward()
        optimizer.step()


def run_te(path, loader):
    model = init_te_model(path)
    model, optimizer = wrap(model, 1.41e-5)
    finetune(model, optimizer, loader)


def run_baseline(path, loader):
    model = init_baseline_model(path)
    model, optimizer = wrap(model, 1.41e-5)
    finetune(model, optimizer, loader)
""",
            line=7,
            count=2,
            why="TransformerEngine's te_mixtral tutorial: each builder's bf16 model is handed through `wrap` to `build_adamw`",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        from amplint.model import trained_casts

        if _fsdp_mixed_precision(ctx):
            return  # a bf16 module under an FSDP mixed-precision policy is AMP804's
        for found in trained_casts(ctx, "bf16", optimizer=_torch_optimizer, choice=_bf16_choice, wrapper=_WRAPPER):
            yield self._diagnostic(ctx, found.cast, found.ctor, chosen=found.chosen, built=found.built, klass=found.optimizer_class)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """An optimizer built on a module that another file made bf16 (a builder, a loader, a
        `from_pretrained(..., torch_dtype=torch.bfloat16)`), or cast to a dtype a project
        helper picks, bf16 among its choices (fp16 not); same-file casts are `check`'s."""
        from amplint.model import ProjectCall, cast_modules, chosen_casts, launched_casts

        for found in cast_modules(project, "bf16", optimizer=_torch_optimizer, wrapper=_WRAPPER):
            if _fsdp_policy_around(project, found.call):
                continue  # a bf16 module under an FSDP mixed-precision policy is AMP804's
            opt = found.optimizer.rsplit(".", 1)[-1]
            message = f"`{opt}` updates the parameters of a `{found.name}` made bf16, with no fp32 master copy"
            data = {"optimizer": opt, "optimizer_class": found.optimizer, "dtype": "bf16", "device": None, "cast_at": project.where(*found.site)}
            yield project.diagnostic(self, found.call, message, data=data, related=(project.related(*found.site, "made bf16 here"),), help=_HELP)
        for found in launched_casts(project, "bf16", optimizer=_torch_optimizer, wrapper=_WRAPPER):
            if _fsdp_policy_around(project, found.call):
                continue
            opt = found.optimizer.rsplit(".", 1)[-1]
            launch = found.launch
            message = f"`{opt}` updates bf16 `{found.name}` with no fp32 master copy: a launcher adds no DeepSpeed or FSDP"
            if len(message) >= 100:
                message = f"`{opt}` updates a bf16 model with no fp32 master copy: a launcher adds no DeepSpeed or FSDP"
            data = {"optimizer": opt, "optimizer_class": found.optimizer, "dtype": "bf16", "device": None,
                    "cast_at": project.where(*found.site), "launcher": launch.path, "launcher_mixed_precision": launch.mixed_precision}
            related = (
                project.related(*found.site, "made bf16 here"),
                *(project.related(*site, "also made bf16 here") for site in found.more),
                project.related(launch.path, launch.row, "launched here, without DeepSpeed or FSDP"),
            )
            yield project.diagnostic(self, found.call, message, data=data, related=related, help=_HELP)
        for found in chosen_casts(project, _bf16_choice, optimizer=_torch_optimizer, wrapper=_WRAPPER):
            record, build = found.record, found.build
            helper = build.call.record["f"].rsplit(".", 1)[-1] if build.helper else build.optimizer.rsplit(".", 1)[-1]
            message = f"`{record['f']}({found.name})` may make the model bf16: `{helper}` has no fp32 master copy"
            if len(message) >= 100:
                message = f"`{record['f']}(...)` may make the model bf16, with no fp32 master copy"
            related = [project.related(*site, "picks the dtype, bfloat16 among its choices") for site in found.choice[1][:1]]
            related.append(project.site(build.call, "the optimizer is built on its parameters here"))
            related.extend(project.site(ProjectCall(found.path, found.qual, other), "also cast here") for other in found.more[:3])
            data = {
                "optimizer": build.optimizer.rsplit(".", 1)[-1], "optimizer_class": build.optimizer, "dtype": "bf16",
                "device": None, "subject": record["f"][: -len(".to")],
            }
            yield project.diagnostic(self, ProjectCall(found.path, found.qual, record), message, data=data, related=tuple(related), help=_HELP)

    def _diagnostic(
        self, ctx: ModuleContext, cast: LowPrecisionCast, ctor: CallInfo, chosen: bool = False, built: bool = False,
        klass: Optional[str] = None,
    ) -> Diagnostic:
        from amplint.model import describe_cast, literal_number

        klass = klass or ctor.qualname  # a class picked at run time: the candidate the rule knows
        opt = (klass or "optimizer").rsplit(".", 1)[-1]
        what = describe_cast(ctx, cast, chosen)
        message = f"{what}: `{opt}` updates bf16 weights with no fp32 master copy"
        if chosen:  # the dtype is picked at run time among literals, bfloat16 one of them
            message = f"{what} may make the model bf16: `{opt}` then has no fp32 master copy"
        data = {
            "optimizer": opt,
            "optimizer_class": klass,
            "lr": literal_number(ctor.arg(1, "lr")),
            "eps": literal_number(ctor.arg(None, "eps")),
            "dtype": "bf16",
            "device": None,
            "subject": cast.subject,
            "snippet": ctx.code_for(ctor.node),  # the optimizer's constructor, which the verifier runs
        }
        related = (ctx.related(ctor.node, "the optimizer is built on its result here"),) if built else ()
        return ctx.diagnostic(self, cast.call.node, message, data=data, help=_HELP, related=related)


def _fsdp_mixed_precision(ctx: ModuleContext) -> bool:
    """The file wraps a module with an FSDP mixed-precision policy on every path (the scale
    view's `policy_wraps`: `FSDP(m, mixed_precision=...)`, `fully_shard(m, mp_policy=...)`, not
    a literal None, nor a choice with None among its alternatives: `policy if not cfg.pure_bf16
    else None`, whose pure-bf16 path AMP804 has nothing to report on)."""
    from amplint.model import scale_file_view

    if "FullyShardedDataParallel" not in ctx.source and "fully_shard" not in ctx.source:
        return False  # no FSDP wrapper spelled: the scale summary is not worth its parse
    return bool(scale_file_view(ctx.source, ctx.path).policy_wraps(ctx.path))


def _fsdp_policy_around(project: Project, call) -> bool:
    """The function building the optimizer wraps a module with an FSDP mixed-precision policy
    (the scale view's `policy_wraps`, in that function)."""
    from amplint.model import scale_project_view

    return bool(scale_project_view(project).policy_wraps(call.path, call.func))
