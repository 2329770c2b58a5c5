"""AMP302 fp16-underflowing-epsilon."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import FP16, Diagnostic, Invalid, Project, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import AutocastRegion, CallInfo, LiteralInfo, LowPrecisionCast, ModuleContext, Scope


#: fp16 rounds anything below this to 0
FP16_FLUSH_TO_ZERO = 2.9802322387695312e-08

#: torch optimizers whose update divides by (sqrt(v) + eps): class -> (eps position, default eps)
_OPTIMIZERS: Dict[str, Tuple[int, float]] = {
    "torch.optim.Adam": (3, 1e-8),
    "torch.optim.AdamW": (3, 1e-8),
    "torch.optim.Adamax": (3, 1e-8),
    "torch.optim.NAdam": (3, 1e-8),
    "torch.optim.RAdam": (3, 1e-8),
    "torch.optim.SparseAdam": (3, 1e-8),
    "torch.optim.RMSprop": (3, 1e-8),
    "torch.optim.Adagrad": (5, 1e-10),
}
_MODULE_FILES = {"SparseAdam": "sparse_adam"}
_OPTIMIZERS.update(
    {
        f"torch.optim.{_MODULE_FILES.get(q.rsplit('.', 1)[1], q.rsplit('.', 1)[1].lower())}.{q.rsplit('.', 1)[1]}": v
        for q, v in list(_OPTIMIZERS.items())
    }
)

#: ops on the lower-precision autocast lists of both CUDA and CPU
_LOWP_OPS = frozenset(
    {
        "torch.matmul", "torch.mm", "torch.bmm", "torch.baddbmm", "torch.addmm", "torch.addbmm", "torch.einsum",
        "torch.nn.functional.linear", "torch.conv1d", "torch.conv2d", "torch.conv3d",
        "torch.nn.functional.conv1d", "torch.nn.functional.conv2d", "torch.nn.functional.conv3d",
        "torch.nn.functional.scaled_dot_product_attention",
    }
)
#: ops on no autocast list (CUDA or CPU): their output keeps the input dtype even under autocast
_KEEP_FP16 = frozenset(
    {"abs", "neg", "relu", "sigmoid", "tanh", "mean", "amax", "amin", "clamp", "clamp_min", "detach", "clone",
     "view", "reshape", "unsqueeze", "squeeze", "transpose", "contiguous", "masked_fill", "max", "min", "gelu",
     "silu"}
)
#: ops autocast upcasts on some device (norm, sum, exp, log, pow, softmax...): fp16 only outside autocast
_KEEP_FP16_OUTSIDE_AUTOCAST = frozenset(
    {"norm", "sum", "sqrt", "rsqrt", "exp", "log", "pow", "square", "var", "std", "softmax", "log_softmax",
     "cumsum", "prod", "logsumexp"}
)
_FUNCTION_MODULES = frozenset({"torch", "torch.nn.functional", "torch.linalg", "torch.special"})
_CLAMPS = {"clamp": "min", "clamp_": "min", "clamp_min": "min", "clamp_min_": "min"}
#: methods and functions clamping to (min, max) bounds
_BOUNDED = frozenset({"clamp", "clamp_", "clip", "clip_"})
_BOUNDED_FUNCTIONS = frozenset({"torch.clamp", "torch.clip"})


class Fp16UnderflowingEpsilon(Rule):
    """
    ## What it does
    Flags epsilons below fp16's smallest subnormal (5.96e-8), such as `1e-8`
    and `1e-12`, where they meet fp16 values:

    - the `eps` of an Adam-family / RMSprop / Adagrad optimizer over
      parameters converted to fp16 in the same file (`.half()`,
      `.to(torch.float16)`, `from_pretrained(torch_dtype=torch.float16)`),
      including the default `eps=1e-8` (`1e-10` for Adagrad) when none is
      passed;
    - `x + 1e-8`, `x / (y + 1e-12)`, `x.clamp(min=1e-8)` where the tensor is
      visibly fp16 (`.half()` / `.to(torch.float16)`), or is the output of a
      matmul/linear/conv inside an fp16 autocast region;
    - the same where the tensor is the values of a reduction returning
      (values, indices) of such a tensor (`y.abs().max(dim=-1)[0] + 1e-9`,
      `.values`), which keep its dtype;
    - an eps that is a parameter's default used as a clamp's min in the
      function's body (`def log_mel(spec, fb, eps=1e-20): ...
      mel.clamp(min=eps)`) on such a tensor (what every call that passes no
      eps gets);
    - a clamp bound that is a constant expression whose eps fp16 rounds away:
      `p.clamp(min=1e-4, max=1 - 1e-4)`, `torch.clamp(p, EPS, 1 - EPS)` with a
      module constant `EPS = 1e-6`, on such a tensor. The expression is
      evaluated in fp16 (round to nearest even, as the cast does);
    - an EMA decay fp16 rounds to 1.0 (`0.9999`, anything above 1 - 2**-12)
      multiplied in place into the parameters of a module the file made fp16:
      `for targ, src in zip(ema.parameters(), model.parameters()):
      targ.mul_(0.9999).add_(src, alpha=1e-4)`, or `targ.lerp_(src, 1e-4)`.
      The decay and the parameters may be an update helper's parameters
      (`update_ema(ref_net.parameters(), unet.parameters(), 0.9999)`), read at
      its calls in the file (a default where a call passes none).

    ## Why is this bad?
    fp16 cannot hold anything below about 2.98e-8: `1e-8` and `1e-12` round to
    exactly 0. The epsilon then guards nothing. In an
    optimizer over fp16 parameters the second-moment estimate of small
    gradients underflows to 0 as well, the update divides by `0 + 0`, and the
    parameters become `-inf`: Adam with `eps=1e-8` turned fp16 parameters into
    `-inf` after one step with gradients of 1e-5. In hand-written code,
    `x / (norm + 1e-12)` divides by zero and `log(p + 1e-8)` gives `-inf` for
    exactly the inputs the epsilon was meant to protect. A bound such as
    `1 - 1e-4` fails the same way without underflowing: fp16 has 2048 steps
    between 0.5 and 1, so 0.9999 rounds to 1.0, `p.clamp(max=1 - 1e-4)` lets
    a saturated sigmoid through as exactly 1, and `log(1 - p)` is `-inf`.
    The largest bounds below 1 that fp16 keeps apart from 1 are 1 - 2**-11
    (0.99951); `1 - 1e-3` is 0.99902. An EMA decay of 0.9999 is the same
    1.0: a relative change of 1e-4 is below half of fp16's spacing at every
    magnitude (2**-12 relative at worst), so `targ.mul_(0.9999)` writes back
    the value it read, and `add_(src, alpha=1e-4)` moves a weight only where
    `src` is far from it: the EMA copy stays where it was cast.

    ## Example
    ```python
    model = Net().cuda().half()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # eps=1e-8 is 0 in fp16
    ```

    ## Use instead
    ```python
    model = Net().cuda()  # fp32 parameters; autocast runs the math in fp16
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    ```
    If the parameters must stay fp16, use an eps fp16 represents (at least
    6.1e-5, its smallest normal number; 1e-4 is common). In hand-written
    code, use such an eps or compute the guarded expression in fp32
    (`x.float()`).

    ## Fix safety
    No fix: the right eps (or moving to fp32 parameters) is a modelling
    decision.

    ## Verification
    `amplint --verify` evaluates the flagged epsilon in fp16 (it is 0.0) and,
    for optimizers, runs one step of the optimizer on fp16 parameters with
    small gradients and reports the count of non-finite parameters. For a
    clamp bound it runs the flagged clamp on tensors of 1.0 in fp16 and fp32
    and reports how many values stay at exactly 1.0.

    ## Notes
    Silent on `eps=` passed to ops that compute in fp32 internally
    (`F.layer_norm`, `nn.LayerNorm`, `F.rms_norm`, `F.normalize` under CUDA
    autocast), on optimizers over fp32 parameters (autocast keeps them fp32,
    so `AdamW(eps=1e-8)` in an AMP script is fine; what counts is what the
    optimizer gets: silent when the optimizer is handed to a master-weight
    wrapper (apex `FP16_Optimizer(optimizer)`, `amp.initialize(model,
    optimizer)`: it steps fp32 copies, eps and moments included, as AMP201
    reads it), when, between the cast and the optimizer, the model
    is rebound or wrapped by peft (`model = get_peft_model(model, config)`,
    `prepare_model_for_kbit_training(model)`: only fp32 adapter weights are
    trainable), converted back (`model.float()`), or the optimizer gets only
    `requires_grad` parameters of a file that freezes some), on `fused=True`
    optimizers (they compute in fp32), on bf16 (1e-8 and 1e-12 are
    representable, E02), and on tensors whose dtype is not visible. A
    function's parameter is read at its callers in the file: it is fp16 when
    every call passes a visibly fp16 tensor (one level up: a caller's own
    parameters are not followed) and the function is only called, never
    handed on as a value (`map(log, mels)`, a callback), which other code
    could call with anything; a helper no call in its file shows is silent. A finding
    that holds only because the project runs fp16 somewhere is dropped in a
    script or file no fp16 can reach, and in a vendored library copy no
    fp16-capable code outside it imports (as AMP301's). The EMA form is
    silent on a module kept fp32 (an fp32 `copy.deepcopy`, a cast undone by
    `.float()` before the update), on a decay fp16 keeps below 1 (`0.999`,
    `0.9995`), on a bf16 module (this rule reads fp16 values only), and where the decay or
    the parameters come from anything but a constant, the file's own cast and
    the helper's calls in the file (a config value, another file's module).

    Across files: the optimizer's eps is checked, as above, when the fp16
    parameters were made in another file (see AMP201).

    ## References
    - amplint's evidence page: `amplint --explain AMP302` (docs/evidence.md#amp302)
    - https://pytorch.org/docs/stable/generated/torch.optim.Adam.html
    """

    code = "AMP302"
    name = "fp16-underflowing-epsilon"
    severity = Severity.WARNING
    message = "epsilon underflows to 0 in fp16"
    triggers = ("half", "float16", "autocast")
    # an eps-taking optimizer constructed, or a literal below 3e-8 as a +/- operand or a clamp's min
    gate_check = "amplint.core.gates:underflowing_eps_site"
    #: a finding depends only on imports, module constants and the definition holding the site
    gate_sites = "amplint.core.gates:underflowing_eps_lines"

    VALID = [
        Valid(
            """
import torch
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            "autocast keeps the parameters fp32: eps=1e-8 is fine",
        ),
        Valid(
            """
import torch
import torch.nn.functional as F
model = Net().cuda().half()
x = x.half()
h = F.layer_norm(x, (512,), eps=1e-12)
n = F.normalize(x, dim=-1, eps=1e-12)
norm = torch.nn.LayerNorm(512, eps=1e-12)
""",
            "eps passed to ops that compute in fp32 internally",
        ),
        Valid(
            """
import torch
model = Net().to(torch.bfloat16)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
x = x.to(torch.bfloat16)
y = x / (x.norm() + 1e-12)
""",
            "bf16 represents 1e-8 and 1e-12",
        ),
        Valid(
            """
import torch
model = Net().cuda().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-4)
fused = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
y = x.half().float() / (x.norm() + 1e-12)
""",
            "an eps fp16 represents; fused optimizers compute in fp32; fp32 arithmetic",
        ),
        Valid(
            """
import torch
teacher = Net().cuda().half().eval()
student = Net().cuda()
optimizer = torch.optim.Adam(student.parameters(), lr=1e-3)
with torch.autocast("cuda", dtype=torch.bfloat16):
    h = torch.matmul(a, b)
    p = h / (h.sum() + 1e-8)
""",
            "the optimized model is fp32 (the fp16 one is a frozen teacher); bf16 region",
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
        self.optimizer = torch.optim.Adam(self.model.parameters(), eps=1e-8)
""",
            "`self.model` of another class: `Trainer` optimizes fp32 parameters",
        ),
        Valid(
            """
import torch
from torch.cuda.amp import autocast

with autocast():
    p = torch.sigmoid(torch.matmul(x, w))
    a = p.clamp(min=1e-3, max=1 - 1e-3)
    b = p.float().clamp(1e-6, 1 - 1e-6)
    c = torch.sigmoid(p.float()).clamp(max=1 - 1e-5)
""",
            "a bound fp16 represents (1 - 1e-3 is 0.999); clamps of fp32 tensors",
        ),
        Valid(
            """
import torch
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("m", torch_dtype=torch.float16)
model = prepare_model_for_kbit_training(model)
model = get_peft_model(model, LoraConfig(r=8))
optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, model.parameters()), lr=2e-4)

base = Net().cuda().half()
get_peft_model(base, LoraConfig(r=8))
adapter_optimizer = torch.optim.Adam(base.parameters(), lr=1e-4)

frozen = Net().cuda().half()
for p in frozen.backbone.parameters():
    p.requires_grad = False
frozen.head.float()
head_optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, frozen.parameters()))
""",
            "what the optimizer gets is fp32: peft adapters (rebound or wrapped in place), an fp32 head of a frozen model",
        ),
        Valid(
            """
import torch
from apex.fp16_utils import FP16_Optimizer

model = Net().cuda().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
""",
            "the optimizer is handed to a master-weight wrapper (apex `FP16_Optimizer`): Adam steps its fp32 copies",
        ),
        Valid(
            """
import torch
from torch.cuda.amp import autocast

def log_mel(spec, mel_basis, eps=1e-20):
    with autocast():
        mel = torch.matmul(mel_basis, spec)
        return torch.log(mel.float().clamp(min=eps))

def log_mel_fp16(spec, mel_basis, eps=1e-20):
    eps = max(eps, 1e-4)
    with autocast():
        return torch.log(torch.matmul(mel_basis, spec).clamp(min=eps))

def argmax_shift(y):
    y = y.half()
    return y.abs().max(dim=-1)[1] + 1e-9

def log(t, eps=1e-20):
    return torch.log(t.clamp(min=eps))

def recon_loss(mel_basis, spec, target):
    with autocast():
        mel = torch.matmul(mel_basis, spec)
    log_mel, log_target = map(log, (mel, target))
    return (log_mel - log(target)).abs().mean()
""",
            "the clamp of an fp32 copy; an eps rebound to one fp16 represents; max()'s indices are"
            " integers; a helper handed on as a value (`map(log, ...)`) and called with a tensor of no visible dtype",
        ),
        Valid(
            """
import copy
import torch

def update_ema(target_params, source_params, rate=0.99):
    for targ, src in zip(target_params, source_params):
        targ.detach().mul_(rate).add_(src, alpha=1 - rate)

net = Net().cuda()
ema = copy.deepcopy(net)
teacher = Net().cuda().half()
teacher.float()
slow = Net().cuda().half()
for batch in loader:
    update_ema(ema.parameters(), net.parameters(), 0.9999)
    update_ema(teacher.parameters(), net.parameters(), 0.9999)
    update_ema(slow.parameters(), net.parameters(), 0.999)
""",
            "an EMA kept in fp32 (and one cast back with `.float()`); a decay fp16 keeps below 1 (0.999 is 0.99902)",
        ),
    ]

    INVALID = [        Invalid(
            """
import torch

@torch.no_grad()
def update_ema(target_params, source_params, rate=0.99):
    for targ, src in zip(target_params, source_params):
        targ.detach().mul_(rate).add_(src, alpha=1 - rate)

def train(loader, net):
    ref_net = Net().cuda()
    ref_net.requires_grad_(False)
    ref_net.to("cuda", dtype=torch.float16)
    for batch in loader:
        update_ema(ref_net.parameters(), net.parameters(), 0.9999)

ema = Net().cuda().half()
for p_ema, p in zip(ema.parameters(), model.parameters()):
    p_ema.lerp_(p, 1e-4)
""",
            line=13,
            count=2,
            why="0.9999 (and 1 - 1e-4) round to 1.0 in fp16: the EMA's multiply leaves the fp16 weights as they were",
        ),

        Invalid(
            """
import torch
model = Net().cuda().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
""",
            line=3,
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import autocast

def log_mel(spec, mel_basis, eps=1e-20):
    with autocast():
        mel = torch.matmul(mel_basis, spec)
        return torch.log(mel.clamp(min=eps))

def peak_normalize(y):
    y = y.half()
    y = y - y.mean(dim=-1, keepdim=True)
    return 0.8 * y / (y.abs().max(dim=-1, keepdim=True)[0] + 1e-9)
""",
            line=4,
            count=2,
            why="the default eps=1e-20 clamps an fp16 matmul output (line 4); max()'s values keep y's fp16 (line 12)",
        ),
        Invalid(
            """
import torch
from torch import nn
from torch.cuda.amp import autocast

def log(t, eps=1e-20):
    return torch.log(t.clamp(min=eps))

class Discriminator(nn.Module):
    def preprocess(self, y):
        y = y - y.mean(dim=-1, keepdim=True)
        return 0.8 * y / (y.abs().max(dim=-1, keepdim=True)[0] + 1e-9)

    def forward(self, wave, weight, spec, mel_basis):
        with autocast():
            fake = torch.tanh(torch.conv1d(wave, weight))
            mel = torch.matmul(mel_basis, spec)
            return self.preprocess(fake), log(mel)
""",
            line=5,
            count=2,
            why="each parameter is fp16 at every call in the file: `log`'s t (line 5) and `preprocess`'s y (line 11)",
        ),
        Invalid(
            """
from torch.optim import AdamW
from transformers import AutoModelForCausalLM
import torch

class Trainer:
    def __init__(self, name):
        self.model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float16)
        self.optimizer = AdamW(self.model.parameters(), lr=2e-5, eps=1e-8, weight_decay=0.01)
""",
            line=8,
        ),
        Invalid(
            """
import torch

def cosine_sim(a, b):
    a = a.half()
    b = b.half()
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1) + 1e-12)
""",
            line=6,
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import autocast

for x, y in loader:
    with autocast():
        logits = torch.matmul(x, w)
        scores = logits.abs()
        probs = scores / (scores.amax(-1, keepdim=True) + 1e-8)
        loss = -(torch.log(probs.clamp(min=1e-10)) * y).sum()
        total = scores.sum(-1) + 1e-8
""",
            line=8,
            count=2,
            why="sum() is upcast to fp32 under CUDA autocast (line 10 is fine); abs/amax/division are not",
        ),
        Invalid(
            """
import torch

class Base:
    def __init__(self, net):
        self.model = net.half()

class Trainer(Base):
    def configure(self):
        self.optimizer = torch.optim.Adam(self.model.parameters(), eps=1e-8)
""",
            line=9,
            why="`self.model` cast by a base class defined in the file",
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import autocast

EPS = 1e-6


def focal_loss(x, w, y):
    with autocast():
        p = torch.sigmoid(torch.matmul(x, w))
        p = p.clamp(min=1e-4, max=1 - 1e-4)
        q = torch.clamp(p, EPS, 1.0 - EPS)
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - q)).mean()
""",
            line=10,
            count=2,
            why="1 - 1e-4 and 1 - 1e-6 are 1.0 in fp16: the clamps let p reach 1 and log(1 - p) is -inf",
        ),
        Invalid(
            """
import torch

model = Net().cuda().half()
model = model.to("cuda")
optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=1e-3)
""",
            line=5,
            why="the requires_grad filter and a device move keep the parameters fp16",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        casts = [c for c in ctx.low_precision_casts if c.dtype == "fp16" and c.subject]
        if casts:
            yield from self._optimizers(ctx, casts)
            yield from self._ema_decays(ctx, casts)
        for lit in ctx.literals:
            if not 0 < abs(lit.value) < FP16_FLUSH_TO_ZERO:
                continue
            if lit.call is None and _param_default(lit) is not None:
                yield from self._default_eps(ctx, lit)
                continue
            if lit.call is None or lit.call.method in _CLAMPS:
                d = self._arithmetic(ctx, lit)
                if d is not None:
                    yield d
        yield from self._absorbed_bounds(ctx)

    # ------------------------------------------------------------ optimizers

    def _optimizers(self, ctx: ModuleContext, casts: List[LowPrecisionCast]) -> Iterator[Diagnostic]:
        for call in ctx.calls:
            q = next((q for q in sorted(call.qualnames) if q in _OPTIMIZERS), None)  # sorted: not the hash seed's pick
            if q is None:
                continue
            if call.arg(None, "fused") is not None and (ctx.code_for(call.arg(None, "fused")) != "False"):
                continue
            cast = _fp16_params(ctx, call, casts)
            if cast is None or _master_wrapped(ctx, call):
                continue
            position, default = _OPTIMIZERS[q]
            eps_node = call.arg(position, "eps")
            if eps_node is None:
                eps, node, text = default, call.node, f"the default eps={default:g}"
            else:
                lit = next((lit for lit in ctx.literals if lit.node is eps_node), None)
                if lit is None or not 0 < abs(lit.value) < FP16_FLUSH_TO_ZERO:
                    continue
                eps, node, text = lit.value, eps_node, f"eps={ctx.code_for(eps_node)}"
            cls = q.rsplit(".", 1)[-1]
            message = f"`{cls}` with {text} over fp16 parameters (`{cast.subject}`): {eps:g} rounds to 0 in fp16"
            help = "Keep fp32 parameters (autocast + GradScaler), or use an eps fp16 represents, e.g. 1e-4"
            data = {"eps": eps, "optimizer_class": q, "snippet": ctx.code_for(call.node), "params": cast.subject}
            data.update(dtype=cast.dtype, device=None)
            yield ctx.diagnostic(self, node, message, data=data, help=help)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """An optimizer whose eps underflows, over a module another file made fp16."""
        for call in project.calls():
            q = project.optimizer_class(call)
            if q not in _OPTIMIZERS or project.master_weights(call):
                continue
            module = next((m for m in project.fp16_modules(project.updated_modules(call)) if m[1] and (m[1][0] != call.path or project.loaded_at(m[1]))), None)
            if module is None:
                continue
            position, default = _OPTIMIZERS[q]
            record = call.record
            ref = record["k"].get("eps", record["a"][position] if len(record["a"]) > position else None)
            if ref is None and "eps" not in record["k"] and len(record["a"]) <= position:
                eps, text = default, f"default eps={default:g}"
            elif ref is not None and "v" in ref and 0 < abs(ref["v"]) < FP16_FLUSH_TO_ZERO:
                eps, text = ref["v"], f"eps={ref['v']:g}"
            else:
                continue
            cls = q.rsplit(".", 1)[-1]
            message = f"`{cls}`'s {text} rounds to 0 on the fp16 parameters of a `{module[0]}`"
            data = {"eps": eps, "optimizer_class": q, "dtype": "fp16", "device": None, "cast_at": project.where(*module[1])}
            yield project.diagnostic(self, call, message, data=data, related=(project.related(*module[1], "made fp16 here"),),
                                     help="Keep fp32 parameters (autocast + GradScaler), or pass an eps fp16 represents (>= 6.1e-5, e.g. `eps=1e-4`)")

    # ------------------------------------------------------------ arithmetic

    def _arithmetic(self, ctx: ModuleContext, lit: LiteralInfo) -> Optional[Diagnostic]:
        import libcst as cst

        if lit.call is not None:
            if not (lit.keyword == "min" or lit.position == 0):
                return None
            tensor = lit.call.receiver
            snippet: cst.CSTNode = lit.call.node
        else:
            parent = lit.parents[0] if lit.parents else None
            if not (isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Add, cst.Subtract))):
                return None
            tensor = parent.right if parent.left is lit.node else parent.left
            snippet = parent
        region = lit.region
        if region is not None and (region.enabled is False or region.dtype == "bf16"):
            return None
        verdict = _fp16_tensor(ctx, tensor, lit.scope, lit.order, lit.statement, region)
        if verdict is None:
            return None
        certain, why = verdict
        text = ctx.code_for(lit.node)
        message = f"{text} rounds to 0 in fp16 next to `{_short(ctx.code_for(tensor))}`, {why}"
        help = "Use an eps fp16 represents (>= 6.1e-5, e.g. 1e-4), or compute this in fp32"
        data = {"eps": lit.value, "optimizer_class": None, "snippet": ctx.code_for(snippet)}
        data.update(dtype="fp16", device=region.device if region is not None else None)
        return ctx.diagnostic(self, lit.node, message, data=data, condition=None if certain else FP16, help=help)


    def _default_eps(self, ctx: ModuleContext, lit: LiteralInfo) -> Iterator[Diagnostic]:
        """`def log(t, eps=1e-20): return torch.log(t.clamp(min=eps))`: the eps a parameter's
        default, used unchanged as the min of a clamp of a tensor the body shows is fp16 (what
        every call that passes no eps gets, in any file). Silent when the body rebinds it."""
        name = _param_default(lit)
        scope = lit.scope
        if name is None or scope.is_module or ctx.assignments_to(name, scope):
            return
        for tensor, site, call in _eps_uses(ctx, scope, name):
            region = call.region
            if region is not None and (region.enabled is False or region.dtype == "bf16"):
                continue
            verdict = _fp16_tensor(ctx, tensor, scope, call.order, call.statement, region)
            if verdict is None:
                continue
            certain, why = verdict
            text = ctx.code_for(lit.node)
            message = f"default {_short(name, 12)}={text} is 0 in fp16 next to `{_short(ctx.code_for(tensor))}`, {why}"
            help = "Use an eps fp16 represents (>= 6.1e-5, e.g. 1e-4) as the default, or compute this in fp32"
            data = {"eps": lit.value, "optimizer_class": None, "snippet": ctx.code_for(site), "parameter": name}
            data.update(dtype="fp16", device=region.device if region is not None else None)
            yield ctx.diagnostic(self, lit.node, message, data=data, condition=None if certain else FP16, help=help,
                                 related=(ctx.related(site, "used here"),))
            return

    # ------------------------------------------------------------ clamp bounds

    def _absorbed_bounds(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """`p.clamp(min=1e-4, max=1 - 1e-4)` on an fp16 `p`: the bound, a constant expression
        evaluated in fp16, is 1.0, so the clamp lets p reach 1 and `log(1 - p)` is -inf."""
        from amplint.model import in_fp16

        for call, tensor, bounds in _clamp_calls(ctx):
            region = call.region
            if region is not None and (region.enabled is False or region.dtype == "bf16"):
                continue
            for side, node in bounds:
                absorbed = _absorbed(ctx, node)
                if absorbed is None:
                    continue
                value, small = absorbed
                verdict = _fp16_tensor(ctx, tensor, call.scope, call.order, call.statement, region)
                if verdict is None:
                    continue
                certain, why = verdict
                rounded = in_fp16(value)
                text = _short(ctx.code_for(node))
                message = f"`{text}` rounds to {rounded:g} in fp16, so this clamp of `{_short(ctx.code_for(tensor))}` lets {rounded:g} through"
                help = "Clamp in fp32 (`x.float().clamp(...)`), or use a bound fp16 represents, e.g. 1 - 1e-3"
                data = {"eps": small, "optimizer_class": None, "snippet": ctx.code_for(call.node), "value": value,
                        "rounds_to": rounded, "bound": side, "why": why}
                data.update(dtype="fp16", device=region.device if region is not None else None)
                yield ctx.diagnostic(self, node, message, data=data, condition=None if certain else FP16, help=help)

    # ------------------------------------------------------------ EMA decay

    def _ema_decays(self, ctx: ModuleContext, casts: List[LowPrecisionCast]) -> Iterator[Diagnostic]:
        """`ema_p.mul_(0.9999).add_(p, alpha=1 - 0.9999)` (or `ema_p.lerp_(p, 1e-4)`) where `ema_p`
        runs over the `.parameters()` of a module the file made fp16: the decay is 1.0 in fp16,
        so the multiply leaves every weight as it was and the EMA never moves. The decay and the
        parameters may be the update helper's parameters, read at its calls in the file."""
        import libcst as cst

        from amplint.model import in_fp16

        seen: Set[int] = set()
        for call in ctx.calls:
            site = _decay_site(ctx, call)
            if site is None:
                continue
            target, rate, lerp = site
            sequence = _loop_sequence(ctx, call, target)
            if sequence is None:
                continue
            scope = call.scope
            by_callers = _param_position(ctx, scope, sequence) is not None or _param_position(ctx, scope, rate) is not None
            for caller in ctx.callers(scope) if by_callers else [None]:
                decay = _decay_value(ctx, scope, rate, caller, lerp)
                params = _passed(ctx, scope, sequence, caller)
                if decay is None or params is None:
                    continue
                value, node = decay
                where = caller if caller is not None else call
                cast = _fp16_parameters_of(ctx, params, where, casts)
                if cast is None or not 0 < value < 1 or in_fp16(value) != 1.0 or id(node) in seen:
                    continue
                seen.add(id(node))
                update = _short(ctx.code_for(call.node), 40)
                if lerp:
                    message = (f"EMA weight {ctx.code_for(node)} is below fp16's step near 1, so `{update}` leaves"
                               f" `{cast.subject}`'s fp16 parameters as they were")
                    if len(message) >= 100:
                        message = f"EMA weight {ctx.code_for(node)} is below fp16's step near 1: `{update}` leaves `{cast.subject}` as it was"
                else:
                    chained = ctx.parent(call.node)  # `.mul_(decay).add_(src, ...)`: an EMA
                    what = "EMA decay" if isinstance(chained, cst.Attribute) and chained.attr.value == "add_" else "decay"
                    message = (f"{what} {value:g} is 1.0 in fp16, so `{update}` leaves"
                               f" `{cast.subject}`'s fp16 parameters undecayed")
                    if len(message) >= 100:
                        message = f"{what} {value:g} is 1.0 in fp16: `{update}` leaves the fp16 `{cast.subject}` unchanged"
                help = "Keep the EMA weights in fp32 (cast a copy for use), or use a decay fp16 keeps below 1 (<= 0.9995)"
                data = {"eps": 1 - value, "optimizer_class": None, "snippet": ctx.code_for(call.node), "decay": value,
                        "params": cast.subject, "dtype": "fp16", "device": None}
                related = [ctx.related(cast.call.node, "made fp16 here")]
                if caller is not None:
                    related.append(ctx.related(call.node, "updated here"))
                yield ctx.diagnostic(self, node, message, data=data, help=help, related=tuple(related))


def _param_default(lit: LiteralInfo) -> Optional[str]:
    """The parameter whose default `lit` is (`def f(t, eps=1e-8)`), if it is one."""
    import libcst as cst

    param = lit.parents[0] if lit.parents else None
    if isinstance(param, cst.Param) and param.default is lit.node:
        return param.name.value
    return None


def _eps_uses(ctx: ModuleContext, scope: "Scope", name: str) -> Iterator[Tuple["cst.BaseExpression", "cst.CSTNode", "CallInfo"]]:
    """(tensor, site, call) where the name `name` is a clamp's min (`t.clamp(min=eps)`,
    `t.clamp_min(eps)`) in `scope`'s own body. Only clamps: the file gate passes a default
    eps in a file that clamps (`gates.underflowing_eps_site`), not every `eps=1e-12` keyword."""
    import libcst as cst

    for call in ctx.calls:
        if call.scope is scope and call.method in _CLAMPS and not call.qualnames and call.receiver is not None:
            bound = call.arg(0, "min")
            if isinstance(bound, cst.Name) and bound.value == name:
                yield call.receiver, call.node, call


def _clamp_calls(ctx: ModuleContext) -> Iterator[Tuple["CallInfo", "cst.BaseExpression", List[Tuple[str, "cst.BaseExpression"]]]]:
    """(call, tensor, [(side, bound)]) of `x.clamp(lo, hi)` / `x.clip(...)` / `torch.clamp(x, lo, hi)`."""
    for call in ctx.calls:
        if call.method in _BOUNDED and not call.qualnames and call.receiver is not None:
            tensor, first = call.receiver, 0
        elif call.qualnames & _BOUNDED_FUNCTIONS:
            tensor, first = call.arg(0, "input"), 1
            if tensor is None:
                continue
        else:
            continue
        bounds = [(side, node) for side, node in (("min", call.arg(first, "min")), ("max", call.arg(first + 1, "max"))) if node is not None]
        if bounds:
            yield call, tensor, bounds


def _absorbed(ctx: ModuleContext, node: "cst.BaseExpression") -> Optional[Tuple[float, float]]:
    """(value, eps) when `node` is a constant `a + eps` / `a - eps` whose eps fp16 rounds away
    (`1 - 1e-4` is 1.0 in fp16): the bound it was written to keep away from is the bound."""
    import libcst as cst

    from amplint.model import folded_number, in_fp16, module_numbers

    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract))):
        return None
    constant = module_numbers(ctx)
    left, right = folded_number(node.left, constant.get), folded_number(node.right, constant.get)
    if left is None or right is None:
        return None
    value = left + right if isinstance(node.operator, cst.Add) else left - right
    big, small = (left, right) if abs(left) >= abs(right) else (right, left)
    if small == 0 or not math.isfinite(in_fp16(value)) or in_fp16(value) != in_fp16(big):
        return None
    return value, abs(small)


def _short(text: str, limit: int = 30) -> str:
    """An expression as a message names it: one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- helpers


def _names_in(node: Optional[cst.CSTNode]) -> Set[str]:
    from amplint.model import dotted_name

    out: Set[str] = set()
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        name = dotted_name(n)
        if name is not None:
            parts = name.split(".")
            out.update(".".join(parts[: i + 1]) for i in range(len(parts)))
            continue
        stack.extend(n.children)
    return out


def _master_wrapped(ctx: ModuleContext, call: CallInfo) -> bool:
    """The optimizer built by `call` is handed to a master-weight wrapper (`FP16_Optimizer(opt)`,
    `amp.initialize(model, opt)`): it then steps fp32 copies of the parameters, eps and moments
    included (AMP201's test, `training_casts.master_wrapped`)."""
    from amplint.model import master_wrapped

    key = next((a.target for a in ctx.assignments if not a.unpacked and a.value is call.node), None)
    return bool(key) and master_wrapped(ctx, key)


def _fp16_params(ctx: ModuleContext, call: CallInfo, casts: List[LowPrecisionCast]) -> Optional[LowPrecisionCast]:
    """The fp16 cast of a module whose parameters `call` (an optimizer) receives."""
    from amplint.model import sees_self_of

    params = call.arg(0, "params")
    names = _names_in(params)
    for name in list(names):
        if "." not in name:
            for a in ctx.assigned_before(name, call):
                names |= _names_in(a.value)
    for cast in casts:
        if cast.subject not in names:
            continue
        if cast.subject.startswith("self."):
            visible = sees_self_of(ctx, call.scope, cast.call.scope)  # not another class's `self.model`
        else:
            visible = cast.call.scope is call.scope or cast.call.scope.is_module
        if visible:
            if not _inference_only(ctx, cast) and not _params_change_after(ctx, cast, call):
                return cast
    return None


#: calls that leave a model's trainable parameters fp32 adapters or fp32 copies (peft)
_ADAPTER_CALLS = frozenset({"get_peft_model", "prepare_model_for_kbit_training", "prepare_model_for_int8_training"})


def _params_change_after(ctx: ModuleContext, cast: LowPrecisionCast, optimizer: CallInfo) -> bool:
    """Between the fp16 cast and the optimizer, the parameters the optimizer gets stop being the
    cast's: the subject is rebound to something else (`model = get_peft_model(model, config)`:
    only fp32 adapter weights are trainable), handed to peft's in-place wrappers
    (`prepare_model_for_kbit_training(model)` upcasts what stays trainable), converted back
    (`model.float()`), or the optimizer gets only `requires_grad` parameters of a file that
    freezes some (a trainable head or adapter may be fp32)."""
    import libcst as cst

    from amplint.model import dotted_name, fp32_cast

    subject = cast.subject
    low, high = cast.call.order, optimizer.order
    if low >= high:
        return False
    for a in ctx.assignments_to(subject):
        if a is cast.assignment or not (low < a.order < high) or a.scope not in (cast.call.scope, optimizer.scope):
            continue
        if _root(a.value) != subject or any(_callee_name(c) in _ADAPTER_CALLS for c in _calls_in(a.value)):
            return True
    for c in ctx.calls:
        if not (low < c.order < high) or c.scope not in (cast.call.scope, optimizer.scope):
            continue
        name = (c.dotted or "").rsplit(".", 1)[-1]
        if name in _ADAPTER_CALLS and any(dotted_name(arg.value) == subject for arg in c.node.args):
            return True
        if fp32_cast(ctx, c.node) and _root(c.node) == subject:
            return True
    params = optimizer.arg(0, "params")
    if params is not None and "requires_grad" in ctx.code_for(params) and _freezes(ctx):
        return True
    return False


def _root(node: "cst.CSTNode") -> Optional[str]:
    """`model` for `model.cuda().half()` (the name a chain of method calls starts from)."""
    import libcst as cst

    from amplint.model import dotted_name

    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        node = node.func.value
    return dotted_name(node)


def _calls_in(node: "cst.CSTNode") -> Iterator["cst.Call"]:
    import libcst as cst

    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Call):
            yield n
        stack.extend(n.children)


def _callee_name(call: "cst.Call") -> str:
    from amplint.model import dotted_name

    return (dotted_name(call.func) or "").rsplit(".", 1)[-1]


def _freezes(ctx: ModuleContext) -> bool:
    """`p.requires_grad = False` or `.requires_grad_(False)` somewhere in the file."""
    from amplint.model import literal_bool

    if any(a.target.endswith("requires_grad") and literal_bool(a.value) is False for a in ctx.assignments):
        return True
    return any(literal_bool(c.arg(0, "requires_grad")) is False for c in ctx.method_calls("requires_grad_"))


def _inference_only(ctx: ModuleContext, cast: LowPrecisionCast) -> bool:
    """`model.half().eval()`: a copy for inference."""
    text = ctx.code_for(cast.assignment.value) if cast.assignment is not None else ""
    return ".eval()" in text or "requires_grad_(False)" in text


def _fp16_tensor(
    ctx: ModuleContext,
    node: Optional[cst.BaseExpression],
    scope: Scope,
    order: int,
    statement: cst.CSTNode,
    region: Optional[AutocastRegion],
    depth: int = 0,
    callers_read: bool = False,
) -> Optional[Tuple[bool, str]]:
    """(certain, why) when `node` is visibly an fp16 tensor; None when not (or unknown). A
    parameter is read at its callers in the file (`_from_callers`), once (`callers_read`)."""
    import libcst as cst

    from amplint.model import literal_number

    if node is None or depth > 12:
        return None
    again = lambda n: _fp16_tensor(ctx, n, scope, order, statement, region, depth + 1, callers_read)  # noqa: E731
    dtype = ctx.known_dtype(node, scope, order, statement)
    if dtype == "fp16":
        return True, "an fp16 tensor"
    if dtype is not None:
        return None
    active = region is not None and region.enabled is not False
    if active and region.dtype in ("fp16", None) and _lowp_output(ctx, node):
        certain = region.dtype == "fp16" and region.enabled is True
        return certain, "an fp16 matmul/linear/conv output"
    if isinstance(node, cst.BinaryOperation) and isinstance(
        node.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)
    ):
        sides = [again(x) if literal_number(x) is None else "number" for x in (node.left, node.right)]
        if None in sides or sides == ["number", "number"]:
            return None
        tensors = [x for x in sides if x != "number"]
        return all(c for c, _ in tensors), tensors[0][1]
    if isinstance(node, cst.Call):
        func = node.func
        keeps = _KEEP_FP16 if active else _KEEP_FP16 | _KEEP_FP16_OUTSIDE_AUTOCAST
        if isinstance(func, cst.Attribute) and not ctx.qualnames(func) and func.attr.value in keeps:
            return again(func.value)
        qualnames = ctx.qualnames(func)
        if any(q.rsplit(".", 1)[-1] in keeps and q.rsplit(".", 1)[0] in _FUNCTION_MODULES for q in qualnames):
            return again(node.args[0].value) if node.args and node.args[0].keyword is None else None
        return None
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Call) and isinstance(node.value.func, cst.Attribute):
        # `x.max(dim=-1)[0]`: the values of a reduction returning (values, indices) keep x's dtype
        if node.value.func.attr.value in _VALUES_INDICES and not ctx.qualnames(node.value.func):
            index = node.slice[0].slice if len(node.slice) == 1 else None
            if isinstance(index, cst.Index) and literal_number(index.value) == 0:
                return again(node.value.func.value)
        return None
    if isinstance(node, cst.Attribute) and node.attr.value == "values" and isinstance(node.value, cst.Call):
        func = node.value.func
        if isinstance(func, cst.Attribute) and func.attr.value in _VALUES_INDICES and not ctx.qualnames(func):
            return again(func.value)
        return None
    if isinstance(node, cst.Name):
        found = [
            a
            for a in ctx.assignments_to(node.value, scope)
            if a.scope is scope and a.order < order and not a.unpacked and a.statement is not statement
        ]
        if not found and not callers_read and node.value in scope.params and not any(
            a.scope is scope and a.order < order for a in ctx.assignments_to(node.value, scope)
        ):
            return _from_callers(ctx, scope, node.value, depth)
        verdicts = [_fp16_tensor(ctx, a.value, scope, a.order, a.statement or a.node, a.region, depth + 1, callers_read) for a in found[-4:]]
        if len(found) <= 4 and verdicts and all(verdicts):  # every assignment so far binds fp16 (`p = p.clamp(...)`)
            return all(c for c, _ in verdicts), verdicts[-1][1]  # type: ignore[index]
    return None


def _from_callers(ctx: ModuleContext, scope: Scope, name: str, depth: int) -> Optional[Tuple[bool, str]]:
    """The parameter `name` of a function of this file is fp16 when it has callers in the file,
    every one passes a tensor visibly fp16 where it is passed (read at the call: its region, its
    scope's assignments; one level: a caller's own parameters are not followed further), and the
    function is only called: its name is not handed on as a value (`map(log, ...)`, a callback),
    which other code could call with anything. `gates.underflowing_eps_lines` keeps every line
    naming the function, so an excerpt holds the same callers."""
    import libcst as cst

    from amplint.model import descendants

    if scope.is_module or not isinstance(scope.node, cst.FunctionDef) or scope.name.startswith("__"):
        return None
    method = scope.cls is not None
    if method and scope.params[:1] != ("self",):
        return None
    callers = [c for c in ctx.calls if ctx.callee(c) is scope]
    if not callers or any(any(a.star for a in c.node.args) for c in callers):
        return None
    if method and any(c.receiver_dotted != "self" for c in callers):
        return None
    uses = 0
    for n in descendants(ctx.module):
        if isinstance(n, cst.Attribute) and n.attr.value == scope.name:
            uses += 1 if method else 0  # `torch.log` is not the file's `log`
        elif isinstance(n, cst.Name) and n.value == scope.name:
            parent = ctx.parent(n)
            if not (isinstance(parent, cst.Attribute) and parent.attr is n):
                uses += 1
    if uses != len(callers) + 1:  # the `def` and the calls only
        return None
    position = scope.params.index(name) - (1 if method else 0)
    verdicts = []
    for c in callers:
        arg = c.arg(position, name)
        verdict = _fp16_tensor(ctx, arg, c.scope, c.order, c.statement, c.region, depth + 1, callers_read=True) if arg is not None else None
        if verdict is None:
            return None
        verdicts.append(verdict)
    return all(certain for certain, _ in verdicts), f"fp16 at every call of `{_short(scope.name, 18)}`"


# --------------------------------------------------------------------------- EMA decay helpers


def _decay_site(ctx: ModuleContext, call: CallInfo) -> Optional[Tuple[str, "cst.BaseExpression", bool]]:
    """(tensor, decay, lerp) of `t.mul_(decay)` / `t.detach().mul_(decay)` / `t.data.mul_(decay)`,
    or of `t.lerp_(src, weight)` (lerp: the decay is 1 - weight); None for anything else."""
    if call.qualnames or call.receiver is None:
        return None
    if call.method == "mul_":
        rate = call.arg(0, "other")
    elif call.method == "lerp_":
        rate = call.arg(1, "weight")
    else:
        return None
    target = _tensor_root(call.receiver)
    if rate is None or target is None:
        return None
    return target, rate, call.method == "lerp_"


def _tensor_root(node: "cst.BaseExpression") -> Optional[str]:
    """`t` for `t`, `t.data`, `t.detach()`."""
    import libcst as cst

    while True:
        if isinstance(node, cst.Attribute) and node.attr.value == "data":
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "detach" and not node.args:
            node = node.func.value
        else:
            break
    return node.value if isinstance(node, cst.Name) else None


def _loop_sequence(ctx: ModuleContext, call: CallInfo, target: str) -> Optional["cst.BaseExpression"]:
    """What the loop binding `target` around `call` runs over: `A` of `for t in A:` or of
    `for t, s in zip(A, B):`, in the call's own function."""
    import libcst as cst

    node: Optional[cst.CSTNode] = ctx.parent(call.node)
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(node, cst.For):
            if isinstance(node.target, cst.Name):
                return node.iter if node.target.value == target else None
            if isinstance(node.target, (cst.Tuple, cst.List)):
                names = [e.value.value if isinstance(e.value, cst.Name) else None for e in node.target.elements]
                it = node.iter
                if target in names and isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "zip":
                    args = it.args
                    index = names.index(target)
                    if len(args) == len(names) and all(a.keyword is None and not a.star for a in args):
                        return args[index].value
                return None
        node = ctx.parent(node)
    return None


def _param_position(ctx: ModuleContext, scope: "Scope", node: Optional["cst.BaseExpression"]) -> Optional[int]:
    """The position a call passes `node` at, when it is a parameter of `scope` its body never rebinds."""
    import libcst as cst

    if scope.is_module or not isinstance(node, cst.Name) or node.value not in scope.params:
        return None
    if any(a.scope is scope for a in ctx.assignments_to(node.value, scope)):
        return None
    method = scope.cls is not None and scope.params[:1] == ("self",)
    return scope.params.index(node.value) - (1 if method else 0)


def _passed(ctx: ModuleContext, scope: "Scope", node: "cst.BaseExpression", caller: Optional[CallInfo]) -> Optional["cst.BaseExpression"]:
    """`node` itself, or for a parameter of `scope` what `caller` passes for it (its default
    where the call passes nothing)."""
    import libcst as cst

    position = _param_position(ctx, scope, node)
    if position is None:
        return node
    if caller is None or position < 0 or any(a.star for a in caller.node.args):
        return None
    arg = caller.arg(position, node.value)  # type: ignore[attr-defined]
    if arg is not None:
        return arg
    fn = scope.node
    if isinstance(fn, cst.FunctionDef):
        for p in (*fn.params.params, *fn.params.kwonly_params):
            if p.name.value == node.value:  # type: ignore[attr-defined]
                return p.default
    return None


def _decay_value(ctx: ModuleContext, scope: "Scope", rate: "cst.BaseExpression", caller: Optional[CallInfo], lerp: bool) -> Optional[Tuple[float, "cst.BaseExpression"]]:
    """(decay, the node spelling it): a constant expression (module constants included) where
    the update is written, or passed for a parameter by `caller`."""
    from amplint.model import folded_number, module_numbers

    node = _passed(ctx, scope, rate, caller)
    value = folded_number(node, module_numbers(ctx).get) if node is not None else None
    if value is None:
        return None
    return (1 - value if lerp else value), node  # type: ignore[return-value]


def _fp16_parameters_of(ctx: ModuleContext, node: Optional["cst.BaseExpression"], where: CallInfo, casts: List[LowPrecisionCast]) -> Optional[LowPrecisionCast]:
    """The fp16 cast of `m` when `node` is `m.parameters()` (or `list(m.parameters())`) at `where`."""
    import libcst as cst

    from amplint.model import dotted_name, sees_self_of

    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "list" and len(node.args) == 1:
        node = node.args[0].value
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "parameters"):
        return None
    subject = dotted_name(node.func.value)
    for cast in casts:
        if cast.subject != subject:
            continue
        if subject.startswith("self."):
            visible = sees_self_of(ctx, where.scope, cast.call.scope)
        else:
            visible = (cast.call.scope is where.scope and cast.call.order < where.order) or cast.call.scope.is_module
        if visible and not _params_change_after(ctx, cast, where):
            return cast
    return None


#: reductions returning (values, indices): `[0]` / `.values` keep the input's dtype
_VALUES_INDICES = frozenset({"max", "min", "topk", "sort", "kthvalue", "median", "mode", "cummax", "cummin"})
def _lowp_output(ctx: ModuleContext, node: cst.BaseExpression) -> bool:
    import libcst as cst

    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return True
    if isinstance(node, cst.Call):
        if ctx.qualnames(node.func) & _LOWP_OPS:
            return True
    return False
