"""Incident snapshots: what `amplint replay` needs to re-run one overflowing step.

Armed after the first skipped step. A forward pre-hook on each module holding
optimized parameters copies the positional and keyword arguments of the
step's root model call (the first such module the step calls, i.e. the
outermost: `model(**batch)` included) with the RNG state and the autocast
setting, and a tensor hook on its output (its first tensor: a Hugging Face
output's `loss` when labels were passed) keeps the gradient backward brings to
it (the scaled upstream gradient, so replay needs no loss function). When that step is skipped too and
the burst reaches `burst` consecutive skipped steps, the snapshot is written
with the model (unchanged: a skipped step updates nothing), the optimizer and
scaler state to DIR/incidents/step<N>.pt, once, if it fits in `max_bytes`.

The file is data (format 2): tensors, numbers and strings that `torch.load(weights_only=True)`
reads without running code, so an incident copied off a cluster can be inspected safely. The
model object and the call's arguments (which only their classes' code can rebuild) travel as one
opaque pickle under `objects`, which `amplint replay` opens only inside the verifier's sandbox.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Optional

import torch

from .sources import first_tensor

#: 2: data only (tensors, numbers, strings: `torch.load(weights_only=True)`), the model and the
#: call's arguments in `objects`, a pickle only the sandbox opens; 1 (a whole pickle) is refused
FORMAT = 2


def _cpu(value: Any, depth: int = 0) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if depth < 4 and isinstance(value, (list, tuple)):
        return type(value)(_cpu(v, depth + 1) for v in value) if type(value) in (list, tuple) else [_cpu(v, depth + 1) for v in value]
    if depth < 4 and isinstance(value, dict):
        return {k: _cpu(v, depth + 1) for k, v in value.items()}
    return value


def tensor_bytes(value: Any, depth: int = 0) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if depth < 6 and isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v, depth + 1) for v in value)
    if depth < 6 and isinstance(value, dict):
        return sum(tensor_bytes(v, depth + 1) for v in value.values())
    return 0


def autocast_setting() -> Dict[str, Any]:
    for device in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device):
                return {"enabled": True, "device_type": device, "dtype": str(torch.get_autocast_dtype(device)).replace("torch.", "")}
        except (RuntimeError, TypeError):  # pragma: no cover - a device type this build lacks
            continue
    return {"enabled": False, "device_type": None, "dtype": None}


def _without_forward_wrappers(model: Any) -> Any:
    """The model with accelerate's autocast wrapper taken off its forward (accelerate keeps the
    original as `_original_forward`): replay applies the recorded precision itself, and its fp32
    pass must not run in fp16."""
    for module in model.modules():
        if "_original_forward" in module.__dict__:
            module.__dict__.pop("forward", None)
            module.__dict__.pop("_original_forward", None)
    return model


class Incidents:
    def __init__(self, directory: str, burst: int, max_bytes: int, save: Callable[..., None], report: Callable[[Dict[str, Any]], None]) -> None:
        self.directory = directory
        self.burst = burst
        self.max_bytes = max_bytes
        self.save_fn = save  # torch's own save, never the guard's
        self.report = report
        self.done = burst <= 0
        self.handles: List[Any] = []
        self.capture: Optional[Dict[str, Any]] = None

    def arm(self, roots: List[Any]) -> None:
        if self.done or self.handles:
            return
        for module in roots:  # per module: only these hooks see keyword arguments
            self.handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post))

    def _pre(self, module: Any, args: Any, kwargs: Dict[str, Any]) -> None:
        cap = self.capture
        if cap is not None:
            if "output_dtype" not in cap and not cap["autocast"]["enabled"]:
                # a module inside the root's call: autocast entered by a wrapper of the root's forward
                # (accelerate wraps `model.forward` in it) is the precision the step ran in
                inner = autocast_setting()
                if inner["enabled"]:
                    cap["autocast"] = inner
            return
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        self.capture = {"module": module, "inputs": _cpu(args), "kwargs": _cpu(dict(kwargs)), "rng": rng,
                        "autocast": autocast_setting(), "training": module.training}

    def _post(self, module: Any, args: Any, output: Any) -> None:
        cap = self.capture
        if cap is None or cap["module"] is not module or "output_dtype" in cap:
            return
        out = first_tensor(output)
        cap["output_dtype"] = str(out.dtype) if out is not None else None
        if out is not None and out.requires_grad:
            def keep(grad: torch.Tensor) -> None:
                cap["grad_output"] = grad.detach().to("cpu", copy=True)
            out.register_hook(keep)

    def end_step(self, step: int, skipped: bool, skipped_run: int, optimizers: List[Any], scaler: Any, scale_before: float) -> None:
        cap, self.capture = self.capture, None
        if self.done or cap is None or not skipped or skipped_run < self.burst:
            return
        self.done = True
        self.disarm()
        model = cap["module"]
        snap: Dict[str, Any] = {
            "format": FORMAT,
            "step": step,
            "grad_output": cap.get("grad_output"),
            "rng": cap["rng"],
            "autocast": cap["autocast"],
            "training": cap["training"],
            "loss_scale": scale_before,
            "scaler": scaler.state_dict() if scaler is not None else None,
            "optimizers": [o.state_dict() for o in optimizers],
            "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
            "main_file": os.path.abspath(getattr(sys.modules.get("__main__"), "__file__", "") or ""),
            "state_dict": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
        }
        import copy

        try:
            model_copy = _without_forward_wrappers(copy.deepcopy(model).to("cpu"))
        except Exception:  # noqa: BLE001 - a model that cannot be copied is replayed from its class
            model_copy = None
        snap["objects"] = self._objects({"model": model_copy, "inputs": cap["inputs"], "kwargs": cap["kwargs"]})
        size = tensor_bytes(snap) + len(snap["objects"])
        if size > self.max_bytes:
            self.report({"type": "incident", "step": step, "path": None, "bytes": size, "message": f"not saved: {size} bytes is over the {self.max_bytes}-byte bound"})
            return
        os.makedirs(os.path.join(self.directory, "incidents"), exist_ok=True)
        rank = os.environ.get("RANK")
        name = f"step{step}" + (f"-rank{rank}" if rank not in (None, "0") else "") + ".pt"
        path = os.path.join(self.directory, "incidents", name)
        self.save_fn(snap, path)  # data only: loads with torch.load(weights_only=True)
        self.report({"type": "incident", "step": step, "path": path, "bytes": os.path.getsize(path), "message": f"snapshot of step {step}"})

    def _objects(self, objects: Dict[str, Any]) -> bytes:
        """The model and the call's arguments as one opaque pickle (bytes in the data-only
        snapshot): `amplint replay` unpickles it only inside the verifier's sandbox, where the
        model's code runs anyway. An unpicklable model is left out (replay names its class)."""
        import io

        buf = io.BytesIO()
        try:
            self.save_fn(objects, buf)
        except Exception:  # noqa: BLE001 - unpicklable model: keep the weights, name the class
            buf = io.BytesIO()
            self.save_fn({**objects, "model": None}, buf)
        return buf.getvalue()

    def disarm(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
