"""Low-precision casts of a module that an optimizer then updates (AMP201 fp16, AMP206 bf16).

A whole-model cast (`.half()`, `.bfloat16()`, `.to(torch.float16)`, `from_pretrained(...,
torch_dtype=torch.bfloat16)`, or a dtype picked at run time among literals the file spells)
matters to an optimizer only when the optimizer is built on that module's own parameters and
steps them with no fp32 master copy. `trained_casts(ctx, dtype, ...)` finds those pairs in one
file, with every silence the two rules share:

* inference or rounding shapes (`model.half().eval()`, `.bfloat16().float()`, a
  `requires_grad_(False)` chained on the cast), a cast back to fp32 later in the scope;
* files that freeze parameters (`p.requires_grad = False`, `requires_grad_(False)`: trainable
  adapters or a new head may be fp32);
* the name rebound to something else on every path from the cast to the optimizer
  (`model = get_peft_model(model, cfg)` on both sides of an if/else);
* optimizers given fp32 copies (`p.detach().clone().float()`), asked to keep master weights
  themselves (`FusedAdam(..., master_weights=True)`), or handed to something that keeps fp32
  master weights (the `wrapper` pattern: apex `FP16_Optimizer`/`amp.initialize`...);
* a module (or a part of it) sharded by Megatron-FSDP's `fully_shard` before the optimizer,
  with a policy that keeps fp32 main parameters (its default);
* a cast after the optimizer was built with no `step()` of that optimizer after it.

The rule says which optimizer classes it knows the update of (`optimizer`), which run-time
choices are its (`choice`), and what else keeps the master weights for it (`wrapper`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Iterator, List, Optional, Pattern, Set, Tuple

import libcst as cst

from . import torchapi
from .bindings import assignment_before
from .dtypes import fp32_cast
from .literal_dtypes import dtype_choices
from .literals import call_arg, call_chain, literal_bool
from .names import dotted_name
from .paths import exclusive
from .types import CallInfo, LowPrecisionCast, Scope
from .walk import descendants

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext

MASTER_WRAPPER = torchapi.MASTER_WRAPPER
_INIT_SCOPES = ("__init__", "<module>", "setup", "build", "build_model")


@dataclass(frozen=True)
class TrainedCast:
    """A cast of a module whose parameters `ctor` (an optimizer constructor) then updates."""

    cast: LowPrecisionCast
    ctor: CallInfo
    chosen: bool  # the dtype is picked at run time among literals, `dtype` one of them
    built: bool = False  # the cast is a builder's (`make_net()`), the optimizer built on its result elsewhere
    optimizer_class: Optional[str] = None  # the class `ctor` builds (a candidate, for a class picked at run time)


def trained_casts(
    ctx: "ModuleContext",
    dtype: str,
    optimizer: Callable[[str], bool] = torchapi.is_optimizer_class,
    choice: Optional[Callable[[FrozenSet[str]], bool]] = None,
    wrapper: Pattern[str] = MASTER_WRAPPER,
) -> Iterator[TrainedCast]:
    """Each cast of a module to `dtype` ("fp16" | "bf16") that an optimizer the file builds
    (`optimizer(qualname)` True) then updates with no fp32 master copy, with the first such
    optimizer. `choice(candidates)`: whether a run-time dtype with these literal candidates
    counts (default: `dtype` among them); `wrapper`: callees that keep fp32 master weights for
    an optimizer handed to them."""
    classes = optimizer_constructors(ctx, optimizer)
    ctors = list(classes)
    if not ctors:
        return
    frozen = frozen_modules(ctx)
    chosen = choice_casts(ctx, choice or (lambda found: dtype in found), dtype)
    casts = [c for c in ctx.low_precision_casts if c.dtype == dtype] + chosen
    peers: Optional[Tuple[Scope, ...]] = None
    for cast in casts:
        if not_a_training_conversion(ctx, cast):
            continue
        subjects = cast_subjects(ctx, cast)
        parts_only = False
        if _frozen_around(frozen, subjects):
            # a frozen base, or part of it: its trainable parts (adapters, a new head) may be fp32;
            # but an optimizer built before an in-place cast of the whole module holds parameters
            # the cast then converts, whatever part of it was frozen
            parts_only = _frozen_parts_only(frozen, subjects) and not _part_reverted(ctx, subjects, cast.call)
            if not parts_only:
                continue
        found = None
        for ctor in ctors:
            if parts_only and not (ctor.order < cast.call.order and cast.call.method in _IN_PLACE):
                continue
            key = _assigned_key(ctx, ctor)
            if _updates(ctx, cast, subjects, ctor, key, wrapper):
                found = ctor
                break
        if found is not None:
            if not _fp32_asserted_after(ctx, subjects, cast.call):
                yield TrainedCast(cast, found, cast in chosen, optimizer_class=classes[found])
            continue
        if parts_only:
            continue
        if peers is None:
            peers = _peer_builders(ctx, [c for c in casts if c not in chosen], frozen)
        found = _built_and_updated(ctx, cast, subjects, ctors, wrapper, peers)
        if found is not None:
            yield TrainedCast(cast, found, cast in chosen, built=True, optimizer_class=classes[found])


#: casts that convert the module itself (`Module.half()`, `.to(...)` return `self`)
_IN_PLACE = ("half", "bfloat16", "to", "type")


def optimizer_constructors(ctx: "ModuleContext", optimizer: Callable[[str], bool]) -> Dict[CallInfo, str]:
    """The file's optimizer constructions of a class `optimizer` takes, with that class: the
    callee's own (`torch.optim.AdamW(...)`), or for a class picked at run time through a local
    name every binding of which is an optimizer class (`optimizer_class = bnb.optim.AdamW8bit`
    behind `--use_8bit_adam`, `torch.optim.AdamW` otherwise: diffusers' scripts), the first
    candidate `optimizer` takes (a `torch.optim` one first): the code offers that path."""
    from .scalers import optimizer_classes

    out: Dict[CallInfo, str] = {}
    for c in ctx.calls:
        q = c.qualname
        if q:
            if optimizer(q):
                out[c] = q
            continue
        if c.qualnames or not isinstance(c.node.func, cst.Name) or not c.node.args:
            continue
        picked = sorted((not k.startswith("torch.optim."), k) for k in optimizer_classes(ctx, c) if optimizer(k))
        if picked:
            out[c] = picked[0][1]  # a torch class first: the one the verifier knows
    return out


def _updates(
    ctx: "ModuleContext", cast: LowPrecisionCast, subjects: Set[str], ctor: CallInfo, key: Optional[str], wrapper: Pattern[str]
) -> bool:
    if not subjects or exclusive(cast.call.path, ctor.path):
        return False
    if not _in_reach(cast.call.scope, ctor.scope, subjects):
        return False
    params = ctor.arg(0, "params")
    if params is None or not _references_parameters(ctx, params, subjects, ctor):
        return False
    if cast.call.order < ctor.order:
        if _rebound_between(ctx, subjects, cast, ctor) or _adapter_added_between(ctx, subjects, cast.call, ctor):
            return False
    elif not (key and _stepped_after(ctx, key, cast.call)):
        return False
    if _reverted_later(ctx, subjects, cast.call, key, cast):
        return False
    if (key and master_wrapped(ctx, key, wrapper)) or _built_in_wrapper(ctx, ctor, wrapper):
        return False
    if keeps_master_weights(ctor) or master_sharded(ctx, subjects, ctor):
        return False
    return True


#: sharders whose mixed-precision policy keeps fp32 main parameters unless told otherwise:
#: Megatron-FSDP's `fully_shard` / `fully_shard_model` (`MixedPrecisionPolicy.main_params_dtype`
#: defaults to `torch.float32`; the optimizer steps those main weights, and the module's
#: low-precision weights are synced from them). torch's own FSDP2 `fully_shard` keeps the
#: parameters' dtype: not one of them.
_MASTER_SHARDERS = ("fully_shard", "fully_shard_model")


def _master_sharder(call: CallInfo) -> bool:
    return any(
        q.rsplit(".", 1)[-1] in _MASTER_SHARDERS and "megatron_fsdp" in q.split(".")[:-1] for q in call.qualnames
    )


def master_sharded(ctx: "ModuleContext", subjects: Set[str], ctor: CallInfo) -> bool:
    """The cast module, or a part of it (`model.fc1`, each `layer` of `for layer in
    model.layers`), is sharded before the optimizer is built by a sharder whose policy keeps fp32
    main parameters (`_MASTER_SHARDERS`): no policy given, or one whose `main_params_dtype` may
    be fp32 or is decided where the file does not show it. A policy with `main_params_dtype`
    bf16/fp16 (the module's own dtype) or None (the module's weights are the main weights)
    keeps the finding."""
    for call in ctx.calls:
        if call.order >= ctor.order or not _master_sharder(call):
            continue
        if call.scope is not ctor.scope or exclusive(call.path, ctor.path):
            continue
        module = call.arg(0, "module")
        if module is None or not _sharded_part(ctx, module, call, subjects):
            continue
        if _policy_keeps_fp32_main(ctx, call):
            return True
    return False


def _sharded_part(ctx: "ModuleContext", module: cst.BaseExpression, call: CallInfo, subjects: Set[str]) -> bool:
    """`module` is a subject or a part of one, or the target of an enclosing `for` over one's parts."""
    spelled = dotted_name(module)
    if _matches(spelled, subjects):
        return True
    if not isinstance(module, cst.Name):
        return False
    current = ctx.parent(call.node)
    while current is not None and not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(current, cst.For) and isinstance(current.target, cst.Name) and current.target.value == module.value:
            it = current.iter
            while isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute):
                it = it.func.value  # `model.layers.children()`, `model.modules()`
            return _matches(dotted_name(it), subjects)
        current = ctx.parent(current)
    return False


