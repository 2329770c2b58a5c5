"""Measure AMP101's accelerate case: does a torch clip after `accelerator.backward(loss)` see scaled gradients?

    python scripts/measure_accelerate_amp101.py      # prints one JSON object (docs/evidence.md#amp101 quotes it)

With `Accelerator(mixed_precision="fp16")` on a GPU, accelerate's `__init__` builds a
GradScaler (`self.scaler = get_grad_scaler(...)`, `native_amp = True`), and on a CPU it
builds none. To run accelerate's own `backward`, `unscale_gradients`, `clip_grad_norm_`
and prepared-optimizer `step` on a CPU, this installs `torch.amp.GradScaler("cpu")` where
`__init__` would have put the CUDA one (same arithmetic: docs/evidence.md), before
`prepare`, exactly as `__init__` does on a GPU. Everything after that is accelerate's code.

Three identical runs of one step on a tiny model: `torch.nn.utils.clip_grad_norm_` after
`accelerator.backward` (what AMP101 flags), `accelerator.clip_grad_norm_` (what its fix
writes), and `accelerator.unscale_gradients()` before the torch clip. Reported: the norm each
clip saw, the true norm, and how far the weights moved.
"""
from __future__ import annotations

import json
from typing import Any, Dict


def one_step(mode: str, max_norm: float = 1.0) -> Dict[str, Any]:
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    before = model.weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    accelerator = Accelerator(mixed_precision="fp16")
    assert accelerator.scaler is None and accelerator.device.type == "cpu"  # what accelerate does on a CPU
    accelerator.scaler = torch.amp.GradScaler("cpu")  # what it does on a GPU (with the CUDA scaler)
    accelerator.native_amp = True
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    loss = torch.nn.functional.mse_loss(model(x), y)
    true_norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g) for g in torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)])
    ).item()
    accelerator.backward(loss)
    if mode == "torch clip":
        seen = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item()
    elif mode == "accelerator.clip_grad_norm_":
        seen = accelerator.clip_grad_norm_(model.parameters(), max_norm).item()
    else:  # "unscale_gradients, then torch clip"
        accelerator.unscale_gradients()
        seen = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item()
    optimizer.step()
    moved = (model.weight.detach() - before).abs().max().item()
    return {
        "mode": mode,
        "scale": accelerator.scaler.get_scale() if accelerator.scaler is not None else None,
        "clip_saw": seen,
        "true_norm": true_norm,
        "ratio": seen / true_norm,
        "weight_moved": moved,
    }


def measure() -> Dict[str, Any]:
    import accelerate
    import torch

    runs = [one_step(m) for m in ("torch clip", "accelerator.clip_grad_norm_", "unscale_gradients, then torch clip")]
    return {"torch": torch.__version__, "accelerate": accelerate.__version__, "device": "cpu", "runs": runs}


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
