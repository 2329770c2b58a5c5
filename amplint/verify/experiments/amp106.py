"""AMP106 scaler-with-fp16-params: `ValueError: Attempting to unscale FP16 gradients.`

A tiny model converted to the finding's dtype (fp16 by default), the finding's
`optimizer_class` (SGD by default) and a real GradScaler on the device: one
scaled backward and `scaler.step`.

fp16 gradients fail GradScaler's dtype check on every device. bf16 ones pass
it, and then depend on the device's unscale kernel: the CPU one accepts bf16
(E16: not reproduced), CUDA's has no bf16 version and raises
NotImplementedError (measured on an H200, torch 2.11+cu130): confirmed.
"""
from __future__ import annotations

from typing import Any, Dict

from ._cast import CastSkipped, run_cast


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    try:
        cls = lab.optimizer_class(data.get("optimizer_class") or "SGD")
    except LookupError:
        cls = torch.optim.SGD
    method, cast_ev = "experiment", {}
    model = None
    if data.get("cast"):  # the user's cast statement decides the parameters' dtype
        try:
            model, _, cast_ev = run_cast(lab, data)
            method = "snippet"
            low = [p.dtype for p in model.parameters() if p.dtype in (torch.float16, torch.bfloat16)]
            dtype = low[0] if low else torch.float32
        except CastSkipped as exc:
            cast_ev = {"snippet_skipped": str(exc)}
    if model is None:
        model = lab.model(dtype=dtype)
    opt = lab.optimizer(model.parameters(), cls.__name__)
    scaler = lab.scaler()
    x, _ = lab.batch(0, dtype=dtype)
    loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    name = lab.dtype_name(dtype)
    ev: Dict[str, Any] = {**cast_ev, "params_dtype": name, "grad_dtype": str(next(model.parameters()).grad.dtype).replace("torch.", ""), "optimizer": cls.__name__}
    try:
        scaler.step(opt)
        scaler.update()
    except Exception as exc:  # noqa: BLE001
        ev["error"] = lab.exc(exc)
        fp16_refused = isinstance(exc, ValueError) and "FP16" in str(exc)
        bf16_unsupported = isinstance(exc, NotImplementedError) and "BFloat16" in str(exc)
        if fp16_refused or bf16_unsupported:
            made = f"after `{cast_ev['cast_ran'][:50]}`, " if method == "snippet" else ""
            return lab.confirmed(f"{made}scaler.step on {name} parameters raised {type(exc).__name__}: {str(exc)[:160]}", ev, method=method, dtype=dtype)
        return lab.inconclusive(f"scaler.step raised {type(exc).__name__}, neither the fp16 ValueError nor the bf16 NotImplementedError", ev, dtype=dtype)
    ev["scale_after_step"] = lab.num(scaler.get_scale())
    made = f"after `{cast_ev['cast_ran'][:50]}`, " if method == "snippet" else ""
    return lab.not_reproduced(f"{made}GradScaler stepped {name} parameters without error", ev, method=method, dtype=dtype)
