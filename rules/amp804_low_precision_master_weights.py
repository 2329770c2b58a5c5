"""AMP804 low-precision-master-weights."""
from __future__ import annotations

import re

from typing import Any, Dict, Iterator, List, Optional, Tuple

from amplint.model import (
    Diagnostic, Invalid, Rule, ScaleFinding, ScaleView, Severity, Valid, Wrapper, scale_file_diagnostics,
    scale_project_diagnostics,
)

_MAX_DEPTH = 4


class LowPrecisionMasterWeights(Rule):
    """
    ## What it does
    Flags a model made bf16 or fp16 (`.bfloat16()`, `.half()`,
    `.to(torch.bfloat16)`, `from_pretrained(..., torch_dtype=torch.bfloat16)`,
    or built while `torch.set_default_dtype(torch.bfloat16)` holds) that is
    then wrapped with an FSDP mixed-precision policy: FSDP1
    `FullyShardedDataParallel(..., mixed_precision=...)`, FSDP2
    `fully_shard(..., mp_policy=...)`, or a Lightning Fabric setup under
    `FSDPStrategy` with a `"*-mixed"` precision. The cast may sit in a builder
    in another module.

    ## Why is this bad?
    FSDP keeps the *sharded* parameters in the dtype the module had when it was
    wrapped, and the optimizer steps those shards; the policy's `param_dtype`
    only casts the unsharded copy used for forward and backward ("Outside
    forward and backward, the *sharded* parameters are kept in full
    precision", torch 2.13's `MixedPrecision` docstring, which assumes an fp32
    model). A model already in bf16 therefore trains with bf16 master
    weights and bf16 optimizer state: with bf16's 8 mantissa bits an update
    smaller than about 1/256 of a weight rounds away (NVIDIA-NeMo/Automodel#3444:
    "many optimizer steps round back to the same BF16 value"), and the policy
    is a no-op. huggingface/accelerate#2624 traced "FSDP needs a larger LR than
    DeepSpeed" to exactly this (DeepSpeed keeps fp32 masters).

    ## Example
    ```python
    model = LLaMA(config).bfloat16()
    model = fabric.setup_module(model)  # Fabric(strategy=FSDPStrategy(), precision="bf16-mixed")
    ```

    ## Use instead
    ```python
    model = LLaMA(config)               # fp32: FSDP keeps fp32 shards for the optimizer
    model = fabric.setup_module(model)
    ```

    ## Notes
    Silent when the dtype is decided at run time (`.to(dtype)` with a variable,
    `set_default_dtype(DTYPES[cfg.dtype])`), when the model is cast back to
    fp32 before it is wrapped, and for wrappers without a mixed-precision
    policy or with a `"*-true"` precision (pure low-precision training chosen
    on purpose), and in a file that never trains the model it wraps (no
    optimizer built, no backward, no `step()`, and the model a local name the
    wrapping function does not return: an inference or rollout script). A `.half()` model trained by a plain optimizer is AMP201's.

    `from_pretrained(..., torch_dtype="auto")` (or `dtype="auto"`) is silent:
    it loads the dtype the checkpoint's `config.json` states, or that of its
    first floating weight (transformers 5.24 `_get_dtype`), which the code does
    not name: many LLM checkpoints are stored in bf16, some in fp32. Since
    transformers 5 `"auto"` is also what a `from_pretrained` without a dtype
    loads (`if dtype is None: dtype = "auto"`), so flagging `"auto"` would mean
    flagging every load; the rule keeps to a dtype the code spells.

    ## References
    - amplint's evidence page: `amplint --explain AMP804` (docs/evidence.md#amp804)
    - huggingface/accelerate#2624, #2674 (accelerate upcasts FSDP1 shards since), #3979
    - NVIDIA-NeMo/Automodel#3444
    """

    code = "AMP804"
    name = "low-precision-master-weights"
    severity = Severity.WARNING
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "a low-precision model wrapped by FSDP mixed precision has no fp32 master weights"
    triggers = ("bfloat16", "half", "float16", "torch_dtype")
    requires = (("mixed_precision", "mp_policy", "Fabric"),)
    #: a cast of a module in this file (the per-file pass; the project pass follows builders)
    gate_regex = re.compile(
        r"\.(?:bfloat16|half)\s*\(\s*\)|\.to\s*\([^)]*(?:bfloat16|float16|half)|torch_dtype\s*=|dtype\s*=\s*torch\.(?:bfloat16|float16)"
        r"|set_default_dtype\s*\(\s*torch\.|set_default_tensor_type\s*\("
    )

    VALID = [
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype="auto")
model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
optimizer = torch.optim.AdamW(model.parameters())
""",
            "torch_dtype='auto': the checkpoint decides the dtype, the code does not name it",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
model = Net()
model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
""",
            "an fp32 model: FSDP keeps fp32 shards",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
