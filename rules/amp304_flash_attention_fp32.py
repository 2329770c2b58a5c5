"""AMP304 flash-attention-fp32."""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

import libcst as cst

from amplint.model import (
    FP32_DEFAULT, CallInfo, Diagnostic, Invalid, ModuleContext, Rule, Severity, Valid, dotted_name, literal_bool,
    literal_string,
)

#: the flash-attn package's entry points (FlashAttention 2 and 3): fp16/bf16 only
_FLASH_FUNCTIONS = frozenset(
    f"{module}.{name}"
    for module in ("flash_attn", "flash_attn.flash_attn_interface", "flash_attn_interface")
    for name in ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
                 "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache")
)
#: flash-attn's modules (`flash_attn.modules.mha`), called on packed qkv (or q and packed kv)
_FLASH_MODULES = frozenset(f"flash_attn.modules.mha.{name}" for name in ("FlashSelfAttention", "FlashCrossAttention"))
#: torch's concatenations: they promote their inputs to one dtype (fp16 with fp32 or bf16 is fp32)
_CONCATS = frozenset(("torch.stack", "torch.cat", "torch.concat", "torch.concatenate"))
_SDPA = frozenset(("torch.nn.functional.scaled_dot_product_attention",))
_SDPA_KERNEL = frozenset(("torch.nn.attention.sdpa_kernel",))
_LEGACY_KERNEL = frozenset(("torch.backends.cuda.sdp_kernel",))
#: SDPA backends that take only fp16/bf16 on CUDA (flash, cuDNN)
_HALF_ONLY = ("FLASH_ATTENTION", "CUDNN_ATTENTION")


