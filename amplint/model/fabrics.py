"""Lightning Fabric objects whose `backward` scales the loss.

`Fabric(precision="16-mixed")` (also `"16"` / `16`, Lightning's aliases) on a GPU with the
default or a DDP strategy uses Lightning's `MixedPrecision` plugin, which builds a
`torch.amp.GradScaler`; `fabric.backward(loss)` is `scaler.scale(loss).backward()`
(`lightning/fabric/plugins/precision/amp.py`), and only `fabric.clip_gradients(...)`
unscales before clipping (`Strategy.clip_gradients_norm` calls
`precision.unscale_gradients(optimizer)` first). AMP101 asks here whether a receiver of
`.backward(loss)` is such a Fabric, the way `accelerators.py` answers for accelerate.

Only what the file shows counts, and only for certain: a `precision=` read from the
arguments, a `plugins=` argument, `accelerator="cpu"` (Lightning turns "16-mixed" into
bf16 there), an FSDP or DeepSpeed strategy (their own precision plugins and clipping:
AMP801/AMP805), or a second binding of the name to something else make the answer
"unknown", which callers treat as "not scaled".
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Set, Tuple

import libcst as cst

from .literals import evaluated
from .receivers import certain_constructor
from .types import CallInfo, Scope

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext

FABRICS = frozenset(("lightning.Fabric", "lightning.fabric.Fabric", "lightning.fabric.fabric.Fabric", "lightning_fabric.Fabric", "lightning_fabric.fabric.Fabric"))
#: Lightning's spellings of fp16 mixed precision (`_PRECISION_INPUT_STR_ALIAS_CONVERSION`: "16" -> "16-mixed")
_FP16_MIXED = ("16-mixed", "16")
#: strategies that keep Lightning's plain MixedPrecision plugin (and its GradScaler)
_PLAIN_STRATEGIES = ("auto", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "dp", "single_device", "ddp_find_unused_parameters_true")


def scaling_fabric(ctx: "ModuleContext", receiver: Optional[str], scope: Scope) -> Optional[CallInfo]:
    """The `Fabric(precision="16-mixed")` constructor that `receiver` (as spelled in `scope`)
    certainly holds, else None."""
    return certain_constructor(ctx, receiver, scope, "_scaling_fabrics", _scales)


def _scales(call: CallInfo) -> bool:
    """`Fabric(...)` whose keywords make its `backward` scale the loss with a GradScaler."""
    if not call.calls_any(FABRICS) or any(a.star or a.keyword is None for a in call.node.args):
        return False  # Fabric takes keywords only; `**kwargs`: anything may be passed
    precision = call.arg(None, "precision")
    if not _literal_in(precision, _FP16_MIXED):
        return False
    if call.arg(None, "plugins") is not None:
        return False
    accelerator = call.arg(None, "accelerator")
    if accelerator is not None and not _literal_in(accelerator, ("cuda", "gpu", "auto")):
        return False
    strategy = call.arg(None, "strategy")
    if strategy is not None and not _literal_in(strategy, _PLAIN_STRATEGIES):
        return False
    return True


def _literal_in(node: Optional[cst.BaseExpression], values: tuple) -> bool:
    """A plain string (or integer) literal spelling one of `values`; its raw text holds the
    value too, which keeps the rule's text gate sound."""
    if isinstance(node, cst.Integer):
        return node.value in values
    if not isinstance(node, cst.SimpleString):
        return False
    value = evaluated(node)
    return isinstance(value, str) and value in values and value in node.value


def fp16_fabrics(ctx: "ModuleContext") -> List[Tuple[CallInfo, Optional[cst.CSTNode], Set[str]]]:
    """The file's `Fabric(...)` constructors that build Lightning's GradScaler, each with where
    fp16 is chosen at run time (None: always) and the names that hold it (`fabric`, then
    `self.fabric = fabric`): `precision="16-mixed"` spelled in the call (always), or a
    `**fabric_kwargs` of the call that the same function gives that precision
    (`fabric_kwargs.update(precision="16-mixed")` or `fabric_kwargs["precision"] = "16-mixed"`,
    a run-time choice: a caller's kwargs may say otherwise). AMP402 asks, for checkpoints that
    leave that scaler's state out. Other keywords as `_scales` reads them (`plugins=`, a CPU
    accelerator, an FSDP or DeepSpeed strategy: unknown, left out)."""
    found: List[Tuple[CallInfo, Optional[cst.CSTNode], Set[str]]] = []
    for call in ctx.calls_to(*FABRICS):
        starred = [a for a in call.node.args if a.star]
        chosen: Optional[cst.CSTNode] = None
        if starred:
            if len(starred) != 1 or starred[0].star != "**" or not isinstance(starred[0].value, cst.Name):
                continue
            if call.arg(None, "precision") is not None:
                continue
            chosen = _precision_given(ctx, call, starred[0].value.value)
            if chosen is None:
                continue
            keywords = [a for a in call.node.args if not a.star]
            if any(a.keyword is None for a in keywords) or not _plain_keywords(ctx, call):
                continue
        elif not _scales(call):
            continue
        found.append((call, chosen, _holders(ctx, call)))
    return found


