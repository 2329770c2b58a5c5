"""The dtypes an expression may hold by the literal choices the code spells.

`known_dtype` answers "which dtype does this certainly have"; a dtype picked at
run time (`dtype=ptdtype`) is None there. Often the code still names every
dtype it can pick: `{'float32': torch.float32, 'bfloat16': torch.bfloat16,
'float16': torch.float16}[args.dtype]`, `torch.float16 if args.fp16 else
torch.float32`, `getattr(torch, 'float16' if half else 'bfloat16')`. Those
literal candidates are the precision paths the code offers: a rule whose
hazard needs fp16 may count a candidate fp16 the way it counts a run-time
`enabled=args.amp` (the fp16 path exists; when it is taken the hazard is
real), and say so in its message.

Only what the file spells counts: a parameter, an attribute, a config read or a
call of a function gives no candidate (an empty set), so a choice made
elsewhere is never guessed. Where the key of a table (or the name handed to
`getattr(torch, ...)`) is an argparse option of the file with literal choices
(`runtime_choices.py`), only the entries those choices select are candidates:
`choices=["bf16", "fp32"]` never reaches the table's fp16 entry, and
`choice_naming` says which choice selects a dtype (`--dtype is float16`) for a
message.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, FrozenSet, Optional

import libcst as cst

from . import torchapi
from .bindings import self_bindings
from .literals import call_arg, literal_string
from .names import dotted_name
from .runtime_choices import option_read

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext
    from .types import AutocastRegion, Scope

_NONE: FrozenSet[str] = frozenset()
_MAX_DEPTH = 6


def dtype_choices(
    ctx: "ModuleContext", node: Optional[cst.BaseExpression], scope: "Scope", before: Optional[int] = None, _depth: int = 0
) -> FrozenSet[str]:
    """The dtypes ('fp16' | 'bf16' | 'fp32') `node` may evaluate to, read in `scope` (at
    order `before`, when given): a dtype literal, either side of `a if c else b` / `a or b`,
    any value of a dict literal subscripted or `.get()`-ed, `getattr(torch, <choices>)`, a
    plain name's assignments in `scope` (else at module level) and a `self.x` attribute's
    assignments in its class (and bases of the file). Empty when the code spells no candidate."""
    if node is None or _depth > _MAX_DEPTH:
        return _NONE
    d = ctx.dtype_of(node)
    if d is not None:
        return frozenset((d,)) if d in ("fp16", "bf16", "fp32") else _NONE
    again = lambda n: dtype_choices(ctx, n, scope, before, _depth + 1)  # noqa: E731
    if isinstance(node, cst.IfExp):
        return again(node.body) | again(node.orelse)
    if isinstance(node, cst.BooleanOperation):
        return again(node.left) | again(node.right)
    if isinstance(node, cst.Subscript):
        return _dict_values(ctx, node.value, scope, before, _depth, _subscript_key(node))
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "get":
            return _dict_values(ctx, func.value, scope, before, _depth, node.args[0].value if node.args else None)
        if isinstance(func, cst.Name) and func.value == "getattr" and len(node.args) >= 2:
            owner = node.args[0].value
            if isinstance(owner, cst.Name) and ctx.imports.qualnames(owner) & {"torch"}:
                return _string_choices(ctx, node.args[1].value, scope, before, _depth)
        return _NONE
    if isinstance(node, cst.Name):
        out: FrozenSet[str] = _NONE
        for a in _bindings(ctx, node.value, scope, before):
            if _guard_choice(ctx, a) != "":
                out |= dtype_choices(ctx, a.value, a.scope, a.order, _depth + 1)
        for arg, at, order in _passed(ctx, scope, node.value):
            out |= dtype_choices(ctx, arg, at, order, _depth + 1)
        return out
    if isinstance(node, cst.Attribute):
        spelled = dotted_name(node)
        if spelled is not None and spelled.startswith("self.") and spelled.count(".") == 1:
            out = _NONE
            for a in self_bindings(ctx, spelled, scope):  # `self.amp_dtype = torch.float16 if ... else ...`
                if not a.unpacked:
                    out |= dtype_choices(ctx, a.value, a.scope, a.order, _depth + 1)
            return out
    return _NONE


def region_dtype_choices(ctx: "ModuleContext", region: "AutocastRegion") -> FrozenSet[str]:
    """The dtypes an autocast region whose dtype is decided at run time may take by the
    literal candidates of its `dtype=` argument (empty when it spells none, or the dtype is
    already known: `region.dtype` says it)."""
    if region.dtype is not None or region.framework:
        return _NONE
    cache = ctx.__dict__.setdefault("_region_dtype_choices", {})
    key = id(region)
    if key not in cache:
        cache[key] = _NONE
        info = ctx.call_info(region.call)
        if region.selector is not None and info is not None:
            cache[key] = frozenset(d for _, d in _selected_contexts(ctx, region, info))
        elif region.qualname is not None and info is not None:
            parameters = torchapi.autocast_parameters(region.qualname)
            position = parameters.index("dtype") if "dtype" in parameters else None
            cache[key] = dtype_choices(ctx, call_arg(region.call, position, "dtype"), info.scope, info.order)
    return cache[key]


def _selected_contexts(ctx: "ModuleContext", region: "AutocastRegion", info):
    """(the dict element, a dtype it autocasts to) for each autocast context of the dict a
    region's context is picked from (`{"fp16": autocast(dtype=torch.float16), ...}[args.x]`)
    that the lookup's key can select."""
    assert region.selector is not None
    key = _subscript_key(region.selector)
    at, order = info.scope, info.order
    for element, parsed in region.selected:
        if not _reachable(ctx, element, key) or parsed.enabled is False:
            continue
        if parsed.dtype is not None:
            yield element, parsed.dtype
        else:
            parameters = torchapi.autocast_parameters(parsed.qualname) if parsed.qualname else ()
            position = parameters.index("dtype") if "dtype" in parameters else None
            for d in dtype_choices(ctx, call_arg(element.value, position, "dtype"), at, order):
                yield element, d