def _policy_keeps_fp32_main(ctx: "ModuleContext", call: CallInfo) -> bool:
    if any(a.star for a in call.node.args):
        return True  # `**kwargs`: a policy the call does not show
    policy = call.arg(None, "mixed_precision_policy")
    if policy is None:
        policies = [a.value for a in call.node.args if a.keyword is None and _policy_call(ctx, a.value, call) is not None]
        policy = policies[0] if policies else None
    if policy is None or (isinstance(policy, cst.Name) and policy.value == "None"):
        return True  # the default policy: fp32 main parameters
    built = _policy_call(ctx, policy, call)
    if built is None:
        return True  # a policy from elsewhere: precision first
    main = call_arg(built, None, "main_params_dtype")
    if main is None:
        return True
    if isinstance(main, cst.Name) and main.value == "None":
        return False  # the module's own weights are the main weights
    found = dtype_choices(ctx, main, call.scope, call.order)
    return not found or "fp32" in found


def _policy_call(ctx: "ModuleContext", value: cst.BaseExpression, call: CallInfo) -> Optional[cst.Call]:
    """The `MixedPrecisionPolicy(...)` call `value` is, directly or through a name bound before `call`."""
    if isinstance(value, cst.Name):
        a = assignment_before(ctx, value.value, call.scope, call.statement, call.order)
        if a is None or a.unpacked:
            return None
        value = a.value
    if isinstance(value, cst.Call) and (dotted_name(value.func) or "").rsplit(".", 1)[-1] == "MixedPrecisionPolicy":
        return value
    return None


