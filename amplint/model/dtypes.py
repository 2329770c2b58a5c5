"""Dtype inference: which floating dtype an expression visibly has, low-precision
casts (`.half()`, `.to(torch.float16)`, `torch_dtype=`), and fp32 casts.

The tables here drive `ModuleContext.known_dtype`; everything assumes the
default dtype is float32 and never guesses otherwise."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional

import libcst as cst

from . import torchapi
from .literals import call_arg, call_chain, literal_string
from .names import dotted_name
from .types import Assignment, CallInfo, LowPrecisionCast, Scope

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext


_CAST_METHOD_DTYPES = {"half": "fp16", "bfloat16": "bf16", "float": "fp32", "double": "other", "long": "other", "int": "other", "bool": "other"}
_FLOAT_FACTORIES = frozenset(
    f"torch.{n}" for n in ("zeros", "ones", "empty", "rand", "randn", "eye", "linspace", "logspace")
)
_LIKE_FACTORIES = frozenset(
    f"torch.{n}" for n in ("zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like")
)
_DTYPE_KEEPING_FUNCTIONS = frozenset(
    f"torch.{n}" for n in (
        "triu", "tril", "transpose", "unsqueeze", "squeeze", "reshape", "flatten", "clone", "masked_fill",
        # a gather / index_select reads the input's values; a reduction keeps a float input's dtype
        # (`dtype=` wins: `torch.sum(x, 1, dtype=torch.float32)`)
        "gather", "index_select", "sum", "mean",
    )
)
_DTYPE_KEEPING_METHODS = frozenset(
    (
        "view", "view_as", "reshape", "unsqueeze", "squeeze", "transpose", "permute", "t", "contiguous", "clone",
        "detach", "expand", "expand_as", "repeat", "triu", "tril", "flatten", "masked_fill", "masked_fill_",
        "fill_", "cuda", "cpu", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "abs", "neg",
        # reductions keep a float tensor's dtype (an integer one's sum is int64: "other" either way)
        "sum", "mean", "amax", "amin",
        # gathers read the receiver's values; the legacy `x.new(size)` allocates in its dtype
        "gather", "index_select", "new",
    )
)
#: softmax and log_softmax: `dtype=` names the result's dtype (`F.log_softmax(x, -1, dtype=torch.float32)`,
#: also under autocast); without it the answer is unknown
_SOFTMAX_FUNCTIONS = frozenset(
    ("torch.softmax", "torch.log_softmax", "torch.nn.functional.softmax", "torch.nn.functional.log_softmax",
     "torch.special.softmax", "torch.special.log_softmax")
)
_SOFTMAX_METHODS = frozenset(("softmax", "log_softmax"))
#: legacy typed constructors (`torch.cuda.FloatTensor(B, N)`, `torch.HalfTensor(3)`): the class names the dtype
_TYPED_CONSTRUCTORS: Dict[str, str] = {
    f"{prefix}{name}Tensor": kind
    for prefix in ("torch.", "torch.cuda.")
    for name, kind in (
        ("Float", "fp32"), ("Half", "fp16"), ("BFloat16", "bf16"), ("Double", "other"), ("Long", "other"),
        ("Int", "other"), ("Short", "other"), ("Char", "other"), ("Byte", "other"), ("Bool", "other"),
    )
}
_TYPED_CONSTRUCTORS["torch.Tensor"] = "fp32"  # `torch.Tensor(n)` allocates the default dtype
#: factories whose result dtype follows their arguments (`arange(3)` is int64, `full(s, 1.)` fp32),
#: so only an explicit `dtype=` tells
_DTYPED_FACTORIES = frozenset(f"torch.{n}" for n in ("arange", "range", "full", "tensor", "as_tensor", "randint"))
#: functions joining a sequence of tensors into one: its dtype is their promoted dtype (and so is
#: autocast's: it runs them in the widest input type), `torch.cat([fp32_zeros, fp16_x])` is fp32
_PROMOTING_FUNCTIONS = frozenset(
    f"torch.{n}" for n in ("cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack")
)
_PARAMETERS = frozenset(("torch.nn.Parameter", "torch.nn.parameter.Parameter"))
#: functions returning tensors that all share their inputs' one dtype (`torch.meshgrid(y, x)`)
_ALIGNING_FUNCTIONS = frozenset(("torch.meshgrid", "torch.broadcast_tensors"))
#: splits: every piece keeps the input's dtype (`a, b = x.chunk(2)`)
_SPLITTING_FUNCTIONS = frozenset(f"torch.{n}" for n in ("chunk", "split", "unbind", "tensor_split"))
_SPLITTING_METHODS = frozenset(("chunk", "split", "unbind", "tensor_split"))
_OTHER_DTYPES = frozenset(
    (
        "float64", "double", "int64", "long", "int32", "int", "int16", "short", "int8", "uint8", "bool",
        "complex64", "complex128", "cfloat", "cdouble",
    )
)


def _is_device_expr(ctx: "ModuleContext", node: cst.BaseExpression) -> bool:
    """`"cuda"`, `device`, `self.device`, `x.device`, `torch.device(...)`: `.to(<this>)` keeps the dtype."""
    s = literal_string(node)
    if s is not None:
        return s.split(":")[0] in ("cuda", "cpu", "xpu", "mps", "meta", "hpu", "xla")
    if isinstance(node, cst.Call):
        return bool(ctx.qualnames(node.func) & {"torch.device"})
    name = dotted_name(node)
    return name is not None and name.rsplit(".", 1)[-1] in ("device", "dev", "rank", "local_rank")


#: the public name (`.to(<device>)` keeps the dtype; rules ask which argument of `.to(...)` is a device)
is_device_expr = _is_device_expr

_CAST_METHODS = {"half": "fp16", "bfloat16": "bf16"}


def _cast_dtype(ctx: ModuleContext, call: CallInfo) -> Optional[str]:
    """The low-precision dtype a `.half()` / `.to(...)` / `from_pretrained(...)` call produces."""
    if call.method in _CAST_METHODS and not call.node.args:
        return _CAST_METHODS[call.method]
    if call.method in ("to", "type"):
        for arg in call.node.args:
            if arg.keyword is None or arg.keyword.value == "dtype":
                d = ctx.dtype_of(arg.value)
                if d in ("fp16", "bf16"):
                    return d
                if call.method == "type" and dotted_name(arg.value) and dotted_name(arg.value).endswith("HalfTensor"):
                    return "fp16"
    if call.method == "from_pretrained" or (call.dotted or "").endswith("from_pretrained"):
        d = ctx.dtype_of(call.arg(None, "torch_dtype")) or ctx.dtype_of(call.arg(None, "dtype"))
        if d is None and call.arg(None, "torch_dtype") is None and call.arg(None, "dtype") is None:
            d = _unpacked_dtype(ctx, call)
        if d in ("fp16", "bf16"):
            return d
    return None


_DTYPE_KEYS = ("torch_dtype", "dtype")


def _unpacked_dtype(ctx: ModuleContext, call: CallInfo) -> Optional[str]:
    """The dtype a `**kwargs` of the call gives: a dict spelled in place, or a name bound to one
    in the call's function before it (`load_kwargs = {"config": c, "torch_dtype": torch.bfloat16}`,
    then `from_pretrained(path, **load_kwargs)`: TransformerEngine's te_mixtral tutorial) whose
    dtype key nothing stores or updates afterwards (`load_kwargs["device_map"] = "auto"` aside)."""
    from .bindings import assignment_before

    for arg in call.node.args:
        if arg.star != "**":
            continue
        value, name = arg.value, None
        if isinstance(value, cst.Name):
            name = value.value
            bound = assignment_before(ctx, name, call.scope, call.statement, call.order)
            if bound is None or bound.unpacked or any(
                a.scope is call.scope and a.target == name and a.order > bound.order and a.order < call.order
                for a in ctx.assignments
            ):
                return None
            value = bound.value
            if _dtype_key_changed(ctx, call.scope, name):
                return None
        if not isinstance(value, cst.Dict):
            return None
        for el in value.elements:
            if not isinstance(el, cst.DictElement):
                return None  # `{**base, ...}`: what it holds is not spelled here
            if literal_string(el.key) in _DTYPE_KEYS:
                return ctx.dtype_of(el.value)
    return None


def _dtype_key_changed(ctx: ModuleContext, scope: Scope, name: str) -> bool:
    """`name["torch_dtype"] = ...` (or any key not spelled), or `name.update(...)` /
    `setdefault` / `pop`, in `scope`."""
    for c in scope.calls:
        if c.receiver_dotted == name and c.method in ("update", "setdefault", "pop", "__setitem__"):
            return True
    for node in _walk(scope.node):
        targets = ()
        if isinstance(node, cst.Assign):
            targets = tuple(t.target for t in node.targets)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            targets = (node.target,)
        for t in targets:
            if isinstance(t, cst.Subscript) and isinstance(t.value, cst.Name) and t.value.value == name:
                keys = [literal_string(e.slice.value) if isinstance(e.slice, cst.Index) else None for e in t.slice]
                if any(k is None or k in _DTYPE_KEYS for k in keys):
                    return True
    return False


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def _find_low_precision_casts(ctx: ModuleContext) -> None:
    by_node: Dict[cst.Call, Assignment] = {}
    for a in ctx.assignments:
        if a.unpacked:
            continue
        for c in call_chain(a.value):
            by_node[c] = a
    for call in ctx.calls:
        dtype = _cast_dtype(ctx, call)
        if dtype is None:
            continue
        assignment = by_node.get(call.node)
        subject = assignment.target if assignment is not None else call.receiver_dotted
        ctx.low_precision_casts.append(LowPrecisionCast(call=call, dtype=dtype, subject=subject, assignment=assignment))


def fp32_cast(ctx: ModuleContext, node: cst.CSTNode) -> bool:
    """`x.float()`, `x.to(torch.float32)`, `x.to(device, torch.float)`, `x.type(torch.float32)`."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    method = node.func.attr.value
    if method == "float":
        return not node.args
    if method in ("to", "type"):
        for arg in node.args:
            if (arg.keyword is None or arg.keyword.value == "dtype") and not isinstance(arg.value, cst.SimpleString):
                if ctx.dtype_of(arg.value) == "fp32":
                    return True
    return False


