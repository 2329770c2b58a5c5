"""AMP204 autocast-disabled-without-cast: a low-precision tensor reaches fp32 code uncast.

Produces the tensor with the finding's `source_op` under autocast (the
finding's dtype, else the device default), then runs the finding's `op` on it
inside `autocast(enabled=False)` against fp32 operands, without and with
`.float()`: a dtype-mismatch exception, or a result still in low precision,
confirms. On CPU a
`source_op` that only the CUDA autocast list lowers is `inconclusive: needs CUDA`.
"""
from __future__ import annotations

from typing import Any, Dict

from .amp203 import _op


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    source = str(data.get("source_op") or "linear").rsplit(".", 1)[-1]
    op = str(data.get("op") or "linear").rsplit(".", 1)[-1]
    default = torch.float16 if lab.is_cuda else torch.bfloat16
    dtype = lab.dtype(data.get("dtype"), default=default)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = default
    make, use = _op(torch, source), _op(torch, op)
    name = lab.dtype_name(dtype)
    ev: Dict[str, Any] = {"source_op": source, "op": op, "autocast": f"{lab.device_type}, {name}"}
    if make is None or use is None:
        return lab.inconclusive(f"no reproduction for {source if make is None else op!r}", ev, dtype=dtype)
    lab.seed_all()
    x = torch.randn(4, 8, device=lab.device)
    try:
        with lab.autocast(dtype):
            h = make(x, None)
    except RuntimeError as exc:
        return lab.inconclusive(f"the {source} reproduction failed: {str(exc)[:120]}", ev, dtype=dtype)
    if h.dim() != 2 or h.shape[-1] != 8:
        h = h.reshape(-1)[:32].reshape(4, 8) if h.numel() >= 32 else None
    if h is None:
        return lab.inconclusive(f"{source} output does not fit the {op} reproduction", ev, dtype=dtype)
    ev["tensor_dtype"] = str(h.dtype).replace("torch.", "")
    if h.dtype == torch.float32:
        if not lab.is_cuda and data.get("device") != "cpu":
            return lab.needs_cuda(f"CPU autocast does not lower {source}; the CUDA list decides", ev, dtype=dtype)
        return lab.not_reproduced(f"{source} under {name} autocast already returned float32", ev, dtype=dtype)
    results = {}
    for label, inp in (("uncast", h), ("with .float()", h.float())):
        lab.seed_all()
        with torch.autocast(lab.device_type, enabled=False):
            try:
                out = use(inp, None)
                results[label] = str(out.dtype).replace("torch.", "")
            except Exception as exc:  # noqa: BLE001
                results[label] = lab.exc(exc)
    ev["inside_autocast_enabled_false"] = results
    uncast = results["uncast"]
    if isinstance(uncast, dict):
        return lab.confirmed(
            f"{op} on the {ev['tensor_dtype']} output of {source} inside autocast(enabled=False) raised "
            f"{uncast['type']}: {uncast['message'][:140]} (with .float(): {results['with .float()']})",
            ev,
            dtype=dtype,
        )
    if uncast != "float32":
        return lab.confirmed(f"{op} inside autocast(enabled=False) still ran in {uncast} (with .float(): {results['with .float()']})", ev, dtype=dtype)
    return lab.not_reproduced(f"{op} inside autocast(enabled=False) ran in float32 without the cast", ev, dtype=dtype)
