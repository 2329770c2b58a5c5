"""AMP602 fp16-without-tensor-core-check: is this GPU one without fp16 tensor cores?

Reports the CUDA device's compute capability: below 7.0 (before Volta) there
are no fp16 tensor cores, so the finding is confirmed; on 7.0 or newer it is
not reproduced. Nothing is timed: the speed-up depends on the GPU and is not
claimed. On a CPU run, or on ROCm, it is inconclusive.
"""
from __future__ import annotations

from typing import Any, Dict

from ._capability import cpu_evidence, cuda_capability


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    ev = cuda_capability(lab)
    if ev is None:
        return lab.needs_cuda("a CUDA device's compute capability", cpu_evidence(lab), dtype=torch.float16)
    if ev["rocm"]:
        return lab.inconclusive("ROCm: capability numbers are not NVIDIA's", ev, dtype=torch.float16)
    cap, name = tuple(ev["capability_tuple"]), ev["device_name"]
    if cap < (7, 0):
        return lab.confirmed(f"{name} is sm_{cap[0]}{cap[1]} (< 7.0): no fp16 tensor cores", ev, dtype=torch.float16)
    return lab.not_reproduced(f"{name} is sm_{cap[0]}{cap[1]} (>= 7.0): fp16 tensor cores present", ev, dtype=torch.float16)
