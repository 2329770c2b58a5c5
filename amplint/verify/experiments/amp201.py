"""AMP201 half-model-training: updates lost to fp16 rounding; Adam's eps makes params non-finite.

One optimizer step on the parameters of a tiny model converted to fp16 (the
finding's dtype), with gradients spread from 1e-5 to 1e-1, against the same
step on fp32 parameters (the master weights autocast keeps). Counts parameters
whose fp32 update was lost to fp16 rounding and parameters that became
non-finite. Uses the finding's `optimizer_class`/`lr`/`eps`; without a class it
runs both SGD (lr 0.1) and Adam (lr 1e-3, eps 1e-8).
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, List

from ._training import fmt


def _num(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _one(lab: Any, cls: type, kwargs: Dict[str, Any], dtype: Any) -> Dict[str, Any]:
    torch = lab.torch

    def step(dt: Any):
        model = lab.model()  # fp32 init, then converted: the same starting values
        start = [p.detach().clone() for p in model.parameters()]
        model.to(dt)
        params = list(model.parameters())
        opt = lab.optimizer(params, cls.__name__, **kwargs)
        for p in params:
            grads = 10.0 ** torch.linspace(-5, -1, p.numel(), dtype=torch.float64)
            p.grad = grads.reshape(p.shape).to(p.device, dt)
        opt.step()
        return start, [p.detach() for p in params], opt

    start, low, opt = step(dtype)
    _, full, _ = step(torch.float32)
    lost = changed = nonfinite = total = 0
    for s, lo, hi in zip(start, low, full):
        moved = hi != s
        changed += int(moved.sum())
        lost += int((moved & (lo == s.to(dtype))).sum())
        nonfinite += int((~torch.isfinite(lo)).sum())
        total += s.numel()
    group = opt.param_groups[0]
    out = {"optimizer": cls.__name__, "lr": lab.num(group.get("lr")), "params": total, "updates_in_fp32": changed, "updates_lost": lost, "nonfinite_params": nonfinite}
    if "eps" in group:
        out["eps"] = group["eps"]
        out["eps_in_low_precision"] = lab.num(torch.tensor(float(group["eps"]), dtype=torch.float64).to(dtype).item())
    return out


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = torch.float16
    runs: List[Dict[str, Any]] = []
    if data.get("optimizer_class"):
        try:
            cls = lab.optimizer_class(data["optimizer_class"])
        except LookupError as exc:
            return lab.inconclusive(str(exc), {"optimizer_class": data.get("optimizer_class")})
        kwargs: Dict[str, Any] = {}
        if _num(data.get("lr")) is not None:
            kwargs["lr"] = _num(data["lr"])
        if _num(data.get("eps")) is not None and "eps" in inspect.signature(cls.__init__).parameters:
            kwargs["eps"] = _num(data["eps"])
        runs.append(_one(lab, cls, kwargs, dtype))
    else:
        runs.append(_one(lab, torch.optim.SGD, {"lr": 0.1}, dtype))
        runs.append(_one(lab, torch.optim.Adam, {"lr": 1e-3, "eps": 1e-8}, dtype))
    name = lab.dtype_name(dtype)
    ev: Dict[str, Any] = {"params_dtype": name, "grads": "1e-5 .. 1e-1", "runs": runs}
    parts = []
    for r in runs:
        bits = []
        if r["updates_lost"]:
            bits.append(f"{r['updates_lost']}/{r['updates_in_fp32']} updates lost to {name} rounding")
        if r["nonfinite_params"]:
            bits.append(f"{r['nonfinite_params']}/{r['params']} parameters became non-finite")
        if bits:
            parts.append(f"{r['optimizer']} (lr {fmt(r['lr'])}): " + ", ".join(bits))
    if parts:
        return lab.confirmed(f"one step on {name} parameters: " + "; ".join(parts) + " (fp32 master weights: none)", ev, dtype=dtype)
    summary = "; ".join(f"{r['optimizer']} (lr {fmt(r['lr'])})" for r in runs)
    return lab.not_reproduced(f"one step on {name} parameters: every update survived and every parameter stayed finite ({summary})", ev, dtype=dtype)
