"""AMP102 optimizer-step-bypasses-scaler: the update is scale x too big; the next update() raises.

Runs the flagged step with a GradScaler enabled and disabled and compares the
parameter updates; then calls the next `scaler.update()` if the step did not. Canonical: `scale(loss).backward(); optimizer.step()`.
With `unscaled: true` (unscale_ ran before `optimizer.step()`) the flagged step
(or the canonical one) runs with an inf gradient injected on the first
iteration: nothing skips that step, so the weights become inf/NaN.
"""
from __future__ import annotations

from typing import Any, Dict

from ._training import describe_error, fmt, run_scaling

CANONICAL = """\
scaler.scale(loss).backward()
optimizer.step()
"""
#: `unscaled: true` findings: unscale_ ran first, so the size is right but an overflowed step is applied
CANONICAL_UNSCALED = """\
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
optimizer.step()
scaler.update()
"""


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    def relevant(enabled, disabled):
        if enabled.optimizer_steps == 0 and not enabled.exception and not enabled.harness_update_error:
            return "the flagged code never stepped the optimizer"
        return None

    if data.get("unscaled"):
        return _unscaled(data, lab)
    res = run_scaling(lab, data, CANONICAL, complete_update="always", relevant=relevant)
    e = res.enabled
    ev = res.base_evidence(lab)
    ratio = res.update_ratio()
    err = res.enabled_only_error()
    ev.update(
        optimizer=res.spec.optimizer,
        update_ratio=lab.num(ratio),
        update_with_scaler=lab.num(e.param_delta),
        update_without_scaler=lab.num(res.disabled.param_delta),
        optimizer_steps=e.optimizer_steps,
        scaler_steps=e.scaler_calls.get("step", 0),
    )
    if err:
        ev["error"] = err
    dtype = res.dtype
    big = ratio is not None and ratio >= 2.0
    if big or err:
        parts = []
        if big:
            parts.append(
                f"optimizer.step() applied still-scaled gradients: the update was {fmt(ratio)}x the correct one "
                f"(loss scale {fmt(res.scale)}, {res.spec.optimizer})"
            )
        elif ratio is not None:
            parts.append(f"the update was {fmt(ratio)}x the correct one ({res.spec.optimizer} is insensitive to the gradient scale)")
        if err:
            parts.append(f"the next scaler.update() raised {describe_error(err)}" if e.harness_update_error is err else f"it raised {describe_error(err)}")
        return lab.confirmed("; ".join(parts), ev, method=res.method, dtype=dtype)
    if ratio is not None and 0.5 <= ratio <= 2.0:
        return lab.not_reproduced(
            f"the update matched the unscaled run (ratio {fmt(ratio)}) and scaler.update() raised nothing", ev, method=res.method, dtype=dtype
        )
    return lab.inconclusive(f"no parameter update to compare (ratio {fmt(ratio)})", ev, method=res.method, dtype=dtype)


def _unscaled(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    """unscale_ then optimizer.step(): nothing skips the step whose gradients overflowed."""
    def relevant(enabled, disabled):
        if enabled.optimizer_steps == 0:
            return "the flagged code never stepped the optimizer"
        return None

    res = run_scaling(lab, data, CANONICAL_UNSCALED, overflow_at=0, relevant=relevant)
    e = res.enabled
    ev = res.base_evidence(lab)
    ev.update(
        variant="unscale_ before optimizer.step()",
        overflow_injected="inf gradient on the first step",
        nonfinite_params=e.nonfinite_params,
        optimizer_steps=e.optimizer_steps,
        scale_history=e.scale_history,
    )
    if e.exception:
        ev["error"] = e.exception
    dtype = res.dtype
    if e.nonfinite_params:
        return lab.confirmed(
            f"the overflowed step was applied: {e.nonfinite_params} parameters became inf/NaN "
            f"(scaler.step would have skipped it; the scale still backed off to {fmt(e.scale_history[-1] if e.scale_history else None)})",
            ev,
            method=res.method,
            dtype=dtype,
        )
    return lab.not_reproduced("the overflowed step left every parameter finite", ev, method=res.method, dtype=dtype)
