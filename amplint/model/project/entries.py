"""Whether a file's code may enter a low-precision autocast: where a project's custom autograd
Function can meet autocast at all (AMP501's reachability, `model/embedded.py`). Read with `ast`,
when conditions are resolved; no libcst, no project model.

A file may enter one when it
* constructs an autocast that may run fp16/bf16: not `enabled=False`, not `dtype=torch.float32`
  (`ctx = torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16)` counts where it is made,
  wherever it is entered);
* names an autocast constructor without calling it (`partial(torch.autocast, "cuda")`, an alias):
  held for later, so counted;
* enters a framework's autocast (`accelerator.autocast()`) or sets a framework's mixed precision:
  Lightning `Trainer(precision="16-mixed")`, `Accelerator(mixed_precision=...)` (also with none
  given: the accelerate config decides), `TrainingArguments(fp16=True)`; a value decided at run
  time counts.
It does not when its only regions are switched off, fp32, or replay a captured state: an autocast
whose `enabled=` is decided at run time in the `backward` of a class (`torch.autocast(**ctx.
autocast_kwargs)` in a checkpoint Function) re-enters what the forward ran under, so it opens
nothing of its own (`regions.replays_autocast` is the per-file model's reading of the same shape).
"""
from __future__ import annotations

import ast
from typing import Any, List, Tuple

from .. import torchapi
from ..precision_names import lightning_autocast_dtype
from ...core.pyast import parse
from .astutil import dotted
from .summary import _ACCELERATORS, _HF_ARGS, _LIGHTNING_TRAINERS, autocast_arguments, import_reader

def may_enter_autocast(source: str) -> bool:
    """What `enters_autocast` needs to find anything, by substrings: an autocast named, or a
    framework's precision setting (the cheap test every file of a project gets)."""
    return (
        "autocast" in source or "Accelerator" in source
        or ("Trainer" in source and ("precision" in source or "**" in source))
        or ("TrainingArguments" in source and ("fp16" in source or "bf16" in source or "**" in source))
    )


def enters_autocast(source: str) -> bool:
    """The file's code may enter a low-precision autocast (module docstring); True when it does
    not parse (what it holds is unknown)."""
    if not may_enter_autocast(source):
        return False
    tree = parse(source)
    if tree is None:
        return True
    reader = import_reader(source, tree)
    called = set()
    stack: List[Tuple[ast.AST, Tuple[str, ...]]] = [(tree, ())]
    while stack:
        node, functions = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions = (*functions, node.name)
        elif isinstance(node, ast.ClassDef):
            functions = (*functions, "")  # a class body: a `def backward` below it is a method
        if isinstance(node, ast.Call):
            called.add(id(node.func))
            if _enters(reader, node, functions):
                return True
        elif isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in called:
            if reader.qualname(dotted(node)) in torchapi.AUTOCAST_CONTEXTS:
                return True  # named, not called: held for later
        stack.extend((child, functions) for child in ast.iter_child_nodes(node))
    return False


def _enters(reader: Any, call: ast.Call, functions: Tuple[str, ...]) -> bool:
    spelled = dotted(call.func)
    q = reader.qualname(spelled)
    if q in torchapi.AUTOCAST_CONTEXTS:
        _, dtype, enabled = autocast_arguments(reader, call, q)
        replays = enabled is None and functions[-2:] == ("", "backward")
        return enabled is not False and dtype != "fp32" and not replays
    if spelled is not None and q is None and spelled.rsplit(".", 1)[-1] == "autocast":
        return True  # `accelerator.autocast()`, or an autocast imported where the reader cannot see
    unpacked = any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    if q in _LIGHTNING_TRAINERS:
        value = keywords.get("precision")
        if value is None:
            return unpacked
        return not isinstance(value, ast.Constant) or lightning_autocast_dtype(value.value) is not None
    if q in _ACCELERATORS:  # none given: the accelerate config decides
        value = keywords.get("mixed_precision", call.args[2] if len(call.args) > 2 else None)
        return not (isinstance(value, ast.Constant) and value.value == "no")
    if q in _HF_ARGS:
        flags = [keywords[f] for f in ("fp16", "bf16") if f in keywords]
        return unpacked or any(not (isinstance(v, ast.Constant) and not v.value) for v in flags)
    return False