def keeps_master_weights(ctor: CallInfo) -> bool:
    """The optimizer is asked to keep master weights itself: `master_weights=` given and not a
    literal False, None or 0 (TransformerEngine's `FusedAdam(..., master_weights=True)` keeps
    fp32 copies of fp16/bf16 parameters and steps those; a list of fp32 copies, a flag decided
    at run time: precision first)."""
    value = ctor.arg(None, "master_weights")
    if value is None:
        return False
    if isinstance(value, cst.Name) and value.value in ("False", "None"):
        return False
    return not (isinstance(value, cst.Integer) and value.value == "0")


#: methods after which a module is still the one cast (its own parameters, their dtype kept)
_KEEPING = frozenset(("cuda", "cpu", "to", "train", "half", "bfloat16", "type"))


def _builder(ctx: "ModuleContext", cast: LowPrecisionCast, subjects: Set[str]) -> Optional[Scope]:
    """The scope that builds the cast module for its callers: a module-level function every
    `return` of which hands back a cast subject (`def make_net(): net = net.half(); ...; return
    net`) or the cast itself (`return net.cuda().half()`), or the `__init__` of a class that
    casts `self` (its instances are the cast module)."""
    scope = cast.call.scope
    if scope.is_module or scope.parent is None:
        return None
    if scope.cls is not None:
        return scope if scope.name == "__init__" and "self" in subjects and scope.parent.is_module else None
    if not scope.parent.is_module or scope.generator or not scope.returns:
        return None
    for value, _ in scope.returns:
        if value is None:
            return None
        chain = list(call_chain(value))
        has_cast = any(c is cast.call.node for c in chain)
        if not has_cast and _chain_root(ctx, value) not in subjects:
            return None
        for c in chain:
            if c is cast.call.node:
                break  # what comes inside the cast is cast with it
            method = c.func.attr.value if isinstance(c.func, cst.Attribute) else None
            if method not in _KEEPING or fp32_cast(ctx, c):
                return None  # `return net.float()`, `return net.eval()`: not the module as cast
    return scope


def _built_by(ctx: "ModuleContext", value: cst.BaseExpression, builder: Scope) -> bool:
    """`value` is the builder's result (`make_net(hyp)`, `CifarNet().cuda()`), methods chained
    after it, maybe inside a wrapper that keeps its parameters (`torch.compile(CifarNet())`)."""
    for _ in range(4):
        if isinstance(value, cst.Call) and value.args and value.args[0].keyword is None and ctx.qualnames(value.func) & torchapi.PARAMETER_KEEPING_WRAPPERS:
            value = value.args[0].value
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and not (ctx.qualnames(value.func) & torchapi.PARAMETER_KEEPING_WRAPPERS):
            value = value.func.value
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
        return False
    if builder.cls is not None:
        return value.func.value == builder.cls.name.value and not ctx.imports.is_imported(value.func.value)
    info = ctx.call_info(value)
    return info is not None and ctx.callee(info) is builder


def _holding(ctx: "ModuleContext", name: str, scope: Scope, order: int, builder: Scope) -> Optional[int]:
    """The order of the binding that makes the local `name` hold the builder's result at
    `order` in `scope` (looking through `torch.compile(name)`-style wrappers that keep its
    parameters), None if its last binding is anything else."""
    bindings = [a for a in ctx.assignments_to(name) if a.scope is scope and a.order < order and not a.unpacked]
    for a in sorted(bindings, key=lambda a: a.order, reverse=True):
        if _kept_by_wrapper(ctx, a.value) == name or _chain_root(ctx, a.value) == name:
            continue  # `model = torch.compile(model)`, `model = model.cuda()`: the same parameters
        return a.order if _built_by(ctx, a.value, builder) else None
    return None


#: how many functions a parameter may be handed through on its way from the builder's result to
#: the optimizer (`run(): wrap(model)`, `wrap(model): build_adamw(model)`)
_FORWARDS = 3


def _peer_builders(ctx: "ModuleContext", casts: List[LowPrecisionCast], frozen) -> Tuple[Scope, ...]:
    """The builders of the file's casts to the same dtype (spelled, not chosen at run time) whose
    module is trained as cast: not an inference conversion, not frozen, not cast back later."""
    out: List[Scope] = []
    for cast in casts:
        if not_a_training_conversion(ctx, cast):
            continue
        subjects = cast_subjects(ctx, cast)
        if _frozen_around(frozen, subjects) or _reverted_later(ctx, subjects, cast.call):
            continue
        builder = _builder(ctx, cast, subjects)
        if builder is not None and builder not in out:
            out.append(builder)
    return tuple(out)


def _built_and_updated(
    ctx: "ModuleContext", cast: LowPrecisionCast, subjects: Set[str], ctors: List[CallInfo], wrapper: Pattern[str],
    peers: Tuple[Scope, ...] = (),
) -> Optional[CallInfo]:
    """The first optimizer, in another scope than a builder's cast, built on the parameters of
    what the builder returned: a local bound to its result (`model = make_net()`), or a
    parameter of the optimizer's function that every call of it in the file passes such a local
    (`main(run, model)` with `model = torch.compile(make_net())`), this builder's at one call at
    least and at the others a peer's (`peers`: another builder of a module cast to the same
    dtype, TransformerEngine's te_mixtral tutorial's HF baseline next to its TE model)."""
    builder = _builder(ctx, cast, subjects)
    if builder is None or _reverted_later(ctx, subjects, cast.call):
        return None
    builders = (builder, *[p for p in peers if p is not builder])
    for ctor in ctors:
        if ctor.scope is builder:
            continue
        held = {}
        for a in ctx.assignments:
            if a.scope is ctor.scope and not a.unpacked and "." not in a.target and a.order < ctor.order:
                start = _holding(ctx, a.target, ctor.scope, ctor.order, builder)
                if start is not None:
                    held[a.target] = start
        held.update({p: -1 for p in _parameters_passed_built(ctx, ctor.scope, builders)})
        params = ctor.arg(0, "params")
        for name, start in held.items():
            if params is None or not _references_parameters(ctx, params, {name}, ctor):
                continue
            if _reverted_after(ctx, {name}, ctor.scope, start):
                continue
            key = _assigned_key(ctx, ctor)
            if (key and master_wrapped(ctx, key, wrapper)) or keeps_master_weights(ctor) or master_sharded(ctx, {name}, ctor):
                continue
            if _returned_to_wrapper(ctx, ctor, key, wrapper):
                continue
            return ctor
    return None


