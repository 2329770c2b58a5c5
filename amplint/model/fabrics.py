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

from typing import TYPE_CHECKING, Optional

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
