"""Autocast regions: parsing `torch.autocast(...)` and its aliases into an
`AutocastRegion`, the ops that run inside one, and how regions nest."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Tuple

import libcst as cst

from . import torchapi
from .bindings import module_class
from .literals import call_arg, literal_bool, literal_string
from .names import dotted_name
from .types import AutocastRegion, CallInfo, Path, Scope

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext


def _parse_autocast(
    ctx: ModuleContext, call: cst.Call, node: cst.CSTNode, parent: Optional[AutocastRegion], held: Optional[str] = None,
) -> Optional[AutocastRegion]:
    """An AutocastRegion if `call` constructs an autocast context, else None. `held`: the
    autocast a local name the call spells holds (`autocast = torch.cuda.amp.autocast if amp
    else suppress; with autocast():`)."""
    qualnames = ctx.imports.qualnames(call.func)
    # sorted: a name bound two ways (`try: from torch.amp import autocast` / `except
    # ImportError: from torch.cuda.amp import autocast`) must read the same in every
    # process, not as the set's hash order falls
    known = [held] if held is not None else sorted(q for q in qualnames if q in torchapi.AUTOCAST_CONTEXTS)
    if known:
        q = known[0]
        parameters = torchapi.autocast_parameters(q)

        def arg(name: str) -> Optional[cst.BaseExpression]:
            return call_arg(call, parameters.index(name), name) if name in parameters else None

        # `autocast(**ctx.autocast_kwargs)`, `autocast(*args)`: whether it is on may be passed (a
        # replayed state, `regions.replays_autocast`); the dtype is read as the device's default
        unpacked = any(a.star for a in call.args)
        device = torchapi.AUTOCAST_CONTEXTS[q] or literal_string(arg("device_type"))
        dtype_node, enabled_node = arg("dtype"), arg("enabled")
        if dtype_node is None:
            dtype = torchapi.DEVICE_DEFAULT_DTYPE.get(device) if device else None
        else:
            d = ctx.dtype_of(dtype_node)
            dtype = d if d in ("fp16", "bf16", "fp32") else None
        if enabled_node is None:
            enabled: Optional[bool] = None if unpacked else True
        else:
            enabled = literal_bool(enabled_node)
        return AutocastRegion(node=node, call=call, device=device, dtype=dtype, enabled=enabled, parent=parent, qualname=q)
    # accelerate / Lightning Fabric: `accelerator.autocast()`; dtype comes from their config
    func = call.func
    if (
        isinstance(func, cst.Attribute)
        and func.attr.value == "autocast"
        and not qualnames
        and dotted_name(func.value) is not None
        and not ctx.imports.is_imported(dotted_name(func.value).split(".")[0])
    ):
        return AutocastRegion(node=node, call=call, device=None, dtype=None, enabled=None, parent=parent, framework=True)
    return None


def held_autocast(ctx: ModuleContext, value: cst.BaseExpression) -> Optional[str]:
    """The autocast `value` names as a callable, not called (`torch.cuda.amp.autocast`), or that
    one side of `a if c else b` names (`torch.cuda.amp.autocast if amp else suppress`): what a
    name bound to it constructs when called."""
    sides = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
    for side in sides:
        if isinstance(side, (cst.Name, cst.Attribute)):
            known = sorted(q for q in ctx.imports.qualnames(side) if q in torchapi.AUTOCAST_CONTEXTS)
            if known:
                return known[0]
    return None


def replays_autocast(ctx: ModuleContext, region: AutocastRegion) -> bool:
    """The region re-enters the autocast state its Function's forward captured: its `enabled=` is
    decided at run time (`autocast(**ctx.autocast_kwargs)`, `enabled=ctx.autocast`) and it sits in
    the `backward` of a class (a checkpoint Function recomputing its forward). Autograd runs
    backward with autocast off; this restores what the forward ran under, so it is no autocast of
    its own: whatever the forward met, its callers entered (or did not)."""
    if region.enabled is not None:
        return False
    info = ctx.call_info(region.call)
    return info is not None and info.scope.name == "backward" and info.scope.cls is not None


# --------------------------------------------------------------------------- autocast ops, casts, regions


@dataclass(eq=False)
class AutocastOp:
    """A use of an op that autocast lists: a torch function, a Tensor method, a
    call of a module whose forward is that op (`self.fc(x)` with
    `self.fc = nn.Linear(...)`), or `a @ b`.

    op: the aten name (`linear`, `matmul`...). Whether it runs in the
    low-precision dtype depends on the device: `torchapi.runs_in_lower_precision`.
    inputs: the expressions whose tensors it consumes.
    """

    node: cst.CSTNode
    op: str
    inputs: Tuple[cst.BaseExpression, ...]
    scope: Scope
    path: Path
    region: Optional[AutocastRegion]
    order: int
    statement: cst.CSTNode


def autocast_ops(ctx: ModuleContext) -> List[AutocastOp]:
    """Every use of an autocast-listed op in the module, in source order (computed once)."""
    if ctx._autocast_ops is None:
        ops: List[AutocastOp] = []
        for call in ctx.calls:
            op = _call_op(ctx, call)
            if op is not None:
                ops.append(op)
        for mm in ctx.matmuls:
            ops.append(AutocastOp(mm.node, "matmul", (mm.node.left, mm.node.right), mm.scope, mm.path, mm.region, mm.order, mm.statement))
        ops.sort(key=lambda o: o.order)
        ctx._autocast_ops = ops
        ctx._autocast_op_by_node = {o.node: o for o in ops}
    return ctx._autocast_ops


def autocast_op_of(ctx: ModuleContext, node: cst.CSTNode) -> Optional[AutocastOp]:
    """The listed op `node` (a Call or `a @ b`) is, if any."""
    autocast_ops(ctx)
    return ctx._autocast_op_by_node.get(node)


def _call_op(ctx: ModuleContext, call: CallInfo) -> Optional[AutocastOp]:
    node = call.node
    if any(a.keyword is not None and a.keyword.value == "out" for a in node.args):
        return None  # `out=` calls are not autocast
    args = tuple(a.value for a in node.args if not a.star)

    def make(op: str, inputs: Tuple[cst.BaseExpression, ...]) -> AutocastOp:
        return AutocastOp(node, op, inputs, call.scope, call.path, call.region, call.order, call.statement)

    for q in sorted(call.qualnames):  # sorted: a name bound two ways picks the same op in every process
        op = torchapi.AUTOCAST_OP_FUNCTIONS.get(q)
        if op is not None:
            return make(op, args)
    if call.qualnames:
        return None
    if call.method in torchapi.AUTOCAST_OP_METHODS and call.receiver is not None:
        return make(torchapi.AUTOCAST_OP_METHODS[call.method], (call.receiver, *args))
    cls = module_class(ctx, node.func, call.scope)
    if cls is not None and cls in torchapi.AUTOCAST_OP_MODULES:
        positional = tuple(a.value for a in node.args if a.keyword is None and not a.star)
        return make(torchapi.AUTOCAST_OP_MODULES[cls], positional)
    return None


def active_region(region: Optional[AutocastRegion]) -> Optional[AutocastRegion]:
    """The region whose autocast is in force at code inside `region`: the
    innermost one that is not switched off by a nested `enabled=False` region
    of its device. None when autocast is (or may be) off there; a disabled
    region whose device is not known counts as switching everything off."""
    disabled = set()
    r = region
    while r is not None:
        if r.enabled is False:
            if r.device is None:
                return None
            disabled.add(r.device)
        elif r.device is None:
            return None if disabled else r
        elif r.device not in disabled:
            return r
        r = r.parent
    return None


def region_within(region: Optional[AutocastRegion], ancestor: AutocastRegion) -> bool:
    """Whether `region` is `ancestor` or nested (lexically) inside it."""
    r = region
    while r is not None:
        if r is ancestor:
            return True
        r = r.parent
    return False


def same_device(ctx: ModuleContext, a: AutocastRegion, b: AutocastRegion) -> bool:
    """Whether two regions are known to autocast the same device: both literal
    and equal, or both given by the same expression (`device_type=dev`)."""
    if a.framework or b.framework:
        return False
    if a.device is not None or b.device is not None:
        return a.device == b.device
    da, db = call_arg(a.call, 0, "device_type"), call_arg(b.call, 0, "device_type")
    return da is not None and db is not None and ctx.code_for(da) == ctx.code_for(db)


def enabled_argument(ctx: ModuleContext, region: AutocastRegion) -> Optional[cst.BaseExpression]:
    """The expression a region's call passes as `enabled=` (positionally or by keyword); None
    when it passes none, or the region is a framework's."""
    if region.framework or region.qualname is None:
        return None
    parameters = torchapi.autocast_parameters(region.qualname)
    return call_arg(region.call, parameters.index("enabled"), "enabled") if "enabled" in parameters else None


