"""`amplint replay FILE`: re-run a saved overflowing step away from the cluster.

Loads an incident snapshot (DIR/incidents/stepN.pt, written by the guard),
then calls the model as the step did (the saved positional and keyword
arguments) with the saved RNG state,
and backward from the saved upstream gradient (the scaled gradient the loss
sent into the model's output, so no loss function is needed): once in the
recorded precision (the recorded autocast setting) and once in fp32, on CPU
or CUDA. It names the first module whose output is non-finite while its
inputs are finite, else the module backward reached first with a non-finite
parameter gradient.

This module is the part that runs the incident: inside the verifier's sandbox
(`sandboxed`, started by `amplint/replay.py`, which reads the incident's data on
the host with `load_incident`: `torch.load(weights_only=True)`, no code runs).
The model and the call's arguments come out of the incident's `objects` pickle
there, and model classes defined in the training script (`__main__`) are found by
reading that script's imports, functions, classes and constants (never its
other top-level statements, which would start training).
"""
from __future__ import annotations

import ast
import copy
import io
import os
import pickle
import sys
import types
from typing import Any, Dict, List, Optional, Tuple


def script_module(path: str) -> types.ModuleType:
    """The definitions of a training script, without running its top-level work."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    keep = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            keep.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.Constant, ast.Tuple, ast.List, ast.Name, ast.Attribute)):
            keep.append(node)
    module = types.ModuleType("__amplint_replay_main__")
    module.__file__ = path
    sys.path.insert(0, os.path.dirname(path))
    try:
        exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), module.__dict__)
    finally:
        sys.path.pop(0)
    return module


def pickle_with_main(main_file: Optional[str]) -> types.ModuleType:
    """A `pickle` stand-in for torch.load whose Unpickler finds `__main__` classes in `main_file`."""
    cache: Dict[str, types.ModuleType] = {}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module == "__main__" and main_file:
                if "m" not in cache:
                    cache["m"] = script_module(main_file)
                return getattr(cache["m"], name)
            return super().find_class(module, name)

    shim = types.ModuleType("amplint_pickle")
    shim.__dict__.update({k: getattr(pickle, k) for k in dir(pickle) if not k.startswith("__")})
    shim.Unpickler = Unpickler  # type: ignore[attr-defined]
    shim.load = lambda fh, **kw: Unpickler(fh, **kw).load()  # type: ignore[attr-defined]
    return shim


def _to(value: Any, device: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value


def run_once(snap: Dict[str, Any], device: str, precision: Optional[Tuple[str, str]]) -> Optional[str]:
    """One forward + backward; the first non-finite module as text, or None when all is finite."""
    import torch

    from .sources import all_finite, first_tensor

    model = copy.deepcopy(snap["model"]).to(device).train(bool(snap.get("training", True)))
    names = {id(m): (n or type(model).__name__) for n, m in model.named_modules()}
    hit: List[str] = []

    def hook(module: Any, args: Any, output: Any) -> None:
        if not hit and not all_finite(output) and all_finite(args):
            hit.append(f"forward output of `{names.get(id(module), '?')}` ({type(module).__name__})")

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    rng = snap.get("rng") or {}
    if rng.get("cpu") is not None:
        torch.set_rng_state(rng["cpu"])
    if device.startswith("cuda") and rng.get("cuda"):
        torch.cuda.set_rng_state_all(rng["cuda"])
    inputs = _to(snap["inputs"], device)
    kwargs = _to(snap.get("kwargs") or {}, device)
    try:
        if precision is not None:
            with torch.autocast(device.split(":")[0], dtype=getattr(torch, precision[1])):
                output = model(*inputs, **kwargs)
        else:
            output = model(*inputs, **kwargs)
    finally:
        for h in handles:
            h.remove()
    if hit:
        return hit[0]
    out = first_tensor(output)
    grad = snap.get("grad_output")
    if out is None or grad is None or not out.requires_grad or not bool(torch.isfinite(grad).all()):
        return None  # a non-finite upstream gradient (the loss overflowed) says nothing about the model
    out.backward(grad.to(device=out.device, dtype=out.dtype))
    bad = None
    for name, module in model.named_modules():
        if any(p.grad is not None and not bool(torch.isfinite(p.grad).all()) for p in module._parameters.values() if p is not None):
            bad = f"gradient of `{name or type(model).__name__}` ({type(module).__name__})"  # the last: backward's first
    return bad


class NotAnIncident(Exception):
    """The file is not a data-only amplint incident (one line, for the user)."""


def load_incident(path: str) -> Dict[str, Any]:
    """The snapshot's data, read with `torch.load(weights_only=True)`: tensors, numbers and
    strings only, so no code of the file runs. Anything else (an incident of format 1, a
    pickle that calls `os.system`) raises NotAnIncident."""
    import torch

    from .incident import FORMAT

    try:
        snap = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever the file holds, it is not ours
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise NotAnIncident(f"not a data-only amplint incident (format {FORMAT}): {first[:200]}") from None
    if not isinstance(snap, dict) or snap.get("format") != FORMAT or not isinstance(snap.get("objects"), bytes):
        raise NotAnIncident(f"not an amplint incident snapshot (format {FORMAT})")
    return snap


def sandboxed(data: Dict[str, Any], lab: Any) -> Dict[str, Any]:
    """Run in the verifier's sandbox (`amplint replay` starts it): open the incident's model and
    arguments (a pickle: the model's own code, which this process may run), replay the step in
    the recorded precision and in fp32, and report both as a verdict."""
    import torch

    snap = load_incident(data["path"])
    objects = torch.load(io.BytesIO(snap.pop("objects")), map_location="cpu", weights_only=False,
                         pickle_module=pickle_with_main(data.get("main")))
    snap.update(objects)
    evidence: Dict[str, Any] = {"step": snap.get("step"), "loss_scale": snap.get("loss_scale")}
    if snap.get("model") is None:
        evidence["no_model"] = str(snap.get("model_class"))
        return lab.inconclusive("the model could not be saved with the snapshot", evidence)
    device = data["device"]
    ac = snap.get("autocast") or {}
    recorded = ("autocast", ac["dtype"]) if ac.get("enabled") and ac.get("dtype") else None
    evidence["low"] = run_once(snap, device, recorded)
    evidence["high"] = run_once(snap, device, None)
    evidence["dtype"] = ac.get("dtype") if recorded else None
    if evidence["low"]:
        return lab.confirmed(f"non-finite in {evidence['dtype']}", evidence, method="snippet")
    return lab.not_reproduced("finite", evidence, method="snippet")


