"""AMP502 custom-op-without-autocast-registration: what dtype an unregistered custom op receives.

Defines a fresh `torch.library.custom_op` in the worker (a matmul kernel that
records the dtypes it receives and whether autocast is on inside it), then
calls it under autocast (the finding's dtype, else the device default: bf16 on
CPU, fp16 on CUDA) on the output of a linear layer and an fp32 weight: once
unregistered and once after `register_autocast(device, cast_inputs=torch.float32)`. Confirmed when the unregistered kernel received a
low-precision tensor that the registered one receives as fp32. The user's op
itself is not run (it is usually a compiled extension); the dispatcher's
autocast fallthrough for unregistered ops is the same on every device.
"""
from __future__ import annotations

import itertools
from typing import Any, Dict, List, Tuple

_IDS = itertools.count()


def _define(lab: Any) -> Tuple[Any, List[Tuple[str, str, bool]]]:
    torch = lab.torch
    seen: List[Tuple[str, str, bool]] = []
    name = f"amplint_verify::probe_mm_{next(_IDS)}"
    device_type = lab.device_type

    def probe(a, b):  # noqa: ANN001, ANN202 - annotations set below (this module's are strings)
        seen.append((lab.dtype_name(a.dtype), lab.dtype_name(b.dtype), bool(torch.is_autocast_enabled(device_type))))
        return a.mm(b)

    probe.__annotations__ = {"a": torch.Tensor, "b": torch.Tensor, "return": torch.Tensor}
    return torch.library.custom_op(name, mutates_args=())(probe), seen


def _call(lab: Any, op: Any, dtype: Any) -> Tuple[Any, Any]:
    torch = lab.torch
    lab.seed_all()
    lin = torch.nn.Linear(lab.IN, lab.HIDDEN).to(lab.device)
    w = torch.randn(lab.HIDDEN, lab.OUT).to(lab.device)
    x, _ = lab.batch(0)
    with lab.autocast(dtype):
        h = lin(x)
        out = op(h, w)
    return lab.dtype_name(h.dtype), lab.dtype_name(out.dtype)


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    default = torch.float16 if lab.is_cuda else torch.bfloat16
    dtype = lab.dtype(data.get("dtype"), default=default)
    name = lab.dtype_name(dtype) or str(dtype)
    ev: Dict[str, Any] = {"autocast": f"{lab.device_type}, {name}", "flagged_op": data.get("op")}
    if data.get("device") and data["device"] != lab.device_type:
        ev["ran_on"] = f"{lab.device_type} (the flagged code targets {data['device']})"
    if not hasattr(torch.library, "custom_op"):
        return lab.inconclusive(f"torch.library.custom_op does not exist in torch {torch.__version__}", ev, dtype=dtype)
    op, seen = _define(lab)
    h_dtype, out_plain = _call(lab, op, dtype)
    a, b, on = seen[-1]
    ev["linear_output_dtype"] = h_dtype
    ev["unregistered"] = {"kernel_saw": [a, b], "autocast_on_in_kernel": on, "output_dtype": out_plain}
    try:
        op.register_autocast(lab.device_type, torch.float32)
    except (AttributeError, ValueError) as exc:
        ev["register_autocast_error"] = lab.exc(exc)
        return lab.inconclusive("register_autocast is unavailable here", ev, dtype=dtype)
    _, out_reg = _call(lab, op, dtype)
    ra, rb, ron = seen[-1]
    ev["registered_fp32"] = {"kernel_saw": [ra, rb], "autocast_on_in_kernel": ron, "output_dtype": out_reg}
    low = {"fp16", "bf16"}
    if (a in low or b in low) and ra == rb == "fp32":
        return lab.confirmed(
            f"{name} autocast: an unregistered custom op received ({a}, {b}) with autocast still on inside "
            f"(output {out_plain}); after register_autocast(cast_inputs=fp32) it received ({ra}, {rb}), autocast "
            f"{'on' if ron else 'off'}",
            ev,
            dtype=dtype,
        )
    return lab.not_reproduced(
        f"{name} autocast: the unregistered custom op received ({a}, {b}); registered ({ra}, {rb})", ev, dtype=dtype
    )