def _returned_to_wrapper(ctx: "ModuleContext", ctor: CallInfo, key: Optional[str], wrapper: Pattern[str]) -> bool:
    """The optimizer is what its module-level function returns (`return AdamW(params)`, or the
    name bound to it), and a call of that function in the file binds the result to a name
    handed to a master-weight wrapper (`optimizer = build_adamw(model)`, then
    `accelerator.prepare(optimizer)`: TransformerEngine's te_mixtral tutorial)."""
    scope = ctor.scope
    if scope.is_module or scope.parent is None or not scope.parent.is_module or scope.cls is not None:
        return False
    if not any(v is ctor.node or (key and isinstance(v, cst.Name) and v.value == key) for v, _ in scope.returns):
        return False
    for call in ctx.calls:
        if call.method is not None or not isinstance(call.node.func, cst.Name) or call.node.func.value != scope.name:
            continue
        if ctx.callee(call) is not scope:
            continue
        bound = _assigned_key(ctx, call)
        if bound and master_wrapped(ctx, bound, wrapper):
            return True
    return False


def _parameters_passed_built(ctx: "ModuleContext", scope: Scope, builders: Tuple[Scope, ...], depth: int = 0) -> Set[str]:
    """The parameters of a module-level function that every call of it in the file (one at
    least) passes a local holding a builder's result (`builders[0]`'s at one call at least, a
    peer's at the others), positionally or by keyword, or a parameter of the calling function,
    never rebound before the call, that every call of that function passes such a local in turn
    (TransformerEngine's te_mixtral tutorial: `wrap_with_accelerator(model)` hands its `model`
    to `build_adamw(model)`)."""
    found = _passed(ctx, scope, builders, depth)
    return {p for p, own in found.items() if own}


def _passed(ctx: "ModuleContext", scope: Scope, builders: Tuple[Scope, ...], depth: int) -> Dict[str, bool]:
    """Each parameter of `scope` every call passes a builder's result, with whether one call at
    least passes `builders[0]`'s."""
    if scope.cls is not None or scope.is_module or scope.parent is None or not scope.parent.is_module:
        return {}
    out: Optional[Dict[str, bool]] = None
    forwarded: Dict[int, Dict[str, bool]] = {}
    for call in ctx.calls:
        if call.method is not None or not isinstance(call.node.func, cst.Name) or call.node.func.value != scope.name:
            continue
        if ctx.callee(call) is not scope:
            continue
        passed: Dict[str, bool] = {}
        for i, arg in enumerate(a for a in call.node.args if not a.star):
            if not isinstance(arg.value, cst.Name):
                continue
            param = arg.keyword.value if arg.keyword is not None else (scope.params[i] if i < len(scope.params) else None)
            if not param:
                continue
            name = arg.value.value
            holders = [b for b in builders if _holding(ctx, name, call.scope, call.order, b) is not None]
            if holders:
                passed[param] = holders[0] is builders[0]
            elif depth < _FORWARDS and call.scope is not scope and name in call.scope.params and not any(
                a.scope is call.scope and a.target == name and a.order < call.order for a in ctx.assignments
            ):
                if id(call.scope) not in forwarded:
                    forwarded[id(call.scope)] = _passed(ctx, call.scope, builders, depth + 1)
                if name in forwarded[id(call.scope)]:
                    passed[param] = forwarded[id(call.scope)][name]
        if out is None:
            out = passed
        else:
            out = {p: own or passed[p] for p, own in out.items() if p in passed}
    return out or {}


def _reverted_after(ctx: "ModuleContext", names: Set[str], scope: Scope, start: int) -> bool:
    """`model.float()` in `scope` after the binding at `start`."""
    return any(
        call.scope is scope and call.order > start and fp32_cast(ctx, call.node) and _chain_root(ctx, call.node) in names
        for call in ctx.calls
    )


def choice_casts(ctx: "ModuleContext", choice: Callable[[FrozenSet[str]], bool], dtype: str) -> List[LowPrecisionCast]:
    """Casts whose dtype is picked at run time among literals the file spells, taken by
    `choice` (`dtype` among them, for instance): `model.to(weight_dtype)` with `weight_dtype =
    torch.float16 if args.fp16 else torch.float32`, `from_pretrained(..., torch_dtype=dtype)`
    likewise (`dtype_choices`)."""
    out: List[LowPrecisionCast] = []
    by_node = None
    for call in ctx.calls:
        if call.method in ("to", "type"):
            args = [a.value for a in call.node.args if a.keyword is None or a.keyword.value == "dtype"]
        elif call.method == "from_pretrained" or (call.dotted or "").endswith("from_pretrained"):
            args = [a.value for a in call.node.args if a.keyword is not None and a.keyword.value in ("torch_dtype", "dtype")]
        else:
            continue
        if not args or any(ctx.dtype_of(a) is not None for a in args):
            continue  # no dtype argument, or a literal one (`low_precision_casts` has those)
        if not any(choice(dtype_choices(ctx, a, call.scope, call.order)) for a in args):
            continue
        if by_node is None:
            by_node = {c: a for a in ctx.assignments if not a.unpacked for c in call_chain(a.value)}
        assignment = by_node.get(call.node)
        subject = assignment.target if assignment is not None else call.receiver_dotted
        out.append(LowPrecisionCast(call=call, dtype=dtype, subject=subject, assignment=assignment))
    return out


