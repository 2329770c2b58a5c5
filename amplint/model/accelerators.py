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
(`--mixed_precision is fp16`) for the rules' messages. `config_scaling_accelerator` answers
a weaker question, for warnings only: an Accelerator that states no precision at all (so
accelerate's config or launcher decides) whose `autocast()` the file enters.

Computed on first use per file (most parsed files never ask).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional

import libcst as cst

from .literals import evaluated, literal_bool
from .names import dotted_name
from .receivers import certain_constructor, visible_bindings
from .runtime_choices import option_read
from .types import CallInfo, Scope

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
    return certain_constructor(ctx, receiver, scope, "_scaling_accelerators", lambda call: _scales(ctx, call))


def scaling_choice(ctx: "ModuleContext", receiver: Optional[str], scope: Scope) -> Optional[str]:
    """`--mixed_precision is fp16` when the scaling accelerator `receiver` holds scales only on
    that choice of an argparse option (None when it always scales, or does not)."""
    ctor = scaling_accelerator(ctx, receiver, scope)
    if ctor is None:
        return None
    option = option_read(ctx, ctor.arg(_MIXED_PRECISION_POSITION, "mixed_precision"))
    return f"{option.flag} is fp16" if option is not None else None


def config_scaling_accelerator(ctx: "ModuleContext", receiver: Optional[str], scope: Scope) -> Optional[CallInfo]:
    """The `Accelerator(...)` that `receiver` certainly holds when it states no mixed precision
    (omitted, `None`, or a parameter of the constructing function that defaults to None and is
    not rebound there) while the file enters `receiver.autocast()`: accelerate then takes the
    precision from its config or launcher (`ACCELERATE_MIXED_PRECISION`), and the code expects
    a mixed one. It scales on the runs configured fp16: unknown to the file, so rules report at
    most a warning. Never with a plugin, `cpu=`, `*args` / `**kwargs` or a
    `GradScalerKwargs(enabled=...)` handler, as for `scaling_accelerator`."""
    if not receiver or not any(c.method == "autocast" and c.receiver_dotted == receiver for c in ctx.calls):
        return None
    if scaling_accelerator(ctx, receiver, scope) is not None:
        return None
    return certain_constructor(ctx, receiver, scope, "_config_accelerators", lambda call: _from_config(ctx, call))


def _from_config(ctx: "ModuleContext", call: CallInfo) -> bool:
    if not call.calls_any(ACCELERATORS) or _scaler_disabled_somewhere(ctx):
        return False
    if any(a.star for a in call.node.args):
        return False
    mixed = call.arg(_MIXED_PRECISION_POSITION, "mixed_precision")
    if mixed is not None and not (isinstance(mixed, cst.Name) and (mixed.value == "None" or _none_default_param(ctx, call, mixed.value))):
        return False
    if call.arg(_CPU_POSITION, "cpu") is not None:
        return False
    return all(call.arg(None, plugin) is None for plugin in _PLUGINS)


def _none_default_param(ctx: "ModuleContext", call: CallInfo, name: str) -> bool:
    """`name` is a parameter of the function `call` is in, defaulting to None, never rebound there."""
    node = call.scope.node
    if not isinstance(node, cst.FunctionDef):
        return False
    for p in (*node.params.params, *node.params.kwonly_params):
        if p.name.value == name:
            default = p.default
            if not (isinstance(default, cst.Name) and default.value == "None"):
                return False
            return not any(a.scope is call.scope for a in ctx.assignments_to(name))
    return False


def _scales(ctx: "ModuleContext", call: CallInfo) -> bool:
    """`Accelerator(...)` whose arguments make its `backward` scale the loss with a GradScaler
    (always, or on an argparse choice "fp16"), in a file with no handler that may turn the
    scaler off."""
    if not call.calls_any(ACCELERATORS) or _scaler_disabled_somewhere(ctx):
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
    value = evaluated(node)
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


#: what `accelerator_precision` answers: a literal setting, or "runtime" (not fixed in the file)
MIXED_LITERALS = {"fp16": "fp16", "bf16": "bf16", "no": "no"}


def accelerator_precision(ctx: "ModuleContext", receiver: Optional[str], scope: Scope) -> Optional[frozenset]:
    """The mixed-precision settings the accelerate `Accelerator` that `receiver` (as spelled in
    `scope`: `accelerator`, `self.accelerator`) may run with, or None when it is not certainly
    an Accelerator (a name bound to anything else, or not bound in what the file shows).

    Each binding is an `Accelerator(...)` call or a parameter annotated `Accelerator` (also
    `Accelerator | None`, `Optional[Accelerator]`). A call answers its literal
    `mixed_precision` ("fp16", "bf16", "no"; `cpu=True` is "no"); omitted, accelerate reads
    `ACCELERATE_MIXED_PRECISION`, which `accelerate launch` and `accelerate config` set, so it
    and any other value (an option, a config, `**kwargs`) is "runtime", as a parameter is."""
    if not receiver:
        return None
    cache: Dict[tuple, Optional[frozenset]] = ctx.__dict__.setdefault("_accelerator_precisions", {})
    key = (receiver, id(scope))
    if key not in cache:
        cache[key] = _precisions(ctx, receiver, scope, 0)
    return cache[key]


def _precisions(ctx: "ModuleContext", name: str, scope: Scope, depth: int) -> Optional[frozenset]:
    root = name.split(".", 1)[0]
    if root != "self" and "." not in name and root in scope.params:
        return frozenset(("runtime",)) if _annotated_accelerator(ctx, scope, root) else None
    bindings = visible_bindings(ctx, name, scope)
    if not bindings or depth > 3:
        return None
    found: set = set()
    for a in bindings:
        if a.unpacked:
            return None
        if isinstance(a.value, cst.Call):
            info = ctx.call_info(a.value)
            if info is None or not info.calls_any(ACCELERATORS):
                return None
            found.add(_call_precision(info))
            continue
        source = dotted_name(a.value)
        if not source:
            return None
        sub = _precisions(ctx, source, a.scope, depth + 1)
        if sub is None:
            return None
        found |= sub
    return frozenset(found)


def _call_precision(call: CallInfo) -> str:
    cpu = call.arg(_CPU_POSITION, "cpu")
    if cpu is not None and literal_bool(cpu) is True:
        return "no"
    mixed = call.arg(_MIXED_PRECISION_POSITION, "mixed_precision")
    if isinstance(mixed, cst.SimpleString) and isinstance(evaluated(mixed), str):
        return MIXED_LITERALS.get(evaluated(mixed).lower(), "runtime")
    return "runtime"


def _annotated_accelerator(ctx: "ModuleContext", scope: Scope, param: str) -> bool:
    """`param` of `scope`'s function is annotated with accelerate's Accelerator (alone, or
    in a union with None / `Optional[...]`)."""
    node = scope.node
    if not isinstance(node, cst.FunctionDef):
        return False
    for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params):
        if p.name.value == param and p.annotation is not None:
            return _names_accelerator(ctx, p.annotation.annotation)
    return False


