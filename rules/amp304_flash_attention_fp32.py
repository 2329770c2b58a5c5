"""AMP304 flash-attention-fp32."""
from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import libcst as cst

from amplint.model import CallInfo, Diagnostic, Invalid, ModuleContext, Rule, Severity, Valid, dotted_name

#: the flash-attn package's entry points (FlashAttention 2 and 3): fp16/bf16 only
_FLASH_FUNCTIONS = frozenset(
    f"{module}.{name}"
    for module in ("flash_attn", "flash_attn.flash_attn_interface", "flash_attn_interface")
    for name in ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
                 "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache")
)
_SDPA = frozenset(("torch.nn.functional.scaled_dot_product_attention",))
_SDPA_KERNEL = frozenset(("torch.nn.attention.sdpa_kernel",))
_LEGACY_KERNEL = frozenset(("torch.backends.cuda.sdp_kernel",))
#: SDPA backends that take only fp16/bf16 on CUDA (flash, cuDNN)
_HALF_ONLY = ("FLASH_ATTENTION", "CUDNN_ATTENTION")


class FlashAttentionFp32(Rule):
    """
    ## What it does
    Flags flash attention called on fp32 tensors: a `flash_attn` function
    (`flash_attn_func`, `flash_attn_varlen_func`, ...) whose query, key or
    value is visibly float32 (made by `.float()`, `.to(torch.float32)`, an fp32
    factory), and `F.scaled_dot_product_attention` on such tensors inside a
    `with sdpa_kernel(SDPBackend.FLASH_ATTENTION)` (or the legacy
    `sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)`)
    and outside an enabled autocast region (an eval or sampling path).

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
    Only a dtype the code shows counts: tensors whose dtype comes from the
    model's weights (an fp16 or fp32 model chosen at run time) are not
    followed. SDPA inside an enabled CUDA autocast region is cast to fp16/bf16
    by autocast and is fine; a backend list that includes the
    memory-efficient or math kernel is a fallback, not a force.

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
        "flash_attn_with_kvcache", "sdpa_kernel", "sdp_kernel",
    )
    #: fp32 evidence: a cast (`.float()`, `torch.float32`) or a factory that makes fp32 by default
    requires = (("float", "randn", "rand(", "zeros", "ones", "empty", "full(", "arange", "tensor("),)
    #: the call or the import naming a flash-attn function, or a `with` forcing SDPA onto the flash
    #: or cuDNN kernel (not a name in prose: transformers' docstrings and comments, nor
    #: `sdpa_kernel(SDPBackend.MATH)`, which parsed eight of its files for nothing)
    gate_check = "amplint.core.gates:flash_attention_possible"

    VALID = [
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

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        for call in ctx.calls_to(*_FLASH_FUNCTIONS):
            found = _fp32_input(ctx, call, 3)
            if found is not None:
                yield self._diagnostic(ctx, call, found, "flash-attn")
        forced = None
        for call in ctx.calls_to(*_SDPA):
            if forced is None:
                forced = _forced_regions(ctx)
            if not forced:
                return
            if call.region is not None and call.region.enabled is not False and call.region.dtype != "fp32":
                continue  # autocast casts SDPA's inputs
            if not any(_inside(ctx, call.node, w) for w in forced):
                continue
            found = _fp32_input(ctx, call, 3)
            if found is not None:
                yield self._diagnostic(ctx, call, found, "sdpa")

    def _diagnostic(self, ctx: ModuleContext, call: CallInfo, arg: cst.BaseExpression, kind: str) -> Diagnostic:
        spelled = call.dotted or "flash_attn_func"
        name = dotted_name(arg) or ctx.code_for(arg)
        if kind == "flash-attn":
            message = f"`{spelled}` gets float32 `{name}`: FlashAttention takes only fp16/bf16"
            help = f"Cast the inputs to bf16 or fp16 before `{spelled}` (and the output back)"
        else:
            message = f"`{spelled}` forced to the flash kernel with float32 `{name}`: no kernel runs fp32"
            help = "Let SDPA fall back (add SDPBackend.MATH or EFFICIENT_ATTENTION), or cast the inputs to bf16"
        data = {"kernel": kind, "dtype": "fp32", "argument": name}
        return ctx.diagnostic(self, call.node, message, data=data, help=help)


def _fp32_input(ctx: ModuleContext, call: CallInfo, count: int) -> Optional[cst.BaseExpression]:
    """The first of the call's first `count` positional inputs whose dtype is visibly fp32."""
    inputs = [a.value for a in call.node.args if a.keyword is None and not a.star][:count]
    for arg in inputs:
        if ctx.known_dtype(arg, call.scope, call.order, call.statement, path=call.path) == "fp32":
            return arg
    return None


def _forced_regions(ctx: ModuleContext) -> List[cst.With]:
    """The `with` statements forcing SDPA onto fp16/bf16-only kernels."""
    out: List[cst.With] = []
    for call in ctx.calls_to(*_SDPA_KERNEL, *_LEGACY_KERNEL):
        statement = call.statement
        if not isinstance(statement, cst.With) or not any(item.item is call.node for item in statement.items):
            continue
        if call.calls_any(_SDPA_KERNEL) and _only_half_backends(ctx, call):
            out.append(statement)
        elif call.calls_any(_LEGACY_KERNEL) and _legacy_flash_only(call):
            out.append(statement)
    return out


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
