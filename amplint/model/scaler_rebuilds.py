"""A GradScaler built anew per iteration of a training loop (AMP107's finding; AMP402 leaves such a
scaler's checkpoint alone: its state restarts every epoch whether saved or not).

`rebuilt_per_iteration(ctx, call)`: the constructor runs inside a loop that uses the scaler (not
conditionally, not with an optimizer built in the same loop: a new run per iteration), or in a
function that uses it and is called in a loop of this file (or, called by nothing here, is named
for an epoch and loops), and does not build its own optimizer or run whole epochs itself.
The one condition allowed around the constructor is the AMP switch (`_amp_switch`): `if amp:` /
`if args.amp:` (or `if cfg.amp and cfg.dtype == "float16":`), a flag that also gates the scaler's
use or an autocast in the same function, which is `GradScaler(enabled=amp)` spelled as a branch; a
test of the scaler itself (`if scaler is None:`), a counter's comparison (`if epoch == 0:`) or a
flag the loop rebinds is a build once or a new run, not this.
"""
from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from .context import ModuleContext
from .names import dotted_name
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
        if any(f.kind in ("if", "else", "except", "try") for f in after) and not _amp_switch(ctx, call, after, key, loop):
            return None  # built conditionally (lazily, on error, ...)
        if _builds_optimizer(ctx, scope, loop):
            return None
        used, direct = _uses(ctx, scope, key, loop)
        if not used:
            return None
        return "inside the loop", direct
    if scope.is_module:
        return None
    if any(f.kind in ("if", "else", "except") for f in call.path) and not _amp_switch(ctx, call, call.path, key, None):
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


#: the scaler's own uses, which the AMP switch gates together with its constructor
_USES = ("scaled_backward", "scaler_step", "unscale", "update")


def _amp_switch(ctx: ModuleContext, call: CallInfo, frames: Tuple[Frame, ...], key: Optional[str], loop: Optional[Frame]) -> bool:
    """Whether the only condition among `frames` around the constructor is the AMP switch: the body
    of `if FLAG:` (a name or attribute, or an `and` of such and calls), whose text also tests the
    scaler's use or an autocast in the same function (or an autocast's `enabled=FLAG`). Not a test
    naming the scaler (`if scaler is None:`, `if self.scaler is None:`: built once), not a
    comparison or a negation (`if epoch == 0:`, `if not resumed:`), nor a flag `loop` rebinds."""
    conditions = [f for f in frames if f.kind in ("if", "else", "except", "try")]
    if len(conditions) != 1 or conditions[0].kind != "if" or conditions[0].test is None:
        return False
    test = conditions[0].test
    names = _flag_names(test)
    if not names or (key is not None and (key in names or key.rsplit(".", 1)[-1] in {n.rsplit(".", 1)[-1] for n in names})):
        return False
    if loop is not None and isinstance(loop.node, cst.For) and _names_in(loop.node.target) & {n.split(".", 1)[0] for n in names}:
        return False  # `for amp in (False, True):` a run per value
    text = _spelled(ctx, test)

    def gated(path: Tuple[Frame, ...]) -> bool:
        return any(f.kind == "if" and f.test is not None and _spelled(ctx, f.test) == text for f in path)

    scope = call.scope
    if any(e.kind in _USES and (key is None or e.scaler == key) and gated(e.path) for e in scope.events):
        return True
    autocasts = {id(r.call): r for r in ctx.regions}
    for c in scope.calls:
        if id(c.node) not in autocasts:
            continue
        enabled = c.arg(None, "enabled")
        if gated(c.path) or (enabled is not None and _spelled(ctx, enabled) == text):
            return True
    return False


def _spelled(ctx: ModuleContext, node: cst.CSTNode) -> str:
    """A test's text without its layout: the same condition wrapped at another indentation (a
    parenthesized `and` split over lines) is the same switch."""
    return "".join(ctx.code_for(node).split())


def _flag_names(test: cst.BaseExpression) -> set:
    """The dotted names a flag test reads (`amp`, `args.amp`; an `and` of flags and calls; a
    configuration attribute compared with a string, `cfg.dtype == "float16"`, which no loop
    counts), or an empty set for any other test (`epoch == 0`, `not resumed`)."""
    if isinstance(test, (cst.Name, cst.Attribute)):
        name = dotted_name(test)
        return {name} if name else set()
    if (
        isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.Equal)
        and isinstance(test.left, cst.Attribute) and isinstance(test.comparisons[0].comparator, cst.SimpleString)
    ):
        name = dotted_name(test.left)
        return {name} if name else set()
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        left, right = _flag_names(test.left), _flag_names(test.right)
        if isinstance(test.left, cst.Call) and right:
            return right
        if isinstance(test.right, cst.Call) and left:
            return left
        return left | right if left and right else set()
    return set()


def _names_in(node: cst.CSTNode) -> set:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, (cst.Tuple, cst.List)):
        return set().union(*(_names_in(e.value) for e in node.elements)) if node.elements else set()
    return set()


def _has_loop(scope: Scope) -> bool:
    return any(any(f.kind == "loop" for f in e.path) for e in scope.events)