def describe_cast(ctx: "ModuleContext", cast: LowPrecisionCast, chosen: bool = False) -> str:
    """How a message names the cast: `` `model.cuda().half()` ``, `` `from_pretrained(...,
    torch_dtype=bfloat16)` ``, `` `from_pretrained(..., torch_dtype=dtype)` `` for a run-time choice."""
    node = cast.call.node
    if cast.call.method == "from_pretrained" or (cast.call.dotted or "").endswith("from_pretrained"):
        if chosen:
            keyword = "torch_dtype" if cast.call.arg(None, "torch_dtype") is not None else "dtype"
            dtype = cast.call.arg(None, keyword)
            spelled = ctx.code_for(dtype) if dtype is not None else "..."
            if len(spelled) > 30 or "\n" in spelled:  # a flag's if/else: the message stays one short sentence
                spelled = "..."
            return f"`from_pretrained(..., {keyword}={spelled})`"
        return f"`from_pretrained(..., torch_dtype={'bfloat16' if cast.dtype == 'bf16' else 'float16'})`"
    text = ctx.code_for(node)
    if len(text) > 40 or "\n" in text:
        text = f"{cast.subject or ''}.{cast.call.method}(...)"
    return f"`{text}`"


def _chain_root(ctx: "ModuleContext", node: cst.CSTNode) -> Optional[str]:
    """`model` for `model.cuda().half()`; None for `Net().half()` or `copy.deepcopy(m).half()`."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        node = node.func.value
    name = dotted_name(node)
    if name is None or ctx.imports.is_imported(name.split(".")[0]):
        return None
    return name


def cast_subjects(ctx: "ModuleContext", cast: LowPrecisionCast) -> Set[str]:
    """The names that hold the cast module afterwards: the assigned name, and the chain's root
    for the in-place `Module.half()`/`to()`."""
    out = set()
    if cast.subject and not ctx.imports.is_imported(cast.subject.split(".")[0]):
        out.add(cast.subject)
    if cast.call.method in ("half", "bfloat16", "to", "type"):  # Module.half()/bfloat16()/to() convert in place
        root = _chain_root(ctx, cast.call.node)
        if root:
            out.add(root)
            whole = _looped_module(ctx, cast.call.node, root)
            if whole:
                out.add(whole)
    return out


def _looped_module(ctx: "ModuleContext", node: cst.CSTNode, name: str) -> Optional[str]:
    """`net` when `name` is the target of an enclosing `for name in net.modules():` (or
    `.children()`): casting each submodule in place casts `net` (those an `isinstance` test
    skips keep theirs, as `BatchNorm` put back to float does in a `.half()` model)."""
    current = ctx.parent(node)
    while current is not None and not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(current, cst.For) and isinstance(current.target, cst.Name) and current.target.value == name:
            it = current.iter
            if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value in ("modules", "children") and not it.args:
                owner = dotted_name(it.func.value)
                if owner and not ctx.imports.is_imported(owner.split(".")[0]):
                    return owner
            return None
        current = ctx.parent(current)
    return None


def _outer_methods(ctx: "ModuleContext", node: cst.Call) -> List[Tuple[str, cst.Call]]:
    """Methods chained after `node`: `.eval()` in `model.half().eval()`."""
    out = []
    current: cst.CSTNode = node
    while True:
        parent = ctx.parent(current)
        if not isinstance(parent, cst.Attribute) or parent.value is not current:
            return out
        call = ctx.parent(parent)
        if not isinstance(call, cst.Call) or call.func is not parent:
            return out
        out.append((parent.attr.value, call))
        current = call


def not_a_training_conversion(ctx: "ModuleContext", cast: LowPrecisionCast) -> bool:
    """Inference or rounding shapes: `.half().eval()`, `.eval().half()`, `.half().float()`."""
    after = _outer_methods(ctx, cast.call.node)
    for method, call in after:
        if method == "eval" or method == "double" or fp32_cast(ctx, call):
            return True
        if method == "requires_grad_" and literal_bool(call.args[0].value if call.args else None) is False:
            return True
    before = list(call_chain(cast.call.node))[1:]
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "eval" for c in before)


def _assigned_key(ctx: "ModuleContext", ctor: CallInfo) -> Optional[str]:
    for a in ctx.assignments:
        if not a.unpacked and a.value is ctor.node:
            return a.target
    return None


def _in_reach(cast_scope: Scope, ctor_scope: Scope, subjects: Set[str]) -> bool:
    """The optimizer's scope sees the object the cast converted, and the cast runs first
    (same scope, or a constructor-like scope of the same class, or module level)."""
    if cast_scope is ctor_scope:
        return True
    if cast_scope.name not in _INIT_SCOPES:
        return False
    if cast_scope.cls is not None and cast_scope.cls is ctor_scope.cls and any(s.startswith("self.") for s in subjects):
        return True
    if cast_scope.is_module:
        return not any(s.split(".")[0] in ctor_scope.params for s in subjects)
    return False


def _matches(receiver: Optional[str], subjects: Set[str]) -> bool:
    return receiver is not None and any(receiver == s or receiver.startswith(s + ".") for s in subjects)


def _refs(ctx: "ModuleContext", node: cst.CSTNode, subjects: Set[str]) -> Tuple[bool, bool]:
    """(a subject's `.parameters()` is called, an fp32 cast is made) anywhere in `node`."""
    parameters = fp32 = False
    for n in descendants(node):
        if not isinstance(n, cst.Call):
            continue
        if isinstance(n.func, cst.Attribute) and n.func.attr.value in ("parameters", "named_parameters"):
            if _matches(dotted_name(n.func.value), subjects):
                parameters = True
        if fp32_cast(ctx, n):
            fp32 = True
    return parameters, fp32


def _references_parameters(ctx: "ModuleContext", params: cst.BaseExpression, subjects: Set[str], ctor: CallInfo) -> bool:
    """`params` holds the subjects' own parameters (not fp32 copies of them), directly or through one name."""
    parameters, fp32 = _refs(ctx, params, subjects)
    if fp32:
        return False
    if parameters:
        return True
    if isinstance(params, cst.Call) and _helper_returns_parameters(ctx, params, subjects, ctor):
        return True
    if isinstance(params, cst.Name):
        a = assignment_before(ctx, params.value, ctor.scope, ctor.statement, ctor.order)
        if a is not None and not a.unpacked:
            parameters, fp32 = _refs(ctx, a.value, subjects)
            if fp32:
                return False
            return parameters or _groups_reference(ctx, a.value, subjects, ctor)
    if isinstance(params, (cst.List, cst.Tuple)):
        return _groups_reference(ctx, params, subjects, ctor)
    return False


def references_parameters(ctx: "ModuleContext", params: cst.BaseExpression, subjects: Set[str], ctor: CallInfo) -> bool:
    """`params` (an optimizer constructor's first argument) holds the subjects' own parameters,
    not fp32 copies of them: in the expression, through a project helper returning them, or
    through the one name bound to them before the constructor."""
    return _references_parameters(ctx, params, subjects, ctor)


def _groups_reference(ctx: "ModuleContext", value: cst.BaseExpression, subjects: Set[str], ctor: CallInfo) -> bool:
    """Param groups whose `params` are names bound to the subjects' own parameters
    (`norm_biases = [p for k, p in model.named_parameters() if "norm" in k]`, then
    `SGD([dict(params=norm_biases, lr=lr_b), dict(params=other_params)])`): one level of names,
    none of them bound to fp32 copies."""
    if not isinstance(value, (cst.List, cst.Tuple)):
        return False
    names = []
    for element in value.elements:
        group = element.value
        if isinstance(group, cst.Dict):
            names += [e.value for e in group.elements if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) and e.key.value.strip("'\"") == "params"]
        elif isinstance(group, cst.Call) and dotted_name(group.func) == "dict":
            names += [a.value for a in group.args if a.keyword is not None and a.keyword.value == "params"]
    found = False
    for name in names:
        if not isinstance(name, cst.Name):
            continue
        a = assignment_before(ctx, name.value, ctor.scope, ctor.statement, ctor.order)
        if a is None or a.unpacked:
            continue
        parameters, fp32 = _refs(ctx, a.value, subjects)
        if fp32:
            return False
        found = found or parameters
    return found