def off_under_guard(ctx: ModuleContext, region: AutocastRegion, path: Path) -> bool:
    """Whether code on the branch `path` runs only where the run-time `enabled=` of `region` is
    false: `with autocast(enabled=args.amp):` then, inside or around it, the `else` of
    `if args.amp:`, or the body of `if not args.amp:` / `if args.amp == False:` /
    `if args.amp is False:` (or of an `and` holding one; the `else` of an `or` holding the flag).
    The flag is matched by its code (`args.amp`, `self.use_amp`); a region whose `enabled=` is
    a literal is decided already (`region.enabled`)."""
    if region.enabled is not None:
        return False
    node = enabled_argument(ctx, region)
    if node is None or not isinstance(node, (cst.Name, cst.Attribute)):
        return False
    flag = ctx.code_for(node)
    for frame in path:
        if frame.kind not in ("if", "else") or frame.test is None:
            continue
        truth = _flag_truth(ctx, frame.test, flag)  # the flag's value where the test holds
        if frame.kind == "if" and truth is False:
            return True
        if frame.kind == "else" and _flag_truth(ctx, frame.test, flag, negated=True) is False:
            return True
    return False


def _flag_truth(ctx: ModuleContext, test: cst.CSTNode, flag: str, negated: bool = False) -> Optional[bool]:
    """The value `flag` must have where `test` holds (`negated`: where it fails); None: any."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _flag_truth(ctx, test.expression, flag, not negated)
    if isinstance(test, cst.BooleanOperation):
        conjunction = isinstance(test.operator, cst.And) != negated  # both sides hold
        if not conjunction:
            return None
        for side in (test.left, test.right):
            found = _flag_truth(ctx, side, flag, negated)
            if found is not None:
                return found
        return None
    if isinstance(test, (cst.Name, cst.Attribute)) and ctx.code_for(test) == flag:
        return not negated
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and ctx.code_for(test.left) == flag:
        target = test.comparisons[0]
        value = literal_bool(target.comparator)
        if value is None:
            return None
        if isinstance(target.operator, (cst.Is, cst.Equal)):
            return value != negated
        if isinstance(target.operator, (cst.IsNot, cst.NotEqual)):
            return (not value) != negated
    return None



# --------------------------------------------------------------------------- autocasts held in a partial


@dataclass(eq=False)
class HeldAutocast:
    """`with amp_autocast():` where `amp_autocast` (or `self.amp_autocast`) holds
    `partial(torch.autocast, ...)`: a region the collector does not make (the `with` calls a
    name). `device`/`dtype` as an `AutocastRegion`'s; `dtypes`: the literal candidates of a
    `dtype=` picked at run time (`torch.bfloat16 if args.amp_dtype == "bfloat16" else
    torch.float16`: `literal_dtypes.dtype_choices`); `enabled` None when the name may also
    hold something else (`amp_autocast = suppress` on another path) or `enabled=` is a flag."""

    node: cst.With
    held: cst.Call  # the `partial(...)` call
    device: Optional[str]
    dtype: Optional[str]
    dtypes: frozenset
    enabled: Optional[bool]
    scope: Scope

    def contains(self, ctx: ModuleContext, node: cst.CSTNode) -> bool:
        start, end = ctx.position(self.node.body)
        s, e = ctx.position(node)
        return (start.row, start.column) <= (s.row, s.column) and (e.row, e.column) <= (end.row, end.column)


def held_autocasts(ctx: ModuleContext) -> List[HeldAutocast]:
    """The `with NAME():` blocks of the file whose NAME holds an autocast in a
    `functools.partial` bound in this file (in the calling scope, else at module level; for
    `self.NAME`, in the class or its bases here), in source order. Computed once per file."""
    found = ctx.__dict__.get("_held_autocasts")
    if found is not None:
        return found
    out: List[HeldAutocast] = []
    for info in ctx.calls:
        statement = info.statement
        if not isinstance(statement, cst.With) or info.region is not None and info.region.node is statement:
            continue
        if info.node.args or not info.dotted or not any(item.item is info.node for item in statement.items):
            continue
        held = _held_partial(ctx, info)
        if held is not None:
            out.append(held)
    ctx.__dict__["_held_autocasts"] = out
    return out


def _held_partial(ctx: ModuleContext, info: CallInfo) -> Optional[HeldAutocast]:
    from .bindings import self_bindings
    from .literal_dtypes import dtype_choices

    spelled = info.dotted
    assert spelled is not None and isinstance(info.statement, cst.With)
    if spelled.startswith("self.") and spelled.count(".") == 1:
        bindings = [a for a in self_bindings(ctx, spelled, info.scope) if not a.unpacked]
    elif "." not in spelled:
        if spelled in info.scope.params:
            return None
        found = [a for a in ctx.assignments_to(spelled) if not a.unpacked]
        bindings = [a for a in found if a.scope is info.scope and a.order < info.order] or (
            [a for a in found if a.scope.is_module] if not info.scope.is_module else []
        )
    else:
        return None
    partials: List[Tuple[cst.Call, str, Scope, int]] = []
    other = False
    for a in bindings:
        sides = [a.value.body, a.value.orelse] if isinstance(a.value, cst.IfExp) else [a.value]
        for side in sides:
            q = _partial_autocast(ctx, side)
            if q is None:
                other = True
            else:
                partials.append((side, q, a.scope, a.order))  # type: ignore[arg-type]
    if not partials:
        return None
    devices, dtypes, choices, enabled = set(), set(), frozenset(), set()
    for call, q, scope, order in partials:
        parameters = torchapi.autocast_parameters(q)

        def arg(name: str) -> Optional[cst.BaseExpression]:
            # the partial's own positional arguments start after the autocast it holds
            return call_arg(call, parameters.index(name) + 1, name) if name in parameters else None

        device = torchapi.AUTOCAST_CONTEXTS[q] or literal_string(arg("device_type"))
        devices.add(device)
        node = arg("dtype")
        if node is None:
            dtypes.add(torchapi.DEVICE_DEFAULT_DTYPE.get(device) if device else None)
        else:
            d = ctx.dtype_of(node)
            dtypes.add(d if d in ("fp16", "bf16", "fp32") else None)
            if d is None:
                choices |= dtype_choices(ctx, node, scope, order)
        node = arg("enabled")
        enabled.add(True if node is None else literal_bool(node))
    device = devices.pop() if len(devices) == 1 else None
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    on: Optional[bool] = enabled.pop() if len(enabled) == 1 else None
    if other and on is not False:
        on = None  # `partial(...) if amp else suppress`: decided at run time
    return HeldAutocast(info.statement, partials[0][0], device, dtype, choices if dtype is None else frozenset(), on, info.scope)


def _partial_autocast(ctx: ModuleContext, value: cst.BaseExpression) -> Optional[str]:
    """The autocast qualname `value` holds when it is `functools.partial(<autocast>, ...)`."""
    if not isinstance(value, cst.Call) or "functools.partial" not in ctx.imports.qualnames(value.func) or not value.args:
        return None
    first = value.args[0]
    if first.keyword is not None or first.star:
        return None
    known = sorted(q for q in ctx.imports.qualnames(first.value) if q in torchapi.AUTOCAST_CONTEXTS)
    return known[0] if known else None
