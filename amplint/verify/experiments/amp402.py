"""AMP402 scaler-state-not-checkpointed: skipped steps after a resume that resets the scale.

Trains a tiny model under autocast (the finding's dtype, fp16 by default) with
a loss large enough that 65536 overflows fp16 gradients, until the GradScaler
has backed off to a scale that fits; then "resumes" twice from that point, once
with a fresh GradScaler (the checkpoint lacked `scaler.state_dict()`) and once
with the saved state loaded, counting the optimizer steps skipped after the
resume.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ._training import fmt

WARMUP, AFTER = 10, 10


def _train(lab: Any, model: Any, opt: Any, scaler: Any, x: Any, dtype: Any, steps: int) -> Tuple[int, List[float]]:
    skipped = 0
    history: List[float] = []
    for _ in range(steps):
        opt.zero_grad()
        with lab.autocast(dtype):
            loss = model(x).float().pow(2).sum()
        before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        after = scaler.get_scale()
        if after < before:
            skipped += 1
        history.append(lab.num(after))
    return skipped, history


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    dtype = lab.dtype(data.get("dtype"), default=torch.float16)
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = torch.float16
    g = torch.Generator().manual_seed(lab.seed)
    x = (torch.randn(64, lab.IN, generator=g) * 4.0).to(lab.device)
    model = lab.model()
    opt = lab.optimizer(model.parameters(), "SGD", lr=1e-5)
    scaler = lab.scaler()
    warm_skipped, warm_history = _train(lab, model, opt, scaler, x, dtype, WARMUP)
    model_state = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = opt.state_dict()
    scaler_state = scaler.state_dict()

    def resume(load_scaler: bool) -> Tuple[int, List[float]]:
        m = lab.model()
        m.load_state_dict(model_state)
        o = lab.optimizer(m.parameters(), "SGD", lr=1e-5)
        o.load_state_dict(opt_state)
        s = lab.scaler()
        if load_scaler:
            s.load_state_dict(scaler_state)
        return _train(lab, m, o, s, x, dtype, AFTER)

    fresh_skipped, fresh_history = resume(False)
    kept_skipped, kept_history = resume(True)
    name = lab.dtype_name(dtype)
    ev = {
        "warmup_steps": WARMUP,
        "warmup_skipped": warm_skipped,
        "scale_at_checkpoint": lab.num(scaler_state.get("scale")),
        "steps_after_resume": AFTER,
        "skipped_after_resume_fresh_scaler": fresh_skipped,
        "skipped_after_resume_restored_scaler": kept_skipped,
        "scale_history_fresh": fresh_history,
        "scale_history_restored": kept_history,
    }
    if fresh_skipped > kept_skipped:
        return lab.confirmed(
            f"{name}: resuming with a fresh GradScaler (scale 65536) skipped {fresh_skipped} of the next {AFTER} optimizer steps "
            f"re-learning the scale the checkpoint had ({fmt(ev['scale_at_checkpoint'])}); restoring scaler.state_dict() skipped {kept_skipped}",
            ev,
            dtype=dtype,
        )
    return lab.not_reproduced(
        f"{name}: a fresh GradScaler after the resume skipped {fresh_skipped} steps, the restored one {kept_skipped} "
        f"(no overflow at scale 65536 here)",
        ev,
        dtype=dtype,
    )
