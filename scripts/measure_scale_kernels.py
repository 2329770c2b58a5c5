"""Measure, on a CPU build of torch, the kernel facts behind AMP304 and AMP812 (issue 23).

    python scripts/measure_scale_kernels.py

* AMP812: torch's `_scaled_mm` (what torchao's float8 linear calls for `input @ weight.t()`)
  checks its shapes before it needs a GPU; its meta kernel runs on CPU. Printed for the
  shapes of the rule's examples.
* AMP304: torch's CPU flash-attention kernel accepts fp32 (the fp16/bf16-only check is in
  the CUDA kernel, `sdp_utils.cpp`), which is why the rule's consequence is CUDA-only.

Prints one JSON object; tests/test_rules_scale.py runs it.
"""
from __future__ import annotations

import json

import torch
import torch.nn.functional as F


def scaled_mm(m: int, k: int, n: int) -> str:
    a = torch.empty(m, k, device="meta", dtype=torch.float8_e4m3fn)
    b = torch.empty(n, k, device="meta", dtype=torch.float8_e4m3fn).t()  # the weight, transposed
    one = torch.ones((), device="meta")
    try:
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return "ok"
    except RuntimeError as exc:
        return str(exc).splitlines()[0]


def cpu_flash_fp32() -> str:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 4, 64, 32)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, q, q)
    return str(out.dtype)


def main() -> None:
    shapes = {"1024x1024": (32, 1024, 1024), "in 1000": (32, 1000, 1024), "out 1000": (32, 1024, 1000), "out 10": (32, 1024, 10)}
    print(json.dumps({
        "torch": torch.__version__,
        "scaled_mm": {name: scaled_mm(*dims) for name, dims in shapes.items()},
        "cpu_flash_fp32": cpu_flash_fp32(),
    }, indent=1))


if __name__ == "__main__":
    main()
