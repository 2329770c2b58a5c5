"""GradScalers and optimizers: their bindings (names, `self.` attributes,
parameters), constructors, `enabled=` literals, fused and framework-prepared
optimizers."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

import libcst as cst

from . import torchapi
from .literals import literal_bool, literal_string
from .names import dotted_name
from .precision_names import FP16_TEXT
from .types import CallInfo, OptimizerInfo, ScalerInfo

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext


_SCALER_PARAM_HINT = "scaler"


# --------------------------------------------------------------------------- derived facts


def _enabled_arg(call: CallInfo, qualname: str) -> Optional[cst.BaseExpression]:
    # torch.amp.GradScaler(device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)
    # torch.cuda.amp.GradScaler(init_scale, growth_factor, backoff_factor, growth_interval, enabled)
    position = 5 if qualname.startswith("torch.amp") else 4
    return call.arg(position, "enabled")


def _scaler_constructor(ctx: ModuleContext, value: cst.BaseExpression) -> Tuple[Optional[CallInfo], bool]:
    """The GradScaler(...) call in `value` and whether it is conditional (`X if c else None`)."""
    conditional = False
    candidates: List[cst.BaseExpression] = [value]
    if isinstance(value, cst.IfExp):
        candidates = [value.body, value.orelse]
        conditional = True
    elif isinstance(value, cst.BooleanOperation):
        candidates = [value.left, value.right]
        conditional = True
    for c in candidates:
        if isinstance(c, cst.Call):
            info = ctx.call_info(c)
            if info is not None and _is_grad_scaler(info):
                return info, conditional
    return None, False


def _is_grad_scaler(call: CallInfo) -> bool:
    return any(
        q in torchapi.GRAD_SCALERS or (q.startswith("torch.") and q.endswith("GradScaler")) for q in call.qualnames
    )


#: public: whether a call constructs a torch GradScaler (any import spelling)
is_grad_scaler_call = _is_grad_scaler

def scales_only_bf16(ctx: ModuleContext) -> bool:
    """Every GradScaler of the file scales bf16 gradients only: the file opens autocast regions
    that may be on, all of them torch autocasts of bf16 (no framework region, none held or of a
    dtype decided at run time), and its text spells no fp16 anywhere (`FP16_TEXT`). bf16 has
    fp32's exponent range, so such a scaler never skips a step and its scale carries nothing
    (Bert-VITS2's `GradScaler(enabled=hps.train.bf16_run)` beside `autocast(dtype=torch.bfloat16)`
    only); the project summary reads the same (`summary` key "b16")."""
    regions = [r for r in ctx.regions if r.enabled is not False]
    return bool(regions) and all(not r.framework and r.dtype == "bf16" for r in regions) and not FP16_TEXT.search(ctx.source)


def scales_bf16_unless_property(ctx: ModuleContext) -> Optional[str]:
    """`<name>` or `<name>@<function>` (the condition `DTYPE_PROPERTY_MAY_FP16` reads) when every
    GradScaler of the file scales bf16 gradients only unless a config property maps to float16:
    the file opens autocast regions that may be on, each a torch autocast of bf16 or one whose
    `dtype=` is the property `<name>` read off a config object (`dtype=config.model_dtype.autocast_dtype`),
    directly or through a parameter of the module-level function `<function>` holding the region
    that every call of it in the file passes that read (`train_step(..., config.model_dtype.autocast_dtype)`,
    then `torch.autocast("cuda", dtype=model_dtype)`), and the file spells no fp16 (`FP16_TEXT`).
    None otherwise: a region of another dtype, or more than one property or function involved."""
    from .literal_dtypes import region_dtype_choices
    from .literals import call_arg
    from .torchapi import autocast_parameters

    regions = [r for r in ctx.regions if r.enabled is not False]
    if not regions or FP16_TEXT.search(ctx.source):
        return None
    specs = set()
    for r in regions:
        if r.framework:
            return None
        if r.dtype == "bf16":
            continue
        if r.dtype is not None or r.selector is not None or r.qualname is None or region_dtype_choices(ctx, r):
            return None
        parameters = autocast_parameters(r.qualname)
        node = call_arg(r.call, parameters.index("dtype"), "dtype") if "dtype" in parameters else None
        name = _property_read(ctx, node)
        if name is not None:
            specs.add(name)
            continue
        info = ctx.call_info(r.call)
        spec = _parameter_property(ctx, node, info) if info is not None else None
        if spec is None:
            return None
        specs.add(spec)
    if len(specs) != 1:
        return None
    return specs.pop()


def _property_read(ctx: ModuleContext, node: Optional[cst.BaseExpression]) -> Optional[str]:
    """`autocast_dtype` for `config.model_dtype.autocast_dtype` (an attribute read off an object
    that is no imported module); None otherwise."""
    if not isinstance(node, cst.Attribute):
        return None
    spelled = dotted_name(node)
    if spelled is None or ctx.imports.is_imported(spelled.split(".", 1)[0]):
        return None
    return node.attr.value


def _parameter_property(ctx: ModuleContext, node: Optional[cst.BaseExpression], info: CallInfo) -> Optional[str]:
    """`<name>@<function>` when `node` is a parameter of the module-level function `<function>`
    holding the region, never rebound there, and every call of the function in the file (one at
    least, each spelling the argument) passes the property read `<name>`."""
    if not isinstance(node, cst.Name):
        return None
    scope = info.scope
    if scope.is_module or scope.cls is not None or scope.parent is None or not scope.parent.is_module:
        return None
    if not isinstance(scope.node, cst.FunctionDef) or node.value not in scope.params:
        return None
    if any(a.scope is scope for a in ctx.assignments_to(node.value, scope)):
        return None
    positional = [p.name.value for p in (*scope.node.params.posonly_params, *scope.node.params.params)]
    position = positional.index(node.value) if node.value in positional else None
    names = set()
    calls = [c for c in ctx.calls if c.dotted == scope.name and c.method is None]
    for call in calls:
        if any(a.star for a in call.node.args):
            return None
        name = _property_read(ctx, call.arg(position, node.value))
        if name is None:
            return None
        names.add(name)
    if len(names) != 1:
        return None
    return f"{names.pop()}@{scope.name}"


def scaler_enabled_argument(call: CallInfo) -> Optional[cst.BaseExpression]:
    """The expression a GradScaler constructor passes as `enabled=` (positionally or by keyword); None when none."""
    return _enabled_arg(call, next(iter(sorted(call.qualnames))))


def _find_scalers(ctx: ModuleContext) -> None:
    def add(key: str, enabled: Optional[bool], device: Optional[str] = None, ctor: Optional[CallInfo] = None, param: bool = False) -> None:
        info = ctx.scalers.get(key)
        if info is None:
            ctx.scalers[key] = ScalerInfo(key=key, enabled=enabled, device=device, is_parameter=param)
            info = ctx.scalers[key]
        elif info.enabled != enabled:
            info.enabled = None
        if ctor is not None:
            info.constructors.append(ctor)
        if param:
            info.is_parameter = True

    for a in ctx.assignments:
        if a.unpacked:
            continue
        ctor, conditional = _scaler_constructor(ctx, a.value)
        if ctor is None:
            continue
        q = next(iter(sorted(ctor.qualnames)))
        enabled_node = _enabled_arg(ctor, q)
        enabled = True if enabled_node is None else literal_bool(enabled_node)
        if conditional and enabled is True:
            enabled = None
        device = None
        if q.startswith("torch.cuda"):
            device = "cuda"
        elif q.startswith("torch.cpu"):
            device = "cpu"
        elif q.startswith("torch.amp"):
            device = literal_string(ctor.arg(0, "device")) or ("cuda" if ctor.arg(0, "device") is None else None)
        add(a.target, enabled, device, ctor)
    # receivers used the way only a GradScaler is used
    for call in ctx.method_calls("backward"):
        inner = call.receiver
        if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value == "scale":
            key = dotted_name(inner.func.value)
            if key and key not in ctx.scalers and not ctx.imports.is_imported(key.split(".")[0]):
                add(key, None)
    for call in ctx.method_calls("unscale_"):
        key = call.receiver_dotted
        if key and key not in ctx.scalers and not ctx.imports.is_imported(key.split(".")[0]):
            add(key, None)
    for scope in ctx.scopes:
        for p in scope.params:
            if _SCALER_PARAM_HINT in p.lower() and p not in ctx.scalers:
                add(p, None, param=True)
    # `self.scaler = scaler` (a parameter) inherits "unknown"
    for a in ctx.assignments:
        src = dotted_name(a.value)
        if src and src in ctx.scalers and a.target not in ctx.scalers:
            add(a.target, ctx.scalers[src].enabled)


def optimizer_classes(ctx: "ModuleContext", call: CallInfo) -> frozenset:
    """The optimizer classes `call` constructs: its own qualified name when that is one
    (`torch.optim.AdamW(...)`), or, for a call through a plain local name the imports do not
    resolve (`optimizer_class(params)`), the classes every binding of that name in the call's
    function (else the module) refers to (`optimizer_class = bnb.optim.AdamW8bit` in one branch,
    `torch.optim.AdamW` in the other: diffusers' `--use_8bit_adam`). Empty when any binding is
    something else (a parameter, a call, a class of the file)."""
    if call.qualname is not None:
        return frozenset((call.qualname,)) if torchapi.is_optimizer_class(call.qualname) else frozenset()
    func = call.node.func
    if call.qualnames or not isinstance(func, cst.Name) or func.value in call.scope.params:
        return frozenset()
    bindings = [a for a in ctx.assignments_to(func.value) if a.scope is call.scope]
    if not bindings and not call.scope.is_module:
        bindings = [a for a in ctx.assignments_to(func.value) if a.scope.is_module]
    out = set()
    for a in bindings:
        q = ctx.qualname(a.value) if not a.unpacked and isinstance(a.value, (cst.Name, cst.Attribute)) else None
        if q is None or not torchapi.is_optimizer_class(q):
            return frozenset()
        out.add(q)
    return frozenset(out)


def _find_optimizers(ctx: ModuleContext) -> None:
    for a in ctx.assignments:
        value = a.value
        if isinstance(value, cst.Call):
            info = ctx.call_info(value)
            if info is None:
                continue
            q = info.qualname
            if q and torchapi.is_optimizer_class(q) and not a.unpacked:
                fused_arg = info.arg(None, "fused")
                opt = ctx.optimizers.setdefault(a.target, OptimizerInfo(key=a.target))
                opt.qualname = q
                # absent: not fused; a literal: that; anything else: decided at run time
                opt.fused = False if fused_arg is None else literal_bool(fused_arg)
                opt.constructors.append(info)
            elif info.method == "prepare" or info.method in ("setup", "initialize", "setup_optimizers"):
                # accelerate `prepare`, Fabric `setup`, DeepSpeed `initialize`: the framework owns scaling
                if ctx.is_optimizer(a.target) or (a.unpacked and "optim" in a.target.lower()):
                    ctx.optimizers.setdefault(a.target, OptimizerInfo(key=a.target)).prepared = True
    for call in ctx.method_calls("step", "unscale_"):
        if call.receiver_dotted in ctx.scalers:
            opt = dotted_name(call.arg(0) or cst.Name("_")) if call.arg(0) is not None else None
            if opt and opt not in ctx.optimizers:
                ctx.optimizers[opt] = OptimizerInfo(key=opt, fused=None)
