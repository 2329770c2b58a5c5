"""AMP105's measurement: how many gradient values an unscaled fp16 backward flushes to zero.

An exactly-zero gradient value is not evidence of underflow by itself (a dead
ReLU unit's gradient is zero in any precision). What a GradScaler rescues are
the values that are nonzero when the loss is multiplied by a large factor and
become zero without it. So, once per call site, right before the program's own
unscaled backward, the same backward is run once more through
`torch.autograd.grad` with the loss multiplied by SCALE (2^14, inside the
range GradScaler keeps; the graph is retained for the program's call). Then,
after the program's backward:

    flushed = values nonzero and finite in the scaled pass whose `.grad` this backward left unchanged
    share   = flushed / values nonzero and finite in the scaled pass

`torch.autograd.grad` writes no `.grad` and draws no random numbers, so the
run's numbers do not change; backward hooks registered by the program see
that one extra pass.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch

SCALE = 2.0 ** 14


class Probe:
    """The scaled reference pass and the gradients as they were before the program's backward."""

    def __init__(self, params: List[torch.Tensor], scaled: List[Optional[torch.Tensor]]) -> None:
        self.params = params
        self.scaled = scaled
        self.before = [None if p.grad is None else p.grad.detach().clone() for p in params]


def before_backward(tensor: torch.Tensor, gradient: Any, params: List[torch.Tensor]) -> Optional[Probe]:
    """Run the scaled reference pass; None when it cannot be run (the program's call then reports its own error)."""
    params = [p for p in params if p.requires_grad and p.is_leaf]
    if not params or not tensor.requires_grad:
        return None
    try:
        scaled = torch.autograd.grad(tensor * SCALE, params, grad_outputs=gradient, retain_graph=True, allow_unused=True)
    except (RuntimeError, TypeError, ValueError):
        return None
    return Probe(params, list(scaled))


def after_backward(probe: Probe) -> Tuple[int, int]:
    """(flushed, nonzero): values nonzero in the scaled pass, and how many of them this backward did not change."""
    flushed = nonzero = 0
    for p, ref, old in zip(probe.params, probe.scaled, probe.before):
        if ref is None:
            continue
        live = (ref != 0) & torch.isfinite(ref)
        count = int(live.sum())
        if not count:
            continue
        nonzero += count
        if p.grad is None:
            flushed += count
            continue
        unchanged = p.grad == 0 if old is None else p.grad == old
        flushed += int((live & unchanged).sum())
    return flushed, nonzero
