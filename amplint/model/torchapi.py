"""What amplint knows about torch's API, as data.

Qualified names are the names a user can import; every alias that torch itself
re-exports is listed so `from torch.cuda.amp.autocast_mode import autocast`
resolves like `torch.cuda.amp.autocast`.
"""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, Optional, Pattern, Tuple

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

#: autocast's parameters in positional order, `torch.autocast(device_type, dtype, enabled,
#: cache_enabled)`; a constructor that implies its device takes none:
#: `torch.cuda.amp.autocast(enabled, dtype, cache_enabled)`, `torch.cpu.amp.autocast(...)` alike
AUTOCAST_PARAMETERS: Tuple[str, ...] = ("device_type", "dtype", "enabled", "cache_enabled")
DEVICE_AUTOCAST_PARAMETERS: Tuple[str, ...] = ("enabled", "dtype", "cache_enabled")


def autocast_parameters(qualname: str) -> Tuple[str, ...]:
    """The positional parameters of the autocast constructor `qualname` (a key of
    `AUTOCAST_CONTEXTS`), read alike by the per-file model and the project summary."""
    return AUTOCAST_PARAMETERS if AUTOCAST_CONTEXTS[qualname] is None else DEVICE_AUTOCAST_PARAMETERS


#: default autocast dtype per device
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

#: `GradScaler(device="cuda", init_scale=2.0**16, ...)`
DEFAULT_INIT_SCALE = 65536.0

# --- optimizers -----------------------------------------------------------

#: optimizers whose constructors accept `fused=True` and then unscale inside
#: their own kernel (`_step_supports_amp_scaling`)
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


def is_torch_optimizer_class(qualname: str) -> bool:
    """A class of `torch.optim` (`torch.optim.AdamW`, `torch.optim.adamw.AdamW`): every one
    keeps its state in the parameters' dtype and writes the update into the parameter itself
    (foreach, for-loop and fused alike), so nothing compensates a low-precision parameter's
    rounding (not `Optimizer`, a scheduler or `swa_utils`)."""
    parts = qualname.split(".")
    return (
        len(parts) >= 3 and parts[:2] == ["torch", "optim"] and parts[-1][:1].isupper() and parts[-1] != "Optimizer"
        and is_optimizer_class(qualname) and "lr_scheduler" not in parts
    )


#: callees that keep fp32 master weights for the optimizer they are given (apex
#: `FP16_Optimizer` / `amp.initialize`, DeepSpeed's `initialize`, fairseq's `FP16Optimizer`,
#: `MixedPrecisionOptimizer`...): matched against the callee's spelling
MASTER_WRAPPER: Pattern[str] = re.compile(r"fp16|master|initialize|mixedprecision", re.IGNORECASE)


# --- fp16 numerics ------------------------------------------

FP16_MAX = 65504.0
FP16_MIN_SUBNORMAL = 5.960464477539063e-08
#: values below this round to zero when cast to fp16
FP16_FLUSH_TO_ZERO = 2.9802322387695312e-08


# --- deprecated device-specific AMP API -------------

from dataclasses import dataclass as _dataclass  # noqa: E402  (appended section)
from typing import Tuple as _Tuple  # noqa: E402


@_dataclass(frozen=True)
class DeprecatedApi:
    """One deprecated name and what replaces it.

    kind: "autocast" | "scaler" | "custom_fwd" | "custom_bwd" | "state"
    params: the deprecated callable's positional parameter names, in order
            (a fix maps every positional argument to its keyword).
    new: the replacement, relative to the `torch` module ("amp.autocast").
    min_torch: the oldest torch that has the replacement in the form a fix writes.
    """

    old: str
    kind: str
    device: str
    new: str
    category: str  # "FutureWarning" | "DeprecationWarning"
    warning: str  # the exact text torch 2.13 emits
    params: _Tuple[str, ...] = ()
    min_torch: _Tuple[int, int] = (2, 4)


def _fw(old: str, new: str) -> str:
    return f"`{old}(args...)` is deprecated. Please use `{new}` instead."


