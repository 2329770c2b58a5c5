"""AMP104 unscale-inside-accumulation: RuntimeError, or accumulated grads off by the scale.

Runs the flagged step for `Lab.ACCUM` (2) micro-batches with the loop index and
the accumulation count bound, with a GradScaler enabled and disabled, and
compares the parameter updates.
Without a `step_source` the canonical reproduction follows the finding's
`shape`: "every" (unscale_ on every micro-batch), "every-updated" (unscale_ and
update on every micro-batch), "sometimes" (unscale_ mid-window), "twice"
(unscale_ twice per step), "inner" (unscale_ of a wrapper's inner optimizer,
step of the wrapper) or "update" (update on every micro-batch).
"""
from __future__ import annotations

from typing import Any, Dict

from ._training import describe_error, fmt, run_scaling

CANONICAL = {
    "every": """\
scaler.scale(loss / accum).backward()
scaler.unscale_(optimizer)
if (i + 1) % accum == 0:
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
    "every-updated": """\
scaler.scale(loss / accum).backward()
scaler.unscale_(optimizer)
if (i + 1) % accum == 0:
    scaler.step(optimizer)
    optimizer.zero_grad()
scaler.update()
""",
    "sometimes": """\
scaler.scale(loss / accum).backward()
if i == 0:
    scaler.unscale_(optimizer)
if (i + 1) % accum == 0:
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
    "twice": """\
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
scaler.unscale_(optimizer)
scaler.step(optimizer)
scaler.update()
""",
    "inner": """\
class _Wrapper:  # a wrapper forwarding its inner optimizer's param_groups (fairseq's FairseqOptimizer)
    def __init__(self, inner):
        self.optimizer = inner

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def step(self, *args, **kwargs):
        return self.optimizer.step(*args, **kwargs)

wrapper = _Wrapper(optimizer)
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
scaler.step(wrapper)
scaler.update()
optimizer.zero_grad()
""",
    "update": """\
scaler.scale(loss / accum).backward()
if (i + 1) % accum == 0:
    scaler.step(optimizer)
    optimizer.zero_grad()
scaler.update()
""",
}

#: relative difference of the update from unscaled training above which it is "wrong"
TOLERANCE = 0.05


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    def relevant(enabled, disabled):
        calls = enabled.scaler_calls
        if not (calls.get("unscale_") or calls.get("update")):
            return "the flagged code never called unscale_ or update"
        return None

    shape = data.get("shape") if data.get("shape") in CANONICAL else "every"
    res = run_scaling(lab, data, CANONICAL[shape], iterations=lab.ACCUM, relevant=relevant)
    e = res.enabled
    ev = res.base_evidence(lab)
    if res.method == "experiment":
        ev["shape"] = shape
    err = res.enabled_only_error()
    ratio = res.update_ratio()
    diff = res.update_difference()
    ev.update(
        micro_batches=res.spec.iterations,
        update_ratio=lab.num(ratio),
        update_difference=lab.num(diff, 4),
        unscale_calls=e.scaler_calls.get("unscale_", 0),
        update_calls=e.scaler_calls.get("update", 0),
        optimizer_steps=e.optimizer_steps,
    )
    if err:
        ev["error"] = err
    dtype = res.dtype
    if err:
        return lab.confirmed(
            f"micro-batch {err.get('iteration', 0) + 1} of {res.spec.iterations} raised {describe_error(err)}", ev, method=res.method, dtype=dtype
        )
    if e.optimizer_steps and diff is not None and diff > TOLERANCE:
        return lab.confirmed(
            f"no error, but the accumulated update differs from unscaled training by {diff:.0%} of its size "
            f"(|update| ratio {fmt(ratio)}, loss scale {fmt(res.scale)})",
            ev,
            method=res.method,
            dtype=dtype,
        )
    if e.optimizer_steps and diff is not None:
        return lab.not_reproduced(
            f"{res.spec.iterations} micro-batches accumulated and stepped with the same update as unscaled training "
            f"(difference {diff:.2g})",
            ev,
            method=res.method,
            dtype=dtype,
        )
    return lab.inconclusive("the optimizer never stepped", ev, method=res.method, dtype=dtype)
