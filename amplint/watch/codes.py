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
}