def _helper_returns_parameters(ctx: "ModuleContext", params: cst.Call, subjects: Set[str], ctor: CallInfo) -> bool:
    """`Adam(get_trainable_params(model))`: a function of this file, passed a subject, returns
    its parameter's own parameters (`[p for p in model.parameters() if p.requires_grad]`),
    not fp32 copies of them."""
    info = ctx.call_info(params)
    callee = ctx.callee(info) if info is not None else None
    if callee is None or not isinstance(callee.node, cst.FunctionDef):
        return False
    names = list(callee.params)
    if callee.cls is not None and names and info is not None and info.receiver_dotted == "self":
        names = names[1:]  # `self.trainable(model)`: the first parameter is the instance
    passed = set()
    for i, arg in enumerate(a for a in params.args if not a.star):
        if not _matches(dotted_name(arg.value), subjects):
            continue
        if arg.keyword is not None:
            passed.add(arg.keyword.value)
        elif i < len(names):
            passed.add(names[i])
    if not passed:
        return False
    returns = [n for n in descendants(callee.node.body) if isinstance(n, cst.Return) and n.value is not None]
    for ret in returns:
        parameters, fp32 = _refs(ctx, ret.value, passed)
        if parameters and not fp32:
            return True
    return False


def _rebound_between(ctx: "ModuleContext", subjects: Set[str], cast: LowPrecisionCast, ctor: CallInfo) -> bool:
    """A subject is assigned something other than itself (`model = get_peft_model(model)`)
    between the cast and the optimizer, on every way from one to the other: a rebind only
    behind a flag (`if args.use_peft: model = get_peft_model(model, cfg)`) leaves the other
    path, where the cast model itself reaches the optimizer, as the code offers it; an
    if/else (or if/elif/else) rebinding it on each side covers every path."""
    rebinds = []
    for s in subjects:
        for a in ctx.assignments_to(s):
            if a is cast.assignment or not (cast.call.order < a.order < ctor.order):
                continue
            if a.scope is not ctor.scope and a.scope is not cast.call.scope:
                continue
            if _chain_root(ctx, a.value) != s and _kept_by_wrapper(ctx, a.value) != s:
                rebinds.append(_branches_beyond(a.path, ctor.path))
    return _covers(rebinds)


#: methods that add new trainable parameters to a module in place (PEFT's integration in diffusers
#: and transformers): the adapter's parameters are made after the cast, in a dtype the library picks
_ADDS_ADAPTER = ("add_adapter", "load_adapter")


def _adapter_added_between(ctx: "ModuleContext", subjects: Set[str], cast: CallInfo, ctor: CallInfo) -> bool:
    """`unet.add_adapter(lora_config)` after the cast and before the optimizer: what it trains are
    the adapter's parameters, not the ones the cast converted (as `get_peft_model` rebinds)."""
    for call in ctx.method_calls(*_ADDS_ADAPTER):
        if cast.order < call.order < ctor.order and call.scope in (cast.scope, ctor.scope) and _matches(call.receiver_dotted, subjects):
            return True
    return False


