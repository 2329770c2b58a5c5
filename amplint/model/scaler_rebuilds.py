"""A GradScaler built anew per iteration of a training loop (AMP107's finding; AMP402 leaves such a
scaler's checkpoint alone: its state restarts every epoch whether saved or not).

`rebuilt_per_iteration(ctx, call)`: the constructor runs inside a loop that uses the scaler (not
conditionally, not with an optimizer built in the same loop: a new run per iteration), or in a
function that uses it and is called in a loop of this file (or, called by nothing here, is named
for an epoch and loops), and does not build its own optimizer or run whole epochs itself.
"""
from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from .context import ModuleContext
from .types import CallInfo, Frame, Scope


def rebuilt_scalers(ctx: ModuleContext) -> set:
    """The keys of the file's scalers every constructor of which builds one per iteration."""
    out = set()
    for key, info in ctx.scalers.items():
        if info.constructors and all(rebuilt_per_iteration(ctx, c) is not None for c in info.constructors):
            out.add(key)
    return out


def _target(ctx: ModuleContext, call: CallInfo) -> Optional[str]:
    for key, info in ctx.scalers.items():
        if any(c is call for c in info.constructors):
            return key
    return None


def _builds_optimizer(ctx: ModuleContext, scope: Scope, loop: Optional[Frame]) -> bool:
    """An optimizer (or a framework `prepare`) constructed in `scope`, inside `loop` when given."""
    for info in ctx.optimizers.values():
        for c in info.constructors:
            if c.scope is scope and (loop is None or any(f is loop for f in c.path)):
                return True
    for c in scope.calls:
        if c.method in ("prepare", "initialize", "setup") and (loop is None or any(f is loop for f in c.path)):
            return True
    # `optimizer = smart_optimizer(model, ...)`, `self.optimizer = build_optimizer(cfg)`
    for a in ctx.assignments:
        if a.scope is scope and isinstance(a.value, cst.Call) and ctx.is_optimizer(a.target):
            if loop is None or any(f is loop for f in a.path):
                return True
    return False


def _runs_epochs(scope: Scope) -> bool:
    """A backward inside two nested loops: the function is a whole run (epochs of batches)."""
    return any(
        e.kind in ("scaled_backward", "backward") and sum(f.kind == "loop" for f in e.path) >= 2 for e in scope.events
    )


def _uses(ctx: ModuleContext, scope: Scope, key: Optional[str], loop: Optional[Frame]) -> Tuple[bool, bool]:
    """(the scaler is used in `scope` [inside `loop`], a scaled backward runs directly in `loop`)."""
    used = direct = False
    for e in scope.events:
        if loop is not None and not any(f is loop for f in e.path):
            continue
        if e.kind in ("scaled_backward", "scaler_step", "unscale", "update") and (key is None or e.scaler == key):
            used = True
            if e.kind == "scaled_backward" and loop is not None:
                inner = e.path[[i for i, f in enumerate(e.path) if f is loop][0] + 1 :]
                direct = direct or not any(f.kind == "loop" for f in inner)
    if key is not None and not used:
        for c in scope.calls:
            if loop is not None and not any(f is loop for f in c.path):
                continue
            if any(isinstance(a.value, (cst.Name, cst.Attribute)) and ctx.code_for(a.value) == key for a in c.node.args):
                used = True
    return used, direct


def rebuilt_per_iteration(ctx: ModuleContext, call: CallInfo) -> Optional[Tuple[str, bool]]:
    """Where the GradScaler `call` builds is built anew per iteration of a training loop (module
    docstring): ("inside the loop" | "in `fn`", per training step), or None."""
    scope = call.scope
    key = _target(ctx, call)
    loops = [f for f in call.path if f.kind == "loop"]
    if loops:
        loop = loops[-1]
        after = call.path[[i for i, f in enumerate(call.path) if f is loop][0] + 1 :]
        if any(f.kind in ("if", "else", "except", "try") for f in after):
            return None  # built conditionally (lazily, on error, ...)
        if _builds_optimizer(ctx, scope, loop):
            return None
        used, direct = _uses(ctx, scope, key, loop)
        if not used:
            return None
        return "inside the loop", direct
    if scope.is_module or any(f.kind in ("if", "else", "except") for f in call.path):
        return None
    if _builds_optimizer(ctx, scope, None) or _runs_epochs(scope):
        return None
    used, _ = _uses(ctx, scope, key, None)
    if not used:
        return None
    looped = [c for c in ctx.callers(scope) if any(f.kind == "loop" for f in c.path)]
    for caller in looped:
        loop = [f for f in caller.path if f.kind == "loop"][-1]
        if not _builds_optimizer(ctx, caller.scope, loop):
            per_step = not _has_loop(scope) and any(e.kind == "scaled_backward" for e in scope.events)
            return f"in `{scope.name}`", per_step
    if not ctx.callers(scope) and "epoch" in scope.name.lower() and _has_loop(scope):
        return f"in `{scope.name}`", False
    return None


def _has_loop(scope: Scope) -> bool:
    return any(any(f.kind == "loop" for f in e.path) for e in scope.events)
