"""AMP107 scaler-recreated-per-epoch: the learned scale resets, overflowing steps are skipped again.

Two short "epochs" of a tiny model under autocast (the finding's dtype, fp16 by
default) with a loss whose gradients overflow fp16 at scale 65536: once with
one GradScaler for both epochs, once with a fresh GradScaler per epoch; reports
the optimizer steps skipped in the second epoch.
"""
from __future__ import annotations

from typing import Any, Dict

from ._training import fmt
from .amp402 import _train

STEPS = 10


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = torch.float16
    g = torch.Generator().manual_seed(lab.seed)
    x = (torch.randn(64, lab.IN, generator=g) * 4.0).to(lab.device)

    def two_epochs(fresh: bool):
        model = lab.model()
        opt = lab.optimizer(model.parameters(), "SGD", lr=1e-5)
        scaler = lab.scaler()
        first, _ = _train(lab, model, opt, scaler, x, dtype, STEPS)
        if fresh:
            scaler = lab.scaler()
        second, history = _train(lab, model, opt, scaler, x, dtype, STEPS)
        return first, second, history

    _, kept, kept_history = two_epochs(False)
    first, fresh, fresh_history = two_epochs(True)
    name = lab.dtype_name(dtype)
    ev = {
        "steps_per_epoch": STEPS,
        "skipped_epoch1": first,
        "skipped_epoch2_fresh_scaler": fresh,
        "skipped_epoch2_one_scaler": kept,
        "scale_history_epoch2_fresh": fresh_history,
        "scale_history_epoch2_one_scaler": kept_history,
    }
    if fresh > kept:
        return lab.confirmed(
            f"{name}: a GradScaler recreated for epoch 2 restarted at 65536 and skipped {fresh} of {STEPS} steps "
            f"(settling at {fmt(fresh_history[-1])}); one scaler kept across epochs skipped {kept}",
            ev,
            dtype=dtype,
        )
    return lab.not_reproduced(
        f"{name}: epoch 2 skipped {fresh} steps with a fresh scaler and {kept} with one scaler (no overflow at 65536 here)", ev, dtype=dtype
    )