def region_choice_naming(ctx: "ModuleContext", region: "AutocastRegion", dtype: str) -> Optional[str]:
    """`--dtype is float16` when the region's `dtype=` is a lookup keyed by an argparse option
    and that choice selects `dtype` (`choice_naming`); None otherwise."""
    if region.dtype is not None or region.framework:
        return None
    info = ctx.call_info(region.call)
    if info is None:
        return None
    if region.selector is not None:  # `{"fp16": autocast(dtype=torch.float16), ...}[args.precision]`
        option = option_read(ctx, _subscript_key(region.selector))
        if option is None:
            return None
        for element, d in _selected_contexts(ctx, region, info):
            text = literal_string(element.key)
            if d == dtype and text in option.choices:
                return f"{option.flag} is {text}"
        return None
    if region.qualname is None:
        return None
    parameters = torchapi.autocast_parameters(region.qualname)
    position = parameters.index("dtype") if "dtype" in parameters else None
    return choice_naming(ctx, call_arg(region.call, position, "dtype"), info.scope, dtype, info.order)


def _bindings(ctx: "ModuleContext", name: str, scope: "Scope", before: Optional[int]):
    """The assignments of `name` that the read in `scope` sees: its own ones (before `before`),
    else the module's; none for a parameter of `scope`."""
    if name in scope.params:
        return []
    found = [a for a in ctx.assignments_to(name) if not a.unpacked]
    own = [a for a in found if a.scope is scope and (before is None or a.order < before)]
    if own:
        return own
    if scope.is_module:
        return []
    return [a for a in found if a.scope.is_module]


def _subscript_key(node: cst.Subscript) -> Optional[cst.BaseExpression]:
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return node.slice[0].slice.value
    return None


def _dict_elements(ctx: "ModuleContext", node: cst.BaseExpression, scope: "Scope", before: Optional[int], depth: int = 0):
    """(element, the scope and order its value is read at) of the dict literal `node` spells or a name is bound to."""
    if isinstance(node, cst.Name) and depth <= _MAX_DEPTH:
        for a in _bindings(ctx, node.value, scope, before):
            if isinstance(a.value, cst.Dict):
                yield from _dict_elements(ctx, a.value, a.scope, a.order, depth + 1)
    elif isinstance(node, cst.Dict):
        for element in node.elements:
            if isinstance(element, cst.DictElement):
                yield element, scope, before


def _reachable(ctx: "ModuleContext", element: cst.DictElement, key: Optional[cst.BaseExpression]) -> bool:
    """Whether a lookup by `key` can select `element`: not when the key reads an option whose
    literal choices do not include the element's literal key."""
    option = option_read(ctx, key)
    text = literal_string(element.key)
    return option is None or text is None or text in option.choices


def _dict_values(
    ctx: "ModuleContext", node: cst.BaseExpression, scope: "Scope", before: Optional[int], depth: int,
    key: Optional[cst.BaseExpression] = None,
) -> FrozenSet[str]:
    """The dtype candidates among the values of a dict literal (spelled here, or bound to a name)
    that a lookup by `key` can select."""
    out: FrozenSet[str] = _NONE
    for element, at, order in _dict_elements(ctx, node, scope, before):
        if _reachable(ctx, element, key):
            out |= dtype_choices(ctx, element.value, at, order, depth + 1)
    return out


