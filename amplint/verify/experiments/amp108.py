"""AMP108 scaler-with-bf16: what an enabled GradScaler adds to a bf16-only run.

Trains the same tiny model twice from the same seed under bf16 autocast, STEPS
optimizer steps each: once plain (`loss.backward(); opt.step()`) and once
through a GradScaler on the device (`scale/backward/step/update`).
Counts, in one step of each run, the scaler's extra work by wrapping its
kernels and `Tensor.item()`: the `_amp_foreach_non_finite_check_and_unscale_`
pass over every gradient element, the `found_inf.item()` host sync in `step`,
and `_amp_update_scale_`; times the other steps (median, reported only) and
compares the final parameters.
Confirmed ("unneeded: same parameters, extra work") when the parameters are
bitwise identical, no step was skipped and the scaled run did extra work; not
reproduced when the scaler changed the result (e.g. skipped a step).
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Any, Dict, List, Tuple

STEPS = 20
_SCALER_OPS = ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_", "host_syncs_item", "gradient_elements_checked_and_unscaled")


class _Count:
    """Counts, during one step, the scaler's kernels and `Tensor.item()` host syncs (by wrapping them)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.ops: Counter = Counter()
        self.saved: Dict[str, Any] = {}

    def __enter__(self) -> "_Count":
        torch = self.torch
        for name in ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_"):
            orig = getattr(torch, name, None)
            if orig is None:
                continue
            self.saved[name] = orig

            def wrapped(*args: Any, _orig: Any = orig, _name: str = name, **kwargs: Any) -> Any:
                self.ops[_name] += 1
                if _name.startswith("_amp_foreach") and args:
                    self.ops["gradient_elements_checked_and_unscaled"] += sum(t.numel() for t in args[0])
                return _orig(*args, **kwargs)

            setattr(torch, name, wrapped)
        item = torch.Tensor.item
        self.saved["item"] = item

        def counted_item(tensor: Any) -> Any:
            self.ops["host_syncs_item"] += 1
            return item(tensor)

        torch.Tensor.item = counted_item
        return self

    def __exit__(self, *exc: Any) -> None:
        self.torch.Tensor.item = self.saved.pop("item")
        for name, orig in self.saved.items():
            setattr(self.torch, name, orig)
        self.saved.clear()


def _train(lab: Any, use_scaler: bool) -> Tuple[Any, List[float], int, Counter]:
    torch = lab.torch
    model = lab.model()
    opt = lab.optimizer(model.parameters(), "SGD", lr=0.1)
    scaler = lab.scaler() if use_scaler else None
    times: List[float] = []
    skipped = 0
    counted: Counter = Counter()
    for k in range(STEPS):
        x, y = lab.batch(k)
        counter = _Count(torch) if k == STEPS - 1 else None  # count one step, time the others

        def step() -> None:
            opt.zero_grad()
            with lab.autocast(torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x), y)
            if scaler is None:
                loss.backward()
                opt.step()
                return
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        # the scale is read outside the counted and timed part (get_scale() is a host sync itself)
        before = scaler.get_scale() if scaler is not None else None
        if counter is not None:
            with counter:
                step()
            counted = counter.ops
        else:
            if lab.is_cuda:
                torch.cuda.synchronize(lab.device)
            t0 = time.perf_counter()
            step()
            if lab.is_cuda:
                torch.cuda.synchronize(lab.device)
            times.append(time.perf_counter() - t0)
        if scaler is not None and scaler.get_scale() < before:
            skipped += 1
    return model, times, skipped, counted


def run(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    torch = lab.torch
    plain, t_plain, _, ops_plain = _train(lab, use_scaler=False)
    scaled, t_scaled, skipped, ops_scaled = _train(lab, use_scaler=True)
    diffs = [(a.detach() - b.detach()).abs().max().item() for a, b in zip(plain.parameters(), scaled.parameters())]
    max_diff = max(diffs)
    n_grad = sum(p.numel() for p in scaled.parameters())
    extra = {name: ops_scaled.get(name, 0) - ops_plain.get(name, 0) for name in _SCALER_OPS}
    per_step_plain = statistics.median(t_plain) if t_plain else None
    per_step_scaled = statistics.median(t_scaled) if t_scaled else None
    ev: Dict[str, Any] = {
        "steps": STEPS,
        "autocast": f"{lab.device_type}, bf16",
        "max_param_diff": lab.num(max_diff),
        "params_identical": max_diff == 0.0,
        "skipped_steps_with_scaler": skipped,
        "gradient_elements": n_grad,
        "extra_work_per_step": extra,
        "median_step_s_plain": lab.num(per_step_plain, 3),
        "median_step_s_with_scaler": lab.num(per_step_scaled, 3),
    }
    if per_step_plain and per_step_scaled:
        ev["time_ratio_with_scaler"] = lab.num(per_step_scaled / per_step_plain, 3)
    extra_work = any(v > 0 for v in extra.values())
    syncs = extra["host_syncs_item"]
    if max_diff == 0.0 and skipped == 0 and extra_work:
        return lab.confirmed(
            f"bf16 with a GradScaler: parameters after {STEPS} steps bitwise identical to no scaler (max diff 0), "
            f"no step skipped; per step the scaler added {extra['_amp_foreach_non_finite_check_and_unscale_']} unscale/inf-check "
            f"pass over {extra['gradient_elements_checked_and_unscaled']} gradient elements, {syncs} host sync(s) (.item()) and "
            f"{extra['_amp_update_scale_']} scale update; median step {ev['median_step_s_with_scaler']}s vs {ev['median_step_s_plain']}s",
            ev,
            dtype=torch.bfloat16,
        )
    return lab.not_reproduced(
        f"bf16 with a GradScaler changed the result: max parameter diff {ev['max_param_diff']}, "
        f"{skipped} skipped step(s) in {STEPS}",
        ev,
        dtype=torch.bfloat16,
    )
