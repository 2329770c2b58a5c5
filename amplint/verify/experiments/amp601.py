"""AMP601 bf16-without-capability-check: is this GPU one without bf16 tensor cores?

Reports the CUDA device's compute capability and `torch.cuda.is_bf16_supported()`
with the default emulation fallback and with `including_emulation=False`.
Below capability 8.0 there are no bf16 tensor cores while the bare call may
still say True (emulation), so the finding is confirmed; on 8.0 or newer it
is not reproduced. Nothing is timed: the speed ratio is not claimed (
§7). On a CPU run, or on ROCm (whose capability numbers are not NVIDIA's), it is
inconclusive.
"""
from __future__ import annotations

from typing import Any, Dict

from ._capability import cpu_evidence, cuda_capability


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    ev = cuda_capability(lab)
    if ev is None:
        return lab.needs_cuda("a CUDA device's compute capability", cpu_evidence(lab), dtype=torch.bfloat16)
    if ev["rocm"]:
        return lab.inconclusive("ROCm: capability numbers are not NVIDIA's", ev, dtype=torch.bfloat16)
    cap, name = tuple(ev["capability_tuple"]), ev["device_name"]
    bare, native = ev["is_bf16_supported"], ev["is_bf16_supported_without_emulation"]
    if cap < (8, 0):
        return lab.confirmed(
            f"{name} is sm_{cap[0]}{cap[1]} (< 8.0): no bf16 tensor cores; is_bf16_supported() = {bare}, "
            f"including_emulation=False = {native}",
            ev,
            dtype=torch.bfloat16,
        )
    return lab.not_reproduced(
        f"{name} is sm_{cap[0]}{cap[1]} (>= 8.0): bf16 tensor cores present; is_bf16_supported() = {bare}, "
        f"including_emulation=False = {native}",
        ev,
        dtype=torch.bfloat16,
    )