model = Net().bfloat16()
model = model.float()
model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
""",
            "cast back to fp32 before the wrapper",
        ),
        Valid(
            """
import torch
import lightning as L
fabric = L.Fabric(strategy="fsdp", precision="bf16-true")
model = Net().bfloat16()
model = fabric.setup_module(model)
""",
            "pure bf16 training chosen on purpose",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
torch.set_default_dtype(DTYPES[config.training.dtype])
model = Net()
torch.set_default_dtype(torch.float32)
fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
""",
            "the default dtype is decided at run time",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = Net().bfloat16()
model = FSDP(model)
""",
            "no mixed-precision policy: pure bf16 training, not a no-op policy",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision

def main():
    policy = MixedPrecision(param_dtype=torch.bfloat16)
    actor = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16)
    actor = FSDP(actor, mixed_precision=policy)
    with torch.no_grad():
        print(generate(actor, prompts))
""",
            "a rollout script: the wrapped model is never trained (no optimizer, no backward)",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
import lightning as L
from lightning.fabric.strategies import FSDPStrategy

strategy = FSDPStrategy(limit_all_gathers=True)
fabric = L.Fabric(devices=4, precision="bf16-mixed", strategy=strategy)
with fabric.device:
    model = LLaMA(config).bfloat16()
model = fabric.setup_module(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
""",
            line=8,
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy

def build(config):
    with torch.device("meta"):
        torch.set_default_dtype(torch.bfloat16)
        model = Transformer(config)
        torch.set_default_dtype(torch.float32)
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    return model
""",
            line=6,
            why="built while the default dtype is bf16",
        ),
        Invalid(
            """
import torch
from transformers import AutoModelForCausalLM
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision

def load(name):
    return AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)

model = load("gpt2")
model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
""",
            line=6,
            why="loaded in bf16 by a builder function",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        yield from scale_project_diagnostics(self, project, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        reported = set()
        for path, e in view.events("wrap"):
            if e["k"] not in ("fsdp1", "fsdp2", "fabric") or not e.get("s"):
                continue
            w = view._wrapper(path, e, 0)
            if w is None or not _mixed_policy(w) or _never_trained(view, path, e):
                continue
            cast = low_precision_cast(view, path, e["f"], e["s"], (e["r"], e["c"]), 0)
            if cast is None:
                continue
            cpath, ce = cast
            at = ce.get("at")
            place = (cpath, *at) if at else view.place(cpath, ce)
            if place in reported:
                continue
            reported.add(place)
            dtype = "bf16" if ce["d"] == "bf16" else "fp16"
            subject = e["s"]
            what = {"fsdp1": "FSDP", "fsdp2": "`fully_shard`", "fabric": "Fabric's FSDP"}[w.kind]
            message = f"`{subject}` is {dtype} before {what} mixed precision wraps it: no fp32 master weights"
            help = f"Build `{subject}` in fp32: the policy's `param_dtype` casts it for compute, the shards stay fp32"
            related: List[Tuple[Any, str]] = []
            if at:
                related.append((view.place(cpath, ce), f"`{ce['t']}` built in {dtype} here"))
            related.append((w.place, "wrapped with a mixed-precision policy here"))
            if w.policy is not None and w.policy.place != w.place:
                related.append((w.policy.place, "its policy"))
            data = {"model": subject, "dtype": dtype, "wrapper": w.kind, "cast": ce.get("via"), "wrapper_site": [w.path, e["r"]]}
            yield ScaleFinding(place, message, help, related, data)


def _never_trained(view: ScaleView, path: str, wrap: Dict[str, Any]) -> bool:
    """An inference or rollout script: the file that wraps the model builds no optimizer and
    runs no backward and no `step()`, and the wrapping function keeps the model to itself (a
    local name it does not return). Without an update there are no master weights to lose."""
    summary = view.summary(path) or {}
    if any(e["e"] in ("back", "step", "opt") for e in summary.get("events", ())):
        return False
    names = [*(wrap.get("t") or []), wrap.get("s")]
    return all("." not in (n or "") for n in names) and wrap["f"] not in summary.get("returns", {})


def _mixed_policy(w: Wrapper) -> bool:
    """A wrapper whose mixed-precision policy casts for compute (the user expects fp32 masters)."""
    if w.kind == "fabric":
        return w.strategy == "fsdp" and (w.precision or "").endswith("-mixed")
    return w.policy is not None or bool(w.event.get("mp"))


def low_precision_cast(
    view: ScaleView, path: str, func: str, name: str, before: Tuple[int, int], depth: int
) -> Optional[Tuple[str, Dict[str, Any]]]:
    """The cast that made `name` bf16/fp16 last before `before` in `func`, following a builder
    function's return when the function itself shows no cast; None when the last dtype change
    is to fp32, is decided at run time, or is not shown."""
    if depth > _MAX_DEPTH:
        return None
    s = view.summary(path)
    if s is None:
        return None
    casts = [e for e in s["events"] if e["e"] == "cast" and e["f"] == func and e["t"] == name and (e["r"], e["c"]) < before]
    if casts:
        last = max(casts, key=lambda e: (e["r"], e["c"]))
        return (path, last) if last["d"] in ("bf16", "fp16") else None
    calls = [r for r in s["binds"].get(func, {}).get(name, []) if "c" in r and (r["r"], r["cc"]) < before]
    latest = max(calls, key=lambda r: (r["r"], r["cc"]), default=None)
    if latest is None:
        return None
    for p, q in view.callees(path, func, latest["c"]):
        ps = view.summary(p)
        for r in (ps["returns"].get(q, []) if ps else []):
            found = _returned_cast(view, p, q, r, depth)
            if found is not None:
                return found
    return None


def _returned_cast(view: ScaleView, path: str, func: str, ref: Dict[str, Any], depth: int) -> Optional[Tuple[str, Dict[str, Any]]]:
    """What a builder returns: a name cast before the return, `Net().bfloat16()`, or
    `AutoModel.from_pretrained(name, torch_dtype=torch.bfloat16)`."""
    if "n" in ref:
        if any(m.startswith("to:") for m in ref.get("m", ())):
            return None  # `return model.half()`: a cast the summary keeps no position for (not reported)
        return low_precision_cast(view, path, func, ref["n"], (10**9, 0), depth + 1)
    if "c" not in ref:
        return None
    tags = [m for m in ref.get("m", ()) if m.startswith("to:")]
    dtype = tags[-1][3:] if tags else (ref.get("dt") if ref["c"].endswith(("from_pretrained", "from_config")) else None)
    if dtype not in ("bf16", "fp16"):
        return None
    event = {"e": "cast", "f": func, "r": ref["r"], "c": ref["cc"], "er": ref["r"], "ec": ref["cc"] + len(ref["c"]), "t": ref["c"], "d": dtype, "via": "return"}
    return (path, event)
