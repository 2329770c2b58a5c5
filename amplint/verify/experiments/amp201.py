"""AMP201 half-model-training: updates lost to fp16 rounding; Adam's eps makes params non-finite.

One optimizer step (the finding's `optimizer_class`, `lr`, `eps`; SGD by
default) on the parameters of a tiny model converted to fp16, with gradients
spread from 1e-5 to 1e-1, against the same step on fp32 parameters (the master
weights autocast keeps). Counts parameters whose fp32 update was lost to fp16
rounding and parameters that became non-finite (amp-facts §0.12, §6.4, E30).
"""
from __future__ import annotations

import inspect
from typing import Any, Dict

from ._training import fmt


def _num(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = torch.float16
    try:
        cls = lab.optimizer_class(data.get("optimizer_class") or "SGD")
    except LookupError as exc:
        return lab.inconclusive(str(exc), {"optimizer_class": data.get("optimizer_class")})
    kwargs: Dict[str, Any] = {}
    if _num(data.get("lr")) is not None:
        kwargs["lr"] = _num(data["lr"])
    if _num(data.get("eps")) is not None and "eps" in inspect.signature(cls.__init__).parameters:
        kwargs["eps"] = _num(data["eps"])

    def step(dt: Any):
        model = lab.model()  # fp32 init, then converted: the same starting values
        start = [p.detach().clone() for p in model.parameters()]
        model.to(dt)
        params = list(model.parameters())
        opt = lab.optimizer(model.parameters(), cls.__name__, **kwargs)
        for p in params:
            n = p.numel()
            grads = 10.0 ** torch.linspace(-5, -1, n, dtype=torch.float64)
            p.grad = grads.reshape(p.shape).to(p.device, dt)
        opt.step()
        return start, [p.detach() for p in params], opt

    start, low, opt = step(dtype)
    _, full, _ = step(torch.float32)
    lost = changed = nonfinite = total = 0
    for s, lo, hi in zip(start, low, full):
        s_low = s.to(dtype)
        moved = hi != s
        changed += int(moved.sum())
        lost += int((moved & (lo == s_low)).sum())
        nonfinite += int((~torch.isfinite(lo)).sum())
        total += s.numel()
    group = opt.param_groups[0]
    name = lab.dtype_name(dtype)
    ev = {
        "optimizer": cls.__name__,
        "lr": lab.num(group.get("lr")),
        "grads": "1e-5 .. 1e-1",
        "params": total,
        "updates_in_fp32": changed,
        "updates_lost_in_" + name: lost,
        "nonfinite_params_" + name: nonfinite,
    }
    if "eps" in group:
        ev["eps"] = group["eps"]
        ev["eps_in_" + name] = lab.num(torch.tensor(float(group["eps"]), dtype=torch.float64).to(dtype).item())
    parts = []
    if lost:
        parts.append(f"{lost}/{changed} parameter updates were lost to {name} rounding")
    if nonfinite:
        parts.append(f"{nonfinite}/{total} parameters became non-finite")
    head = f"one {cls.__name__} step (lr {fmt(group.get('lr'))}) on {name} parameters: "
    if parts:
        return lab.confirmed(head + ", ".join(parts) + " (fp32 master weights: none)", ev, dtype=dtype)
    return lab.not_reproduced(head + f"all {changed} updates survived and every parameter stayed finite", ev, dtype=dtype)
