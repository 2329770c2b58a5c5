"""The runtime-only rule family (AMP7xx): names, messages and rule pages.

These codes have no static `Rule` class (nothing in source text shows them);
`amplint --explain AMP701` and `python -m amplint.docs` read them from here.
Static codes seen happening at run time (AMP101 ...) keep their own pages.
"""
from __future__ import annotations

from typing import Dict

RUNTIME_RULES: Dict[str, Dict[str, str]] = {
    "AMP701": {
        "name": "loss-scale-collapse",
        "severity": "error",
        "message": "the GradScaler's loss scale keeps falling: gradients overflow step after step",
        "docs": """\
## What it does
Reported by `amplint run` (and `amplint.watch`, the Lightning and Hugging Face
callbacks) while a training run is watched: the GradScaler's scale fell on N
consecutive optimizer steps (`--collapse-steps`, default 8), or more than X of
the steps were skipped (`--skip-share`, default 0.25, judged once at least 50
steps ran). The finding says since which step, how far the scale fell, and
which module's output or gradient became non-finite first.

## Why is this bad?
A GradScaler halves the scale and skips the optimizer step whenever a gradient
is `inf` or `NaN`. A few skipped steps at the start, and one now and then when
the scale grows, are how it finds its level. A scale that keeps falling means
every step overflows whatever the scale: the weights stop changing while the
loss curve looks flat, and the scale ends near zero, where the small gradients
underflow instead. The cause is in the model or the data (an activation beyond
fp16's 65504, a learning rate that blew the weights up, a bad initialization,
a division by a near-zero value), not in the scaler.

## Example
```
AMP701 train.py:14: loss scale fell on 8 consecutive steps since step 40
(65536 -> 256); first non-finite: forward output of `blocks.3.mlp` (Linear,
built at model.py:27)
```

## Use instead
Look at the module the finding names. `amplint replay DIR/incidents/<file>`
re-runs the saved step in the recorded precision and in fp32 and names the
first module whose output overflows. Typical fixes: keep that module in fp32
(`with torch.autocast(device_type, enabled=False):` plus `.float()` inputs),
lower the learning rate or add warm-up, normalize the inputs, or train in
bf16 where the hardware has it.

## Notes
Runtime codes never come from `amplint PATHS`: they describe a run, not a
file. `filename:line` is where the named module was built when the source is
known, else the `scaler.update()` call.
""",
    },
    "AMP702": {
        "name": "rank-scale-disagreement",
        "severity": "error",
        "message": "the ranks of one run disagree on a skipped step or on the loss scale",
        "docs": """\
## What it does
Reported by `amplint run` once every process of a multi-rank run (torchrun,
`torch.distributed.run`) has ended: the step records of all ranks are lined up
by optimizer step, and the first step at which the ranks disagree is reported:
some ranks skipped it (their GradScaler found inf/NaN) while others stepped, or
the loss scale a step ran with, or the one `update()` left, differs between
ranks. The finding names the first rank to go non-finite (the rank that skipped
the earliest step) and, when the guard found it on that rank, the module whose
output or gradient became non-finite first.

## Why is this bad?
Data-parallel ranks must apply the same update, or their replicas drift apart.
A GradScaler decides to skip from the gradients it unscales on its own rank.
Under DDP every rank holds the same all-reduced gradient, so they agree; under
sharding (FSDP1's `FullyShardedDataParallel`, a ZeRO-style optimizer) each rank
holds a different shard, so an overflow in one shard makes only that rank skip
and halve its scale. From then on the ranks scale their losses differently, and
the reduced gradient mixes the two scales. Nothing raises: the loss just stops
meaning what it did. `ShardedGradScaler` all-reduces the inf/NaN flag first, so
every rank skips together (docs/evidence.md#amp802 has the 2-process
measurement).

## Example
```
AMP702 train.py:56: ranks disagree on step 3: rank 1 skipped it (inf/NaN
gradients), rank 0 stepped; first non-finite: gradient of `ShardedLinear` on
rank 1
```

## Use instead
With FSDP1, use `torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler`
(the static rule AMP802 flags the plain one); with a sharded optimizer of your
own, all-reduce the found-inf flag (max) before `step`. FSDP2 (`fully_shard`)
needs nothing: its DTensor gradients all-reduce the flag inside `unscale_`.
When the scales differ from the first step, the ranks were started from
different scaler states (a checkpoint loaded on one rank only).

## Notes
Runtime codes never come from `amplint PATHS`: they describe a run, not a
file. `filename:line` is where the named module was built, else the first
rank's `scaler.update()` call. Judged by the `amplint run` process after the
ranks end, from DIR/events.jsonl: nothing is exchanged between the ranks while
they train. `amplint.watch(...)` in code, which ends inside each rank, does not
compare ranks. Steps are matched by number; a rank that crashed is compared on
the steps it recorded.
""",
    },
}
