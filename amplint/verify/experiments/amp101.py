"""AMP101 clip-grad-before-unscale: the clip sees scale x the true norm; the update shrinks.

Runs the flagged step (`step_source`) on a tiny model with a real GradScaler,
once enabled and once disabled, and compares what the clip saw. The canonical
reproduction is `scale(loss).backward(); clip(model.parameters(), threshold);
scaler.step(optimizer); scaler.update()`.
"""
from __future__ import annotations

from typing import Any, Dict

from ._training import fmt, run_scaling

CANONICAL = """\
scaler.scale(loss).backward()
torch.nn.utils.{func}(model.parameters(), {threshold!r})
scaler.step(optimizer)
scaler.update()
"""


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    func = str(data.get("clip_function") or "clip_grad_norm_")
    func = "clip_grad_value_" if "value" in func else "clip_grad_norm_"
    threshold = data.get("threshold")
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or threshold <= 0:
        threshold = None
    canonical_threshold = float(threshold) if threshold is not None else (1.0 if func == "clip_grad_norm_" else 0.1)

    def relevant(enabled, disabled):
        if not enabled.clips or not disabled.clips:
            return "the flagged code never reached a torch clip function"
        return None

    res = run_scaling(
        lab,
        data,
        CANONICAL.format(func=func, threshold=canonical_threshold),
        complete_update="if-stepped",
        relevant=relevant,
        threshold=threshold,
    )
    e, d = res.enabled, res.disabled
    ev = res.base_evidence(lab)
    if res.method == "experiment" and threshold is None:
        ev.setdefault("assumed", {})["clip threshold"] = canonical_threshold
    if not e.clips or not d.clips:
        return lab.error("the canonical reproduction did not reach the clip", **ev)
    ce, cd = e.clips[0], d.clips[0]
    ratio = ce["seen"] / cd["seen"] if cd["seen"] else float("inf")
    thr = ce["threshold"]
    ratio_update = res.update_ratio()
    shrink = (1.0 / ratio_update) if ratio_update not in (None, 0.0) else None
    what = "norm" if ce["function"] == "clip_grad_norm_" else "max |grad|"
    ev.update(
        clip_function=ce["function"],
        threshold=lab.num(thr),
        clip_saw=lab.num(ce["seen"]),
        true_value=lab.num(cd["seen"]),
        ratio=lab.num(ratio),
        clip_fired=ce["seen"] > thr,
        clip_fired_on_true_grads=cd["seen"] > thr,
        update_shrink=lab.num(shrink),
    )
    if "fraction_clipped" in ce:
        ev["fraction_clipped"] = lab.num(ce["fraction_clipped"])
        ev["fraction_clipped_on_true_grads"] = lab.num(cd.get("fraction_clipped"))
    if e.exception:
        ev["error"] = e.exception
    dtype = res.dtype
    if ratio > 1.5:
        if ce["seen"] > thr:
            tail = f"it clipped to {fmt(thr)} and the real update came out {fmt(shrink)}x smaller than with unscaled clipping"
        else:
            tail = f"the threshold {fmt(thr)} is above even the scaled value here, so this step was not clipped"
        summary = (
            f"{ce['function']} saw {what} {fmt(ce['seen'])} = {fmt(ratio)}x the true {fmt(cd['seen'])} "
            f"(loss scale {fmt(res.scale)}); {tail}"
        )
        return lab.confirmed(summary, ev, method=res.method, dtype=dtype)
    if 0.67 <= ratio <= 1.5:
        summary = f"{ce['function']} saw the true {what} {fmt(cd['seen'])} (ratio {fmt(ratio)}): the gradients were unscaled before the clip"
        return lab.not_reproduced(summary, ev, method=res.method, dtype=dtype)
    return lab.inconclusive(f"the clip saw {fmt(ratio)}x the true {what}, not the loss scale", ev, method=res.method, dtype=dtype)
