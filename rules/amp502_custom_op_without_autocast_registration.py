"""AMP502 custom-op-without-autocast-registration."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set

import libcst as cst

from amplint.model import (
    AUTOCAST_AWARE_OP_NAMESPACES, CPP_EXTENSION_LOADERS, CUSTOM_OP_DECORATORS, REGISTER_AUTOCAST, CallInfo,
    Diagnostic, Invalid, ModuleContext, Rule, Severity, Valid, imported_names, literal_string,
)

_CASTS = ("float", "half", "bfloat16", "double", "type_as")


@dataclass
class _Op:
    local: str  # the name the file calls it by (`my_mm`, `torch.ops.mylib.mm`, `ext.forward`)
    qualified: Optional[str]  # "mylib::mm" when known
    kind: str  # "custom_op" | "torch.ops" | "extension"


class CustomOpWithoutAutocastRegistration(Rule):
    """
    ## What it does
    Flags a custom operator called inside an enabled autocast region when the
    file registers no autocast rule for it: functions decorated with
    `torch.library.custom_op`, `torch.ops.<ns>.<op>` for a namespace the file
    defines (or when it loads its own op library), and the functions of a
    module built by `torch.utils.cpp_extension.load` / `load_inline`.

    ## Why is this bad?
    An op without an autocast kernel hits autocast's *fallthrough*: its inputs
    are not cast, and autocast stays enabled inside it. In E10
    the kernel saw `(float32, float32, autocast on)` and its inner `mm`
    returned bf16. Under autocast the inputs are often fp16/bf16 outputs of a
    previous linear next to fp32 weights, so a kernel written for `float*`
    reads garbage or raises a dtype error. `torch.library.register_autocast(op,
    device_type, cast_inputs)` (or `CustomOpDef.register_autocast`) casts the
    inputs and runs the op with autocast disabled. A pybind function from
    `cpp_extension.load` is not a dispatcher op at all: nothing can register
    it, so its inputs must be cast by hand.

    ## Example
    ```python
    @torch.library.custom_op("mylib::fused_gelu", mutates_args=())
    def fused_gelu(x: torch.Tensor) -> torch.Tensor:
        ...

    with torch.autocast("cuda"):
        y = fused_gelu(model(x))
    ```

    ## Use instead
    ```python
    fused_gelu.register_autocast("cuda", torch.float32)

    with torch.autocast("cuda"):
        y = fused_gelu(model(x))
    ```

    ## Fix safety
    No fix: the right `cast_inputs` dtype depends on the kernel.

    ## Verification
    `amplint --verify` defines a fresh `torch.library.custom_op` and calls it
    under autocast on a linear layer's output, reporting the dtypes its kernel
    receives unregistered (low precision, autocast still on inside) and after
    `register_autocast(device, cast_inputs=torch.float32)` (fp32, autocast
    off), as in E10. The flagged op itself is not run.

    ## Notes
    There is no `torch.amp.register_op_dtype`; the message never suggests
    it. Registration in another file cannot be seen: the rule stays silent when
    any `register_autocast` call, or any `Library.impl`/`torch.library.impl`
    for an `Autocast*` dispatch key, mentions the op's name anywhere in the
    file, and it flags `torch.ops.<ns>.<op>` only for namespaces the file
    defines itself (C++ `TORCH_LIBRARY_IMPL(ns, Autocast, m)` kernels, as
    torchvision ships, are invisible to it). Calls whose tensor arguments are
    cast explicitly (`.float()`, `.to(torch.float32)`) and calls in a nested
    `autocast(enabled=False)` are fine.

    ## References
    - amplint's evidence page: `amplint --explain AMP502` (docs/evidence.md#amp502)
    - https://pytorch.org/docs/stable/library.html#torch.library.register_autocast
    """

    code = "AMP502"
    name = "custom-op-without-autocast-registration"
    severity = Severity.WARNING
    message = "custom op called under autocast without an autocast registration"
    triggers = ("custom_op", "torch.ops", "import ops", "cpp_extension")
    requires = (("autocast",),)  # no autocast region, no finding

    VALID = [
        Valid(
            """
import torch

@torch.library.custom_op("mylib::fused_gelu", mutates_args=())
def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    return x.clone()

fused_gelu.register_autocast("cuda", torch.float32)

with torch.autocast("cuda"):
    y = fused_gelu(model(x))
""",
            "CustomOpDef.register_autocast",
        ),
        Valid(
            """
import torch
from torch.library import custom_op, register_autocast