_AUTOCAST_PARAMS = ("enabled", "dtype", "cache_enabled")
_SCALER_PARAMS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")

#: every deprecated spelling (module re-exports included) -> what replaces it
DEPRECATED_AMP: Dict[str, DeprecatedApi] = {}


def _add(names: _Tuple[str, ...], api: DeprecatedApi) -> None:
    for n in names:
        DEPRECATED_AMP[n] = api


for _dev in ("cuda", "cpu"):
    _add(
        (f"torch.{_dev}.amp.autocast", f"torch.{_dev}.amp.autocast_mode.autocast"),
        DeprecatedApi(
            old=f"torch.{_dev}.amp.autocast",
            kind="autocast",
            device=_dev,
            new="amp.autocast",
            category="FutureWarning",
            warning=_fw(f"torch.{_dev}.amp.autocast", f"torch.amp.autocast('{_dev}', args...)"),
            params=_AUTOCAST_PARAMS,
            # torch.autocast(device_type, ...) exists since 1.10
            min_torch=(1, 10),
        ),
    )
    _add(
        (f"torch.{_dev}.amp.GradScaler", f"torch.{_dev}.amp.grad_scaler.GradScaler"),
        DeprecatedApi(
            old=f"torch.{_dev}.amp.GradScaler",
            kind="scaler",
            device=_dev,
            new="amp.GradScaler",
            category="FutureWarning",
            warning=_fw(f"torch.{_dev}.amp.GradScaler", f"torch.amp.GradScaler('{_dev}', args...)"),
            params=_SCALER_PARAMS,
            min_torch=(2, 3),  # GradScaler(device)
        ),
    )
for _which, _param in (("custom_fwd", "fwd"), ("custom_bwd", "bwd")):
    _add(
        (f"torch.cuda.amp.{_which}", f"torch.cuda.amp.autocast_mode.{_which}"),
        DeprecatedApi(
            old=f"torch.cuda.amp.{_which}",
            kind=_which,
            device="cuda",
            new=f"amp.{_which}",
            category="FutureWarning",
            warning=_fw(f"torch.cuda.amp.{_which}", f"torch.amp.{_which}(args..., device_type='cuda')"),
            params=(_param,),
            min_torch=(2, 4),  # custom_fwd(device_type=)
        ),
    )

#: device-specific autocast state functions (C++ DeprecationWarning, RUN E32 and
#: the same texts for ipu/xla/set_*_enabled observed on the 2.13 build)
_STATE_DEVICES = {"gpu": "cuda", "cpu": "cpu", "ipu": "ipu", "xla": "xla"}
for _short, _dev in _STATE_DEVICES.items():
    for _old, _new, _arg in (
        (f"get_autocast_{_short}_dtype", "get_autocast_dtype", ""),
        (f"set_autocast_{_short}_dtype", "set_autocast_dtype", "dtype"),
        (f"is_autocast_{_short}_enabled", "is_autocast_enabled", ""),
        (f"set_autocast_{_short}_enabled", "set_autocast_enabled", "enabled"),
    ):
        if _short == "gpu" and _old.endswith("_enabled"):
            continue  # torch.is_autocast_enabled() / set_autocast_enabled(b) mean CUDA and are not deprecated
        _add(
            (f"torch.{_old}",),
            DeprecatedApi(
                old=f"torch.{_old}",
                kind="state",
                device=_dev,
                new=_new,
                category="DeprecationWarning",
                warning=(
                    f"torch.{_old}({_arg}) is deprecated. Please use "
                    f"torch.{_new}('{_dev}'{', ' + _arg if _arg else ''}) instead."
                ),
                params=(_arg,) if _arg else (),
                # the device-generic functions arrived with the deprecation (2.4 cycle)
                min_torch=(2, 4),
            ),
        )

