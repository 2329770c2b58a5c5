"""AMP103 scaler-step-without-update: the next iteration raises, or the scale never backs off.

Runs the flagged step for two iterations, the first with an overflowing (inf)
gradient, with a GradScaler enabled and disabled. Canonical: `scale(loss).backward(); scaler.step(optimizer);
optimizer.zero_grad()` with no `update()`.
"""
from __future__ import annotations

from typing import Any, Dict

from ._training import describe_error, fmt, run_scaling

CANONICAL = """\
scaler.scale(loss).backward()
scaler.step(optimizer)
optimizer.zero_grad()
"""


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    def relevant(enabled, disabled):
        if not enabled.scaler_calls.get("step") and not enabled.scaler_calls.get("unscale_"):
            return "the flagged code never stepped the scaler"
        return None

    res = run_scaling(lab, data, CANONICAL, iterations=2, overflow_at=0, relevant=relevant)
    e = res.enabled
    ev = res.base_evidence(lab)
    err = res.enabled_only_error()
    after_overflow = e.scale_history[0] if e.scale_history else None
    ev.update(
        scale_history=e.scale_history,
        scale_after_overflow=after_overflow,
        update_calls=e.scaler_calls.get("update", 0),
        iterations=e.iterations_run,
    )
    if err:
        ev["error"] = err
    dtype = res.dtype
    stuck = after_overflow is not None and after_overflow >= res.scale and e.scaler_calls.get("update", 0) == 0
    if err or stuck:
        parts = []
        if err:
            k = err.get("iteration", 0)
            parts.append(f"{f'iteration {k + 1}' if k else 'the step'} raised {describe_error(err)}")
        if stuck:
            parts.append(f"after an inf gradient the scale stayed {fmt(after_overflow)} (no update() backed it off)")
        return lab.confirmed("; ".join(parts), ev, method=res.method, dtype=dtype)
    if after_overflow is not None and after_overflow < res.scale:
        return lab.not_reproduced(
            f"two iterations ran and the scale backed off {fmt(res.scale)} -> {fmt(after_overflow)} after the overflow",
            ev,
            method=res.method,
            dtype=dtype,
        )
    return lab.inconclusive("the step neither raised nor updated the scale", ev, method=res.method, dtype=dtype)