def strip_views(ctx: ModuleContext, expr: cst.BaseExpression) -> cst.BaseExpression:
    """The tensor expression under dtype-preserving views: `h.transpose(1, 2)[0]` -> `h`."""
    while True:
        if (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in torchapi.DTYPE_PRESERVING_METHODS
            and not any(ctx.dtype_of(a.value) for a in expr.args)  # `x.view(torch.float16)` reinterprets
        ):
            expr = expr.func.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT", "H", "mH"):
            expr = expr.value
        else:
            return expr


def cast_inputs_dtype(ctx: "ModuleContext", name: str, scope: "Scope", before: int) -> Optional[str]:
    """The dtype a parameter `name` of `scope` arrives in when the function is decorated
    `custom_fwd(..., cast_inputs=torch.float32)` and does not rebind it before `before`: autocast
    casts floating inputs to that dtype (a custom op's forward that computes in fp32 by design).
    Only fp32/bf16 are answered: the rules read them to stay silent, never to report."""
    node = scope.node
    if not isinstance(node, cst.FunctionDef) or name not in scope.params:
        return None
    dtype = None
    for decorator in node.decorators:
        call = decorator.decorator
        if isinstance(call, cst.Call) and ctx.qualnames(call.func) & torchapi.CUSTOM_FWD_BWD:
            dtype = ctx.dtype_of(call_arg(call, None, "cast_inputs"))
    if dtype is None or dtype == "fp16":
        return None  # fp16 only under autocast (outside it the inputs are not cast): not claimed
    if any(a.scope is scope and a.order < before for a in ctx.assignments_to(name, scope)):
        return None
    return dtype