@custom_op("mylib::mm", mutates_args=())
def my_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b

register_autocast("mylib::mm", "cuda", torch.float16)

with torch.autocast("cuda"):
    y = torch.ops.mylib.mm(a, b)
    z = my_mm(a, b)
""",
            "torch.library.register_autocast by op name",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda"):
    boxes = torch.ops.torchvision.nms(boxes, scores, 0.5)
    y = torch.ops.aten.mm(a, b)
    z = torch.ops.xformers.efficient_attention(q, k, v)
""",
            "aten/torchvision ops have autocast kernels; a foreign namespace may register in C++",
        ),
        Valid(
            """
import torch
from torch.utils.cpp_extension import load
ext = load(name="ext", sources=["ext.cpp"])
with torch.autocast("cuda"):
    h = model(x)
    with torch.autocast("cuda", enabled=False):
        y = ext.forward(h.float(), w.float())
""",
            "a nested autocast(enabled=False) with explicit casts",
        ),
        Valid(
            """
import torch

@torch.library.custom_op("mylib::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2

y = scale(x)
with torch.autocast("cuda"):
    z = model(y)
""",
            "the op is called outside autocast",
        ),
        Valid(
            """
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="ext", cpp_sources=src, functions=["fwd"])
with torch.autocast("cuda"):
    y = ext.fwd(x.float(), w.to(torch.float32))
""",
            "inputs cast explicitly",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch

@torch.library.custom_op("mylib::fused_gelu", mutates_args=())
def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    return x.clone()

class Trainer:
    def step(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            h = self.model(x)
            return fused_gelu(h)
""",
            line=11,
        ),
        Invalid(
            """
import torch
from torch.library import custom_op

@custom_op("mylib::mm", mutates_args=())
def my_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b

for x in loader:
    with torch.amp.autocast("cuda"):
        y = torch.ops.mylib.mm(model(x), w)
""",
            line=10,
        ),
        Invalid(
            """
import torch
from torch.utils import cpp_extension

fused = cpp_extension.load(name="fused_adam", sources=["fused.cpp", "fused_kernel.cu"])

def train(model, loader, use_amp):
    for x in loader:
        with torch.autocast("cuda", enabled=use_amp):
            h = model(x)
            out = fused.layer_norm(h, model.weight, model.bias)
""",
            line=10,
        ),
        Invalid(
            """
import torch
lib = torch.library.Library("myops", "DEF")
lib.define("rms(Tensor x, Tensor w) -> Tensor")
with torch.autocast("cpu", dtype=torch.bfloat16):
    y = torch.ops.myops.rms(model(x), w)
""",
            line=5,
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        if not ctx.regions:
            return
        ops = _custom_ops(ctx)
        namespaces = _defined_namespaces(ctx)
        extensions = _extension_modules(ctx)
        registered = _registration_text(ctx)
        for call in ctx.calls:
            region = call.region
            if region is None or region.enabled is False:
                continue
            op = _op_of(ctx, call, ops, namespaces, extensions)
            if op is None or _registered(op, registered) or _casts_inputs(ctx, call):
                continue
            device = region.device or "cuda"
            data = {
                "op": op.qualified or op.local,
                "kind": op.kind,
                "device": device,
                "dtype": region.dtype,
                "snippet": ctx.code_for(call.node),
                "names": imported_names(ctx, call.node),
            }
            yield ctx.diagnostic(self, call.node, _message(op), data=data, help=_help(op, device))


def _custom_ops(ctx: ModuleContext) -> Dict[str, _Op]:
    """Local names of `torch.library.custom_op` results."""
    ops: Dict[str, _Op] = {}
    for scope in ctx.scopes:
        node = scope.node
        if not isinstance(node, cst.FunctionDef) or scope.cls is not None:
            continue
        for dec in node.decorators:
            expr = dec.decorator
            if isinstance(expr, cst.Call) and ctx.qualnames(expr.func) & CUSTOM_OP_DECORATORS:
                ops[node.name.value] = _Op(node.name.value, literal_string(expr.args[0].value) if expr.args else None, "custom_op")
    for a in ctx.assignments:
        value = a.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Call):
            inner = value.func
            if ctx.qualnames(inner.func) & CUSTOM_OP_DECORATORS:
                ops[a.target] = _Op(a.target, literal_string(inner.args[0].value) if inner.args else None, "custom_op")
    return ops


def _defined_namespaces(ctx: ModuleContext) -> Set[str]:
    """Op namespaces the file defines (custom_op/define strings, `Library("ns", "DEF")`),
    plus "*" when it loads its own op library."""
    found: Set[str] = set()
    for call in ctx.calls:
        first = literal_string(call.arg(0))
        if first and "::" in first and (call.qualnames & CUSTOM_OP_DECORATORS or call.calls_any(("torch.library.define",))):
            found.add(first.split("::", 1)[0])
        if call.calls_any(("torch.library.Library",)) and first:
            kind = literal_string(call.arg(1, "kind"))
            if kind in ("DEF", "FRAGMENT"):
                found.add(first)
        if call.calls_any(("torch.ops.load_library",)):
            found.add("*")
        if call.qualnames & CPP_EXTENSION_LOADERS:
            flag = call.arg(None, "is_python_module")
            if isinstance(flag, cst.Name) and flag.value == "False":
                found.add("*")
    return found


def _extension_modules(ctx: ModuleContext) -> Set[str]:
    """Module-level names bound to a `cpp_extension.load`/`load_inline` Python module."""
    names: Set[str] = set()
    for a in ctx.assignments:
        if not (a.scope.is_module or a.target.startswith("self.")) or not isinstance(a.value, cst.Call):
            continue
        info = ctx.call_info(a.value)
        if info is None or not info.qualnames & CPP_EXTENSION_LOADERS:
            continue
        flag = info.arg(None, "is_python_module")
        if isinstance(flag, cst.Name) and flag.value == "False":
            continue
        names.add(a.target)
    return names


def _registration_text(ctx: ModuleContext) -> List[str]:
    """The source of every autocast registration in the file (argument text and receivers)."""
    texts: List[str] = []
    for call in ctx.calls:
        if call.qualnames & REGISTER_AUTOCAST or call.method == "register_autocast":
            texts.append(ctx.code_for(call.node))
        elif call.method == "impl" or call.calls_any(("torch.library.impl",)):
            text = ctx.code_for(call.node)
            if "Autocast" in text:
                texts.append(text)
    for node in ctx.scopes:
        if isinstance(node.node, cst.FunctionDef):
            for dec in node.node.decorators:
                text = ctx.code_for(dec.decorator)
                if "Autocast" in text or "register_autocast" in text:
                    texts.append(text)
    return texts


def _op_of(ctx: ModuleContext, call: CallInfo, ops: Dict[str, _Op], namespaces: Set[str], extensions: Set[str]) -> Optional[_Op]:
    dotted = call.dotted or ""
    if dotted in ops:
        return ops[dotted]
    for q in sorted(call.qualnames):  # sorted: the op named must not follow the hash seed
        parts = q.split(".")
        if len(parts) >= 4 and parts[:2] == ["torch", "ops"]:
            ns, name = parts[2], parts[3]
            if ns in AUTOCAST_AWARE_OP_NAMESPACES or (ns not in namespaces and "*" not in namespaces):
                return None
            return _Op(dotted, f"{ns}::{name}", "torch.ops")
    root, _, rest = dotted.rpartition(".")
    if root in extensions and rest:
        return _Op(dotted, None, "extension")
    return None


def _registered(op: _Op, texts: List[str]) -> bool:
    if op.kind == "extension":
        return False
    needles = {op.local.rsplit(".", 1)[-1]}
    if op.qualified:
        needles.add(op.qualified)
        needles.add(op.qualified.split("::", 1)[-1])
    return any(n in t for n in needles for t in texts)


def _casts_inputs(ctx: ModuleContext, call: CallInfo) -> bool:
    for arg in call.node.args:
        value = arg.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            method = value.func.attr.value
            if method in _CASTS:
                return True
            if method == "to" and any(
                a.keyword is not None and a.keyword.value == "dtype" or ctx.dtype_of(a.value) is not None for a in value.args
            ):
                return True
    return False


def _message(op: _Op) -> str:
    if op.kind == "extension":
        return f"`{op.local}` (a `cpp_extension` function) is called under autocast, which never casts its inputs"
    return f"Custom op `{op.qualified or op.local}` is called under autocast with no autocast rule"


def _help(op: _Op, device: str) -> str:
    if op.kind == "extension":
        return f'Cast its inputs inside `torch.autocast("{device}", enabled=False)`'
    if op.kind == "custom_op":
        return f'Register one with `{op.local}.register_autocast("{device}", torch.float32)`'
    return f'Register one with `torch.library.register_autocast("{op.qualified or op.local}", "{device}", torch.float32)`'

