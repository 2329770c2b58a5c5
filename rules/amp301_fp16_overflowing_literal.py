"""AMP301 fp16-overflowing-literal."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

from amplint.model import (
    AUTOCAST_RUNS, Diagnostic, FP16, MODULE_FP32, MODULES_CAST, REACHED, Invalid, Project, ProjectCall, Rule, Severity, Valid, Witness,
    with_requirement,
)

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import (
        AUTOCAST_LOWER_PRECISION_FUNCS, AUTOCAST_LOWER_PRECISION_METHODS, AutocastRegion, CallInfo,
        LiteralInfo, ModuleContext, Path, Scope, descendants, dotted_name, literal_number, make_fix,
        replace_node,
    )


FP16_MAX = 65504.0

#: method -> (position, keyword) of the fill value
_FILL_METHODS = {
    "masked_fill": (1, "value"),
    "masked_fill_": (1, "value"),
    "fill_": (0, "value"),
    "new_full": (1, "fill_value"),
    "index_fill": (2, "value"),
    "index_fill_": (2, "value"),
}
#: qualified function -> (position, keyword) of the fill value, position of the tensor (None: none)
_FILL_FUNCTIONS = {
    "torch.full": (1, "fill_value", None),
    "torch.full_like": (1, "fill_value", 0),
    "torch.masked_fill": (2, "value", 0),
    "torch.Tensor.masked_fill": (2, "value", 0),
    "torch.Tensor.masked_fill_": (2, "value", 0),
}
#: words in an `if` / conditional-expression test that make a constant dtype-aware
_DTYPE_WORDS = ("dtype", "float16", "half", "fp16", "bf16", "bfloat16", "finfo", "autocast", "is_floating_point")


@dataclass
class _Site:
    """One overflowing constant and where it is used."""

    node: cst.BaseExpression  # what is flagged (and replaced by the fix)
    value: float
    text: str  # the constant as written
    call: Optional[CallInfo]  # the call it is an argument of
    position: Optional[int]
    keyword: Optional[str]
    parents: Tuple[cst.CSTNode, ...]
    lit: LiteralInfo
    scope: Scope
    path: Path
    region: Optional[AutocastRegion]
    statement: cst.CSTNode
    order: int


class Fp16OverflowingLiteral(Rule):
    """
    ## What it does
    Flags constants larger in magnitude than fp16's largest finite value
    (65504), typically `-1e9` or `-1e10` attention-mask values, used where the
    tensor they meet may be fp16:

    - as the fill value of `masked_fill` / `masked_fill_` / `fill_` /
      `index_fill` / `torch.full` / `new_full` / `full_like` (error: it raises);
    - in an additive mask (`scores + (1 - mask) * -1e9`, `scores += mask * -1e9`,
      `extended_mask = (1.0 - mask) * -1e9`, `softmax(scores - 1e9, -1)`) or in
      `torch.where(mask, -1e9, x)` (warning: it silently becomes `-inf`).

    One bug, one finding: the same constant filled, in consecutive statements
    of one block, into one tensor or into tensors made from it (three
    `ch_scores.new(n).fill_(-1e17)` in a row, `x.masked_fill_(a, -1e9)` then
    `x.masked_fill_(b, -1e9)`) is reported once, at the first fill, the others
    related locations its fix rewrites too: they meet one dtype, so they hold
    or fail together. Only statements on rows with nothing but comments
    between are consecutive, and a fill assigned to names nothing else in the
    file mentions (a dead store) is reported on its own: the findings must not
    depend on how a huge file is parsed, and such statements are what it is
    parsed in pieces of.

    ```python
    scores.masked_fill_(pad, -1e9)  # one finding, here; the next fill related
    scores.masked_fill_(eos, -1e9)

    a = scores.masked_fill(pad, -1e9)  # a dead store: a finding of its own
    ```

    The finding is kept only when the project can run fp16 (fp16 autocast,
    `.half()`, `torch.float16`, an enabled GradScaler or a dtype decided at
    run time, in any file); see `precision` in the configuration. Not in a
    script no fp16 can reach: a file with an `if __name__ == "__main__":`
    block whose text, the project modules it imports and the project modules
    importing it never name a low-precision dtype, autocast, a loss scaler or
    a precision flag (one example of a repository of examples, next to the
    fp16 ones); nor in a file the project runs itself (under tests/, examples/,
    scripts/: not a module of an importable package) whose text, the project
    modules it imports, those importing it and the project modules each of
    those imports (its trainer), up to six rounds up, name no fp16 source (an
    fp16 dtype or cast, autocast, a loss scaler, a mixed-precision flag, a
    dtype looked up at run time; a bf16/fp32 choice may be there; in a module
    imported, not a mention that only tests a dtype, returns one from a
    converter, picks one by a run-time test for tensors that module makes
    itself or compresses gradients in fp16: pytorch/torchrec's embedding
    modules, imported by its fp32 bert4rec example, unless the line casts), and that
    some project module imports (an import by a module name several project
    files share means the one in the importer's folder, or in a folder it
    names: `sys.path.append(".../seq2seq")`; a dotted one means a file whose
    folders it spells: `from detkit.util.misc import x` never loads a training
    script's `utils/misc.py`) or that runs itself: a test module
    a runner collects (`test_*.py`, `*_test.py`) or a `__main__` script
    nothing imports (OpenNMT-py's beam-search test filling fp32 scores; a
    package module nothing imports may be built by a registry from fp16
    code, and stays); nor in a library copy vendored
    into the project (`annotator/uniformer/mmcv/`) that no fp16-capable code
    outside it imports, or in a definition of such a copy the project does not
    use (no code outside the copy, no class it registers and nothing it runs on
    import names it, or what those name: an unused point-cloud sampler's op);
    nor in a plain module no program loads: below the project root, outside
    any package (no `__init__.py` beside it), only definitions at its top
    level (imports, classes, functions, assignments that call nothing) and no
    `__main__` block, imported by no project file, its dotted or path tail
    (`baselines.transformer`, `baselines/transformer.py`) spelled by no code,
    config or launch script (a registry's strings, a config's `_target_`), its
    name held as a value by no config (a Hydra defaults entry `- /model:
    transformer` that picks the project's `configs/model/transformer.yaml` loads
    that YAML, not the module), and
    not pickable by a file that imports modules by a computed name (an unused
    file of a library copy vendored as plain folders; s4's unregistered
    `src/models/baselines/transformer.py`).

    ## Why is this bad?
    fp16 tops out at 65504. `fp16_tensor.masked_fill(mask, -1e9)` (and `fill_`,
    `torch.full(..., dtype=torch.float16)`) raises
    `RuntimeError: value cannot be converted to type c10::Half without overflow`;
    -65504 still works and -65505 raises. Under autocast the
    attention scores come out of a matmul in fp16, so code that worked in fp32
    crashes the first time it runs under fp16 AMP.

    The additive forms do not raise: `-1e9` becomes `-inf` in fp16, and a row
    whose positions are all masked (padding-only query rows, a fully masked
    causal block) goes through softmax as all `-inf` and comes out `NaN`. Those NaNs then spread through the loss.

    ## Example
    ```python
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    scores = scores.masked_fill(attention_mask == 0, -1e9)
    ```

    ## Use instead
    ```python
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
    ```
    `torch.finfo(x.dtype).min` is -65504 in fp16, about -3.39e38 in bf16 and
    -3.40e38 in fp32, and a fully masked row of it softmaxes to a uniform row
    instead of NaN. `float("-inf")` also fills without raising, but
    fully masked rows then give NaN. For additive masks, prefer `masked_fill`
    (it replaces the score instead of adding to it: `-100 + finfo(fp16).min`
    still overflows to `-inf`, E04) or build the mask in fp32.

    ## Fix safety
    Unsafe: replaces the constant of a fill (`masked_fill`, `fill_`,
    `new_full`, `full_like`, `torch.full(dtype=d)`, `torch.where`) with
    `torch.finfo(<tensor>.dtype).min` (`.max` for positive constants), where
    `<tensor>` is the tensor being filled, when it is a plain name or
    attribute and `torch` is imported in the file. The masked value changes
    from -1e9 to the dtype's minimum, which is what the code meant but can
    change results that depended on the exact constant. Additive masks get no
    fix: adding `finfo.min` to a negative score overflows too.

    ## Verification
    `amplint --verify` fills (or adds) the flagged constant on an fp16 tensor
    and reports the exception text or the count of `-inf` / NaN values after
    a softmax over a fully masked row.

    ## Notes
    Silent on `float("-inf")`, `torch.finfo(x.dtype).min`, dtype-aware
    constants (`-1e4 if x.dtype == torch.float16 else -1e9`, or an `if` on the
    dtype), tensors visibly fp32/bf16 (`scores.float().masked_fill(...)`,
    `torch.zeros(n, n).masked_fill_(...)`, a factory whose `dtype=` is a local
    the function binds to one dtype only (`dtype = torch.bfloat16`; not a
    parameter), a legacy typed constructor such as
    `torch.cuda.FloatTensor(n).fill_(1e10)`, a softmax given its dtype
    (`F.log_softmax(x, -1, dtype=torch.float32)`), `x.new_full(...)` /
    `x.new_zeros(...)` / `x.new(size)` of such an `x` and its `gather`,
    `index_select` or `sum`, including the inputs of a `custom_fwd(cast_inputs=torch.float32)`
    forward), tensors that type promotion makes fp32 (`torch.cat([torch.zeros(n, 1),
    x], -1)`, `fp16_scores + fp32_pos`, the fill's own boolean mask times a float
    literal (`(m * 1.0).masked_fill(m, -1e9)`: fp32, then cast where it lands,
    `.to(torch.bfloat16)`), also through what a function of the file
    returns: a relative-position `self._relative_shift(pos)` padding with fp32 zeros),
    code inside a bf16 or
    `enabled=False` autocast region, and projects that never run fp16 (bf16
    loses precision on -1e9 but represents it: it becomes -998244352, E03).
    A tensor a module makes in fp32 and holds (`self.register_buffer("bias",
    torch.tril(torch.ones(n, n)))`, an `nn.Parameter` of a factory) lifts what it
    meets to fp32 under autocast or apex O1 (GPT-2's `w * self.bias - 1e10 * (1 -
    self.bias)`), unless the module is cast: such a finding is kept only where
    code reaching the file (the file, its project imports, its importers a few
    rounds up) may cast modules to fp16 (`.half()`, `float16`, a `.to()` with a
    dtype chosen elsewhere, DeepSpeed, apex O2/O3, "16-true", `torch_dtype=`), or
    the file is a module of an importable package (its users may).
    A tensor an op autocast lowers makes from operands visibly fp32 where it
    runs (`q = q.float(); k = k.float(); attn = torch.matmul(q, k.transpose(2, 3))`)
    is fp32 whatever casts the modules (`.half()` cannot reach it), and fp16 only
    under an fp16 autocast: such a finding is kept only where some program
    loading the file may enter a low-precision autocast (the file itself, or a
    module that imports both it and a file entering one), as for AMP501
    (PatchTST's standalone fp32 timing script, whose kernel helper names
    float16 only as a dtype it accepts).
    Silent too on a parameter of a private module-level function (`_fill(scores,
    ...)`) that the file only calls, when every call passes a tensor whose dtype
    is visibly not fp16 where it is passed (`x.float()`, `torch.zeros(n)`, read
    along the caller's own control flow); a caller in another file is not
    looked for.
    Silent, too, on an additive mask built from a parameter of the function as it is passed
    (`ext = (1.0 - video_mask.unsqueeze(1)) * -1e6`: reshaped, combined with numbers, not
    rebound before): its dtype is the caller's mask's, and a boolean or integer mask from the
    data makes it fp32. A cast of the mask in the function (`mask = mask.to(dtype)`) keeps it.

    Across functions and files (the project model): also flags a fill or an
    additive mask in a function that runs under an fp16 autocast its own file
    does not show -- another file's region reached through the call graph,
    an autocast held in an attribute or `partial` (`with self.amp_autocast():`),
    a project decorator that enters autocast, a Lightning
    `Trainer(precision="16-mixed")` or an fp16 `Accelerator`. Only when the
    region's dtype is fp16 (bf16 represents -1e9) and the tensor is an autocast
    output: made in that function by an op autocast runs in fp16 (`q @ k`,
    `torch.matmul`, `F.linear`, an `nn.Linear` / `nn.Conv*` held in an
    attribute), not `.float()`ed, and in no function that tests a dtype. The
    region's start is a related location, with the chain of calls; when the per-file check
    already reported the constant because the project runs fp16 somewhere, the
    one finding takes this message and keeps its fix.

    Like every rule, silent in a file whose tensors cannot be PyTorch tensors
    (`core/gating.py`'s `not_torch_code`): the file never names `torch` and
    imports TensorFlow/Keras, JAX/Flax, Paddle, MXNet, MindSpore or MLX (a
    library's `modeling_tf_*.py` / `modeling_flax_*.py`), or imports numpy
    (scipy, pandas) and otherwise only the standard library.

    ## References
    - amplint's evidence page: `amplint --explain AMP301` (docs/evidence.md#amp301)
    - https://pytorch.org/docs/stable/generated/torch.finfo.html
    """

    code = "AMP301"
    name = "fp16-overflowing-literal"
    severity = Severity.ERROR
    message = "constant overflows fp16"
    #: a number literal beyond 65504 in one of the places `_classify` looks (a fill call's
    #: argument, a mask product, `+=`, a softmax operand, `NAME = literal`): most big numbers in
    #: model code are config defaults, comparisons and docstrings, which never open the gate
    gate_check = "amplint.core.gates:overflowing_literal_site"
    #: a finding depends only on imports, module constants and the definition holding the site
    gate_sites = "amplint.core.gates:overflowing_literal_lines"

    VALID = [
        Valid(
            """
import torch


class Retrieval(torch.nn.Module):
    def similarity(self, visual, video_mask):
        extended_mask = (1.0 - video_mask.unsqueeze(1)) * -1e6
        return self.transformer(visual.half(), extended_mask)
""",
            "the mask is built from the caller's mask as it is passed: a data mask makes it fp32",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    scores = q @ k.transpose(-1, -2)
    scores = scores.masked_fill(mask == 0, float("-inf"))
""",
            "float('-inf') fills without raising",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    scores = q @ k.transpose(-1, -2)
    scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
""",
            "the dtype's own minimum",
        ),
        Valid(
            """
import torch
model.half()

def attend(scores, mask):
    neg = -1e4 if scores.dtype == torch.float16 else -1e9
    return scores.masked_fill(mask, -1e4 if scores.dtype == torch.float16 else -1e9)
""",
            "dtype-aware constants",
        ),
        Valid(
            """
import torch
model = model.half()

def attend(scores, mask):
    if scores.dtype == torch.float16:
        return scores.masked_fill(mask, -65504.0)
    return scores.masked_fill(mask, -1e9)
""",
            "the -1e9 branch runs only when the scores are not fp16",
        ),
        Valid(
            """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        scores = q @ k.transpose(-1, -2)
        scores = scores.masked_fill(mask == 0, -1e9)
""",
            "a bf16-only project: -1e9 is representable in bf16",
        ),
        Valid(
            """
import torch
model.half()
causal = torch.triu(torch.ones(n, n), diagonal=1).masked_fill(mask, -1e9)
scores = scores.float().masked_fill(mask, -1e9)
big = torch.full((n, n), -1e9)
""",
            "tensors that are visibly fp32 (factories without dtype, .float())",
        ),
        Valid(
            """
import torch
model.half()

def poisoned_inputs(rows, used, hidden):
    dtype = torch.bfloat16
    t = torch.randn(rows, hidden, dtype=dtype, device="cuda")
    t[used:].fill_(1e30)
    return t
""",
            "a factory's dtype a local bound to bf16 only: bf16 holds 1e30 (TransformerEngine's quantize benchmark)",
        ),
        Valid(
            """
import torch
from torch.autograd import Function
model.half()


class NearFarFromAabb(Function):
    @staticmethod
    def forward(ctx, rays_o, rays_d, aabb):
        n = rays_o.shape[0]
        nears = torch.cuda.FloatTensor(n).fill_(1e10)
        fars = torch.FloatTensor(n, 3).fill_(-1e10)
        far = torch.Tensor(n).fill_(1e10)
        return nears, fars, far
""",
            "legacy typed constructors name their dtype: torch.cuda.FloatTensor / torch.FloatTensor / torch.Tensor are fp32",
        ),
        Valid(
            """
import torch
from torch.cuda.amp import custom_bwd, custom_fwd

model.half()


class NearFarFromAabb(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, rays_o, rays_d):
        nears = rays_o.new_full((rays_o.shape[0],), 1e10)
        fars = rays_o.new_zeros(rays_o.shape[0]).fill_(-1e10)
        return nears, fars

    @staticmethod
    @custom_bwd
    def backward(ctx, g_near, g_far):
        return None, None


def bounds(x):
    x = x.float()
    return x.new_full((3,), -1e9), x.new_zeros(3).fill_(1e10)
""",
            "new_full / new_zeros of fp32 tensors: inputs of a custom_fwd(cast_inputs=torch.float32) forward, .float()",
        ),
        Valid(
            """
import torch
from detector.utils.amp import custom_fwd

scaler = torch.cuda.amp.GradScaler()


class ContrastiveLoss:
    @custom_fwd(cast_inputs=torch.float32)
    def __call__(self, img_emb, text_emb, text_mask):
        logits = torch.matmul(img_emb, text_emb.transpose(-1, -2)) / self.scale.exp()
        logits = logits.masked_fill(~text_mask, -1000000)
        return logits.logsumexp(-1)
""",
            "a body under custom_fwd(cast_inputs=torch.float32) (here re-exported by a project module)"
            " computes in fp32: autocast casts its inputs and is off inside (GLIP's ATSS loss)",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda"):
    logits = model(x)
    with torch.autocast("cuda", enabled=False):
        scores = logits.float().masked_fill(mask, -1e9)
    ids = torch.full((n,), 100000, dtype=torch.long)
""",
            "fp32-only region with an explicit cast; integer tensors",
        ),
        Valid(
            """
import torch

def check_early_stop(running_beam_scores, beam_scores, is_sent_finished, length_penalty):
    best_possible = running_beam_scores[:, :1] / length_penalty
    worst_finished = torch.where(is_sent_finished, torch.min(beam_scores, dim=1, keepdim=True)[0], -1.0e9)
    return best_possible > worst_finished

def step(topk_log_probs, finished):
    topk_log_probs += (~finished) * -1.0e9
    return topk_log_probs

model = model.half()
""",
            "the drill (transformers beam search): shifting existing scores whose dtype is not visibly fp16",
        ),
        Valid(
            """
import torch

def select_tiling(tilings, required_scale):
    required_scale = torch.where(required_scale < 1.0, 10e9, required_scale)
    return tilings[int(required_scale.argmin())]

def init_state(state):
    state[4] -= 1e30
    return state

model.half()
""",
            "the drill (transformers molmo2, rwkv): big constants on size arithmetic and fp32 recurrent state",
        ),
        Valid(
            """
import torch

EMPTY_SCORE = -1e9


def _fill_empty(scores, empty):
    return scores.masked_fill(empty, EMPTY_SCORE)


def maxsim(a, b, mask):
    scores = torch.einsum("ash,bth->abst", a, b)
    scores = scores.max(dim=-1).values.float()
    if mask is not None:
        scores = scores * mask
    scores = scores.sum(dim=-1)
    return _fill_empty(scores, ~mask.bool().any(dim=-1))


def export(model):
    return model.half()
""",
            "the private helper's only caller passes fp32 scores (`.float()`, then fp32-preserving ops)",
        ),
        Valid(
            """
import torch
from torch import nn


class RelativeMultiHeadAttention(nn.Module):
    def forward(self, query, key, pos_embedding, mask):
        content_score = query @ key.transpose(2, 3)
        pos_score = self._relative_shift(query @ pos_embedding.permute(0, 2, 3, 1))
        score = content_score + pos_score
        score.masked_fill_(mask, -1e9)
        return score.softmax(-1)

    def _relative_shift(self, pos_score):
        b, h, t1, t2 = pos_score.size()
        zeros = torch.zeros((b, h, t1, 1), device=pos_score.device)
        padded = torch.cat([zeros, pos_score], dim=-1).view(b, h, t2 + 1, t1)
        return padded[:, :, 1:].view_as(pos_score)


with torch.autocast("cuda"):
    out = RelativeMultiHeadAttention()(q, k, pos, mask)
""",
            "the blind drill (coqui-ai/TTS conformer): the helper's `torch.cat` with fp32 zeros makes"
            " fp32 scores, and fp16 + fp32 is fp32",
        ),
        Valid(
            """
import torch

model = Net().cuda().half()

def falcon_bias(attention_mask, scores):
    bias = (attention_mask * 1.0).masked_fill(attention_mask, -1e9).to(torch.bfloat16)
    return scores + bias
""",
            "the fill's own boolean mask times 1.0 is fp32: -1e9 lands there, then in bf16, which holds it",
        ),
        Valid(
            """
import torch
import torch.nn.functional as F

model = Decoder().cuda().half()


def rescore(logits, index, mask, size):
    lprobs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
    picked = torch.gather(lprobs, 2, index).squeeze(2)
    scores = torch.sum(picked, dim=1)
    pruned = scores.new(size).fill_(-1e17)
    probs = logits.softmax(-1, dtype=torch.float32).masked_fill(mask, -1e9)
    return pruned, probs
""",
            "softmax with `dtype=torch.float32` is fp32, and so is what gather, sum and"
            " `.new(size)` make of it (fairseq's noisy-channel rescoring)",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch

model = Decoder().cuda().half()


def rescore(ch_scores, size):
    fw = ch_scores.new(size).fill_(-1e17).view(2, -1)
    ch = ch_scores.new(size).fill_(-1e17).view(2, -1)
    lm = ch_scores.new(size).fill_(-1e17).view(2, -1)
    return fw, ch, lm
""",
            line=7,
            count=1,
            why="one bug, one finding: three fills in a row of tensors made from `ch_scores` (fairseq's"
            " noisy-channel rescoring) meet its dtype; one finding, the others related",
        ),
        Invalid(
            """
import torch

model = Decoder().cuda().half()


def mask(scores, pad, eos):
    scores.masked_fill_(pad, -1e9)
    scores.masked_fill_(eos, -1e9)
    return scores
""",
            line=7,
            count=1,
            fixed="""
import torch

model = Decoder().cuda().half()


def mask(scores, pad, eos):
    scores.masked_fill_(pad, torch.finfo(scores.dtype).min)
    scores.masked_fill_(eos, torch.finfo(scores.dtype).min)
    return scores
""",
            why="two fills of `scores` in a row are one finding, and its fix rewrites both",
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import custom_fwd

scaler = torch.cuda.amp.GradScaler()


class ContrastiveLoss:
    @custom_fwd(cast_inputs=torch.float32)
    def __call__(self, img_emb, text_emb, text_mask):
        logits = torch.matmul(img_emb, text_emb.transpose(-1, -2)).half()
        return logits.masked_fill(~text_mask, -1000000)
""",
            line=11,
            count=1,
            why="custom_fwd(cast_inputs=torch.float32) makes the inputs fp32, but the body casts the logits to fp16 itself",
        ),
        Invalid(
            """
import torch

model = Decoder().cuda().half()


def mask(scores, pad, eos):
    a = scores.masked_fill(pad, -1e9)
    b = scores.masked_fill(eos, -1e9)

    scores.masked_fill_(pad, -1e9)
    return scores
""",
            line=7,
            count=3,
            why="one finding each: `a` and `b` are dead stores (what a huge file is parsed in pieces"
            " of), and an empty row between two fills ends the run",
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F

model = Decoder().cuda().half()


def rescore(logits, index, size):
    lprobs = F.log_softmax(logits, dim=-1, dtype=torch.float16)
    scores = torch.sum(torch.gather(lprobs, 2, index).squeeze(2), dim=1)
    return scores.new(size).fill_(-1e17)
""",
            line=10,
            why="softmax asked for fp16: the scores gathered and summed from it are fp16 (the VALID twin asks for fp32)",
        ),
        Invalid(
            """
import torch
model.half()

def poisoned_inputs(rows, used, hidden, dtype=torch.bfloat16):
    t = torch.randn(rows, hidden, dtype=dtype, device="cuda")
    t[used:].fill_(1e30)
    return t
""",
            line=6,
            why="the dtype is a parameter: a caller may pass float16 (the VALID twin binds it to bf16 only)",
        ),
        Invalid(
            """
import torch

def fill(scores, attention_mask):
    scores = scores.half()
    return (scores * 1.0).masked_fill(attention_mask, -1e9)
""",
            line=5,
            why="an fp16 tensor times 1.0 stays fp16 (the VALID twin multiplies the boolean mask)",
        ),
        Invalid(
            """
import torch
with torch.autocast("cuda"):
    scores = q @ k.transpose(-1, -2)
    scores = scores.masked_fill(mask == 0, -1e9)
""",
            line=4,
            fixed="""
import torch
with torch.autocast("cuda"):
    scores = q @ k.transpose(-1, -2)
    scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
""",
        ),
        Invalid(
            """
import math
import torch
from torch import nn


class BertSelfAttention(nn.Module):
    def forward(self, hidden_states, attention_mask=None):
        query = self.query(hidden_states)
        key = self.key(hidden_states)
        attention_scores = torch.matmul(query, key.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.head_dim)
        if attention_mask is not None:
            attention_scores.masked_fill_(attention_mask == 0, -1e10)
        probs = nn.functional.softmax(attention_scores, dim=-1)
        return torch.matmul(probs, self.value(hidden_states))


model = BertSelfAttention().cuda().half()
""",
            line=13,
            fixed="""
import math
import torch
from torch import nn


class BertSelfAttention(nn.Module):
    def forward(self, hidden_states, attention_mask=None):
        query = self.query(hidden_states)
        key = self.key(hidden_states)
        attention_scores = torch.matmul(query, key.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.head_dim)
        if attention_mask is not None:
            attention_scores.masked_fill_(attention_mask == 0, torch.finfo(attention_scores.dtype).min)
        probs = nn.functional.softmax(attention_scores, dim=-1)
        return torch.matmul(probs, self.value(hidden_states))


model = BertSelfAttention().cuda().half()
""",
        ),
        Invalid(
            """
import torch as th
from torch.cuda.amp import autocast

NEG_INF = -1e9

def masked_logits(logits, valid):
    return logits.masked_fill(~valid, NEG_INF)

def train_step(model, batch):
    with autocast():
        logits = masked_logits(model(batch.x), batch.valid)
""",
            line=7,
        ),
        Invalid(
            """
import torch

class Decoder(torch.nn.Module):
    def forward(self, x, lengths):
        bias = x.new_full((x.size(0), x.size(1)), -1e9)
        pad = torch.full((4, 4), -1e9, dtype=torch.float16, device=x.device)
        return x + bias + pad

with torch.autocast("cuda"):
    out = Decoder()(x, lengths)
""",
            line=5,
            count=2,
        ),
        Invalid(
            """
import torch

EMPTY_SCORE = -1e9


def _fill_empty(scores, empty):
    return scores.masked_fill(empty, EMPTY_SCORE)


def maxsim(a, b, mask):
    scores = torch.einsum("ash,bth->abst", a, b).max(dim=-1).values.float().sum(dim=-1)
    return _fill_empty(scores, ~mask.bool().any(dim=-1))


def maxsim_half(a, b, mask):
    scores = torch.einsum("ash,bth->abst", a, b).half().amax(dim=-1).sum(dim=-1)
    return _fill_empty(scores, ~mask.bool().any(dim=-1))
""",
            line=7,
            why="one caller passes fp16 scores",
        ),
        Invalid(
            """
import torch
from torch import nn


class RelativeMultiHeadAttention(nn.Module):
    def forward(self, query, key, pos_embedding, mask):
        content_score = query @ key.transpose(2, 3)
        pos_score = self._relative_shift(query @ pos_embedding.permute(0, 2, 3, 1))
        score = content_score + pos_score
        score.masked_fill_(mask, -1e9)
        return score.softmax(-1)

    def _relative_shift(self, pos_score):
        b, h, t1, t2 = pos_score.size()
        zeros = pos_score.new_zeros((b, h, t1, 1))
        padded = torch.cat([zeros, pos_score], dim=-1).view(b, h, t2 + 1, t1)
        return padded[:, :, 1:].view_as(pos_score)


with torch.autocast("cuda"):
    out = RelativeMultiHeadAttention()(q, k, pos, mask)
""",
            line=10,
            why="zeros made like the fp16 scores: the shifted scores stay fp16",
        ),
        Invalid(
            """
import math
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, n_ctx):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx))

    def _attn(self, q, k, v):
        w = torch.matmul(q, k) / math.sqrt(v.size(-1))
        nd, ns = w.size(-2), w.size(-1)
        b = self.bias[:, :, ns - nd : ns, :ns]
        w = (w * b).masked_fill(b == 0, -1e10)
        return torch.matmul(nn.Softmax(dim=-1)(w), v)


model = Attention(1024).cuda().half()
""",
            line=15,
            why="the module is cast: its fp32 `bias` buffer is fp16 too, so is `w * b` (silent when no"
            " code reaching the file casts modules: tests/test_fp32_scripts.py)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        guards = _GuardIndex(ctx)
        found: List[Tuple[_Site, "_Use", Diagnostic]] = []
        for site in _sites(ctx):
            judged = self._judge(ctx, site, guards)
            if judged is not None:
                found.append((site, *judged))
        yield from _one_per_tensor(ctx, found)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """A mask constant in a function that runs under an fp16 autocast its file does not
        show (another file's, a held `partial(torch.autocast, ...)`, a project decorator, a
        framework's precision flag), on a tensor that autocast computed in fp16 there."""
        project.reached()  # loads the modules autocast regions lead to
        for path, qual, info in list(project.functions()):
            found: List[Tuple[ProjectCall, dict, Witness]] = []
            for site in info.get("masks", ()):
                call = ProjectCall(path, qual, site)
                own = project.region_of(call)
                if own is not None and own.kind != "held":
                    continue  # a region its own file shows decides (`check`)
                witnesses = [Witness(own, ())] if own is not None else project.autocast_witnesses((path, qual))
                witness = next((w for w in witnesses if w.region.enabled is not False and w.region.dtype == "fp16"), None)
                if witness is None or not _lowered(project, call, site["src"]):
                    continue  # bf16 keeps fp32's range; a tensor not made by autocast may be fp32
                found.append((call, site, witness))
            for group in _one_per_filled_name(found):
                call, site, witness = group[0]
                yield self._project_diagnostic(project, call, site, witness, [s for _, s, _ in group[1:]])

    def _project_diagnostic(self, project: Project, call: ProjectCall, site: dict, witness: Witness,
                            later: List[dict]) -> Diagnostic:
        """`later`: the same constant's next fills of the same tensor (one bug), related sites."""
        from amplint.model import Location, Related
        region = witness.region
        when = " (when enabled)" if region.enabled is None else ""
        tensor = site["x"] or "the tensor"
        under = f"`{tensor}` is fp16 under autocast{when}"
        bound = "min" if site["v"] < 0 else "max"
        if site["raises"]:
            message = f"{site['t']} in `{site['op']}` does not fit fp16 and raises: {under}"
            severity = Severity.ERROR
            help = f"Use `torch.finfo({site['x'] or 'x'}.dtype).{bound}`"
        else:
            where = "an additive mask" if site["op"] == "additive" else f"`{site['op']}`"
            message = f"{site['t']} in {where} overflows fp16 to inf: {under}"
            severity = Severity.WARNING
            help = f"Use `torch.finfo({site['x'] or 'x'}.dtype).{bound}`: a fully masked row of inf softmaxes to NaN"
        data = {"literal": site["v"], "op": site["op"], "tensor": site["x"] or None, "raises": bool(site["raises"]),
                "dtype": region.dtype, "device": region.device}
        also = tuple(Related(Location(s["r"], s["c"]), Location(s["er"], s["ec"]), f"{s['t']} also filled in `{s['x']}`'s dtype")
                     for s in later)
        return project.diagnostic(self, call, message, data=data, severity=severity,
                                  related=(project.entered(region, witness.chain), *also), help=help)

    def _judge(self, ctx: ModuleContext, site: _Site, guards: "_GuardIndex") -> Optional[Tuple["_Use", Diagnostic]]:
        region = site.region
        if region is not None and (region.enabled is False or region.dtype == "bf16"):
            return None
        use = _classify(ctx, site)
        if use is None:
            return None
        if _dtype_aware(ctx, site.parents, site.path, site.statement, site.scope, guards):
            return None
        if use.op in ("additive", "where") and _is_integer(site.lit.node):
            return None  # `index + 100000`: integer arithmetic, not a mask
        if use.dtype_node is not None:
            dtype = ctx.dtype_kind(use.dtype_node)
        elif use.op == "torch.full":
            dtype = "fp32"  # no dtype=: the default dtype (a float fill value gives float32)
        else:
            dtype = None
            if _mask_times_float(ctx, use):
                return None
            for expr in [use.tensor, *use.others]:
                d = _known_dtype(ctx, expr, site)
                if d in ("fp32", "bf16", "other"):
                    return None
                dtype = d if dtype in (None, MODULE_FP32) and d is not None else dtype
        if dtype in ("fp32", "bf16", "other"):
            return None
        unknown = dtype in (None, MODULE_FP32)  # a module's fp32 tensor is fp16 once the module is cast
        if unknown and _not_fp16_from_any_caller(ctx, use.tensor, site):
            return None
        if dtype is None and region is None and _inputs_cast_to_fp32(ctx, site.scope):
            # `@custom_fwd(cast_inputs=torch.float32)`: a body written to compute in fp32 (autocast
            # casts its floating inputs to fp32 and is off inside); only a tensor it visibly makes
            # fp16 is reported (GLIP's ATSS loss masking contrastive logits of its fp32 embeddings)
            return None
        if unknown and _builds_mask(use) and _mask_parameter_as_passed(ctx, use.tensor, site):
            return None  # `(1.0 - video_mask.unsqueeze(1)) * -1e6`: the caller's mask, bool/int from the data
        if unknown and not use.raises and not _builds_mask(use) and not _low_precision_source(ctx, use.tensor, site):
            # a silent overflow on an existing tensor of unknown dtype: report it only when the
            # tensor visibly comes from an op autocast runs in fp16 (matmul, linear, ...: §6.2 "the
            # attention scores come out of a matmul as fp16"). Beam scores, log-probs, recurrent
            # state and index arithmetic shifted by a big constant are fp32 in the drill's libraries.
            return None
        condition = None if dtype == "fp16" else _fp16_condition(site, dtype)
        if condition is not None and region is None and _fp32_operands(ctx, use.tensor, site):
            # a matmul of `.float()`ed operands is fp32 whatever casts the modules: only an fp16
            # autocast running this code lowers it (PatchTST's standalone fp32 timing script)
            condition = with_requirement(condition, AUTOCAST_RUNS)
        return use, self._diagnostic(ctx, site, use, condition=condition)

    def _diagnostic(self, ctx: ModuleContext, site: _Site, use: "_Use", condition: Optional[str]) -> Diagnostic:
        tensor_text = ctx.code_for(use.tensor) if use.tensor is not None else None
        bound = "min" if site.value < 0 else "max"
        if use.raises:
            message = f"{site.text} in `{use.op}` does not fit fp16; on an fp16 tensor it raises"
            help = f"Use `torch.finfo({tensor_text if _simple(use.tensor) else 'x'}.dtype).{bound}`"
            severity = Severity.ERROR
        else:
            where = "an additive mask" if use.op == "additive" else f"`{use.op}`"
            message = f"{site.text} in {where} overflows fp16 to inf; a fully masked row softmaxes to NaN"
            help = f"Use `torch.finfo(x.dtype).{bound}`, or build the mask in fp32"
            severity = Severity.WARNING
        data = {
            "literal": site.value,
            "op": use.op,
            "snippet": ctx.code_for(use.snippet),
            "tensor": tensor_text,
            "raises": use.raises,
            "dtype": site.lit.region.dtype if site.lit.region is not None else None,
            "device": site.lit.region.device if site.lit.region is not None else None,
        }
        return ctx.diagnostic(
            self,
            site.node,
            message,
            fix=_fix(ctx, site, use),
            data=data,
            condition=condition,
            severity=severity,
            help=help,
        )


def _one_per_tensor(ctx: ModuleContext, found: List[Tuple[_Site, "_Use", Diagnostic]]) -> Iterator[Diagnostic]:
    """One bug, one finding: the same constant filled, in consecutive statements of one block,
    into the same tensor or into tensors made from it (`x.new(n).fill_(-1e17)` three times over:
    fairseq's noisy-channel rescoring) is reported once, at the first fill, the others related
    and fixed with it. They hold or fail together: the dtype they meet is that tensor's."""
    import dataclasses

    groups: List[List[Tuple[_Site, Diagnostic, "_Use"]]] = []
    # key -> (group index, id of the block, statement index, the statement's last row)
    last: Dict[tuple, Tuple[int, int, int, int]] = {}
    blocks: Dict[int, Dict[int, int]] = {}
    text = _Text(ctx.source)
    for site, use, diagnostic in found:
        origin = _origin(ctx, use)
        place = _statement_place(ctx, site.statement, blocks) if origin is not None else None
        if origin is None or place is None:
            groups.append([(site, diagnostic, use)])
            continue
        key = (id(site.scope), origin, site.value, use.op, diagnostic.condition, diagnostic.message)
        first, end = ctx.position(place[2])
        previous = last.get(key)
        if (previous is not None and previous[1] == place[0] and place[1] - previous[2] in (0, 1)
                and text.adjoin(previous[3], first.row) and not _dead_store(ctx, site.node, text)
                and not _dead_store(ctx, groups[previous[0]][-1][0].node, text)):
            groups[previous[0]].append((site, diagnostic, use))
            last[key] = (previous[0], place[0], place[1], end.row)
            continue
        last[key] = (len(groups), place[0], place[1], end.row)
        groups.append([(site, diagnostic, use)])
    for group in groups:
        site, diagnostic, _ = group[0]
        if len(group) == 1:
            yield diagnostic
            continue
        others = group[1:]
        origin = _origin(ctx, group[0][2])
        related = tuple(diagnostic.related) + tuple(
            ctx.related(s.node, f"{s.text} also filled in `{origin}`'s dtype") for s, _, _ in others
        )
        fix = diagnostic.fix
        if fix is not None:
            if all(d.fix is not None for _, d, _ in others):
                fix = dataclasses.replace(fix, edits=fix.edits + tuple(e for _, d, _ in others for e in d.fix.edits))
            else:
                fix = None  # a fix of only some of the sites would leave the bug
        yield dataclasses.replace(diagnostic, related=related, fix=fix)


def _one_per_filled_name(found: List[Tuple[ProjectCall, dict, Witness]]) -> List[List[Tuple[ProjectCall, dict, Witness]]]:
    """The project pass's `_one_per_tensor`, on summary records: fills of one named tensor
    (`scores.masked_fill_(a, -1e9)` then `scores.masked_fill_(b, -1e9)`) with one constant on
    adjacent rows, under one region, are one finding."""
    groups: List[List[Tuple[ProjectCall, dict, Witness]]] = []
    last: Dict[tuple, int] = {}
    for item in found:
        _, site, witness = item
        if not site["x"] or site["op"] == "additive":
            groups.append([item])
            continue
        key = (site["x"], site["v"], site["op"], id(witness.region))
        index = last.get(key)
        if index is not None and 0 <= site["r"] - groups[index][-1][1]["er"] <= 1:
            groups[index].append(item)
            continue
        last[key] = len(groups)
        groups.append([item])
    return groups


def _origin(ctx: ModuleContext, use: "_Use") -> Optional[str]:
    """The tensor whose dtype a fill meets, spelled: `x` for `x.masked_fill_(...)`,
    `x.new(n).fill_(...)` and `x.new_full(...)` (methods keeping the receiver's dtype, indexing);
    None for an expression of anything else (a call, arithmetic) or a fill of no tensor."""
    import libcst as cst

    from amplint.model import dotted_name
    if use.op == "additive" or use.dtype_node is not None:
        return None
    node = use.tensor
    while True:
        if isinstance(node, cst.Subscript):
            node = node.value
        elif (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
              and node.func.attr.value in _RECEIVER_DTYPE_METHODS):
            node = node.func.value
        else:
            break
    if not isinstance(node, (cst.Name, cst.Attribute)):
        return None
    return dotted_name(node)


#: methods whose result has the receiver's dtype (factories `new*`, views, copies)
_RECEIVER_DTYPE_METHODS = frozenset((
    "new", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "view", "view_as", "reshape",
    "unsqueeze", "squeeze", "transpose", "permute", "contiguous", "clone", "detach", "expand", "expand_as",
    "repeat", "flatten", "masked_fill", "masked_fill_", "fill_",
))


def _statement_place(ctx: ModuleContext, statement: cst.CSTNode,
                     blocks: Dict[int, Dict[int, int]]) -> Optional[Tuple[int, int, cst.CSTNode]]:
    """(id of the block holding `statement`, its index there, the block's statement holding it):
    consecutive statements of one block have consecutive indices. `blocks`: the statements'
    indices of the blocks seen so far."""
    import libcst as cst

    node: Optional[cst.CSTNode] = statement
    while node is not None:
        parent = ctx.parent(node)
        if isinstance(parent, (cst.IndentedBlock, cst.Module)):
            index = blocks.get(id(parent))
            if index is None:  # one pass per block: linear in its length
                index = blocks[id(parent)] = {id(n): i for i, n in enumerate(parent.body)}
            return id(parent), index[id(node)], node
        node = parent
    return None


# Grouping must not depend on how the file was parsed: a huge module or function body is parsed
# in pieces (engine/excerpt.py `pieces`), each keeping every statement but one run of *leaves*
# (assignments to names no other word of the file mentions), the other leaves blanked. So the
# fills grouped are those of statements no piece blanks (`_dead_store` refuses every leaf), on
# rows with nothing but comments between (`_adjoin`: a blanked leaf leaves empty rows).


class _Text:
    """The file's rows and word counts, made when first asked (a file with no two fills in a row
    never splits or counts its text)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._rows: Optional[List[str]] = None
        self._words: Optional[Dict[str, int]] = None

    @property
    def rows(self) -> List[str]:
        if self._rows is None:
            self._rows = self.source.split("\n")
        return self._rows

    @property
    def words(self) -> Dict[str, int]:
        if self._words is None:
            self._words = _word_counts(self.source)
        return self._words

    def adjoin(self, last_row: int, next_row: int) -> bool:
        """Whether only comment rows lie between row `last_row` and row `next_row` (1-based)."""
        return all(row.strip().startswith("#") for row in self.rows[last_row:next_row - 1])


def _word_counts(text: str) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for m in _WORDS.finditer(text):
        word = m.group()
        counts[word] = counts.get(word, 0) + 1
    return counts


_WORDS = re.compile(r"\w+")


def _dead_store(ctx: ModuleContext, literal: cst.CSTNode, text: _Text) -> bool:
    """Whether `literal` lies in an assignment to plain names whose every mention in the file
    lies on its own rows: what a piece may parse alone (a leaf)."""
    import libcst as cst

    node: Optional[cst.CSTNode] = literal
    while node is not None and not isinstance(node, (cst.Assign, cst.AnnAssign)):
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return False
        node = ctx.parent(node)
    if node is None:
        return False
    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
    if not all(isinstance(t, cst.Name) for t in targets):
        return False
    first, end = ctx.position(node)
    own = _word_counts("\n".join(text.rows[first.row - 1:end.row]))  # whole rows, as a leaf's words
    return all(text.words.get(t.value, 0) <= own.get(t.value, 0) for t in targets)


# --------------------------------------------------------------------------- sites


def _lowered(project: Project, call: ProjectCall, src) -> bool:
    """The tensor a mask site meets is an autocast output: an op autocast lowers made it
    (recorded as "lp" by the summary), or a torch module the project model resolves."""
    if src == "lp":
        return True
    return isinstance(src, dict) and any(project.lowers(call.path, call.func, spelled) for spelled in src.get("m", ()))


def _known_dtype(ctx: ModuleContext, expr: Optional[cst.BaseExpression], site: _Site) -> Optional[str]:
    """The dtype `expr` visibly has at the site; when its assignments disagree, read along the
    site's control flow (`w = w * self.bias - ...` hides the earlier `w = q @ k`)."""
    if expr is None:
        return None
    found = ctx.known_dtype(expr, site.scope, site.order, site.statement)
    return found if found is not None else ctx.known_dtype(expr, site.scope, site.order, site.statement, path=site.path)


def _inputs_cast_to_fp32(ctx: ModuleContext, scope: Scope) -> bool:
    """`scope` is a function decorated `custom_fwd(..., cast_inputs=torch.float32)` (torch's, or
    one a project module re-exports): autocast, if on where it is called, casts its floating
    inputs to fp32 and is off in its body."""
    import libcst as cst

    from amplint.model import CUSTOM_FWD_BWD, call_arg, dotted_name

    node = scope.node
    if not isinstance(node, cst.FunctionDef):
        return False
    for decorator in node.decorators:
        call = decorator.decorator
        if not isinstance(call, cst.Call):
            continue
        names = ctx.qualnames(call.func) or {dotted_name(call.func) or ""}
        # torch's, or re-exported by a project module (maskrcnn_benchmark's utils/amp.py)
        if names & CUSTOM_FWD_BWD or any(n.rpartition(".")[2] == "custom_fwd" for n in names):
            cast = call_arg(call, None, "cast_inputs")
            if cast is not None and ctx.dtype_of(cast) == "fp32":
                return True
    return False


def _fp16_condition(site: _Site, dtype: Optional[str]) -> str:
    """When a finding on a tensor not visibly fp16 holds: the project runs fp16 and it can reach
    the site -- the definition holding it runs (a vendored library copy runs only what the
    project uses of it), and for a tensor a module holds in fp32 (`MODULE_FP32`: a buffer
    whose product with the scores is fp32 under autocast), code reaching the file may cast
    modules to fp16."""
    condition = FP16
    if site.scope.definition is not None:
        condition = with_requirement(condition, REACHED, site.scope.definition)
    if dtype == MODULE_FP32:
        condition = with_requirement(condition, MODULES_CAST)
    return condition


@dataclass
class _Use:
    op: str  # "masked_fill", "torch.full", "torch.where", "additive", ...
    tensor: Optional[cst.BaseExpression]  # the tensor filled / masked
    snippet: cst.CSTNode  # the flagged expression
    raises: bool
    dtype_node: Optional[cst.BaseExpression] = None  # an explicit dtype= deciding the result dtype
    others: Tuple[cst.BaseExpression, ...] = ()  # operands whose fp32-ness also makes it harmless
    sign: float = 1.0  # -1 when the constant is subtracted (`scores - 1e9 * mask`)


def _mask_times_float(ctx: ModuleContext, use: "_Use") -> bool:
    """`(m * 1.0).masked_fill(m, -1e9)`: the filled tensor is the fill's own boolean mask times
    (or plus) a float literal, which type promotion makes the default dtype, fp32; the value lands
    there (and in what it is cast to after: bf16 holds -1e9), not in fp16."""
    import libcst as cst

    from amplint.model import dotted_name, literal_number

    if use.op not in ("masked_fill", "masked_fill_") or not isinstance(use.snippet, cst.Call):
        return False
    tensor = use.tensor
    if not (isinstance(tensor, cst.BinaryOperation) and isinstance(tensor.operator, (cst.Multiply, cst.Add))):
        return False
    number = next((x for x in (tensor.left, tensor.right) if literal_number(x) is not None), None)
    other = tensor.right if number is tensor.left else tensor.left
    if number is None or not isinstance(number, cst.Float):
        return False  # `m * 1` stays boolean-integer; a float literal makes it floating
    mask = use.snippet.args[0].value if use.snippet.args and use.snippet.args[0].keyword is None else None
    for a in use.snippet.args:
        if a.keyword is not None and a.keyword.value == "mask":
            mask = a.value
    name = dotted_name(other)
    return name is not None and mask is not None and dotted_name(mask) == name


def _builds_mask(use: "_Use") -> bool:
    """`torch.where(m, 0.0, -1e10)` or `bias = (1 - m) * -1e9`: a new additive mask, made to be
    added to attention scores (whatever their dtype), not a shift of an existing tensor."""
    import libcst as cst

    from amplint.model import literal_number
    if use.op in ("torch.where", "where"):
        return literal_number(use.tensor) is not None if use.tensor is not None else False
    return use.op == "additive" and use.snippet is not None and isinstance(use.snippet, cst.BinaryOperation) and (
        isinstance(use.snippet.operator, cst.Multiply)
    )


#: methods that reshape a tensor and keep its dtype
_SHAPE_METHODS = frozenset((
    "unsqueeze", "squeeze", "view", "reshape", "expand", "flatten", "transpose", "permute", "contiguous", "repeat",
))


def _mask_parameter_as_passed(ctx: ModuleContext, mask: Optional[cst.BaseExpression], site: "_Site") -> bool:
    """The additive mask built at the site (`ext = (1.0 - video_mask.unsqueeze(1)) * -1e6`) is made
    of a parameter of the function (not `self`), not rebound before it (nor after it, in a loop
    around it), only reshaped and combined
    with numbers: it has the dtype the caller's mask has, and a mask from the data is boolean or
    integer, which `1.0 - m` makes fp32. A cast in the function (`m = m.to(dtype=self.dtype)`,
    `m.to(dtype)`, `.half()`) keeps the finding, as does any other tensor in the expression."""
    import libcst as cst

    from amplint.model import literal_number

    scope = site.scope
    if mask is None or scope.is_module:
        return False
    names: List[str] = []

    def plain(node: cst.BaseExpression) -> bool:
        if literal_number(node) is not None:
            return True
        if isinstance(node, cst.Name):
            names.append(node.value)
            return True
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply)):
            return plain(node.left) and plain(node.right)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            return plain(node.expression)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _SHAPE_METHODS:
            return all(not a.star and (_is_integer(a.value) or literal_number(a.value) is not None) for a in node.args) and (
                plain(node.func.value)
            )
        return False

    if not plain(mask) or not names:
        return False
    in_loop = any(f.kind == "loop" for f in site.path)
    return all(
        n in scope.params and n not in ("self", "cls")
        and not any(a.scope is scope and (a.order < site.order or in_loop) for a in ctx.assignments_to(n, scope))
        for n in names
    )


def _not_fp16_from_any_caller(ctx: ModuleContext, tensor: Optional[cst.BaseExpression], site: "_Site") -> bool:
    """`tensor` is a parameter, not reassigned before the site, of a private module-level
    function (`_fill(scores, ...)`) that this file only calls, and every call passes a value
    whose dtype is visibly not fp16 (fp32, bf16, an integer) where it is passed: the argument
    dtypes along the file's own call edges, read flow-sensitively. A private function is its
    module's business; a caller in another file is not looked for (precision first)."""
    import libcst as cst

    from amplint.model import descendants

    scope = site.scope
    if not isinstance(tensor, cst.Name) or scope.is_module or scope.cls is not None:
        return False
    if not scope.name.startswith("_") or scope.name.startswith("__") or scope.parent is None or not scope.parent.is_module:
        return False
    if tensor.value not in scope.params or ctx.assigned_before(tensor.value, site):
        return False
    callers = [c for c in ctx.calls if ctx.callee(c) is scope]
    if not callers:
        return False
    uses = sum(1 for n in descendants(ctx.module) if isinstance(n, cst.Name) and n.value == scope.name)
    if uses != len(callers) + 1:  # the `def` and the calls: never passed on as a value
        return False
    position = scope.params.index(tensor.value)
    for call in callers:
        if any(a.star for a in call.node.args):
            return False
        arg = call.arg(position, tensor.value)
        if arg is None or ctx.known_dtype(arg, call.scope, call.order, call.statement, path=call.path) not in ("fp32", "bf16", "other"):
            return False
    return True


def _fp32_operands(ctx: ModuleContext, expr: Optional[cst.BaseExpression], site: "_Site") -> bool:
    """`expr` is, or is bound in this scope before the site to, an op autocast lowers (`@`,
    matmul, bmm, einsum, linear, ...; scaled by a number or not) all of whose tensor operands are
    visibly fp32 where it runs (`q = q.float()`, `torch.zeros(n)`): fp32 outside autocast, fp16
    only under an fp16 autocast. Read at the last assignment before the site when it runs on
    every way there, else at every assignment before it."""
    import libcst as cst
    if expr is None:
        return False
    if isinstance(expr, cst.Name):
        found = [
            a for a in ctx.assignments_to(expr.value, site.scope)
            if a.scope is site.scope and a.order < site.order and a.statement is not site.statement
        ]
        if not found or any(a.unpacked for a in found):
            return False
        last = max(found, key=lambda a: a.order)
        if _encloses(last.path, site.path):
            found = [last]
        return all(_lowered_fp32(ctx, a.value, a) for a in found)
    return False


def _lowered_fp32(ctx: ModuleContext, value: cst.BaseExpression, at) -> bool:
    """`value`, assigned at `at`, is an op autocast lowers on operands all visibly fp32 there."""
    import libcst as cst

    from amplint.model import AUTOCAST_LOWER_PRECISION_FUNCS, AUTOCAST_LOWER_PRECISION_METHODS, literal_number
    while isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Divide, cst.Multiply)) and (
        literal_number(value.right) is not None
    ):
        value = value.left
    operands: List[cst.BaseExpression] = []
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.MatrixMultiply):
        operands = [value.left, value.right]
    elif isinstance(value, cst.Call):
        func = value.func
        if ctx.qualnames(func) & AUTOCAST_LOWER_PRECISION_FUNCS:
            operands = [a.value for a in value.args if a.keyword is None and not a.star]
            if operands and isinstance(operands[0], (cst.SimpleString, cst.ConcatenatedString)):
                operands = operands[1:]  # einsum's equation
        elif isinstance(func, cst.Attribute) and not ctx.qualnames(func) and func.attr.value in AUTOCAST_LOWER_PRECISION_METHODS:
            operands = [func.value] + [a.value for a in value.args if a.keyword is None and not a.star]
        if any(a.star for a in value.args):
            return False
    if not operands:
        return False
    return all(
        ctx.known_dtype(op, at.scope, at.order, at.statement, path=at.path) == "fp32" for op in operands
        if literal_number(op) is None
    )


def _encloses(outer, inner) -> bool:
    """The control flow `outer` (of a statement) is a prefix of `inner`: the statement runs on
    every way to the point `inner` is the flow of (in the same function)."""
    if len(outer) > len(inner):
        return False
    return all(a.kind == b.kind and a.node is b.node for a, b in zip(outer, inner))


def _low_precision_source(ctx: ModuleContext, expr: Optional[cst.BaseExpression], site: "_Site", depth: int = 0) -> bool:
    """`expr` is, or is bound in this scope (before the site) to, the result of an op that autocast
    lowers to fp16 (matmul, `@`, bmm, einsum, linear, conv, SDPA), or an fp16 cast."""
    import libcst as cst

    from amplint.model import AUTOCAST_LOWER_PRECISION_FUNCS, AUTOCAST_LOWER_PRECISION_METHODS, descendants
    if expr is None or depth > 3:
        return False
    if isinstance(expr, cst.Name):
        return any(
            _low_precision_source(ctx, a.value, site, depth + 1)
            for a in ctx.assignments_to(expr.value, site.scope)
            if a.scope is site.scope and a.order < site.order
        )
    for node in descendants(expr):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
            return True
        if isinstance(node, cst.Call):
            if ctx.qualnames(node.func) & AUTOCAST_LOWER_PRECISION_FUNCS:
                return True
            if isinstance(node.func, cst.Attribute) and not ctx.qualnames(node.func):
                method = node.func.attr.value
                if method in AUTOCAST_LOWER_PRECISION_METHODS or method == "half":
                    return True
            if ctx.known_dtype(node) == "fp16":
                return True
        if isinstance(node, cst.Name) and node is not expr and depth < 3:
            if _low_precision_source(ctx, node, site, depth + 1):
                return True
    return False


def _sites(ctx: ModuleContext) -> Iterator[_Site]:
    # name -> its uses as an argument of a fill-like call, in call order: built once, so n
    # `NEG_i = -1e9` constants cost O(n), not O(n * fill calls)
    import libcst as cst
    fill_args: Optional[Dict[str, List[Tuple[CallInfo, Optional[int], Optional[str], cst.Name]]]] = None
    for lit in ctx.literals:
        if abs(lit.value) <= FP16_MAX:
            continue
        text = ctx.code_for(lit.node)
        parent = lit.parents[0] if lit.parents else None
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is lit.node:
            # `NEG_INF = -1e9` used later as a fill value
            name = _single_name_target(parent)
            if name is None or not _constant(ctx, name, lit.value):
                continue
            if fill_args is None:
                fill_args = {}
                for call in ctx.calls:
                    if _is_fill_like(call):
                        for position, keyword, arg in _args(call):
                            if isinstance(arg, cst.Name):
                                fill_args.setdefault(arg.value, []).append((call, position, keyword, arg))
            for call, position, keyword, arg in fill_args.get(name, ()):
                if lit.scope is not call.scope and not lit.scope.is_module:
                    continue
                yield _Site(arg, lit.value, text, call, position, keyword, (), lit, call.scope,
                            call.path, call.region, call.statement, call.order)
            continue
        call = lit.call
        yield _Site(lit.node, lit.value, text, call, lit.position, lit.keyword, lit.parents, lit, lit.scope,
                    call.path if call else lit.path, call.region if call else lit.region,
                    call.statement if call else lit.statement, call.order if call else lit.order)


def _classify(ctx: ModuleContext, site: _Site) -> Optional[_Use]:
    import libcst as cst

    from amplint.model import literal_number
    call = site.call
    if call is not None:
        if call.method in _FILL_METHODS and not call.qualnames:
            position, keyword = _FILL_METHODS[call.method]
            if _at(site, position, keyword):
                dtype = call.arg(None, "dtype") if call.method == "new_full" else None
                return _Use(call.method, call.receiver, call.node, True, dtype)
            return None
        for q in sorted(call.qualnames & set(_FILL_FUNCTIONS)):
            position, keyword, tensor_position = _FILL_FUNCTIONS[q]
            if not _at(site, position, keyword):
                return None
            tensor = call.arg(tensor_position, "input") if tensor_position is not None else None
            dtype = call.arg(None, "dtype") if q in ("torch.full", "torch.full_like") else None
            return _Use(q.replace("torch.Tensor.", ""), tensor, call.node, True, dtype)
        if call.qualnames & {"torch.where"}:
            if _at(site, 1, "input"):
                return _Use("torch.where", call.arg(2, "other"), call.node, False)
            if _at(site, 2, "other"):
                return _Use("torch.where", call.arg(1, "input"), call.node, False)
            return None
        if call.method == "where" and not call.qualnames and _at(site, 1, "other"):
            return _Use("where", call.receiver, call.node, False)
        return None
    parents = site.parents
    if not parents:
        return None
    first = parents[0]
    second = parents[1] if len(parents) > 1 else None
    if isinstance(first, cst.BinaryOperation) and isinstance(first.operator, (cst.Add, cst.Subtract)):
        other = first.right if first.left is site.node else first.left
        if literal_number(other) is not None:
            return None
        # a constant shift of a whole tensor (`probs - 1e8` before a threshold) is harmless even as -inf;
        # it matters when the shifted scores go through a softmax in the same expression
        if not any(_is_softmax(ctx, p) for p in parents[1:] if not isinstance(p, cst.BaseStatement)):
            return None
        sign = -1.0 if isinstance(first.operator, cst.Subtract) and first.right is site.node else 1.0
        return _Use("additive", other, _outermost_sum(parents), False, sign=sign)
    if isinstance(first, cst.BinaryOperation) and isinstance(first.operator, cst.Multiply):
        mask = first.right if first.left is site.node else first.left
        if literal_number(mask) is not None:
            return None
        if isinstance(second, cst.BinaryOperation) and isinstance(second.operator, (cst.Add, cst.Subtract)):
            scores = second.right if second.left is first else second.left
            sign = -1.0 if isinstance(second.operator, cst.Subtract) and second.right is first else 1.0
            return _Use("additive", scores, _outermost_sum(parents[1:]), False, others=(mask,), sign=sign)
        if isinstance(second, cst.AugAssign) and isinstance(second.operator, (cst.AddAssign, cst.SubtractAssign)):
            sign = -1.0 if isinstance(second.operator, cst.SubtractAssign) else 1.0
            return _Use("additive", second.target, second, False, others=(mask,), sign=sign)
        if isinstance(second, (cst.Assign, cst.AnnAssign)) and second.value is first:
            name = _single_name_target(second) or ""
            last = name.rsplit(".", 1)[-1].lower()
            if "mask" in last or "bias" in last:
                return _Use("additive", mask, first, False)
        return None
    if isinstance(first, cst.AugAssign) and isinstance(first.operator, (cst.AddAssign, cst.SubtractAssign)):
        sign = -1.0 if isinstance(first.operator, cst.SubtractAssign) else 1.0
        return _Use("additive", first.target, first, False, sign=sign)
    return None


# --------------------------------------------------------------------------- helpers


def _is_softmax(ctx: ModuleContext, node: cst.CSTNode) -> bool:
    import libcst as cst

    from amplint.model import dotted_name
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    name = func.attr.value if isinstance(func, cst.Attribute) else dotted_name(func) or ""
    return name in ("softmax", "log_softmax")


def _at(site: _Site, position: int, keyword: str) -> bool:
    return site.keyword == keyword if site.keyword is not None else site.position == position


def _args(call: CallInfo) -> Iterator[Tuple[Optional[int], Optional[str], cst.BaseExpression]]:
    index = 0
    for arg in call.node.args:
        if arg.star:
            return
        if arg.keyword is not None:
            yield None, arg.keyword.value, arg.value
        else:
            yield index, None, arg.value
            index += 1


def _is_fill_like(call: CallInfo) -> bool:
    if call.method in _FILL_METHODS and not call.qualnames:
        return True
    if call.method == "where" and not call.qualnames:
        return True
    return bool(call.qualnames & (set(_FILL_FUNCTIONS) | {"torch.where"}))


def _single_name_target(node: cst.CSTNode) -> Optional[str]:
    import libcst as cst
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
    elif isinstance(node, cst.AnnAssign):
        target = node.target
    else:
        return None
    return target.value if isinstance(target, cst.Name) else None


def _constant(ctx: ModuleContext, name: str, value: float) -> bool:
    """`name` is only ever assigned this one number."""
    from amplint.model import literal_number
    found = ctx.assignments_to(name)
    return bool(found) and all(literal_number(a.value) == value and not a.unpacked for a in found)


def _is_integer(node: cst.CSTNode) -> bool:
    import libcst as cst
    while isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, cst.Integer)


def _outermost_sum(parents) -> cst.CSTNode:
    import libcst as cst
    node = parents[0]
    for p in parents[1:]:
        if isinstance(p, cst.BinaryOperation):
            node = p
        else:
            break
    return node


def _dtype_aware(ctx: ModuleContext, parents, path: Path, statement: cst.CSTNode, scope: Scope,
                 guards: "_GuardIndex") -> bool:
    import libcst as cst
    for p in parents:
        if isinstance(p, cst.IfExp) and _mentions_dtype(ctx.code_for(p.test)):
            return True
        if isinstance(p, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            break
    if any(f.kind in ("if", "else") and f.test is not None and _mentions_dtype(ctx.code_for(f.test)) for f in path):
        return True
    return guards.after_dtype_guard(scope, statement)


class _GuardIndex:
    """Which statements of a function (or module) follow an `if x.dtype == torch.float16: return ...`
    in an enclosing block. Each scope's body is read once, on its first query, so a file with n
    sites costs O(n) here instead of rescanning the preceding statements per site."""

    def __init__(self, ctx: ModuleContext) -> None:
        self._ctx = ctx
        self._by_scope: Dict[int, Dict[int, bool]] = {}

    def after_dtype_guard(self, scope: Scope, statement: cst.CSTNode) -> bool:
        import libcst as cst
        index = self._by_scope.get(id(scope.node))
        if index is None:
            node = scope.node
            body = node.body.body if isinstance(node, cst.FunctionDef) else node.body
            index = self._by_scope[id(scope.node)] = {}
            self._index(body, False, index)
        return index.get(id(statement), False)

    def _index(self, body, outer: bool, index: Dict[int, bool]) -> None:
        """Record, for every statement in `body` and its nested blocks, whether a guard that
        exits precedes it in its own block or any enclosing one."""
        import libcst as cst
        guard = outer
        for stmt in body:
            index[id(stmt)] = guard
            for suite in _suites(stmt):
                self._index(getattr(suite, "body", ()), guard, index)
            if isinstance(stmt, cst.If) and _mentions_dtype(self._ctx.code_for(stmt.test)) and _exits(stmt.body):
                guard = True


def _suites(stmt: cst.CSTNode) -> List[cst.CSTNode]:
    """The blocks of a compound statement that run in the same function."""
    import libcst as cst
    if isinstance(stmt, cst.If):
        out: List[cst.CSTNode] = [stmt.body]
        if isinstance(stmt.orelse, cst.If):
            out.append(cst.IndentedBlock(body=[stmt.orelse]))
        elif stmt.orelse is not None:
            out.append(stmt.orelse.body)
        return out
    if isinstance(stmt, (cst.For, cst.While)):
        return [stmt.body] + ([stmt.orelse.body] if stmt.orelse is not None else [])
    if isinstance(stmt, cst.With):
        return [stmt.body]
    if isinstance(stmt, cst.Try):
        out = [stmt.body] + [h.body for h in stmt.handlers]
        out += [x.body for x in (stmt.orelse, stmt.finalbody) if x is not None]
        return out
    return []


def _exits(block: cst.BaseSuite) -> bool:
    import libcst as cst
    body = getattr(block, "body", ())
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(s, (cst.Return, cst.Raise, cst.Continue)) for s in last.body)
    return False


def _mentions_dtype(text: str) -> bool:
    return any(w in text for w in _DTYPE_WORDS)


def _simple(node: Optional[cst.CSTNode]) -> bool:
    """A plain name or attribute chain: safe to evaluate twice."""
    import libcst as cst
    if isinstance(node, cst.Name):
        return True
    return isinstance(node, cst.Attribute) and _simple(node.value)


def _fix(ctx: ModuleContext, site: _Site, use: _Use):
    from amplint.model import make_fix, replace_node
    if use.op == "additive":
        return None
    torch_name = ctx.imports.bound_name("torch")
    if torch_name is None:
        return None
    bound = "min" if site.value < 0 else "max"
    if use.dtype_node is not None:
        if not _simple(use.dtype_node) or ctx.dtype_kind(use.dtype_node) is not None:
            return None
        finfo = f"{torch_name}.finfo({ctx.code_for(use.dtype_node)}).{bound}"
    elif _simple(use.tensor):
        finfo = f"{torch_name}.finfo({ctx.code_for(use.tensor)}.dtype).{bound}"
    else:
        return None
    return make_fix(
        f"Replace {site.text} with `{finfo}`",
        [replace_node(ctx, site.node, finfo)],
        safe=False,
    )
