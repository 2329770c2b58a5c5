"""accelerate `Accelerator` objects whose `backward` scales the loss.

With `Accelerator(mixed_precision="fp16")` accelerate builds a GradScaler and
`accelerator.backward(loss)` runs `scaler.scale(loss).backward()`: the
gradients stay multiplied by the loss scale until `accelerator.unscale_gradients()`
(which `accelerator.clip_grad_norm_` / `clip_grad_value_` call) or the prepared
optimizer's `step`. Rules that reason about scaled gradients (AMP101) ask
here whether a receiver of `.backward(loss)` is such an object.

Only what the file shows counts, and only for certain: a `mixed_precision`
read from a config or the environment is decided at run time,
and so is a DeepSpeed / FSDP / Megatron-LM plugin's own handling of scaling,
a CPU accelerator (no scaler) or a `GradScalerKwargs(enabled=...)` handler.
Any of these, or a second binding of the name to something else, makes the
answer "unknown", which callers treat as "not scaled". One run-time choice
counts: `mixed_precision=args.mixed_precision` where the file defines that
argparse option with literal choices and "fp16" is one of them
(`runtime_choices.py`): that documented run scales the loss, so the accelerator
is a scaling one on it, and `scaling_choice` names the choice
(`--mixed_precision is fp16`) for the rules' messages.

Computed on first use per file (most parsed files never ask).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional

import libcst as cst

from .bindings import self_bindings
from .literals import literal_bool
from .names import dotted_name
from .runtime_choices import option_read
from .types import Assignment, CallInfo, Scope

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext

ACCELERATORS = frozenset(("accelerate.Accelerator", "accelerate.accelerator.Accelerator"))
#: plugins that take scaling away from accelerate's own GradScaler (DeepSpeed, Megatron-LM)
#: or whose clipping the rule does not model (FSDP)
_PLUGINS = ("deepspeed_plugin", "fsdp_plugin", "megatron_lm_plugin")
#: Accelerator(device_placement, split_batches, mixed_precision, gradient_accumulation_steps, cpu, ...)
_MIXED_PRECISION_POSITION = 2
_CPU_POSITION = 4


def scaling_accelerator(ctx: "ModuleContext", receiver: Optional[str], scope: Scope) -> Optional[CallInfo]:
    """The `Accelerator(mixed_precision="fp16")` constructor that `receiver` (as spelled
    in `scope`: `accelerator`, `self.accelerator`) certainly holds, else None."""
    if not receiver:
        return None
    root = receiver.split(".", 1)[0]
    if root != "self" and root in scope.params:
        return None  # a parameter: whatever the caller passes
    cache: Dict[tuple, Optional[CallInfo]] = ctx.__dict__.setdefault("_scaling_accelerators", {})
    key = (receiver, id(scope))
    if key not in cache:
        cache[key] = _resolve(ctx, receiver, scope, depth=0)
    return cache[key]


def _resolve(ctx: "ModuleContext", name: str, scope: Scope, depth: int) -> Optional[CallInfo]:
    """Every binding of `name` visible from `scope` is an fp16 Accelerator constructor
    (directly or through a name that is one): the first of them, else None."""
    bindings = _bindings(ctx, name, scope)
    if not bindings or depth > 3 or _scaler_disabled_somewhere(ctx):
        return None
    found: Optional[CallInfo] = None
    for a in bindings:
        ctor: Optional[CallInfo] = None
        if a.unpacked:
            return None
        if isinstance(a.value, cst.Call):
            info = ctx.call_info(a.value)
            if info is not None and _scales(ctx, info):
                ctor = info
        else:
            source = dotted_name(a.value)
            if source and source.split(".", 1)[0] not in a.scope.params:
                ctor = _resolve(ctx, source, a.scope, depth + 1)
        if ctor is None:
            return None
        found = found or ctor
    return found


def _bindings(ctx: "ModuleContext", name: str, scope: Scope) -> List[Assignment]:
    """The assignments that can bind `name` where `scope` reads it: for `self.x` those of
    its class and its bases here (`self_bindings`); for a plain name those of `scope` itself when it assigns it, else the module's."""
    if name.startswith("self."):
        return self_bindings(ctx, name, scope)
    found = ctx.assignments_to(name)
    own = [a for a in found if a.scope is scope]
    if own:
        return own
    return [a for a in found if a.scope.is_module]


def scaling_choice(ctx: "ModuleContext", receiver: Optional[str], scope: Scope) -> Optional[str]:
    """`--mixed_precision is fp16` when the scaling accelerator `receiver` holds scales only on
    that choice of an argparse option (None when it always scales, or does not)."""
    ctor = scaling_accelerator(ctx, receiver, scope)
    if ctor is None:
        return None
    option = option_read(ctx, ctor.arg(_MIXED_PRECISION_POSITION, "mixed_precision"))
    return f"{option.flag} is fp16" if option is not None else None


def _scales(ctx: "ModuleContext", call: CallInfo) -> bool:
    """`Accelerator(...)` whose arguments make its `backward` scale the loss with a GradScaler
    (always, or on an argparse choice "fp16")."""
    if not call.calls_any(ACCELERATORS):
        return False
    if any(a.star for a in call.node.args):  # *args / **kwargs: anything may be passed
        return False
    mixed = call.arg(_MIXED_PRECISION_POSITION, "mixed_precision")
    if not _is_fp16_literal(mixed) and not _fp16_choice(ctx, mixed):
        return False
    cpu = call.arg(_CPU_POSITION, "cpu")
    if cpu is not None and literal_bool(cpu) is not False:
        return False
    for plugin in _PLUGINS:
        value = call.arg(None, plugin)
        if value is not None and not (isinstance(value, cst.Name) and value.value == "None"):
            return False
    return True


def _is_fp16_literal(node: Optional[cst.BaseExpression]) -> bool:
    """A plain string literal spelling "fp16" (accelerate lower-cases it); the raw text must
    hold the letters too, which keeps the rule's text gate (a search for "fp16") sound."""
    if not isinstance(node, cst.SimpleString):
        return False
    value = node.evaluated_value
    return isinstance(value, str) and value.lower() == "fp16" and "fp16" in node.value.lower()


def _fp16_choice(ctx: "ModuleContext", node: Optional[cst.BaseExpression]) -> bool:
    """`args.mixed_precision` of an argparse option of the file whose literal choices include
    "fp16" (spelled so: accelerate takes no other spelling, and the text gate searches for it)."""
    option = option_read(ctx, node)
    return option is not None and "fp16" in option.choices


def _scaler_disabled_somewhere(ctx: "ModuleContext") -> bool:
    """A `GradScalerKwargs(enabled=...)` handler in the file that may turn the scaler off."""
    cached = ctx.__dict__.get("_accelerate_scaler_disabled")
    if cached is None:
        cached = False
        for call in ctx.calls:
            if call.dotted and call.dotted.rsplit(".", 1)[-1] == "GradScalerKwargs":
                enabled = call.arg(4, "enabled")
                if enabled is not None and literal_bool(enabled) is not True:
                    cached = True
                    break
        ctx._accelerate_scaler_disabled = cached
    return cached
