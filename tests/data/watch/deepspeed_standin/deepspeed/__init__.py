"""A STAND-IN for DeepSpeed, not DeepSpeed (which needs CUDA to run; tests/test_watch_deepspeed.py).

It has only what `amplint run` reads from a DeepSpeed engine, under DeepSpeed's own names (DeepSpeed
0.19: `deepspeed/runtime/engine.py`, `deepspeed/runtime/fp16/loss_scaler.py`): `initialize` returning
the engine first, `DeepSpeedEngine.backward` / `step` with `_take_model_step` run once per optimizer
step on a gradient-accumulation boundary, `engine.skipped_steps` counting the steps the overflow
check skipped, `engine.optimizer.overflow`, and the fp16 optimizer's `loss_scaler.cur_scale`, a
dynamic scaler that halves on overflow and raises "Current loss scale already at minimum - cannot
decrease scale anymore. Exiting run." at `min_scale`. Written for the test, no DeepSpeed code in it.
"""
from .runtime.engine import DeepSpeedEngine


def initialize(model, optimizer, config):
    engine = DeepSpeedEngine(model, optimizer, config)
    return engine, engine.optimizer, None, None
