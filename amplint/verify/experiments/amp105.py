"""AMP105 fp16-backward-without-scaler: gradient values underflow to zero in fp16 without scaling.

Trains nothing: one forward under autocast (the finding's dtype, fp16 by
default) on a small MLP and one backward, plain and through a GradScaler
(65536, then `unscale_`), against an fp32 reference. The loss is multiplied by
1, 1e-2 and 1e-3 to cover gradient magnitudes from typical to small; the
verdict reports, for each, the fraction of nonzero fp32 gradient values that
came out exactly zero (fp16's smallest subnormal is 5.96e-8).
"""
from __future__ import annotations

from typing import Any, Dict, List

from ._training import fmt

MULTIPLIERS = (1.0, 1e-2, 1e-3)


def _model(lab: Any) -> Any:
    nn = lab.nn
    lab.seed_all()
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(lab.device)


def _grads(lab: Any, x: Any, mult: float, dtype: Any, mode: str) -> Any:
    torch = lab.torch
    m = _model(lab)
    if mode == "fp32":
        (m(x).float().pow(2).mean() * mult).backward()
    else:
        with lab.autocast(dtype):
            loss = m(x).float().pow(2).mean() * mult
        if mode == "scaled":
            scaler = lab.scaler()
            scaler.scale(loss).backward()
            scaler.unscale_(torch.optim.SGD(m.parameters(), lr=0.0))
        else:
            loss.backward()
    return torch.cat([p.grad.detach().float().flatten() for p in m.parameters()])


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = torch.float16
    g = torch.Generator().manual_seed(lab.seed)
    x = torch.randn(256, 32, generator=g).to(lab.device)
    rows: List[Dict[str, Any]] = []
    for mult in MULTIPLIERS:
        ref = _grads(lab, x, mult, dtype, "fp32")
        nonzero = ref != 0
        n = max(int(nonzero.sum()), 1)
        plain = _grads(lab, x, mult, dtype, "plain")
        scaled = _grads(lab, x, mult, dtype, "scaled")
        rows.append(
            {
                "loss_multiplier": mult,
                "median_abs_grad": lab.num(ref.abs().median(), 3),
                "zeroed_without_scaler": lab.num(float(((plain == 0) & nonzero).sum()) / n, 4),
                "zeroed_with_scaler": lab.num(float(((scaled == 0) & nonzero).sum()) / n, 4),
                "rel_error_without_scaler": lab.num(float((plain - ref).norm() / ref.norm()), 3),
                "rel_error_with_scaler": lab.num(float((scaled - ref).norm() / ref.norm()), 3),
            }
        )
    name = lab.dtype_name(dtype)
    ev: Dict[str, Any] = {"gradient_values": int(ref.numel()), "loss_scale": 65536.0, "regimes": rows}
    worse = [r for r in rows if r["zeroed_without_scaler"] > r["zeroed_with_scaler"]]
    table = "; ".join(
        f"median |grad| {fmt(r['median_abs_grad'])}: {r['zeroed_without_scaler']:.2%} zeroed without a scaler, {r['zeroed_with_scaler']:.2%} with"
        for r in rows
    )
    if worse:
        return lab.confirmed(f"{name} backward: {table}", ev, dtype=dtype)
    return lab.not_reproduced(f"no gradient value underflowed in {name}: {table}", ev, dtype=dtype)
