"""AMP802 fsdp-needs-sharded-scaler."""
from __future__ import annotations

import re

from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import (
    Diagnostic, Invalid, Rule, ScaleFinding, ScaleView, Severity, Valid, Wrapper, scale_file_diagnostics,
    scale_project_diagnostics,
)


class FsdpNeedsShardedScaler(Rule):
    """
    ## What it does
    Flags a plain `torch.amp.GradScaler` (or `torch.cuda.amp.GradScaler`)
    built for the training step of an FSDP1 model
    (`FullyShardedDataParallel`) that runs in fp16: its mixed-precision
    policy has `param_dtype` or `reduce_dtype` `torch.float16`, or the file
    runs an fp16 autocast. The model is followed across files, as for AMP801.

    ## Why is this bad?
    Each FSDP1 rank holds only its own shard of every gradient, so a plain
    GradScaler looks for inf/NaN in that shard alone and decides on its own
    whether to skip the step: when an overflow lands in one rank's shard, that
    rank skips and halves its scale while the others step and keep theirs.
    The shards then update inconsistently and the ranks' loss scales drift
    apart (facebookresearch/fairscale#179: with a sharded optimizer the plain
    scaler hangs). `ShardedGradScaler` all-reduces the inf flag across ranks
    first, so every rank makes the same decision (its docstring in torch 2.13
    `torch/distributed/fsdp/sharded_grad_scaler.py`: "Sync inf/nan for scaled
    gradient tensors ... across nodes"). Overflows are routine while the
    scaler searches for its scale, so this happens in the first steps.
    Measured on 2 gloo ranks (docs/evidence.md#amp802; an FSDP1-style
    stand-in): an fp16 overflow in rank 1's shard made rank 1 skip and halve
    its scale to 32768 while rank 0 stepped at 65536; with ShardedGradScaler
    both skipped. `amplint run` reports such a run as AMP702.

    ## Example
    ```python
    model = FSDP(net, mixed_precision=MixedPrecision(param_dtype=torch.float16))
    scaler = torch.amp.GradScaler("cuda")
    ```

    ## Use instead
    ```python
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    scaler = ShardedGradScaler()
    ```

    ## Notes
    Silent for FSDP2 (`fully_shard`): its gradients are DTensors and the
    ordinary `torch.amp.GradScaler` reduces their inf checks (torchtitan and
    torchtune use it so). Silent for bf16 policies (no scaler is needed there;
    AMP108 covers a GradScaler with bf16), for `NO_SHARD` (every rank sees the
    whole reduced gradient), for a scaler built with `enabled=False`, and when
    the file does not show fp16 (a policy chosen at run time). A Hugging
    Face `Trainer` with `TrainingArguments(fsdp=..., fp16=True)` (or `--fsdp
    ... --fp16`) builds its scaler itself through accelerate: a
    `ShardedGradScaler` for FSDP1 and the plain one for FSDP2 (accelerate
    1.16 `get_grad_scaler` / `get_fsdp2_grad_scaler`): silent (its fp16
    reduction is AMP803's).

    ## References
    - amplint's evidence page: `amplint --explain AMP802` (docs/evidence.md#amp802)
    - facebookresearch/fairscale#179, #181; pytorch/pytorch#115710; meta-pytorch/tnt#997 (FSDP2 uses the plain scaler)
    - https://pytorch.org/docs/stable/fsdp.html
    """

    code = "AMP802"
    name = "fsdp-needs-sharded-scaler"
    severity = Severity.ERROR
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "a plain GradScaler with an fp16 FSDP model: ranks skip steps on their own"
    triggers = ("GradScaler",)
    requires = (("FullyShardedDataParallel", "FSDP"),)
    gate_regex = re.compile(r"FullyShardedDataParallel|\bFSDP\s*\(")

    VALID = [
        Valid(
            """
from transformers import Trainer, TrainingArguments
args = TrainingArguments(output_dir="out", fsdp="full_shard auto_wrap", fsdp_config={"version": 1}, fp16=True)
trainer = Trainer(model=model, args=args, train_dataset=dataset)
trainer.train()
""",
            "the Trainer's accelerate builds a ShardedGradScaler for its FSDP1 model itself",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
model = FSDP(Net(), mixed_precision=MixedPrecision(param_dtype=torch.float16))
scaler = ShardedGradScaler()
loss = model(x).sum()
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
""",
            "the sharded scaler syncs the inf checks",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
model = Net()
fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
scaler = torch.amp.GradScaler("cuda")
loss = model(x).sum()
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
""",
            "FSDP2: the plain scaler handles DTensor gradients",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
model = FSDP(Net(), mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
scaler = torch.amp.GradScaler("cuda", enabled=False)
loss = model(x).sum()
scaler.scale(loss).backward()
""",
            "bf16 policy and a disabled scaler",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
policy = MixedPrecision(param_dtype=dtype_from(args))
model = FSDP(Net(), mixed_precision=policy)
scaler = torch.amp.GradScaler("cuda")
loss = model(x).sum()
scaler.scale(loss).backward()
""",
            "the policy's dtype is decided at run time",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
model = FSDP(Net(), mixed_precision=MixedPrecision(param_dtype=torch.float16))
scaler = torch.amp.GradScaler("cuda")
loss = model(x).sum()
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
""",
            line=4,
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
model = FSDP(Net(), mixed_precision=MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32))
compiled = torch.compile(model, mode="max-autotune")
scaler = torch.amp.GradScaler("cuda")
loss = compiled(x).sum()
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
""",
            line=5,
            why="the model trained through torch.compile is the fp16 FSDP one",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel

class Trainer:
    def __init__(self, net):
        self.model = FullyShardedDataParallel(net)
        self.scaler = torch.cuda.amp.GradScaler()

    def step(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x).mean()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            line=7,
            why="fp16 from the file's autocast; the model in `self.model`",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision

fp16_policy = MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32)

def train(net, loader):
    model = FSDP(net, mixed_precision=fp16_policy)
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler()
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            line=9,
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        yield from scale_project_diagnostics(self, project, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        for path, e in view.events("ctor"):
            if e["k"] != "scaler" or e.get("sharded") or e.get("en") is False:
                continue
            found = self._fp16_fsdp(view, path, e)
            if found is None:
                continue
            w, why = found
            target = (e.get("t") or ["scaler"])[0] or "scaler"
            related = [(w.place, "wrapped by `FullyShardedDataParallel` here")]
            if w.policy is not None and why == "policy":
                related.append((w.policy.place, "its fp16 mixed-precision policy"))
            message = f"`{target}` is a plain GradScaler for an fp16 FSDP model: ranks skip steps on their own"
            help = "Use `torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler()`: it syncs the inf checks"
            data = {"scaler": target, "scaler_class": e.get("q"), "wrapper": "fsdp1", "fp16_from": why, "wrapper_site": [w.path, w.event["r"]]}
            yield ScaleFinding(view.place(path, e), message, help, related, data)

    def _fp16_fsdp(self, view: ScaleView, path: str, scaler: Dict[str, Any]) -> Optional[Tuple[Wrapper, str]]:
        """An FSDP1 model (sharded) the scaler's training step uses, and why it runs fp16."""
        s = view.summary(path)
        assert s is not None
        target = (scaler.get("t") or [""])[0] or ""
        funcs = [scaler["f"]]
        cls = view._class_of(path, scaler["f"])
        if target.startswith("self.") and cls:
            funcs = [q for q in s["functions"] if q.startswith(f"{cls}.")]
        autocast_fp16 = any(
            ev["e"] == "autocast" and ev.get("d") == "fp16" and ev.get("en") is not False for ev in s["events"]
        )
        seen: Set[Tuple[str, str]] = set()
        for func in funcs:
            for name in _used_models(s, func):
                if (func, name) in seen:
                    continue
                seen.add((func, name))
                for w in view.wrappers(path, func, name):
                    if w.kind != "fsdp1" or not w.sharded_fsdp1:
                        continue
                    if w.policy is not None and "fp16" in (w.policy.param, w.policy.effective_reduce):
                        return w, "policy"
                    if autocast_fp16 and (w.policy is None or w.policy.param in (None, "fp16", "fp32")):
                        return w, "autocast"
        return None


def _used_models(summary: Dict[str, Any], func: str) -> List[str]:
    """The names a function calls or takes the parameters of (`model(x)`, `model.parameters()`)."""
    out: List[str] = []
    for spelled in summary["uses"].get(func, ()):
        name = spelled[: -len(".parameters")] if spelled.endswith(".parameters") else spelled
        head = name.split(".", 1)[0]
        if head in ("torch", "nn", "F") or not name:
            continue
        if name not in out:
            out.append(name)
    return out