def _names_accelerator(ctx: "ModuleContext", node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        sides = [node.left, node.right]
        others = [s for s in sides if not (isinstance(s, cst.Name) and s.value == "None")]
        return len(others) == 1 and _names_accelerator(ctx, others[0])
    if isinstance(node, cst.Subscript) and dotted_name(node.value) in ("Optional", "typing.Optional") and len(node.slice) == 1:
        inner = node.slice[0].slice
        return isinstance(inner, cst.Index) and _names_accelerator(ctx, inner.value)
    if isinstance(node, cst.SimpleString) and isinstance(evaluated(node), str):
        return evaluated(node).strip() in ("Accelerator", "accelerate.Accelerator")  # a forward reference
    return not ctx.imports.qualnames(node).isdisjoint(ACCELERATORS)


#: Accelerator(device_placement, split_batches, mixed_precision, gradient_accumulation_steps, ...)
_ACCUMULATION_POSITION = 3


def accumulating_accelerator(ctx: "ModuleContext", receiver: Optional[str], scope: Scope) -> Optional[CallInfo]:
    """The `Accelerator(gradient_accumulation_steps=N)` constructor, N a constant above 1 (a
    literal or a module constant), that `receiver` (as spelled in `scope`) certainly holds, else
    None. With it `with receiver.accumulate(model):` syncs only every N-th micro-batch, and
    the prepared optimizer's `step` (which runs `scaler.update()`) skips the others. Never with
    a plugin (DeepSpeed / FSDP / Megatron-LM clip and scale on their own), `cpu=`, `*args` /
    `**kwargs`, a `gradient_accumulation_plugin` or a `GradScalerKwargs(enabled=...)` handler.
    `accelerator_precision` answers whether it scales."""
    return certain_constructor(ctx, receiver, scope, "_accumulating_accelerators", lambda call: _accumulates(ctx, call))


def _accumulates(ctx: "ModuleContext", call: CallInfo) -> bool:
    from .literals import folded_number, module_numbers

    if not call.calls_any(ACCELERATORS) or _scaler_disabled_somewhere(ctx):
        return False
    if any(a.star for a in call.node.args) or call.arg(_CPU_POSITION, "cpu") is not None:
        return False
    if any(call.arg(None, plugin) is not None for plugin in (*_PLUGINS, "gradient_accumulation_plugin")):
        return False
    steps = folded_number(call.arg(_ACCUMULATION_POSITION, "gradient_accumulation_steps"), module_numbers(ctx).get)
    return steps is not None and steps > 1
