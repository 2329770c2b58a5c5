"""The experiment lab: the device, tiny models, optimizers and scalers, and verdicts.

Imported only inside the worker process (it imports torch). One `Lab` lives for
the whole worker; `begin()` reseeds it before every experiment, so the same
finding data gives the same verdict and the same evidence numbers.

An experiment is `run(data, lab) -> dict` built with `lab.confirmed(...)`,
`lab.not_reproduced(...)`, `lab.inconclusive(...)` or `lab.error(...)`.
"""
from __future__ import annotations

import contextlib
import random
from typing import Any, Dict, Iterable, Optional, Tuple

import torch
import torch.nn as nn

from .verdicts import Verdicts

FP16_MAX = 65504.0
FP16_MIN_SUBNORMAL = 2.0**-24


class DeviceUnavailable(Exception):
    """The requested device cannot be used in this environment."""


_DTYPES = {
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "fp64": torch.float64,
    "float64": torch.float64,
    "double": torch.float64,
}
_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64"}


def resolve_device(spec: str) -> torch.device:
    """auto | cpu | cuda | cuda:N -> a usable torch.device (auto prefers CUDA)."""
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise DeviceUnavailable(f"--device {spec}: CUDA is not available (torch {torch.__version__})")
        index = 0
        if ":" in spec:
            try:
                index = int(spec.split(":", 1)[1])
            except ValueError:
                raise DeviceUnavailable(f"--device {spec}: not a device (use auto, cpu, cuda or cuda:N)") from None
        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise DeviceUnavailable(f"--device {spec}: only {count} CUDA device(s) visible")
        return torch.device("cuda", index)
    raise DeviceUnavailable(f"--device {spec}: not a device (use auto, cpu, cuda or cuda:N)")


class Lab(Verdicts):
    """Everything an experiment needs, on one device, reseeded per experiment."""

    ACCUM = 2  # micro-batches per optimizer step in accumulation experiments
    IN, HIDDEN, OUT, BATCH = 8, 16, 4, 16

    def __init__(self, device: str = "auto", seed: int = 0) -> None:
        self.torch = torch
        self.nn = nn
        self.device = resolve_device(device)
        self.device_type = self.device.type
        self.is_cuda = self.device_type == "cuda"
        self.seed = seed
        self.code: Optional[str] = None
        if self.is_cuda:
            torch.cuda.set_device(self.device)
        else:
            torch.set_num_threads(1)
        self._env = self._describe()

    # ------------------------------------------------------------ environment

    def _describe(self) -> Dict[str, Any]:
        env: Dict[str, Any] = {"torch": torch.__version__, "device_type": self.device_type}
        if self.is_cuda:
            name = torch.cuda.get_device_name(self.device)
            major, minor = torch.cuda.get_device_capability(self.device)
            env.update(
                device=f"{self.device} ({name}, sm_{major}{minor})",
                device_name=name,
                capability=f"{major}.{minor}",
            )
        else:
            env.update(device="cpu", device_name=_cpu_name(), capability=None)
        return env

    def env(self) -> Dict[str, Any]:
        return dict(self._env)

    def begin(self, code: str, seed: int) -> None:
        self.code = code
        self.seed = seed
        torch.set_default_dtype(torch.float32)
        self.seed_all(seed)

    def end(self) -> None:
        torch.set_default_dtype(torch.float32)
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def seed_all(self, seed: Optional[int] = None) -> None:
        seed = self.seed if seed is None else seed
        random.seed(seed)
        torch.manual_seed(seed)
        if self.is_cuda:
            torch.cuda.manual_seed_all(seed)

    # ------------------------------------------------------------ dtypes

    @staticmethod
    def dtype(name: Any, default: Optional[torch.dtype] = torch.float16) -> Optional[torch.dtype]:
        """"fp16" / "torch.float16" / "half" / a torch.dtype -> torch.dtype (default when unknown)."""
        if isinstance(name, torch.dtype):
            return name
        if not isinstance(name, str):
            return default
        key = name.strip().lower().replace("torch.", "")
        return _DTYPES.get(key, default)

    @staticmethod
    def dtype_name(dtype: Optional[torch.dtype]) -> Optional[str]:
        return _DTYPE_NAMES.get(dtype) if dtype is not None else None

    def autocast(self, dtype: Optional[torch.dtype]):
        """autocast on the lab's device for a low-precision dtype; a no-op for fp32/None."""
        if dtype in (torch.float16, torch.bfloat16):
            return torch.autocast(self.device_type, dtype=dtype)
        return contextlib.nullcontext()

    # ------------------------------------------------------------ tiny things

    def model(self, dtype: torch.dtype = torch.float32, seed: Optional[int] = None) -> nn.Module:
        """Linear(8, 16) -> ReLU -> Linear(16, 4), seeded, on the device."""
        self.seed_all(self.seed if seed is None else seed)
        m = nn.Sequential(nn.Linear(self.IN, self.HIDDEN), nn.ReLU(), nn.Linear(self.HIDDEN, self.OUT))
        return m.to(device=self.device, dtype=dtype)

    def batch(self, k: int = 0, n: Optional[int] = None, dtype: torch.dtype = torch.float32) -> Tuple[torch.Tensor, torch.Tensor]:
        """The k-th deterministic (x, y) micro-batch for `model()`."""
        g = torch.Generator().manual_seed(1000 + self.seed * 7919 + k)
        n = n or self.BATCH
        x = torch.randn(n, self.IN, generator=g)
        y = torch.randn(n, self.OUT, generator=g)
        return x.to(self.device, dtype), y.to(self.device, dtype)

    @staticmethod
    def optimizer_class(name: Optional[str]) -> type:
        """"Adam" / "torch.optim.AdamW" -> the torch.optim class (LookupError if not in torch.optim)."""
        short = (name or "SGD").strip().rsplit(".", 1)[-1]
        cls = getattr(torch.optim, short, None)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
            raise LookupError(f"{name!r} is not a torch.optim optimizer")
        return cls

    def optimizer(self, params: Iterable, cls: Optional[str] = "SGD", **kwargs: Any) -> torch.optim.Optimizer:
        klass = self.optimizer_class(cls)
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        kwargs.setdefault("lr", 0.1 if klass is torch.optim.SGD else 1e-3)
        return klass(params, **kwargs)

    def scaler(self, enabled: bool = True, **kwargs: Any):
        """A GradScaler on the lab's device.

        Always pass the device: `GradScaler()` means "cuda" and silently
        disables itself on a CPU-only machine.
        """
        return torch.amp.GradScaler(self.device_type, enabled=enabled, **kwargs)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"
