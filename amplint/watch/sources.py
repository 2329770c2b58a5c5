"""Which module went non-finite first.

Nothing runs per step until an overflow is seen: checking every module's
output every step would cost more than the whole budget. On the first skipped
step the gradients are checked (the optimizer did not step, so they are still
there): the latest module in registration order with a non-finite gradient is
the first one backward reached. From then on a global forward hook is armed
for a bounded number of steps and reports the first module whose output is
non-finite, the cause when the forward itself overflows. Both checks only
read tensors.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from .sites import BuildSites


def module_names(modules: Iterable[Any]) -> Dict[int, str]:
    """id(module) -> its path in its model (roots: modules that are no one's child): torch's
    dotted path below the root (`body.2`, what `get_submodule` takes), the root's class for the
    root itself, and for a root that is a container indexed from 0 (an `nn.Sequential` model) its
    class with the indices (`Sequential[4]`, `Sequential[2].proj`), not a bare `4`."""
    modules = list(modules)
    children = set()
    for m in modules:
        for c in m._modules.values():
            if c is not None:
                children.add(id(c))
    names: Dict[int, str] = {}
    for root in modules:
        if id(root) in children:
            continue
        for name, sub in root.named_modules():
            names.setdefault(id(sub), _path(type(root).__name__, name))
    return names


def _path(root: str, dotted: str) -> str:
    if not dotted:
        return root
    parts = dotted.split(".")
    if not parts[0].isdigit():
        return dotted
    out = root
    for part in parts:
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def _floats(value: Any, out: List[torch.Tensor], depth: int = 0) -> None:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            out.append(value)
    elif depth < 3 and isinstance(value, (list, tuple)):
        for v in value:
            _floats(v, out, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for v in value.values():
            _floats(v, out, depth + 1)


def first_tensor(value: Any) -> Optional[torch.Tensor]:
    """The tensor a model call returns first: itself, the first item of a tuple or list, the
    first tensor value of a dict or a Hugging Face ModelOutput (`loss` when labels were given)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        return value[0] if value and isinstance(value[0], torch.Tensor) else None
    if isinstance(value, dict):
        return next((v for v in value.values() if isinstance(v, torch.Tensor)), None)
    return None


def all_finite(value: Any) -> bool:
    tensors: List[torch.Tensor] = []
    _floats(value, tensors)
    return all(bool(torch.isfinite(t).all()) for t in tensors)


class Sources:
    """Finds the first non-finite module output or gradient once overflows begin."""

    def __init__(self, build_sites: BuildSites, arm_steps: int, report: Callable[[Dict[str, Any]], None]) -> None:
        self.build_sites = build_sites
        self.arm_steps = arm_steps
        self.report = report
        self.armed_left = 0
        self.handle = None
        self.found_forward: Optional[Dict[str, Any]] = None
        self.step_hit: Optional[Any] = None
        self.first: Optional[Dict[str, Any]] = None  # the best source known, for AMP701
        self.gradient_checked = False

    def describe(self, module: Any, kind: str, step: int) -> Dict[str, Any]:
        names = module_names(self.build_sites.sites.keys())
        name = names.get(id(module), type(module).__name__)
        site = self.build_sites.site(module)
        record = {
            "type": "nonfinite",
            "kind": kind,
            "step": step,
            "module": name,
            "class": type(module).__name__,
            "filename": site[0] if site else None,
            "line": site[1] if site else None,
        }
        where = f", built at {site[0]}:{site[1]}" if site else ""
        record["message"] = f"{kind} of `{name}` ({type(module).__name__}{where}) at step {step}"
        return record

    def on_skipped(self, step: int, params: List[torch.Tensor]) -> None:
        """A skipped step: check gradients once, and arm the forward hook."""
        if not self.gradient_checked:
            self.gradient_checked = True
            bad = {id(p) for p in params if p.grad is not None and not bool(torch.isfinite(p.grad).all())}
            if bad:
                culprit = None
                for module in list(self.build_sites.sites.keys()):
                    if any(id(p) in bad for p in module._parameters.values() if p is not None):
                        culprit = module  # keep the last: backward reaches it first
                if culprit is not None:
                    record = self.describe(culprit, "gradient", step)
                    self.first = self.first or record
                    self.report(record)
        if self.found_forward is None and self.handle is None:
            self.armed_left = self.arm_steps
            self.handle = torch.nn.modules.module.register_module_forward_hook(self._hook)

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        if self.step_hit is None and not all_finite(output) and all_finite(args):
            self.step_hit = module

    def end_step(self, step: int) -> None:
        """Called after each step record: report a forward hit, or count down the arming."""
        if self.handle is None:
            return
        if self.step_hit is not None:
            record = self.describe(self.step_hit, "forward output", step)
            self.found_forward = record
            self.first = record  # the forward cause explains the gradients too
            self.report(record)
            self.disarm()
            return
        self.armed_left -= 1
        if self.armed_left <= 0:
            self.disarm()

    def disarm(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        self.step_hit = None
