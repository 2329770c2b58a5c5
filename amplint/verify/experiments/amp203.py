"""AMP203 ineffective-fp32-cast-in-autocast: the `.float()` is undone by the next op.

Runs the finding's `op` on an fp32 (`.float()`-ed) input under autocast on the
lab's device with the finding's dtype (the device default when absent) and
reports the output dtype: low precision means autocast recast the input. On CPU an op that only the CUDA autocast list
lowers is `inconclusive: needs CUDA`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

A, B = 8, 8


def _op(torch: Any, name: str) -> Optional[Callable[[Any, Any], Any]]:
    F = torch.nn.functional
    w = lambda h, *shape: torch.randn(*shape, device=h.device)  # noqa: E731
    table: Dict[str, Callable[[Any, Any], Any]] = {
        "linear": lambda h, g: F.linear(h, w(h, B, A)),
        "matmul": lambda h, g: torch.matmul(h, w(h, A, B)),
        "mm": lambda h, g: torch.mm(h, w(h, A, B)),
        "addmm": lambda h, g: torch.addmm(w(h, B), h, w(h, A, B)),
        "bmm": lambda h, g: torch.bmm(h[None], w(h, 1, A, B)),
        "baddbmm": lambda h, g: torch.baddbmm(w(h, 1, 4, B), h[None], w(h, 1, A, B)),
        "addbmm": lambda h, g: torch.addbmm(w(h, 4, B), h[None], w(h, 1, A, B)),
        "einsum": lambda h, g: torch.einsum("ij,jk->ik", h, w(h, A, B)),
        "mv": lambda h, g: torch.mv(h, w(h, A)),
        "addmv": lambda h, g: torch.addmv(w(h, 4), h, w(h, A)),
        "addr": lambda h, g: torch.addr(w(h, A, B), h[0], w(h, B)),
        "conv1d": lambda h, g: F.conv1d(h[None], w(h, 2, 4, 3)),
        "conv2d": lambda h, g: F.conv2d(h[None, None], w(h, 2, 1, 3, 3)),
        "conv_transpose1d": lambda h, g: F.conv_transpose1d(h[None], w(h, 4, 2, 3)),
        "conv_transpose2d": lambda h, g: F.conv_transpose2d(h[None, None], w(h, 1, 2, 3, 3)),
        "prelu": lambda h, g: F.prelu(h, w(h, 1)),
        "scaled_dot_product_attention": lambda h, g: F.scaled_dot_product_attention(h[None], h[None], h[None]),
        "linalg_vecdot": lambda h, g: torch.linalg.vecdot(h, w(h, 4, A)),
    }
    aliases = {"Linear": "linear", "Conv1d": "conv1d", "Conv2d": "conv2d", "__matmul__": "matmul", "sdpa": "scaled_dot_product_attention"}
    return table.get(aliases.get(name, name))


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    op = str(data.get("op") or "linear").rsplit(".", 1)[-1]
    default = torch.float16 if lab.is_cuda else torch.bfloat16
    dtype = lab.dtype(data.get("dtype"), default=default)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = default
    fn = _op(torch, op)
    ev: Dict[str, Any] = {"op": op, "autocast": f"{lab.device_type}, {lab.dtype_name(dtype)}"}
    if fn is None:
        return lab.inconclusive(f"no reproduction for op {op!r}", ev, dtype=dtype)
    key = "AutocastCUDA" if lab.is_cuda else "AutocastCPU"
    try:
        listed = bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", key))
    except Exception:  # noqa: BLE001
        listed = None
    ev["autocast_kernel"] = listed
    if not lab.is_cuda and listed is False and data.get("device") != "cpu":
        return lab.needs_cuda(f"CPU autocast does not lower {op}; the CUDA list decides", ev, dtype=dtype)
    lab.seed_all()
    h = torch.randn(4, A, device=lab.device, dtype=dtype)
    with lab.autocast(dtype):
        out = fn(h.float(), None)
    ev.update(input_dtype="float32 (after .float())", output_dtype=str(out.dtype).replace("torch.", ""))
    if out.dtype == dtype:
        return lab.confirmed(f"under {lab.dtype_name(dtype)} autocast {op}(h.float()) returned {ev['output_dtype']}: the cast was undone", ev, dtype=dtype)
    return lab.not_reproduced(f"under {lab.dtype_name(dtype)} autocast {op}(h.float()) returned {ev['output_dtype']}: the fp32 cast held", ev, dtype=dtype)
