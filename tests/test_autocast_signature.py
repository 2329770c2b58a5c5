"""autocast's positional signature is one table (`torchapi.autocast_parameters`): the per-file
model (libcst) and the project summary (`ast`) read every constructor's arguments alike."""
from __future__ import annotations

import itertools

import libcst as cst
import pytest

from amplint.core.config import Config
from amplint.model import torchapi
from amplint.model.context import ModuleContext
from amplint.model.project.summary import summarize

#: spellings of the arguments after the callee, positional and keyword, some of them wrong on purpose
ARGUMENTS = [
    "",
    '"cpu"',
    '"cuda", torch.bfloat16',
    '"cpu", torch.float16, False',
    '"cuda", torch.float16, True, False',
    "True",
    "False, torch.bfloat16",
    "True, torch.float16, False",
    "enabled=False",
    "dtype=torch.bfloat16",
    'device_type="cpu", dtype=torch.float16',
    '"cuda", dtype=torch.bfloat16',
    "*args",
    "False, *rest",
    "flag, torch.bfloat16",
    "**ctx.autocast_kwargs",
    '"cuda", dtype=torch.bfloat16, **extra',
]


def _model_regions(source):
    ctx = ModuleContext.build(cst.parse_module(source), source, "t.py", Config())
    return [(r.device, r.dtype, r.enabled) for r in ctx.regions]


def _summary_regions(source):
    return [(r["device"], r["dtype"], r["enabled"]) for r in summarize(source)["regions"]]


@pytest.mark.parametrize("qualname", sorted(torchapi.AUTOCAST_CONTEXTS))
def test_the_model_and_the_summary_read_autocast_arguments_alike(qualname):
    lines = ["import torch", f"import {qualname.rsplit('.', 1)[0]}"]
    lines += [f"with {qualname}({arguments}):\n    pass" for arguments in ARGUMENTS]
    source = "\n".join(lines) + "\n"
    assert _model_regions(source) == _summary_regions(source)
    assert len(_model_regions(source)) == len(ARGUMENTS)


@pytest.mark.parametrize(
    "call, expected",
    [
        ('torch.autocast("cpu", torch.float16, False)', ("cpu", "fp16", False)),
        ("torch.cuda.amp.autocast(False, torch.bfloat16)", ("cuda", "bf16", False)),
        ("torch.cpu.amp.autocast(True, torch.float16)", ("cpu", "fp16", True)),
        ('torch.cuda.amp.autocast("cuda")', ("cuda", "fp16", None)),  # not a device: `enabled` comes first
        ("torch.cpu.amp.autocast()", ("cpu", "bf16", True)),
        # whether `**kwargs` / `*args` switch it on is decided at run time (a checkpoint's replay of a
        # captured state); the dtype is read as the device's default
        ("torch.cuda.amp.autocast(**ctx.gpu_autocast_kwargs)", ("cuda", "fp16", None)),
        ('torch.autocast("cuda", *state)', ("cuda", "fp16", None)),
        ('torch.autocast("cuda", dtype=torch.bfloat16, **kw)', ("cuda", "bf16", None)),
        ('torch.autocast("cuda", enabled=False, **kw)', ("cuda", "fp16", False)),
    ],
)
def test_positions_follow_each_constructors_signature(call, expected):
    source = f"import torch\nwith {call}:\n    pass\n"
    assert _model_regions(source) == _summary_regions(source) == [expected]


def test_every_autocast_constructor_has_a_signature():
    for qualname, device in torchapi.AUTOCAST_CONTEXTS.items():
        parameters = torchapi.autocast_parameters(qualname)
        assert ("device_type" in parameters) == (device is None)
        assert {"dtype", "enabled", "cache_enabled"} <= set(parameters)
