"""Training-step events: each scope's ordered scaled_backward, backward,
unscale, clip, scaler_step, optimizer_step, update, zero_grad, save and call
steps, which order rules reason about."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional

import libcst as cst

from . import torchapi
from .names import dotted_name
from .types import CallInfo, Event, Scope

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext


def _scaled_names(scope: Scope, ctx: ModuleContext) -> Dict[str, str]:
    """`scaled = scaler.scale(loss)` in this scope: name -> scaler key."""
    out = {}
    for a in ctx.assignments:
        if a.scope is scope and isinstance(a.value, cst.Call) and isinstance(a.value.func, cst.Attribute):
            if a.value.func.attr.value == "scale":
                key = dotted_name(a.value.func.value)
                if key in ctx.scalers:
                    out[a.target] = key
    return out


def _events(ctx: ModuleContext, scope: Scope) -> List[Event]:
    events: List[Event] = []
    scaled = None
    local_functions = ctx.__dict__.get("_local_function_names")
    if local_functions is None:  # once per module, not once per scope (quadratic on files with thousands of functions)
        local_functions = ctx._local_function_names = {s.name for s in ctx.scopes if not s.is_module}
    for call in scope.calls:
        m = call.method
        recv = call.receiver_dotted
        if m == "backward":
            inner = call.receiver
            if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value == "scale":
                key = dotted_name(inner.func.value)
                if key in ctx.scalers:
                    events.append(Event("scaled_backward", call, scaler=key))
                    continue
            if scaled is None:
                scaled = _scaled_names(scope, ctx)
            if recv in scaled:
                events.append(Event("scaled_backward", call, scaler=scaled[recv]))
            elif call.node.args and call.node.args[0].keyword is None and recv and not ctx.imports.is_imported(recv.split(".")[0]):
                events.append(Event("framework_backward", call))
            else:
                events.append(Event("backward", call))
        elif m in ("manual_backward",):
            events.append(Event("framework_backward", call))
        elif call.calls_any(("torch.autograd.backward",)):
            events.append(Event("backward", call))
        elif call.calls_any(torchapi.CLIP_FUNCTIONS):
            events.append(Event("clip", call))
        elif m == "unscale_" and recv in ctx.scalers:
            events.append(Event("unscale", call, scaler=recv, optimizer=_arg_key(call)))
        elif m == "step" and recv in ctx.scalers:
            events.append(Event("scaler_step", call, scaler=recv, optimizer=_arg_key(call)))
        elif m == "update" and recv in ctx.scalers:
            events.append(Event("update", call, scaler=recv))
        elif m == "step" and ctx.is_optimizer(recv):
            events.append(Event("optimizer_step", call, optimizer=recv))
        elif m == "zero_grad":
            events.append(Event("zero_grad", call, optimizer=recv))
        elif call.calls_any(("torch.save",)):
            events.append(Event("save", call))
        elif recv == "self" and m:
            events.append(Event("call", call, target=m))
        elif call.dotted in local_functions:
            events.append(Event("call", call, target=call.dotted))
    return events


def _arg_key(call: CallInfo) -> Optional[str]:
    arg = call.arg(0, "optimizer")
    return dotted_name(arg) if arg is not None else None
