"""AMP104 unscale-inside-accumulation: RuntimeError, or accumulated grads off by the scale.

Runs the flagged step for `Lab.ACCUM` (2) micro-batches with the loop index and
the accumulation count bound, with a GradScaler enabled and disabled
(amp-facts §2 gradient accumulation, E12, E18). Canonical: `unscale_` on every
micro-batch, `step`/`update` at the boundary.
"""
from __future__ import annotations

from typing import Any, Dict

from ._training import describe_error, fmt, run_scaling

CANONICAL = """\
scaler.scale(loss / accum).backward()
scaler.unscale_(optimizer)
if (i + 1) % accum == 0:
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    def relevant(enabled, disabled):
        if not enabled.scaler_calls.get("unscale_"):
            return "the flagged code never called unscale_"
        return None

    res = run_scaling(lab, data, CANONICAL, iterations=lab.ACCUM, relevant=relevant)
    e = res.enabled
    ev = res.base_evidence(lab)
    err = res.enabled_only_error()
    ratio = res.update_ratio()
    ev.update(
        micro_batches=res.spec.iterations,
        update_ratio=lab.num(ratio),
        unscale_calls=e.scaler_calls.get("unscale_", 0),
        optimizer_steps=e.optimizer_steps,
    )
    if err:
        ev["error"] = err
    dtype = res.spec.dtype or "fp32"
    off = ratio is not None and not (0.5 <= ratio <= 2.0) and e.optimizer_steps > 0
    if err:
        return lab.confirmed(
            f"micro-batch {err.get('iteration', 0) + 1} of {res.spec.iterations} raised {describe_error(err)}", ev, method=res.method, dtype=dtype
        )
    if off:
        return lab.confirmed(
            f"no error, but the accumulated update was {fmt(ratio)}x the correct one (loss scale {fmt(res.scale)})",
            ev,
            method=res.method,
            dtype=dtype,
        )
    if ratio is not None and e.optimizer_steps > 0:
        return lab.not_reproduced(
            f"{res.spec.iterations} micro-batches accumulated and stepped with the same update as unscaled training (ratio {fmt(ratio)})",
            ev,
            method=res.method,
            dtype=dtype,
        )
    return lab.inconclusive("the optimizer never stepped", ev, method=res.method, dtype=dtype)