#: `torch.amp.custom_fwd` / `custom_bwd`: `device_type` is a required keyword
#: (TypeError at decoration time without it)
AMP_CUSTOM_FWD: FrozenSet[str] = frozenset({"torch.amp.custom_fwd", "torch.amp.autocast_mode.custom_fwd"})
AMP_CUSTOM_BWD: FrozenSet[str] = frozenset({"torch.amp.custom_bwd", "torch.amp.autocast_mode.custom_bwd"})
#: every decorator that makes an autograd.Function autocast-aware
CUSTOM_FWD_BWD: FrozenSet[str] = AMP_CUSTOM_FWD | AMP_CUSTOM_BWD | frozenset(
    {
        "torch.cuda.amp.custom_fwd",
        "torch.cuda.amp.custom_bwd",
        "torch.cuda.amp.autocast_mode.custom_fwd",
        "torch.cuda.amp.autocast_mode.custom_bwd",
    }
)

# --- custom autograd Functions and custom ops ---------

AUTOGRAD_FUNCTION: FrozenSet[str] = frozenset(
    {"torch.autograd.Function", "torch.autograd.function.Function", "torch.autograd.function.InplaceFunction"}
)

#: Python spellings of ops on the lower-precision lists of CUDA and CPU autocast
#: (matmul / linear / conv / bmm family, SDPA)
AUTOCAST_LOWER_PRECISION_FUNCS: FrozenSet[str] = frozenset(
    [f"torch.{op}" for op in (
        "matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "addr", "mv", "einsum",
        "chain_matmul", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
        "conv_transpose3d", "conv_tbc", "prelu", "linalg.multi_dot", "linalg.vecdot",
    )]
    + [f"torch.nn.functional.{op}" for op in (
        "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
        "conv_transpose3d", "prelu", "scaled_dot_product_attention",
    )]
)
#: the same ops as Tensor methods (`x.mm(w)`, `a.matmul(b)`)
AUTOCAST_LOWER_PRECISION_METHODS: FrozenSet[str] = frozenset(
    {"matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "addr", "mv"}
)

CUSTOM_OP_DECORATORS: FrozenSet[str] = frozenset(
    {"torch.library.custom_op", "torch._library.custom_ops.custom_op"}
)
REGISTER_AUTOCAST: FrozenSet[str] = frozenset({"torch.library.register_autocast"})
CPP_EXTENSION_LOADERS: FrozenSet[str] = frozenset(
    {"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"}
)
#: torch.ops namespaces whose ops ship autocast kernels (aten's lists; torchvision
#: registers its own)
AUTOCAST_AWARE_OP_NAMESPACES: FrozenSet[str] = frozenset({"aten", "prims", "torchvision"})
# --- autocast op lists ------------------------------
#
# The aten ops each backend's autocast kernel runs in the autocast (low-precision)
# dtype ("lower_precision_fp"). Authoritative for torch 2.13 are the dispatcher
# registrations [REG], printed in E33; the docs page lists Python names and
# omits some entries (§1.2 "Docs and code disagree").

#: CUDA: AT_FORALL_LOWER_PRECISION_FP plus the cudnn convolutions
LOWER_PRECISION_OPS_CUDA: FrozenSet[str] = frozenset(
    {
        "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
        "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
        "cudnn_convolution", "cudnn_convolution_transpose", "prelu",
        "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear",
        "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
        "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
        "rnn_tanh_cell", "rnn_relu_cell",
        "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    }
)  # fmt: skip

#: CPU: the "to bf16/fp16" list; no einsum, mv, addmv, addr, RNN cells
LOWER_PRECISION_OPS_CPU: FrozenSet[str] = frozenset(
    {
        "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm",
        "_addmm_activation", "addbmm", "linear", "_convolution", "matmul", "conv_tbc",
        "mkldnn_rnn_layer", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
        "prelu", "scaled_dot_product_attention", "_native_multi_head_attention",
    }
)  # fmt: skip

#: device -> lower-precision ops; XPU uses CUDA's macros without the cudnn ops.
#: Devices absent here (mps, hpu, xla...) have no known list: rules stay silent on them.
LOWER_PRECISION_OPS: Dict[str, FrozenSet[str]] = {
    "cuda": LOWER_PRECISION_OPS_CUDA,
    "xpu": LOWER_PRECISION_OPS_CUDA - {"cudnn_convolution", "cudnn_convolution_transpose"},
    "cpu": LOWER_PRECISION_OPS_CPU,
}


def runs_in_lower_precision(op: str, device: Optional[str]) -> bool:
    """Whether autocast on `device` runs aten `op` in the low-precision dtype.

    With the device unknown (decided at run time) only ops listed for both
    CUDA and CPU count, so the answer holds whichever it turns out to be.
    """
    if device is None:
        return op in LOWER_PRECISION_OPS_CUDA and op in LOWER_PRECISION_OPS_CPU
    ops = LOWER_PRECISION_OPS.get(device)
    return ops is not None and op in ops


def _with_aliases(table: Dict[str, str], prefixes: Dict[str, str]) -> Dict[str, str]:
    out = dict(table)
    for short, long in prefixes.items():
        for name, op in table.items():
            if name.startswith(short):
                out[long + name[len(short):]] = op
    return out


#: torch functions (qualified names) -> the aten op they dispatch to
AUTOCAST_OP_FUNCTIONS: Dict[str, str] = _with_aliases(
    {
        "torch.matmul": "matmul", "torch.mm": "mm", "torch.bmm": "bmm", "torch.mv": "mv",
        "torch.addmm": "addmm", "torch.addbmm": "addbmm", "torch.baddbmm": "baddbmm",
        "torch.addmv": "addmv", "torch.addr": "addr", "torch.einsum": "einsum",
        "torch.chain_matmul": "chain_matmul", "torch.linalg.multi_dot": "linalg_multi_dot",
        "torch.linalg.vecdot": "linalg_vecdot", "torch.linalg.matmul": "matmul",
        "torch.conv1d": "conv1d", "torch.conv2d": "conv2d", "torch.conv3d": "conv3d",
        "torch.conv_tbc": "conv_tbc", "torch.conv_transpose1d": "conv_transpose1d",
        "torch.conv_transpose2d": "conv_transpose2d", "torch.conv_transpose3d": "conv_transpose3d",
        "torch.prelu": "prelu",
        "torch.nn.functional.linear": "linear",
        "torch.nn.functional.conv1d": "conv1d", "torch.nn.functional.conv2d": "conv2d",
        "torch.nn.functional.conv3d": "conv3d", "torch.nn.functional.conv_tbc": "conv_tbc",
        "torch.nn.functional.conv_transpose1d": "conv_transpose1d",
        "torch.nn.functional.conv_transpose2d": "conv_transpose2d",
        "torch.nn.functional.conv_transpose3d": "conv_transpose3d",
        "torch.nn.functional.prelu": "prelu",
        "torch.nn.functional.scaled_dot_product_attention": "scaled_dot_product_attention",
    },
    {},
)  # fmt: skip

#: Tensor methods -> aten op. In-place forms (`addmm_`) and `out=` calls are not
#: autocast, so they are absent.
AUTOCAST_OP_METHODS: Dict[str, str] = {
    "matmul": "matmul", "mm": "mm", "bmm": "bmm", "mv": "mv", "addmm": "addmm",
    "addbmm": "addbmm", "baddbmm": "baddbmm", "addmv": "addmv", "addr": "addr", "prelu": "prelu",
}  # fmt: skip

#: nn.Module classes whose forward applies one listed op to its input
AUTOCAST_OP_MODULES: Dict[str, str] = _with_aliases(
    {
        "torch.nn.Linear": "linear", "torch.nn.LazyLinear": "linear",
        "torch.nn.Conv1d": "conv1d", "torch.nn.Conv2d": "conv2d", "torch.nn.Conv3d": "conv3d",
        "torch.nn.LazyConv1d": "conv1d", "torch.nn.LazyConv2d": "conv2d", "torch.nn.LazyConv3d": "conv3d",
        "torch.nn.ConvTranspose1d": "conv_transpose1d", "torch.nn.ConvTranspose2d": "conv_transpose2d",
        "torch.nn.ConvTranspose3d": "conv_transpose3d", "torch.nn.PReLU": "prelu",
        "torch.nn.LSTMCell": "lstm_cell", "torch.nn.GRUCell": "gru_cell", "torch.nn.RNNCell": "rnn_tanh_cell",
    },
    {"torch.nn.Linear": "torch.nn.modules.linear.Linear", "torch.nn.Conv": "torch.nn.modules.conv.Conv"},
)  # fmt: skip

#: nn.Module classes whose output is a floating tensor (their own listed op or not)
#: torch functions whose result is an integer or bool tensor whatever their inputs' dtype
#: (`F.one_hot(idx).float()` converts indices, it does not upcast an fp16 value)
INTEGER_RESULT_FUNCS: FrozenSet[str] = frozenset(
    {
        "torch.nn.functional.one_hot", "torch.argmax", "torch.argmin", "torch.argsort",
        "torch.nonzero", "torch.searchsorted", "torch.bucketize", "torch.randint",
        "torch.randint_like", "torch.randperm", "torch.multinomial",
    }
)  # fmt: skip
#: the same as Tensor methods (`logits.argmax(-1)`, `mask.bool()`, `idx.long()`)
INTEGER_RESULT_METHODS: FrozenSet[str] = frozenset(
    {"argmax", "argmin", "argsort", "nonzero", "long", "int", "short", "byte", "bool"}
)

FLOAT_OUTPUT_MODULES: FrozenSet[str] = frozenset(
    {
        *AUTOCAST_OP_MODULES,
        "torch.nn.LayerNorm", "torch.nn.GroupNorm", "torch.nn.RMSNorm", "torch.nn.Embedding",
        "torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d",
    }
)  # fmt: skip

#: Tensor methods that keep the dtype of their receiver (views, copies, reshapes)
DTYPE_PRESERVING_METHODS: FrozenSet[str] = frozenset(
    {
        "transpose", "permute", "view", "reshape", "contiguous", "t", "unsqueeze", "squeeze",
        "flatten", "expand", "expand_as", "view_as", "reshape_as", "narrow", "detach", "clone",
        "chunk", "split", "unflatten", "movedim", "swapaxes",
    }
)  # fmt: skip

# --- DataParallel ------------------------------------------------

#: constructors of single-process multi-GPU wrappers whose replicas run in worker threads
DATA_PARALLEL_CLASSES: FrozenSet[str] = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"}
)
#: the functional form, `torch.nn.parallel.data_parallel(module, inputs, device_ids)`
DATA_PARALLEL_FUNCTIONS: FrozenSet[str] = frozenset(
    {"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"}
)

#: wrappers whose `.parameters()` are the wrapped module's own Parameter objects (dtype and all):
#: `DDP(model)`, `nn.DataParallel(model)`, `torch.compile(model)`
PARAMETER_KEEPING_WRAPPERS: FrozenSet[str] = DATA_PARALLEL_CLASSES | frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.compile",
    }
)

# --- device capability checks ---------------------------------------------

CAPABILITY_FUNCTIONS: FrozenSet[str] = frozenset(
    {"torch.cuda.get_device_capability", "torch.cuda.get_device_properties"}
)
BF16_SUPPORT_FUNCTIONS: FrozenSet[str] = frozenset({"torch.cuda.is_bf16_supported"})

#: a tensor a module made in fp32 and holds (`self.register_buffer("bias", torch.ones(n))`,
#: `self.w = nn.Parameter(torch.empty(n))`): fp32 unless the module is cast (`model.half()`,
#: `.to(torch.float16)`), which the file that defines it does not show. Only a rule that asks
#: whether code reaching the file may cast modules (`facts.MODULES_CAST`) may read it as fp32;
#: every other reader sees an unknown dtype
MODULE_FP32 = "fp32-module"
#: constructors whose result is always a floating tensor
FLOAT_FACTORIES: FrozenSet[str] = frozenset(
    {
        "torch.randn", "torch.rand", "torch.randn_like", "torch.rand_like",
        "torch.nn.Parameter", "torch.nn.parameter.Parameter",
    }
)  # fmt: skip
