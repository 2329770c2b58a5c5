"""What amplint knows about torch's API, as data (amp-facts.md is the source).

Qualified names are the names a user can import; every alias that torch itself
re-exports is listed so `from torch.cuda.amp.autocast_mode import autocast`
resolves like `torch.cuda.amp.autocast`.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Optional

# --- autocast -------------------------------------------------------------

#: qualified name -> the device it implies (None: taken from the first argument)
AUTOCAST_CONTEXTS: Dict[str, Optional[str]] = {
    "torch.autocast": None,
    "torch.amp.autocast": None,
    "torch.amp.autocast_mode.autocast": None,
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}

#: default autocast dtype per device [amp-facts §1.1]
DEVICE_DEFAULT_DTYPE: Dict[str, str] = {
    "cuda": "fp16",
    "cpu": "bf16",
    "xpu": "fp16",
    "mps": "fp16",
    "hpu": "bf16",
    "xla": "bf16",
}

FP16_DTYPES: FrozenSet[str] = frozenset({"torch.float16", "torch.half"})
BF16_DTYPES: FrozenSet[str] = frozenset({"torch.bfloat16"})
FP32_DTYPES: FrozenSet[str] = frozenset({"torch.float32", "torch.float"})
#: spelled strings accepted as dtypes (HF `torch_dtype="float16"`)
DTYPE_STRINGS: Dict[str, str] = {
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
}


def dtype_of_qualname(qualname: Optional[str]) -> Optional[str]:
    """'fp16' | 'bf16' | 'fp32' for a torch dtype's qualified name, else None."""
    if qualname in FP16_DTYPES:
        return "fp16"
    if qualname in BF16_DTYPES:
        return "bf16"
    if qualname in FP32_DTYPES:
        return "fp32"
    return None


# --- GradScaler -----------------------------------------------------------

GRAD_SCALERS: FrozenSet[str] = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.cpu.amp.grad_scaler.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
        "torch.distributed.fsdp.ShardedGradScaler",
    }
)

#: `GradScaler(device="cuda", init_scale=2.0**16, ...)` [amp-facts §2]
DEFAULT_INIT_SCALE = 65536.0

# --- optimizers -----------------------------------------------------------

#: optimizers whose constructors accept `fused=True` and then unscale inside
#: their own kernel (`_step_supports_amp_scaling`) [amp-facts §2]
FUSED_CAPABLE: FrozenSet[str] = frozenset(
    {"torch.optim.Adam", "torch.optim.AdamW", "torch.optim.SGD", "torch.optim.Adagrad"}
)

CLIP_FUNCTIONS: FrozenSet[str] = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_value_",
        "torch.nn.utils.clip_grad.clip_grad_norm",
        "torch.nn.utils.get_total_norm",
        "torch.nn.utils.clip_grads_with_norm_",
    }
)


def is_optimizer_class(qualname: str) -> bool:
    """`torch.optim.AdamW`, `bitsandbytes.optim.AdamW8bit`, `apex.optimizers.FusedAdam`..."""
    head, _, last = qualname.rpartition(".")
    if not last[:1].isupper() or "sched" in qualname.lower() or "swa_utils" in head:
        return False
    return "optim" in head.lower()


# --- fp16 numerics [amp-facts §6.1] ------------------------------------------

FP16_MAX = 65504.0
FP16_MIN_SUBNORMAL = 5.960464477539063e-08
#: values below this round to zero when cast to fp16
FP16_FLUSH_TO_ZERO = 2.9802322387695312e-08