def _kept_by_wrapper(ctx: "ModuleContext", value: cst.BaseExpression) -> Optional[str]:
    """`model` for `DDP(model, device_ids=[rank])`, `torch.compile(model)`, `nn.DataParallel(model)`
    (methods chained after them too): wrappers whose `.parameters()` are the module's own,
    so the optimizer built on the result updates the cast parameters."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and not (ctx.qualnames(value.func) & torchapi.PARAMETER_KEEPING_WRAPPERS):
        value = value.func.value  # `DDP(model).cuda()`
    if not isinstance(value, cst.Call) or not value.args or value.args[0].keyword is not None:
        return None
    if not ctx.qualnames(value.func) & torchapi.PARAMETER_KEEPING_WRAPPERS:
        return None
    return _chain_root(ctx, value.args[0].value)


def _branches_beyond(path, base) -> tuple:
    """The if/else frames of `path` past its common prefix with `base` (where the optimizer is
    built): the branches that decide whether the statement runs on the way to it. Loops and
    try blocks are not counted as branches (a rebind in them is taken to run)."""
    common = 0
    while common < min(len(path), len(base)) and path[common].node is base[common].node and path[common].kind == base[common].kind:
        common += 1
    return tuple(f for f in path[common:] if f.kind in ("if", "else"))


def _covers(paths: List[tuple]) -> bool:
    """Whether statements at these branch paths run on every path: one of them unconditionally,
    or both sides of one `if` covered in turn."""
    if any(not p for p in paths):
        return True
    sides: Dict[int, Dict[str, List[tuple]]] = {}
    for p in paths:
        sides.setdefault(id(p[0].node), {}).setdefault(p[0].kind, []).append(p[1:])
    return any("if" in s and "else" in s and _covers(s["if"]) and _covers(s["else"]) for s in sides.values())


def _stepped_after(ctx: "ModuleContext", key: str, cast: CallInfo) -> bool:
    for call in ctx.method_calls("step"):
        if call.scope is not cast.scope or call.order <= cast.order:
            continue
        if call.receiver_dotted == key:
            return True
        arg = call.arg(0, "optimizer")
        if arg is not None and dotted_name(arg) == key:
            return True
    return False


def _reverted_later(
    ctx: "ModuleContext", subjects: Set[str], cast: CallInfo, key: Optional[str] = None, low: Optional[LowPrecisionCast] = None
) -> bool:
    """`model.float()` / `model.to(torch.float32)` later in the same scope. With the optimizer's
    name `key`: not one made once training is over (after a loop stepping that optimizer, the
    revert in none of its loops: `--upcast_before_saving`); with the cast `low`, not one under
    an `if` testing that the cast's run-time dtype was fp32 already (`if load_dtype ==
    torch.float32: model.to(dtype=torch.float32)`: the low-precision path skips it)."""
    for call in ctx.calls:
        if call.scope is cast.scope and call.order > cast.order and fp32_cast(ctx, call.node):
            if _chain_root(ctx, call.node) in subjects:
                if key and _trained_before(ctx, key, cast, call):
                    continue
                if low is not None and _on_fp32_path(ctx, low, call):
                    continue
                return True
    return False


def _fp32_asserted_after(ctx: "ModuleContext", subjects: Set[str], cast: CallInfo) -> bool:
    """After the cast, the scope raises unless the module is fp32 (`if
    accelerator.unwrap_model(controlnet).dtype != torch.float32: raise ValueError(...)`,
    diffusers' check that trainable models start in full precision): on a low-precision path the
    run stops there, it never trains the cast weights."""
    import re

    row = ctx.position(cast.node)[0].row
    words = [re.compile(r"(?<![\w.])%s\b" % re.escape(s)) for s in subjects]
    for node in descendants(cast.scope.node):
        if not isinstance(node, cst.If) or not isinstance(node.test, cst.Comparison) or len(node.test.comparisons) != 1:
            continue
        if not isinstance(node.test.comparisons[0].operator, (cst.NotEqual, cst.IsNot)):
            continue
        text = ctx.code_for(node.test)
        if ".dtype" not in text or "float32" not in text or not any(w.search(text) for w in words):
            continue
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
        if not any(isinstance(b, cst.SimpleStatementLine) and any(isinstance(x, cst.Raise) for x in b.body) for b in body):
            continue
        if ctx.position(node)[0].row > row:
            return True
    return False


def _part_reverted(ctx: "ModuleContext", subjects: Set[str], cast: CallInfo) -> bool:
    """A part of the cast module put back to fp32 later in the scope (`disc.heads.float()`): the
    trainable part may be that one."""
    for call in ctx.calls:
        if call.scope is cast.scope and call.order > cast.order and fp32_cast(ctx, call.node):
            root = _chain_root(ctx, call.node)
            if root and any(root.startswith(s + ".") for s in subjects):
                return True
    return False


def _trained_before(ctx: "ModuleContext", key: str, cast: CallInfo, revert: CallInfo) -> bool:
    """`key.step()` (or `scaler.step(key)`) in a loop of the cast's scope between the cast and
    `revert`, the revert in none of the loops around that step: training ran on the cast weights."""
    for step in ctx.method_calls("step"):
        if step.scope is not cast.scope or not (cast.order < step.order < revert.order):
            continue
        arg = step.arg(0, "optimizer")
        if step.receiver_dotted != key and not (arg is not None and dotted_name(arg) == key):
            continue
        loops = [f.node for f in step.path if f.kind == "loop"]
        if loops and not any(f.node is node for f in revert.path for node in loops):
            return True
    return False


def _on_fp32_path(ctx: "ModuleContext", low: LowPrecisionCast, revert: CallInfo) -> bool:
    """`revert` sits under an `if` (its body) whose test is `name == torch.float32` (or `is`),
    `name` the run-time dtype the cast `low` was given: it runs only where nothing was cast."""
    names = {a.value.value for a in low.call.node.args if isinstance(a.value, cst.Name)}
    if not names:
        return False
    for frame in revert.path:
        test = frame.test
        if frame.kind != "if" or not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            continue
        target = test.comparisons[0]
        if not isinstance(target.operator, (cst.Equal, cst.Is)):
            continue
        sides = (test.left, target.comparator)
        if any(isinstance(x, cst.Name) and x.value in names for x in sides) and any(ctx.dtype_of(x) == "fp32" for x in sides):
            return True
    return False


def master_wrapped(ctx: "ModuleContext", key: str, wrapper: Pattern[str] = MASTER_WRAPPER) -> bool:
    """The optimizer is handed to something that keeps fp32 master weights (a callee `wrapper`
    matches: `FP16_Optimizer(optimizer)`, `amp.initialize(model, optimizer)`,
    `deepspeed.initialize(model=model, optimizer=optimizer)`), as an argument or an element
    of a tuple or list argument (`optimizers=(optimizer, scheduler)`)."""
    for call in ctx.calls:
        callee = call.dotted or min(call.qualnames, default="")
        if not wrapper.search(callee):
            continue
        for a in call.node.args:
            values = [e.value for e in a.value.elements] if isinstance(a.value, (cst.Tuple, cst.List)) else [a.value]
            if any(dotted_name(v) == key for v in values):
                return True
    return False


def _built_in_wrapper(ctx: "ModuleContext", ctor: CallInfo, wrapper: Pattern[str]) -> bool:
    """The optimizer is built inside the call that keeps its master weights, unnamed
    (`booster.boost(model, torch.optim.SGD(model.parameters()))`, `FP16_Optimizer(SGD(...))`)."""
    for call in ctx.calls:
        callee = call.dotted or min(call.qualnames, default="")
        if call is ctor or not wrapper.search(callee):
            continue
        for a in call.node.args:
            values = [e.value for e in a.value.elements] if isinstance(a.value, (cst.Tuple, cst.List)) else [a.value]
            if any(v is ctor.node for v in values):
                return True
    return False


#: the attributes that name one parameter tensor of a module (`conv.weight`, `head.bias`)
_ONE_TENSOR = ("weight", "bias")


def freezes(ctx: "ModuleContext") -> bool:
    """`p.requires_grad = False` or `.requires_grad_(False)` anywhere in the file (a freeze of
    one named tensor aside, `frozen_modules`)."""
    return bool(frozen_modules(ctx))


def frozen_modules(ctx: "ModuleContext") -> List[Optional[str]]:
    """What the file freezes (`p.requires_grad = False`, `.requires_grad_(False)`): the module
    frozen (`net_clip` for `net_clip.requires_grad_(False)`, `model` for `for p in
    model.parameters(): p.requires_grad = False`), None where it cannot be told (a freeze of
    something else). Freezing one tensor named by its attribute (`self.whiten.weight.
    requires_grad = False`, `conv.bias.requires_grad_(False)`: a fixed whitening filter, a bias
    left at zero) is left out: it leaves no room for fp32 trainable parts, the rest still trains
    (one in a loop, `for layer in layers: layer.weight.requires_grad = False`, freezes many)."""
    out: List[Optional[str]] = []
    for a in ctx.assignments:
        if a.target.endswith("requires_grad") and literal_bool(a.value) is False:
            parts = a.target.split(".")
            if len(parts) >= 3 and parts[-2] in _ONE_TENSOR and not any(f.kind == "loop" for f in a.path):
                continue
            out.append(_frozen_owner(ctx, a.node, ".".join(parts[:-1]), a.scope) if len(parts) >= 2 else None)
    for call in ctx.method_calls("requires_grad_"):
        if literal_bool(call.arg(0, "requires_grad")) is False:
            parts = (call.receiver_dotted or "").split(".")
            if len(parts) >= 2 and parts[-1] in _ONE_TENSOR and not any(f.kind == "loop" for f in call.path):
                continue
            out.append(_frozen_owner(ctx, call.node, call.receiver_dotted, call.scope) if call.receiver_dotted else None)
    return out


def _frozen_owner(ctx: "ModuleContext", node: cst.CSTNode, name: Optional[str], scope: Scope) -> Optional[str]:
    """The module whose parameters a freeze of `name` reaches: `name` itself, or for the target
    of an enclosing `for name in X.parameters()` / `for n, name in X.named_parameters()` (also
    `.modules()`, `.children()`), `X`; None for another loop variable, a name from elsewhere,
    or a parameter of a helper (`def freeze(m): m.requires_grad_(False)`: any module of its
    callers)."""
    if not name or ctx.imports.is_imported(name.split(".")[0]):
        return None
    head = name.split(".")[0]
    current = ctx.parent(node)
    while current is not None and not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(current, cst.For):
            targets = [current.target] if isinstance(current.target, cst.Name) else [
                e.value for e in current.target.elements
            ] if isinstance(current.target, (cst.Tuple, cst.List)) else []
            if any(isinstance(t, cst.Name) and t.value == head for t in targets):
                it = current.iter
                if (
                    "." not in name and isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute)
                    and it.func.attr.value in ("parameters", "named_parameters", "modules", "children", "named_modules", "named_children")
                ):
                    owner = dotted_name(it.func.value)
                    return owner if owner and _local_module(ctx, owner, scope) else None
                return None
        current = ctx.parent(current)
    return name if _local_module(ctx, name, scope) else None


def _local_module(ctx: "ModuleContext", name: str, scope: Scope) -> bool:
    head = name.split(".")[0]
    return not ctx.imports.is_imported(head) and (head == "self" or head not in scope.params)


def _frozen_parts_only(frozen: List[Optional[str]], subjects: Set[str]) -> bool:
    """Every freeze that reaches the cast module is of a part of it (`vae.encoder` for `vae`):
    none of unknown reach, of the module itself or of one holding it."""
    for f in frozen:
        if f is None:
            return False
        for s in subjects:
            if f == s or s.startswith(f + "."):
                return False
    return True


def _frozen_around(frozen: List[Optional[str]], subjects: Set[str]) -> bool:
    """A freeze that may reach the cast module: one of unknown reach, or of a subject, of a
    module holding it, or of a part of it (`net.backbone` for `net`)."""
    for f in frozen:
        if f is None:
            return True
        for s in subjects:
            if f == s or s.startswith(f + ".") or f.startswith(s + "."):
                return True
    return False
