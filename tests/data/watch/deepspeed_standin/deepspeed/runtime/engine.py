"""The stand-in engine (see deepspeed/__init__.py): not DeepSpeed."""
import torch
from torch import nn


class DynamicLossScaler:
    def __init__(self, init_scale, scale_window, min_scale):
        self.cur_scale = init_scale
        self.scale_window = scale_window
        self.min_scale = min_scale
        self.good_steps = 0

    def update_scale(self, overflow):
        if overflow:
            if self.cur_scale == self.min_scale:
                raise Exception("Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
            self.cur_scale = max(self.cur_scale / 2, self.min_scale)
            self.good_steps = 0
        else:
            self.good_steps += 1
            if self.good_steps % self.scale_window == 0:
                self.cur_scale *= 2


class FP16Optimizer:
    """Wraps a torch optimizer (not a torch Optimizer itself, as DeepSpeed's is not)."""

    def __init__(self, optimizer, loss_scaler):
        self.optimizer = optimizer
        self.loss_scaler = loss_scaler
        self.overflow = False

    def step(self):
        params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        self.overflow = any(not bool(torch.isfinite(p.grad).all()) for p in params)
        self.loss_scaler.update_scale(self.overflow)
        if self.overflow:
            return
        for p in params:
            p.grad.div_(self._scale_used)
        self.optimizer.step()

    def backward(self, loss):
        self._scale_used = self.loss_scaler.cur_scale
        (loss.float() * self._scale_used).backward()

    def zero_grad(self):
        self.optimizer.zero_grad()


class DeepSpeedEngine(nn.Module):
    def __init__(self, model, optimizer, config):
        super().__init__()
        self.module = model
        fp16 = config.get("fp16", {})
        scaler = DynamicLossScaler(2.0 ** fp16.get("initial_scale_power", 16), fp16.get("loss_scale_window", 1000),
                                   fp16.get("min_loss_scale", 1))
        self.optimizer = FP16Optimizer(optimizer, scaler)
        self.accumulation = config.get("gradient_accumulation_steps", 1)
        self.micro_steps = 0
        self.global_steps = 0
        self.skipped_steps = 0

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self.accumulation == 0

    def backward(self, loss):
        self.optimizer.backward(loss / self.accumulation)

    def _take_model_step(self):
        self.optimizer.step()
        if self.optimizer.overflow:
            self.skipped_steps += 1
        self.global_steps += 1
        self.optimizer.zero_grad()

    def step(self):
        if self.is_gradient_accumulation_boundary():
            self._take_model_step()
        self.micro_steps += 1
