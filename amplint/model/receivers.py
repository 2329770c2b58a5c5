"""The constructor call a receiver certainly holds (`accelerator`, `self.fabric`): every
binding of the name visible where it is read is such a call, directly or through another name
that is one. `accelerators.py` (accelerate's `Accelerator`) and `fabrics.py` (Lightning's
`Fabric`) ask it with their own test of the call; a parameter, an unpacked binding or any
other value makes the answer None."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Optional

import libcst as cst

from .bindings import self_bindings
from .names import dotted_name
from .types import Assignment, CallInfo, Scope

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext

_MAX_DEPTH = 3


def certain_constructor(
    ctx: "ModuleContext", receiver: Optional[str], scope: Scope, memo: str, makes: Callable[[CallInfo], bool]
) -> Optional[CallInfo]:
    """The first constructor call (`makes`) that `receiver` (as spelled in `scope`) certainly
    holds, else None; answers are kept on `ctx` under `memo`."""
    if not receiver:
        return None
    root = receiver.split(".", 1)[0]
    if root != "self" and root in scope.params:
        return None  # a parameter: whatever the caller passes
    cache: Dict[tuple, Optional[CallInfo]] = ctx.__dict__.setdefault(memo, {})
    key = (receiver, id(scope))
    if key not in cache:
        cache[key] = _resolve(ctx, receiver, scope, makes, 0)
    return cache[key]


def _resolve(ctx: "ModuleContext", name: str, scope: Scope, makes: Callable[[CallInfo], bool], depth: int) -> Optional[CallInfo]:
    """Every binding of `name` visible from `scope` is a constructor `makes` accepts (directly
    or through a name that is one): the first of them, else None."""
    bindings = visible_bindings(ctx, name, scope)
    if not bindings or depth > _MAX_DEPTH:
        return None
    found: Optional[CallInfo] = None
    for a in bindings:
        ctor: Optional[CallInfo] = None
        if a.unpacked:
            return None
        if isinstance(a.value, cst.Call):
            info = ctx.call_info(a.value)
            if info is not None and makes(info):
                ctor = info
        else:
            source = dotted_name(a.value)
            if source and source.split(".", 1)[0] not in a.scope.params:
                ctor = _resolve(ctx, source, a.scope, makes, depth + 1)
        if ctor is None:
            return None
        found = found or ctor
    return found


def visible_bindings(ctx: "ModuleContext", name: str, scope: Scope) -> List[Assignment]:
    """The assignments that can bind `name` where `scope` reads it: for `self.x` those of
    its class and its bases here (`self_bindings`); for a plain name those of `scope` itself
    when it assigns it, else the module's."""
    if name.startswith("self."):
        return self_bindings(ctx, name, scope)
    found = ctx.assignments_to(name)
    own = [a for a in found if a.scope is scope]
    return own if own else [a for a in found if a.scope.is_module]