def choice_naming(
    ctx: "ModuleContext", node: Optional[cst.BaseExpression], scope: "Scope", dtype: str, before: Optional[int] = None,
    _depth: int = 0,
) -> Optional[str]:
    """`--dtype is float16` when `node` is a lookup keyed by an argparse option with literal
    choices (`DTYPES[args.dtype]`, `getattr(torch, args.dtype)`, or a name bound only to one)
    and a choice selects `dtype`; None otherwise."""
    if node is None or _depth > _MAX_DEPTH:
        return None
    key: Optional[cst.BaseExpression] = None
    table: Optional[cst.BaseExpression] = None
    if isinstance(node, cst.Subscript):
        key, table = _subscript_key(node), node.value
    elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "get" and node.args:
        key, table = node.args[0].value, node.func.value
    elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "getattr" and len(node.args) >= 2:
        option = option_read(ctx, node.args[1].value)
        owner = node.args[0].value
        if option is not None and isinstance(owner, cst.Name) and ctx.imports.qualnames(owner) & {"torch"}:
            picked = sorted(c for c in option.choices if torchapi.DTYPE_STRINGS.get(c) == dtype)
            return f"{option.flag} is {picked[0]}" if picked else None
        return None
    elif isinstance(node, cst.Name):
        bindings = _bindings(ctx, node.value, scope, before)
        if len(bindings) == 1:
            return choice_naming(ctx, bindings[0].value, bindings[0].scope, dtype, bindings[0].order, _depth + 1)
        for a in bindings:  # `if args.dtype in ["float16", "fp16"]: dtype = torch.float16`
            guard = _guard_choice(ctx, a)
            if guard and dtype in dtype_choices(ctx, a.value, a.scope, a.order, _depth + 1):
                return guard
        for arg, at, order in _passed(ctx, scope, node.value):
            named = choice_naming(ctx, arg, at, dtype, order, _depth + 1)
            if named is not None:
                return named
        return None
    option = option_read(ctx, key)
    if option is None or table is None:
        return None
    for element, at, order in _dict_elements(ctx, table, scope, before):
        text = literal_string(element.key)
        if text in option.choices and dtype in dtype_choices(ctx, element.value, at, order, _depth + 1):
            return f"{option.flag} is {text}"
    return None


def _string_choices(ctx: "ModuleContext", node: cst.BaseExpression, scope: "Scope", before: Optional[int], depth: int) -> FrozenSet[str]:
    """`getattr(torch, name)`: the dtypes the strings `name` may hold spell."""
    s = literal_string(node)
    if s is not None:
        d = torchapi.DTYPE_STRINGS.get(s)
        return frozenset((d,)) if d in ("fp16", "bf16", "fp32") else _NONE
    if depth > _MAX_DEPTH:
        return _NONE
    option = option_read(ctx, node)
    if option is not None:  # `getattr(torch, args.dtype)`, `--dtype` with literal choices
        return frozenset(d for d in (torchapi.DTYPE_STRINGS.get(c) for c in option.choices) if d in ("fp16", "bf16", "fp32"))
    if isinstance(node, cst.IfExp):
        return _string_choices(ctx, node.body, scope, before, depth + 1) | _string_choices(ctx, node.orelse, scope, before, depth + 1)
    if isinstance(node, cst.Name):
        out: FrozenSet[str] = _NONE
        for a in _bindings(ctx, node.value, scope, before):
            out |= _string_choices(ctx, a.value, a.scope, a.order, depth + 1)
        return out
    return _NONE


def _guard_choice(ctx: "ModuleContext", a) -> Optional[str]:
    """For an assignment in the body of an `if` (or `elif`) testing an argparse option against
    literals (`if args.dtype in ["float16", "fp16"]:`, `== "fp16"`): `--dtype is float16`, the
    first of them the option's literal choices hold; "" when the choices hold none (the branch
    never runs); None when no such test guards it."""
    frame = next((f for f in reversed(a.path) if f.kind in ("if", "else")), None)
    if frame is None or frame.kind != "if" or not isinstance(frame.test, cst.Comparison):
        return None
    test = frame.test
    if len(test.comparisons) != 1:
        return None
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    if isinstance(operator, cst.Equal):
        texts = [literal_string(right)]
    elif isinstance(operator, cst.In) and isinstance(right, (cst.List, cst.Tuple, cst.Set)):
        texts = [literal_string(e.value) for e in right.elements]
    else:
        return None
    option = option_read(ctx, test.left)
    if option is None or any(t is None for t in texts):
        return None
    picked = [t for t in texts if t in option.choices]
    return f"{option.flag} is {picked[0]}" if picked else ""


def _passed(ctx: "ModuleContext", scope: "Scope", name: str):
    """(argument, the scope and order it is read at) for each call in the file of the function
    `scope` whose parameter `name` is read unchanged there (no assignment of it in the body):
    what the call passes, or the parameter's literal default where a call passes nothing.
    Nothing for a module, a dunder or `*args` calls (their arguments cannot be placed)."""
    if scope.is_module or name not in scope.params or not isinstance(scope.node, cst.FunctionDef) or scope.name.startswith("__"):
        return
    if any(a.scope is scope for a in ctx.assignments_to(name)):
        return
    method = scope.cls is not None and scope.params[:1] == ("self",)
    position = scope.params.index(name) - (1 if method else 0)
    params = scope.node.params
    param = next((p for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == name), None)
    if param is None:
        return
    keyword_only = param in params.kwonly_params
    for call in ctx.callers(scope):
        if method and call.receiver_dotted != "self":
            continue
        if any(arg.star for arg in call.node.args):
            continue
        arg = call.arg(None if keyword_only else position, name)
        if arg is not None:
            yield arg, call.scope, call.order
        elif param.default is not None:
            yield param.default, scope, None
