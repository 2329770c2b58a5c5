"""`amplint replay FILE`: re-run a saved overflowing step away from the cluster.

Loads an incident snapshot (DIR/incidents/stepN.pt, written by the guard),
then calls the model as the step did (the saved positional and keyword
arguments) with the saved RNG state,
and backward from the saved upstream gradient (the scaled gradient the loss
sent into the model's output, so no loss function is needed): once in the
recorded precision (the recorded autocast setting) and once in fp32, on CPU
or CUDA. It names the first module whose output is non-finite while its
inputs are finite, else the module backward reached first with a non-finite
parameter gradient. Exit code 1 when the recorded precision overflows, 0 when
it does not, 2 when the snapshot cannot be replayed.

The snapshot is a pickle: replay only files you trust, as with `torch.load`.
Model classes defined in the training script (`__main__`) are found by
reading that script's imports, functions, classes and constants (never its
other top-level statements, which would start training).
"""
from __future__ import annotations

import argparse
import ast
import copy
import os
import pickle
import sys
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="amplint replay", description="Re-run a saved overflowing step in the recorded precision and in fp32.")
    p.add_argument("file", help="an incident snapshot, DIR/incidents/stepN.pt")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    p.add_argument("--main", default=None, metavar="SCRIPT", help="the training script defining the model classes (default: the one recorded)")
    args = p.parse_args(list(sys.argv[2:] if argv is None else argv))
    import torch

    from .findings import clean

    try:
        snap = torch.load(args.file, map_location="cpu", weights_only=False, pickle_module=pickle_with_main(args.main or _recorded_main(args.file)))
    except Exception as exc:  # noqa: BLE001 - any unreadable snapshot is a usage error
        sys.stderr.write(f"amplint replay: error: cannot load {clean(args.file)}: {clean(exc)}\n")
        return 2
    if not isinstance(snap, dict) or snap.get("format") != 1:
        sys.stderr.write("amplint replay: error: not an amplint incident snapshot\n")
        return 2
    if snap.get("model") is None:
        sys.stderr.write(f"amplint replay: error: the model ({clean(snap.get('model_class'))}) could not be saved with the snapshot\n")
        return 2
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    ac = snap.get("autocast") or {}
    recorded = ("autocast", ac["dtype"]) if ac.get("enabled") and ac.get("dtype") else None
    label = f"{ac['dtype']} autocast" if recorded else "recorded precision (no autocast)"
    out = sys.stdout
    out.write(f"amplint replay: step {snap.get('step')} (loss scale {snap.get('loss_scale')}), on {device}\n")
    low = run_once(snap, device, recorded)
    high = run_once(snap, device, None)
    out.write(f"  {label}: " + (f"first non-finite: {clean(low)}" if low else "all outputs and gradients finite") + "\n")
    out.write("  float32: " + (f"first non-finite: {clean(high)}" if high else "all outputs and gradients finite") + "\n")
    if low and not high:
        out.write(f"{clean(low)} overflows in {ac.get('dtype')} and not in float32\n")
    elif low and high:
        out.write("non-finite in float32 too: the values themselves blow up (learning rate, data, initialization), not only the precision\n")
    return 1 if low else 0


def _recorded_main(path: str) -> Optional[str]:
    """The training script recorded in the snapshot, read without unpickling the model."""
    import torch

    class Skip(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module == "__main__":
                return _Placeholder
            return super().find_class(module, name)

    shim = types.ModuleType("amplint_pickle_probe")
    shim.__dict__.update({k: getattr(pickle, k) for k in dir(pickle) if not k.startswith("__")})
    shim.Unpickler = Skip  # type: ignore[attr-defined]
    try:
        snap = torch.load(path, map_location="cpu", weights_only=False, pickle_module=shim)
    except Exception:  # noqa: BLE001 - the real load reports the error
        return None
    main_file = snap.get("main_file") if isinstance(snap, dict) else None
    return main_file if main_file and os.path.isfile(main_file) else None


class _Placeholder:
    """Stands in for a `__main__` class while only the snapshot's metadata is read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