class FlashAttentionFp32(Rule):
    """
    ## What it does
    Flags flash attention called on fp32 tensors: a `flash_attn` function
    (`flash_attn_func`, `flash_attn_varlen_func`, ...) or module
    (`FlashSelfAttention`, `FlashCrossAttention`) whose query, key or
    value is visibly float32 (made by `.float()`, `.to(torch.float32)`, an fp32
    factory), and `F.scaled_dot_product_attention` on such tensors inside a
    `with sdpa_kernel(SDPBackend.FLASH_ATTENTION)` (or the legacy
    `sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)`)
    and outside an enabled autocast region (an eval or sampling path).

    Also, as warnings:
    - flash attention on a concatenation (`torch.stack([q, k, v])`, `torch.cat`)
      of tensors some of which were cast to fp16 (`q = q_norm(q).half()`)
      while a sibling from the same unpacking (`q, k, v = qkv.unbind(2)`) was
      not: they shared a dtype before the cast, so whenever the cast changed
      anything the sibling is fp32 or bf16 and the concatenation promotes all
      of them to float32 (outside an fp16 autocast; HunyuanDiT's packed qkv
      on its fp32 run);
    - SDPA restricted to the flash kernel by a settings object chosen at run
      time: `sdp_kernel(**config._asdict())` where `config` may be a
      `namedtuple` of the legacy switches (or a dict of them) built flash-only
      in the file (`Config(True, False, False)` on an A100, lucidrains'
      `Attend`), with the flash-only setting as a related location;
    - flash attention (a `flash_attn` function, or SDPA forced as above) on
      inputs of no visible dtype, outside any autocast region its file shows,
      in a project whose default run is fp32: no file of the project (its
      code, notebooks, launch scripts, configs and docs) fixes a low precision
      (an fp16/bf16/fp8 dtype or cast, torch's autocast, a GradScaler, apex,
      DeepSpeed, a `*_dtype` variable, a framework precision such as
      "16-mixed", `--mixed_precision=fp16`), so low precision comes only from a
      run-time choice left off by default (accelerate's config or launch flag:
      `accelerator.autocast()` does nothing without one). Such a run hands the
      kernel the fp32 outputs of fp32 layers.

    ## Why is this bad?
    The flash kernels take only fp16 and bf16. flash-attn raises `RuntimeError:
    FlashAttention only support fp16 and bf16 data type` (unslothai/unsloth#827,
    SWivid/F5-TTS#1201: sampling during training); SDPA forced to the flash
    backend warns "Expected query, key and value to all be of dtype: {Half,
    BFloat16}" and raises `RuntimeError: No available kernel. Aborting
    execution.` (lucidrains/denoising-diffusion-pytorch#239). flash-attn is not
    a torch operator, so autocast does not cast its inputs: an fp32 tensor
    reaches it even inside autocast. CUDA only: torch's CPU flash kernel accepts
    fp32 (docs/evidence.md), the CUDA check is `check_tensor_dtype` in
    `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`.

    ## Example
    ```python
    q = q.float()                       # e.g. for a debug or sampling path
    out = flash_attn_func(q, k, v, causal=True)
    ```

    ## Use instead
    ```python
    out = flash_attn_func(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True).to(q.dtype)
    ```
    or let SDPA choose its kernel (no `sdpa_kernel`), which falls back to the
    memory-efficient or math kernel for fp32.

    ## Notes
    Only a dtype the code shows counts, or the default run of a project that
    fixes no low precision anywhere: tensors whose dtype comes from the
    model's weights in a project that can cast them, or run them under an
    fp16/bf16 autocast it writes down, are not followed (a word in a comment
    counts as written down: the check reads text and stays silent when in
    doubt). SDPA inside an enabled CUDA autocast region is cast to fp16/bf16
    by autocast and is fine; a backend list, or a settings object, that
    includes the memory-efficient or math kernel is a fallback, not a force.
    `precision = "fp16"` or `"bf16"` in the configuration turns the
    default-run warnings off.

    ## References
    - amplint's evidence page: `amplint --explain AMP304` (docs/evidence.md#amp304)
    - lucidrains/denoising-diffusion-pytorch#239; unslothai/unsloth#827; SWivid/F5-TTS#1201; facebookresearch/sam3#524
    - https://pytorch.org/docs/stable/generated/torch.nn.attention.sdpa_kernel.html
    """

    code = "AMP304"
    name = "flash-attention-fp32"
    severity = Severity.ERROR
    message = "flash attention on float32 tensors: the kernel takes only fp16/bf16"
    #: a call the rule resolves to a flash-attn function spells the function's name, in the call
    #: or in the import it goes through (`flash_attn_varlen_` covers the three varlen entry
    #: points); not the bare `flash_attn`, which transformers' model files name by the hundred
    #: (`_supports_flash_attn = True`) and which got 425 of its files parsed for this rule alone
    triggers = (
        "flash_attn_func", "flash_attn_varlen_", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
        "flash_attn_with_kvcache", "sdpa_kernel", "sdp_kernel", "FlashSelfAttention", "FlashCrossAttention",
    )
    #: fp32 evidence: a cast (`.float()`, `torch.float32`) or a factory that makes fp32 by default
    #: ... or a kernel setting, which on a project's default fp32 run needs none (`FP32_DEFAULT`)
    requires = (("float", "randn", "rand(", "zeros", "ones", "empty", "full(", "arange", "tensor(", "sdp_kernel", "sdpa_kernel",
                 "flash_attn"),)
    #: the call or the import naming a flash-attn function, or a `with` forcing SDPA onto the flash
    #: or cuDNN kernel (not a name in prose: transformers' docstrings and comments, nor
    #: `sdpa_kernel(SDPBackend.MATH)`, which parsed eight of its files for nothing)
    gate_check = "amplint.core.gates:flash_attention_possible"

    VALID = [
        Valid(
            """
import torch
from flash_attn.modules.mha import FlashSelfAttention


class Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.inner_attn = FlashSelfAttention()

    def forward(self, x, memory):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, -1).unbind(dim=2)
        qkv = torch.stack([q.half(), k.half(), v.half()], dim=2)
        return self.inner_attn(qkv)

    def cross(self, q, kv):
        k, v = kv.unbind(dim=2)
        k = k.half()
        return self.inner_attn(q, torch.stack([k, v], dim=2))
""",
            "every input of the stack cast to fp16; a stack inline in the call is not read",
        ),
        Valid(
            """
from flash_attn import flash_attn_func
def attend(q, k, v):
    return flash_attn_func(q, k, v, causal=True)
""",
            "the dtype comes from the caller: not followed",
        ),
        Valid(
            """
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
q = torch.randn(2, 8, 128, 64).float()
with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
    out = F.scaled_dot_product_attention(q, q, q)
""",
            "the math kernel is a fallback for fp32",
        ),
        Valid(
            """
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
q = torch.randn(2, 8, 128, 64, device="cuda").float()
with torch.autocast("cuda", dtype=torch.bfloat16):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, q, q)
""",
            "autocast casts SDPA's inputs to bf16",
        ),
        Valid(
            """
import torch
from flash_attn import flash_attn_func
q = torch.randn(2, 128, 8, 64, device="cuda", dtype=torch.bfloat16)
out = flash_attn_func(q, q, q)
""",
            "bf16 inputs",
        ),
        Valid(
            """
from collections import namedtuple
import torch
import torch.nn.functional as F

Config = namedtuple("Config", ["enable_flash", "enable_math", "enable_mem_efficient"])

class Attend(torch.nn.Module):
    def __init__(self, a100):
        super().__init__()
        self.cuda_config = Config(True, True, False) if a100 else Config(False, True, True)

    def forward(self, q, k, v):
        with torch.backends.cuda.sdp_kernel(**self.cuda_config._asdict()):
            return F.scaled_dot_product_attention(q.float(), k, v)
""",
            "every setting the object can hold keeps the math kernel: a fallback for fp32",
        ),
    ]

    INVALID = [
        Invalid(
            """
from flash_attn import flash_attn_func
def attend(q, k, v):
    q = q.float()
    return flash_attn_func(q, k, v, causal=True)
""",
            line=4,
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

@torch.no_grad()
def sample(q, k, v):
    q = q.to(torch.float32)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v)
""",
            line=9,
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F
x = torch.randn(4, 8, 256, 64, device="cuda")
with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False):
    y = F.scaled_dot_product_attention(x, x, x, is_causal=True)
""",
            line=5,
            why="the legacy context; `torch.randn` makes fp32",
        ),
    ]

    #: the promoted-concatenation warnings (tests/test_rules_api.py runs them; INVALID holds the errors)
    PROMOTED_INVALID = [
        Invalid(
            """
import torch
from flash_attn.modules.mha import FlashSelfAttention


class Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.inner_attn = FlashSelfAttention()

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, -1).unbind(dim=2)
        q = q.half()
        k = k.half()
        qkv = torch.stack([q, k, v], dim=2)
        return self.inner_attn(qkv)
""",
            line=18,
            why="v keeps the model's dtype: on an fp32 (or bf16) model the stack is float32",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        for call in _flash_module_calls(ctx):
            found = _fp32_input(ctx, call, 2)
            if found is not None:
                yield self._diagnostic(ctx, call, found, "flash-attn")
                continue
            promoted = _promoted_concat(ctx, call, 2)
            if promoted is not None:
                yield self._promoted(ctx, call, *promoted)
        for call in ctx.calls_to(*_FLASH_FUNCTIONS):
            found = _fp32_input(ctx, call, 3)
            if found is not None:
                yield self._diagnostic(ctx, call, found, "flash-attn")
                continue
            promoted = _promoted_concat(ctx, call, 3)
            if promoted is not None:
                yield self._promoted(ctx, call, *promoted)
            elif call.region is None and not _low_precision_input(ctx, call, 3):
                yield self._default_run(ctx, call, "flash-attn", None)
        forced = None
        for call in ctx.calls_to(*_SDPA):
            if forced is None:
                forced = _forced_regions(ctx)
            if not forced:
                return
            if call.region is not None and call.region.enabled is not False and call.region.dtype != "fp32":
                continue  # autocast casts SDPA's inputs
            around = next(((w, settings) for w, settings in forced if _inside(ctx, call.node, w)), None)
            if around is None:
                continue
            found = _fp32_input(ctx, call, 3)
            if found is not None:
                yield self._diagnostic(ctx, call, found, "sdpa", settings=around[1])
            elif call.region is None and not _low_precision_input(ctx, call, 3):
                yield self._default_run(ctx, call, "sdpa", around[1])

    def _promoted(self, ctx: ModuleContext, call: CallInfo, concat: cst.Call, cast: cst.BaseExpression, other: cst.BaseExpression) -> Diagnostic:
        """A concatenation of fp16-cast inputs with a sibling left in its own dtype: float32
        whenever the cast did anything."""
        spelled = call.dotted or ctx.code_for(call.node.func)
        joined = dotted_name(concat.func) or "torch.stack"
        message = f"`{joined}` of fp16 `{ctx.code_for(cast)}` and uncast `{ctx.code_for(other)}` is float32 unless `{ctx.code_for(other)}` is fp16: `{spelled}` takes only fp16/bf16"
        if len(message) > 120:
            message = f"`{joined}` of fp16 and uncast inputs is float32 unless all are fp16: FlashAttention takes only fp16/bf16"
        data = {"kernel": "flash-attn", "dtype": "fp32", "argument": ctx.code_for(other), "promoted": True}
        return ctx.diagnostic(
            self, call.node, message, data=data, severity=Severity.WARNING,
            related=(ctx.related(concat, "promoted here"),),
            help=f"Cast `{ctx.code_for(other)}` with the others (or all to one dtype) before `{joined}`",
        )

    def _default_run(self, ctx: ModuleContext, call: CallInfo, kind: str, settings: Optional[cst.BaseExpression]) -> Diagnostic:
        """Inputs of no visible dtype, outside any autocast its file shows, in a project that fixes
        no low precision anywhere (`FP32_DEFAULT`): on the default run they are fp32."""
        spelled = call.dotted or "flash_attn_func"
        if kind == "flash-attn":
            message = f"`{spelled}` on the project's default fp32 run: FlashAttention takes only fp16/bf16"
            help = f"Cast the inputs to bf16 or fp16 before `{spelled}` (and the output back), or fall back to SDPA in fp32"
        else:
            forced = "forced to the flash kernel" if settings is None else "restricted to the flash kernel (on some runs)"
            message = f"`{spelled}` {forced}, and the project's default run is fp32: no kernel runs fp32"
            help = "Keep a fallback (enable_math / SDPBackend.MATH or EFFICIENT_ATTENTION) for fp32, or cast the inputs to bf16"
        data = {"kernel": kind, "dtype": "fp32", "argument": None, "default_run": True}
        related = (ctx.related(settings, "flash-only setting"),) if settings is not None else ()
        return ctx.diagnostic(self, call.node, message, data=data, help=help, severity=Severity.WARNING, condition=FP32_DEFAULT,
                              related=related)

    def _diagnostic(
        self, ctx: ModuleContext, call: CallInfo, arg: cst.BaseExpression, kind: str, settings: Optional[cst.BaseExpression] = None
    ) -> Diagnostic:
        spelled = call.dotted or "flash_attn_func"
        name = dotted_name(arg) or ctx.code_for(arg)
        if kind == "flash-attn":
            message = f"`{spelled}` gets float32 `{name}`: FlashAttention takes only fp16/bf16"
            help = f"Cast the inputs to bf16 or fp16 before `{spelled}` (and the output back)"
        else:
            message = f"`{spelled}` forced to the flash kernel with float32 `{name}`: no kernel runs fp32"
            help = "Let SDPA fall back (add SDPBackend.MATH or EFFICIENT_ATTENTION), or cast the inputs to bf16"
        data = {"kernel": kind, "dtype": "fp32", "argument": name}
        if settings is None:
            return ctx.diagnostic(self, call.node, message, data=data, help=help)
        # the flash-only setting is one of several chosen at run time (a GPU check, a flag)
        related = (ctx.related(settings, "flash-only setting"),)
        return ctx.diagnostic(self, call.node, message, data=data, help=help, severity=Severity.WARNING, related=related)


def _fp32_input(ctx: ModuleContext, call: CallInfo, count: int) -> Optional[cst.BaseExpression]:
    """The first of the call's first `count` positional inputs whose dtype is visibly fp32."""
    inputs = [a.value for a in call.node.args if a.keyword is None and not a.star][:count]
    for arg in inputs:
        if ctx.known_dtype(arg, call.scope, call.order, call.statement, path=call.path) == "fp32":
            return arg
    return None


def _flash_module_calls(ctx: ModuleContext) -> Iterator[CallInfo]:
    """Calls of a flash-attn module (`self.inner_attn(qkv)` with `self.inner_attn =
    FlashSelfAttention(...)`)."""
    from amplint.model import module_class

    for call in ctx.calls:
        func = call.node.func
        if isinstance(func, (cst.Name, cst.Attribute)) and module_class(ctx, func, call.scope) in _FLASH_MODULES:
            yield call


def _promoted_concat(ctx: ModuleContext, call: CallInfo, count: int) -> Optional[Tuple[cst.Call, cst.BaseExpression, cst.BaseExpression]]:
    """An input of the call bound, on every way to it, to `torch.stack([q, k, v])` (`cat`) of
    tensors some visibly fp16 (`q = q.half()`) and some of no visible dtype, where an uncast one
    comes from the same unpacking as a cast one (`q, k, v = qkv.unbind(2)`): they shared a dtype
    before the cast, so whenever `.half()` changed anything the uncast one is fp32 or bf16 and the
    concatenation promotes all to float32 (HunyuanDiT's q/k-only `.half()` on its fp32 run).
    Outside an fp16 autocast (where the sibling would come out fp16). (concat, cast, uncast)."""
    if call.region is not None and call.region.enabled is not False and call.region.dtype == "fp16":
        return None
    inputs = [a.value for a in call.node.args if a.keyword is None and not a.star][:count]
    for arg in inputs:
        if not isinstance(arg, cst.Name):
            continue
        found = [a for a in ctx.assignments_to(arg.value, call.scope) if a.scope is call.scope and a.order < call.order]
        if not found:
            continue
        at = max(found, key=lambda a: a.order)  # the last binding, when it runs on every way to the call
        if at.unpacked or at.statement is call.statement or not _encloses(at.path, call.path):
            continue
        value = at.value
        if not (isinstance(value, cst.Call) and ctx.qualnames(value.func) & _CONCATS and value.args):
            continue
        first = value.args[0]
        if first.keyword is not None or first.star or not isinstance(first.value, (cst.List, cst.Tuple)):
            continue
        elements = [e.value for e in first.value.elements]
        if any(isinstance(e, cst.StarredElement) for e in first.value.elements) or not all(isinstance(e, cst.Name) for e in elements):
            continue
        kinds = {e.value: ctx.known_dtype(e, at.scope, at.order, at.statement, path=at.path) for e in elements}  # type: ignore[union-attr]
        if any(k not in (None, "fp16") for k in kinds.values()):
            continue
        cast = [e for e in elements if kinds[e.value] == "fp16"]  # type: ignore[union-attr]
        for other in (e for e in elements if kinds[e.value] is None):  # type: ignore[union-attr]
            bound = [a for a in ctx.assignments_to(other.value, at.scope) if a.scope is at.scope and a.order < at.order]  # type: ignore[union-attr]
            if len(bound) != 1 or not bound[0].unpacked:
                continue
            for c in cast:
                if any(a.statement is bound[0].statement and a.unpacked for a in ctx.assignments_to(c.value, at.scope) if a.order < at.order):  # type: ignore[union-attr]
                    return value, c, other
    return None


def _encloses(outer, inner) -> bool:
    """The control flow `outer` is a prefix of `inner`: the statement runs on every way there."""
    if len(outer) > len(inner):
        return False
    return all(a.kind == b.kind and a.node is b.node for a, b in zip(outer, inner))


def _low_precision_input(ctx: ModuleContext, call: CallInfo, count: int) -> bool:
    """Some of the call's first `count` inputs is visibly fp16/bf16 (or of another known dtype)."""
    inputs = [a.value for a in call.node.args if a.keyword is None and not a.star][:count]
    return any(
        ctx.known_dtype(arg, call.scope, call.order, call.statement, path=call.path) not in (None, "fp32") for arg in inputs
    )


def _forced_regions(ctx: ModuleContext) -> List[Tuple[cst.With, Optional[cst.BaseExpression]]]:
    """The `with` statements forcing SDPA onto fp16/bf16-only kernels, each with None when it
    always does, else the flash-only settings value a settings object chosen at run time may be."""
    out: List[Tuple[cst.With, Optional[cst.BaseExpression]]] = []
    for call in ctx.calls_to(*_SDPA_KERNEL, *_LEGACY_KERNEL):
        statement = call.statement
        if not isinstance(statement, cst.With) or not any(item.item is call.node for item in statement.items):
            continue
        if call.calls_any(_SDPA_KERNEL) and _only_half_backends(ctx, call):
            out.append((statement, None))
        elif call.calls_any(_LEGACY_KERNEL):
            if _legacy_flash_only(call):
                out.append((statement, None))
            else:
                settings = _settings_flash_only(ctx, call)
                if settings is not None:
                    out.append((statement, settings))
    return out


_LEGACY_FIELDS = ("enable_flash", "enable_math", "enable_mem_efficient")


def _settings_flash_only(ctx: ModuleContext, call: CallInfo) -> Optional[cst.BaseExpression]:
    """`sdp_kernel(**config._asdict())` / `sdp_kernel(**config)` where some value `config` can
    have in this file is flash-only: `config = self.cuda_config if is_cuda else self.cpu_config`
    and `self.cuda_config = Config(True, False, False)` of a `namedtuple("Config", ["enable_flash",
    "enable_math", "enable_mem_efficient"])` (lucidrains' `Attend`: flash only on an A100), or a
    dict of those keys. A value that cannot be read is not flash-only. Returns the flash-only value."""
    stars = [a.value for a in call.node.args if a.star == "**"]
    if len(stars) != 1 or len(call.node.args) != 1:
        return None
    value = stars[0]
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "_asdict" and not value.args:
        value = value.func.value
    tuples = _namedtuples(ctx)
    for candidate in _candidates(ctx, value, call, 0):
        settings = _settings(candidate, tuples)
        if settings is None:
            continue
        flash, math, efficient = (settings.get(f) for f in _LEGACY_FIELDS)
        if flash is not False and math is False and efficient is False:
            return candidate
    return None


def _candidates(ctx: ModuleContext, node: cst.BaseExpression, call: CallInfo, depth: int) -> Iterator[cst.BaseExpression]:
    """The expressions `node` may stand for at `call`: both arms of a conditional expression, the
    values a local name is assigned before `call`, or an attribute of `self` is assigned anywhere
    in the class."""
    if depth > 4:
        return
    if isinstance(node, cst.IfExp):
        yield from _candidates(ctx, node.body, call, depth + 1)
        yield from _candidates(ctx, node.orelse, call, depth + 1)
        return
    spelled = dotted_name(node)
    if spelled is None:
        yield node
        return
    if spelled.startswith("self.") and spelled.count(".") == 1:
        owner = call.scope.cls
        found = [a for a in ctx.assignments_to(spelled) if owner is not None and a.scope.cls is owner and not a.unpacked]
    elif "." not in spelled:
        found = ctx.assigned_before(spelled, call)
    else:
        found = []
    for a in found:
        yield from _candidates(ctx, a.value, call, depth + 1)


def _namedtuples(ctx: ModuleContext) -> Dict[str, Tuple[str, ...]]:
    """Module-level `Name = namedtuple("Name", [fields])` of the file: name -> fields."""
    out: Dict[str, Tuple[str, ...]] = {}
    for a in ctx.assignments:
        value = a.value
        if not a.scope.is_module or a.unpacked or "." in a.target or not isinstance(value, cst.Call) or len(value.args) < 2:
            continue
        if "collections.namedtuple" not in ctx.qualnames(value.func):
            continue
        fields_node = value.args[1].value
        if isinstance(fields_node, (cst.List, cst.Tuple)):
            names = [literal_string(e.value) for e in fields_node.elements]
        else:
            text = literal_string(fields_node)
            names = list(text.replace(",", " ").split()) if text is not None else [None]
        if names and all(isinstance(n, str) for n in names):
            out[a.target] = tuple(n for n in names if n is not None)
    return out


def _settings(node: cst.BaseExpression, tuples: Dict[str, Tuple[str, ...]]) -> Optional[Dict[str, Optional[bool]]]:
    """The legacy backend switches a value spells: a call of a file's namedtuple or `dict(...)`,
    or a dict display, of literal booleans (a switch left out is its default, True)."""
    values: Dict[str, Optional[bool]] = {}
    if isinstance(node, cst.Call):
        name = dotted_name(node.func)
        fields = tuples.get(name or "", ()) if name != "dict" else ()
        if name != "dict" and not fields:
            return None
        for i, arg in enumerate(node.args):
            if arg.star:
                return None
            key = arg.keyword.value if arg.keyword is not None else (fields[i] if i < len(fields) else None)
            if key is None:
                return None
            values[key] = literal_bool(arg.value)
    elif isinstance(node, cst.Dict):
        for element in node.elements:
            if not isinstance(element, cst.DictElement):
                return None
            key = literal_string(element.key)
            if key is None:
                return None
            values[key] = literal_bool(element.value)
    else:
        return None
    if not set(values) <= set(_LEGACY_FIELDS) | {"enable_cudnn"} or None in values.values():
        return None
    return {f: values.get(f, True) for f in _LEGACY_FIELDS}


def _only_half_backends(ctx: ModuleContext, call: CallInfo) -> bool:
    arg = call.arg(0, "backends")
    if arg is None:
        return False
    items = [e.value for e in arg.elements] if isinstance(arg, (cst.List, cst.Tuple)) else [arg]
    names = []
    for item in items:
        spelled = dotted_name(item)
        if not spelled:
            return False
        names.append(spelled.rsplit(".", 1)[-1])
    return bool(names) and all(n in _HALF_ONLY for n in names)


def _legacy_flash_only(call: CallInfo) -> bool:
    """`sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)` (cuDNN,
    the default True, takes fp16/bf16 only as well)."""
    values = {}
    for name, position in (("enable_flash", 0), ("enable_math", 1), ("enable_mem_efficient", 2)):
        node = call.arg(position, name)
        values[name] = None if node is None else (node.value if isinstance(node, cst.Name) and node.value in ("True", "False") else "?")
    return values["enable_flash"] in (None, "True") and values["enable_math"] == "False" and values["enable_mem_efficient"] == "False"


def _inside(ctx: ModuleContext, node: cst.CSTNode, region: cst.With) -> bool:
    start, end = ctx.position(node)
    rstart, rend = ctx.position(region)
    return (rstart.row, rstart.column) < (start.row, start.column) and (end.row, end.column) <= (rend.row, rend.column)