def module_state_dtype(ctx: "ModuleContext", node: cst.Attribute, scope: Scope) -> Optional[str]:
    """`torchapi.MODULE_FP32` when `node` is `self.X` in a method and everything its class (and its bases
    in this file) binds to `X` -- `self.X = ...`, `self.register_buffer("X", ...)`,
    `self.register_parameter("X", nn.Parameter(...))` -- is made in fp32 (a factory without
    `dtype=`, `torch.Tensor(n)`, an fp32 cast); else None. A binding outside the class is not
    seen (precision first: the answer only ever silences a rule, and only on its condition)."""
    from .bindings import enclosing_class_name, sees_self_of, self_bindings

    spelled = dotted_name(node)
    owner = enclosing_class_name(scope)
    if spelled is None or owner is None or not spelled.startswith("self.") or spelled.count(".") != 1:
        return None
    memo = ctx.__dict__.setdefault("_module_state_dtypes", {})
    key = (owner, spelled)
    if key in memo:
        return memo[key]
    memo[key] = None  # `self.x = self.x * 2`: decided by the other bindings, or unknown
    name = spelled[len("self."):]
    made = []  # (value, scope it is read in, order)
    for a in self_bindings(ctx, spelled, scope):
        if a.unpacked:
            return None
        made.append((a.value, a.scope, a.order))
    for call in ctx.method_calls("register_buffer", "register_parameter"):
        if call.receiver_dotted == "self" and literal_string(call_arg(call.node, 0, "name")) == name and sees_self_of(ctx, scope, call.scope):
            made.append((call_arg(call.node, 1, "tensor" if call.method == "register_buffer" else "param"), call.scope, call.order))
    dtypes = set()
    for value, at, order in made:
        if isinstance(value, cst.Call) and ctx.qualnames(value.func) & _PARAMETERS:
            value = call_arg(value, 0, "data")
        if isinstance(value, cst.Name) and value.value == "None":
            continue  # a placeholder: what replaces it is another binding
        dtypes.add(ctx.known_dtype(value, at, order))  # a fresh depth budget: the answer is kept for every asker
    found = torchapi.MODULE_FP32 if dtypes and dtypes <= {"fp32", torchapi.MODULE_FP32} else None
    memo[key] = found
    return found
