"""AMP105 fp16-backward-without-scaler: gradient values underflow to zero in fp16 without scaling.

Trains nothing: one forward under autocast (the finding's dtype, fp16 by
default) on a small MLP and one backward, plain and through a GradScaler
(65536, then `unscale_`), against an fp32 reference. The loss is multiplied by
1, 1e-2 and 1e-3 to cover gradient magnitudes from typical to small; the
verdict reports, for each, the fraction of nonzero fp32 gradient values that
came out exactly zero (fp16's smallest subnormal is 5.96e-8).

The user's own code (`step_source`: the region's `with` through the flagged
backward) runs on the lab's tiny model twice, with the code's AMP flags
(`use_amp`, `args.fp16`, ...) true and false. It is `confirmed` when a
backward ran on a graph with fp16 ops and did not go through a GradScaler,
`not-reproduced` when every backward that ran was scaled or ran without fp16
ops (the plain backward on the branch where the region's `enabled` flag is
off), `inconclusive` when the flagged backward never ran. The regimes above
are then the reference for what such a backward loses.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..snippet import (
    Batch,
    Refused,
    Sink,
    TrainingSpec,
    Unbindable,
    _tiny_model_wrapper,
    bind_by_role,
    prepare_training,
    resolve_qualname,
    run_slice,
    slice_globals,
)
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
    runs, why = _users_step(lab, data)
    if runs is not None:
        return _judge(lab, runs, ev, name, dtype)
    if why:
        ev["snippet_skipped"] = why
    worse = [r for r in rows if r["zeroed_without_scaler"] > r["zeroed_with_scaler"]]
    table = "; ".join(
        f"median |grad| {fmt(r['median_abs_grad'])}: {r['zeroed_without_scaler']:.2%} zeroed without a scaler, {r['zeroed_with_scaler']:.2%} with"
        for r in rows
    )
    if worse:
        return lab.confirmed(f"{name} backward: {table}", ev, dtype=dtype)
    return lab.not_reproduced(f"no gradient value underflowed in {name}: {table}", ev, dtype=dtype)


def _users_step(lab: Any, data: Dict[str, Any]) -> Tuple[Optional[List[Dict[str, Any]]], Optional[str]]:
    """Run the region through the backward with the code's flags on and off; what each backward saw."""
    source = data.get("step_source")
    if not isinstance(source, str) or not source.strip():
        return None, None
    try:
        prepared = prepare_training(TrainingSpec(source=source, data=dict(data)))
    except Refused as exc:
        return None, f"not run: {exc}"
    runs, errors = [], []
    for flag in (True, False):
        try:
            record = _run_once(lab, prepared, flag)
        except Unbindable as exc:
            return None, f"could not bind {', '.join(exc.names)}"
        if record.get("error") and not record["backwards"]:
            errors.append(record["error"])
        runs.append(record)
    if len(errors) == 2:
        return None, f"the flagged code raised {errors[0]['type']}: {errors[0]['message'][:120]}"
    return runs, None


def _run_once(lab: Any, prepared: Any, flag: bool) -> Dict[str, Any]:
    torch = lab.torch
    lab.seed_all()
    model = lab.model()
    criterion = torch.nn.MSELoss()
    wrapped = _tiny_model_wrapper(torch)(model, criterion)
    opt = lab.optimizer(model.parameters(), "SGD")
    scaler = lab.scaler()
    x, y = lab.batch(0)
    record: Dict[str, Any] = {"flags": flag, "fp16_forward": False, "backwards": [], "error": None}
    low = (torch.float16,)

    def on_forward(_module: Any, _inputs: Any, output: Any) -> None:
        if getattr(output, "dtype", None) in low:
            record["fp16_forward"] = True

    for layer in model:
        layer.register_forward_hook(on_forward)
    scaled: set = set()
    original_scale = scaler.scale

    def scale(outputs: Any) -> Any:
        out = original_scale(outputs)
        scaled.add(id(out))
        return out

    scaler.scale = scale  # type: ignore[method-assign]
    values = {
        "model": wrapped, "optimizer": opt, "scaler": scaler, "criterion": criterion, "x": x, "y": y, "batch": Batch((x, y)),
        "flag": flag, "index": 0, "accum": lab.ACCUM, "threshold": 1.0, "device": lab.device, "dtype": torch.float16,
        "sink": Sink(), "params": list(model.parameters()), "loader": [Batch(lab.batch(j)) for j in range(lab.ACCUM)],
        "scheduler": torch.optim.lr_scheduler.LambdaLR(opt, lambda _s: 1.0),
    }

    def value_for(role: str, path: str) -> Any:
        if role == "loss":
            return criterion(model(x).float(), y)  # a loss the slice reads but does not compute: fp32
        if role.startswith(("module:", "api:")):
            return resolve_qualname(role.split(":", 1)[1])
        return values[role]

    globs = slice_globals(lab, bind_by_role(prepared.roles, value_for))
    original_backward = torch.Tensor.backward

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        record["backwards"].append({"scaled": id(self) in scaled, "fp16_graph": record["fp16_forward"]})
        return original_backward(self, *args, **kwargs)

    torch.Tensor.backward = backward  # type: ignore[method-assign]
    try:
        error = run_slice(prepared, globs)
    finally:
        torch.Tensor.backward = original_backward  # type: ignore[method-assign]
    if error is not None:
        record["error"] = lab.exc(error)
    return record


def _judge(lab: Any, runs: List[Dict[str, Any]], ev: Dict[str, Any], name: str, dtype: Any) -> Dict[str, Any]:
    ev["user_code_runs"] = runs
    bad = [r for r in runs if any(b["fp16_graph"] and not b["scaled"] for b in r["backwards"])]
    if bad:
        when = "with its AMP flags on" if bad[0]["flags"] else "with its AMP flags off"
        worst = max(ev["regimes"], key=lambda r: r["zeroed_without_scaler"])
        return lab.confirmed(
            f"the flagged code ran a backward through fp16 autocast ops with no GradScaler ({when}); gradients below 6e-8 "
            f"then flush to zero (the reference experiment: {worst['zeroed_without_scaler']:.2%} zeroed at median |grad| "
            f"{fmt(worst['median_abs_grad'])})",
            ev,
            method="snippet",
            dtype=dtype,
        )
    ran = [b for r in runs for b in r["backwards"]]
    if ran:
        parts = []
        if any(not b["scaled"] for b in ran):
            parts.append("its unscaled backward ran without fp16 ops (autocast off)")
        if any(b["scaled"] for b in ran):
            parts.append("its fp16 backward went through the GradScaler")
        return lab.not_reproduced(
            f"the flagged code, run with its AMP flags on and off: {'; '.join(parts)}",
            ev,
            method="snippet",
            dtype=dtype,
        )
    return lab.inconclusive("the flagged backward never ran", ev, method="snippet", dtype=dtype)