def _plain_keywords(ctx: "ModuleContext", call: CallInfo) -> bool:
    """The keywords spelled beside `**kwargs` keep the plain MixedPrecision plugin: literals, or
    a parameter of the function whose default is one (`accelerator="auto"`, handed on)."""
    if call.arg(None, "plugins") is not None:
        return False
    accelerator = _default_of(call, call.arg(None, "accelerator"))
    if accelerator is not None and not _literal_in(accelerator, ("cuda", "gpu", "auto")):
        return False
    strategy = _default_of(call, call.arg(None, "strategy"))
    return strategy is None or _literal_in(strategy, _PLAIN_STRATEGIES)


def _default_of(call: CallInfo, node: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """`node`, or the default of the parameter of `call`'s function that it names."""
    function = call.scope.node
    if not isinstance(node, cst.Name) or not isinstance(function, cst.FunctionDef):
        return node
    for param in (*function.params.params, *function.params.kwonly_params):
        if param.name.value == node.value:
            return param.default if param.default is not None else node
    return node


def _precision_given(ctx: "ModuleContext", call: CallInfo, name: str) -> Optional[cst.CSTNode]:
    """The statement of `call`'s function, before it, that gives the dict `name` an fp16 mixed
    `precision`: `name.update(precision="16-mixed")` or `name["precision"] = "16-mixed"`."""
    for other in ctx.method_calls("update"):
        if other.scope is call.scope and other.order < call.order and other.receiver_dotted == name:
            if _literal_in(other.arg(None, "precision"), _FP16_MIXED):
                return other.statement
    for a in ctx.assignments:
        if a.scope is not call.scope or a.order > call.order or not _literal_in(a.value, _FP16_MIXED):
            continue
        target = a.node.targets[0].target if isinstance(a.node, cst.Assign) and len(a.node.targets) == 1 else None
        if (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and target.value.value == name
                and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index)
                and _literal_in(target.slice[0].slice.value, ("precision",))):
            return a.statement or a.node
    return None


def _holders(ctx: "ModuleContext", call: CallInfo) -> Set[str]:
    """The names bound to what `call` builds in its function (`fabric = Fabric(...)`) and the
    attributes bound to those there (`self.fabric = fabric`, `self.fabric = Fabric(...)`)."""
    names: Set[str] = set()
    for a in ctx.assignments:
        if a.scope is call.scope and not a.unpacked and a.value is call.node:
            names.add(a.target)
    for a in ctx.assignments:
        if a.scope is call.scope and not a.unpacked and isinstance(a.value, cst.Name) and a.value.value in names:
            names.add(a.target)
    return names


#: Lightning Fabric's FSDP strategy class (not the Trainer's `lightning.pytorch` one)
_FSDP_STRATEGIES = frozenset(("lightning.fabric.strategies.FSDPStrategy", "lightning.fabric.strategies.fsdp.FSDPStrategy",
                              "lightning_fabric.strategies.FSDPStrategy", "lightning_fabric.strategies.fsdp.FSDPStrategy"))


def fsdp_full_fabrics(ctx: "ModuleContext") -> List[Tuple[CallInfo, Optional[cst.CSTNode], Set[str]]]:
    """The file's `Fabric(precision="16-mixed", strategy=FSDPStrategy(state_dict_type="full"))`
    constructors (the strategy spelled in the call, or a name bound once to it in the same
    function), in `fp16_fabrics`' shape: FSDPPrecision builds a ShardedGradScaler there, and
    `fabric.load` of a full checkpoint restores a Stateful entry of the state through its
    `load_state_dict` (lightning 2.6.6, `fabric/strategies/fsdp.py`). The sharded default
    assigns the saved dict instead, so it is left out, as are `**kwargs`, `plugins=`, a CPU
    accelerator and a `precision=` given to the strategy."""
    found: List[Tuple[CallInfo, Optional[cst.CSTNode], Set[str]]] = []
    for call in ctx.calls_to(*FABRICS):
        if any(a.star or a.keyword is None for a in call.node.args):
            continue
        if not _literal_in(call.arg(None, "precision"), _FP16_MIXED) or call.arg(None, "plugins") is not None:
            continue
        accelerator = call.arg(None, "accelerator")
        if accelerator is not None and not _literal_in(accelerator, ("cuda", "gpu", "auto")):
            continue
        if _full_fsdp(ctx, call, call.arg(None, "strategy")):
            found.append((call, None, _holders(ctx, call)))
    return found


def _full_fsdp(ctx: "ModuleContext", fabric: CallInfo, node: Optional[cst.BaseExpression]) -> bool:
    """`node` is (or names, bound once in `fabric`'s function) `FSDPStrategy(...)` with a literal
    `state_dict_type="full"`, no `**kwargs` and no `precision=`."""
    if isinstance(node, cst.Name):
        bound = [a for a in ctx.assignments if a.scope is fabric.scope and a.target == node.value]
        if len(bound) != 1 or bound[0].unpacked or bound[0].order > fabric.order:
            return False
        node = bound[0].value
    if not isinstance(node, cst.Call):
        return False
    strategy = next((c for c in ctx.calls_to(*_FSDP_STRATEGIES) if c.node is node), None)
    if strategy is None or any(a.star for a in node.args) or strategy.arg(None, "precision") is not None:
        return False
    return _literal_in(strategy.arg(None, "state_dict_type"), ("full",))

