"""The CUDA-only claims of the scale rules (issue 23), checked on a GPU box: scripts/gpu-check.sh part 5.

    python scripts/gpu_scale_checks.py          # exit 0: every check that ran passed; 1: one failed

docs/evidence.md states these from DeepSpeed's and TransformerEngine's source, not from a run (neither
package runs without CUDA). Each check prints `ok`, `FAIL` or `skipped (why)`; a missing package or a
device too old is a skip, never a pass. One process, world size 1 (DeepSpeed's single-GPU engine).

- AMP806: a direct `loss.backward()` on a DeepSpeed fp16 engine raises "Loss scaling is required for this
  configuration, but backward() was called directly" (DeepSpeed 0.19.x; older releases skipped silently).
- AMP807: with `fp16.loss_scale` > 0 the scale is static: after an overflowing step the engine skips it
  and keeps the scale; with `loss_scale` 0 (dynamic) the scale falls.
- AMP805: under ZeRO stage 2 the engine's parameters hold no `.grad` after `engine.backward` (the
  gradients live in the optimizer's partitions), so `torch.nn.utils.clip_grad_norm_` on them measures 0.
- AMP811 / AMP812: TransformerEngine `Linear` in `fp8_autocast` (capability 8.9+): 1024x1024 runs; a
  1000-wide layer fails with "FP8 execution requires 2D input matrices with height divisible by 8 and
  width divisible by 16"; a backward inside and one outside the region both run (printed: the scale
  factors after each, which docs/evidence.md does not yet claim).
"""
from __future__ import annotations

import importlib.util
import os
import sys
import traceback

RESULTS = []


def check(name):
    def wrap(fn):
        def run():
            try:
                outcome = fn()
            except Exception as exc:  # noqa: BLE001 - a failed check is reported, the others still run
                outcome = f"FAIL ({type(exc).__name__}: {str(exc)[:300]})"
                traceback.print_exc(limit=3)
            RESULTS.append((name, outcome))
            print(f"  {name}: {outcome}", flush=True)
        return run
    return wrap


def _engine(config, zero=0):
    import deepspeed
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).cuda()
    # a client torch optimizer under ZeRO needs zero_allow_untested_optimizer (SGD is not on its list)
    config = dict({"train_batch_size": 4, "zero_optimization": {"stage": zero}, "zero_allow_untested_optimizer": True}, **config)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    return engine


def _scale(engine):
    opt = engine.optimizer
    for name in ("cur_scale", "loss_scale"):
        value = getattr(opt, name, None)
        if value is not None:
            return float(value)
    return float(opt.loss_scaler.cur_scale)


@check("AMP806 direct backward on a DeepSpeed fp16 engine")
def amp806():
    import deepspeed
    import torch

    engine = _engine({"fp16": {"enabled": True}})
    loss = engine(torch.randn(4, 16, device="cuda", dtype=torch.half)).float().pow(2).mean()
    try:
        loss.backward()
    except RuntimeError as exc:
        if "backward() was called directly" in str(exc) or "not supported" in str(exc):
            return f"ok (deepspeed {deepspeed.__version__}: {str(exc)[:120]})"
        raise
    return f"FAIL (deepspeed {deepspeed.__version__}: loss.backward() ran without the engine's loss scaling, no error)"


@check("AMP807 static fp16 loss_scale is never backed off")
def amp807():
    import torch

    kept = {}
    for loss_scale in (128.0, 0):
        # hysteresis 1: the dynamic scaler halves on the first overflow (its default, 2, waits for a second)
        engine = _engine({"fp16": {"enabled": True, "loss_scale": loss_scale, "initial_scale_power": 7, "hysteresis": 1}})
        before = _scale(engine)
        loss = engine(torch.full((4, 16), 1e4, device="cuda", dtype=torch.half)).float().pow(2).sum() * 1e4
        engine.backward(loss)
        engine.step()
        kept[loss_scale] = (before, _scale(engine), int(getattr(engine, "skipped_steps", -1)))
    (s0, s1, skip_static), (d0, d1, skip_dynamic) = kept[128.0], kept[0]
    summary = f"static {s0:g} -> {s1:g} (skipped {skip_static}), dynamic {d0:g} -> {d1:g} (skipped {skip_dynamic})"
    return ("ok (" if s1 == s0 and d1 < d0 else "FAIL (") + summary + ")"


@check("AMP805 torch clip on a ZeRO-2 engine's parameters")
def amp805():
    import torch

    engine = _engine({"fp16": {"enabled": True}, "gradient_clipping": 1.0}, zero=2)
    loss = engine(torch.randn(4, 16, device="cuda", dtype=torch.half)).float().pow(2).mean()
    engine.backward(loss)
    grads = [p.grad for p in engine.module.parameters()]
    norm = float(torch.nn.utils.clip_grad_norm_(engine.module.parameters(), 1.0))
    engine.step()
    global_norm = engine.get_global_grad_norm()
    summary = f"{sum(g is None for g in grads)} of {len(grads)} .grad None, torch clip norm {norm:g}, engine's norm {global_norm}"
    return ("ok (" if norm == 0.0 else "FAIL (") + summary + ")"


def _fp8_scales(layer):
    """The first forward scaling factors of a TE module, where this TE version keeps them (else None)."""
    try:
        return [float(v) for v in layer.fp8_meta["scaling_fwd"].scale.flatten()[:2]]
    except (AttributeError, KeyError, TypeError):
        return None


@check("AMP811/AMP812 TransformerEngine fp8_autocast")
def amp81x():
    import torch
    import transformer_engine.pytorch as te

    if torch.cuda.get_device_capability() < (8, 9):
        return f"skipped (capability {torch.cuda.get_device_capability()} < 8.9: no FP8)"
    fp8_autocast = getattr(te, "fp8_autocast", None) or getattr(te, "autocast")
    layer = te.Linear(1024, 1024).cuda()
    x = torch.randn(32, 1024, device="cuda", requires_grad=True)
    with fp8_autocast(enabled=True):
        out = layer(x)
    out.float().sum().backward()
    outside = _fp8_scales(layer)
    with fp8_autocast(enabled=True):
        out = layer(x)
        out.float().sum().backward()
    inside = _fp8_scales(layer)
    odd = te.Linear(1000, 1000).cuda()
    try:
        with fp8_autocast(enabled=True):
            odd(torch.randn(32, 1000, device="cuda"))
    except AssertionError as exc:
        message = str(exc)
    else:
        return f"FAIL (a 1000-wide te.Linear ran under fp8_autocast; scales outside {outside}, inside {inside})"
    ok = "divisible by 16" in message
    return ("ok (" if ok else "FAIL (") + f"1000-wide: {message[:120]}; backward outside: scale {outside}, inside: {inside})"


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("  skipped: no CUDA device (these claims are CUDA-only)")
        return 0
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if importlib.util.find_spec("deepspeed") is None:
        for name in ("AMP806", "AMP807", "AMP805"):
            RESULTS.append((name, "skipped"))
            print(f"  {name}: skipped (deepspeed is not installed: pip install deepspeed)")
    else:
        amp806()
        amp807()
        amp805()
    if importlib.util.find_spec("transformer_engine") is None:
        RESULTS.append(("AMP811/AMP812", "skipped"))
        print("  AMP811/AMP812: skipped (transformer_engine is not installed)")
    else:
        amp81x()
    return 1 if any(outcome.startswith("FAIL") for _, outcome in RESULTS) else 0


if __name__ == "__main__":
    sys.exit(main())
