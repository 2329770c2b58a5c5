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

from ._cast import CastSkipped, fp32_twin, low_precision, run_cast, users_optimizer
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


def users_step(lab: Any, data: Dict[str, Any]) -> Dict[str, Any]:
    """The user's cast, then the user's optimizer over what it made low precision, one step:
    updates lost to rounding and non-finite parameters against the same optimizer on fp32
    copies of the same values (fp16 or bf16, whichever the cast made; AMP206 runs it too).
    Raises CastSkipped when the user's code could not run."""
    torch = lab.torch
    model, _, ev = run_cast(lab, data)
    low = low_precision(lab, model)
    total = sum(p.numel() for p in model.parameters())
    if not low:
        return lab.not_reproduced(
            f"the cast `{ev['cast_ran'][:60]}` left all {total} of the tiny model's values fp32: the optimizer updates fp32 weights",
            ev, method="snippet",
        )
    opt, how = users_optimizer(lab, data, model)
    ev.update(how)
    twin, twin_opt = fp32_twin(lab, model, opt)
    params, mirror = list(model.parameters()), list(twin.parameters())
    start = [p.detach().clone() for p in params]
    for p, q in zip(params, mirror):
        grads = 10.0 ** torch.linspace(-5, -1, p.numel(), dtype=torch.float64)
        p.grad = grads.reshape(p.shape).to(p.device, p.dtype)
        q.grad = grads.reshape(q.shape).to(q.device, q.dtype)
    opt.step()
    twin_opt.step()
    lost = moved_total = nonfinite = counted = 0
    for p, q, s in zip(params, mirror, start):
        if p.dtype not in (torch.float16, torch.bfloat16):
            continue
        moved = q.detach() != s.float()
        moved_total += int(moved.sum())
        lost += int((moved & (p.detach() == s)).sum())
        nonfinite += int((~torch.isfinite(p.detach())).sum())
        counted += p.numel()
    name = lab.dtype_name(low[0].dtype)
    group = opt.param_groups[0]
    ev.update(
        {"grads": "1e-5 .. 1e-1", "low_precision_values": counted, "parameter_values": total, "updates_in_fp32": moved_total,
         "updates_lost": lost, "nonfinite_params": nonfinite, "optimizer": type(opt).__name__, "lr": lab.num(group.get("lr"))}
    )
    if "eps" in group:
        ev["eps"] = group["eps"]
    made = f"`{ev['cast_ran'][:50]}`" + (f" ({ev['cast_site']})" if ev.get("cast_site") else "")
    bits = []
    if lost:
        bits.append(f"{lost}/{moved_total} updates lost to {name} rounding")
    if nonfinite:
        bits.append(f"{nonfinite}/{counted} parameters became non-finite")
    defaults = (ev.get("assumed") or {}).get("optimizer arguments at the class default")
    if defaults:
        ev["lr_note"] = f"class defaults for {', '.join(defaults)}"
    if bits:
        return lab.confirmed(
            f"{made} made {counted}/{total} of the tiny model's values {name}; one step of this code's {type(opt).__name__} (lr {fmt(ev['lr'])}{'; ' + ev['lr_note'] if defaults else ''}): "
            + ", ".join(bits) + " (fp32 copies: none)",
            ev, method="snippet", dtype=low[0].dtype,
        )
    return lab.not_reproduced(
        f"{made} made {counted}/{total} of the tiny model's values {name}, but one step of this code's {type(opt).__name__} kept every update and every value finite",
        ev, method="snippet", dtype=low[0].dtype,
    )


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    skipped = None
    if data.get("cast"):
        try:
            return users_step(lab, data)
        except CastSkipped as exc:
            skipped = str(exc)
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
    if skipped:
        ev["snippet_skipped"] = skipped
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
