"""Device-capability probes shared by AMP601 and AMP602."""
from __future__ import annotations

from typing import Any, Dict, Optional


def bf16_support(torch: Any) -> Dict[str, Any]:
    """`torch.cuda.is_bf16_supported()` with and without emulation (None where the argument is missing)."""
    out: Dict[str, Any] = {}
    try:
        out["is_bf16_supported"] = bool(torch.cuda.is_bf16_supported())
    except Exception as exc:  # noqa: BLE001
        out["is_bf16_supported"] = f"raised {type(exc).__name__}"
    try:
        out["is_bf16_supported_without_emulation"] = bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch before the including_emulation parameter
        out["is_bf16_supported_without_emulation"] = None
    except Exception as exc:  # noqa: BLE001
        out["is_bf16_supported_without_emulation"] = f"raised {type(exc).__name__}"
    return out


def cuda_capability(lab: Any) -> Optional[Dict[str, Any]]:
    """Evidence about the lab's CUDA device, or None when the lab is not on CUDA."""
    torch = lab.torch
    if not lab.is_cuda:
        return None
    major, minor = torch.cuda.get_device_capability(lab.device)
    return {
        "device_name": torch.cuda.get_device_name(lab.device),
        "capability": f"{major}.{minor}",
        "capability_tuple": [major, minor],
        "rocm": bool(getattr(torch.version, "hip", None)),
        **bf16_support(torch),
    }


def cpu_evidence(lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    return {"cuda_available": bool(torch.cuda.is_available()), "cuda_devices": int(torch.cuda.device_count()), **bf16_support(torch)}
