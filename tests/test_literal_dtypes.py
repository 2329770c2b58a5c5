"""`dtype_choices`: the dtypes a run-time choice may take by the literals the code spells
(model/literal_dtypes.py), and the autocast regions whose dtype is such a choice."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.model import ModuleContext, dtype_choices, region_dtype_choices


def context(source: str) -> ModuleContext:
    source = textwrap.dedent(source).lstrip("\n")
    return ModuleContext.build(cst.parse_module(source), source, "t.py")


def choices_of_last_use(source: str, name: str):
    """The choices of the last assignment's value... of the argument of the last call `use(...)`."""
    ctx = context(source + "\nuse(" + name + ")\n")
    call = [c for c in ctx.calls if c.dotted == "use"][-1]
    return dtype_choices(ctx, call.node.args[0].value, call.scope, call.order)


@pytest.mark.parametrize(
    "source, name, expected",
    [
        ("import torch\nd = torch.float16 if a else torch.float32", "d", {"fp16", "fp32"}),
        ("import torch\nptdtype = {'float32': torch.float32, 'float16': torch.float16}[args.dtype]", "ptdtype", {"fp32", "fp16"}),
        ("import torch\ntable = {'bf16': torch.bfloat16, 'fp16': torch.half}\nd = table.get(args.p)", "d", {"bf16", "fp16"}),
        ("import torch\nd = getattr(torch, 'float16' if half else 'bfloat16')", "d", {"fp16", "bf16"}),
        ("import torch\nw = torch.float32\nif args.mp == 'fp16':\n    w = torch.float16", "w", {"fp32", "fp16"}),
        ("import torch\nd = args.dtype", "d", set()),
        ("import torch\nd = torch.bfloat16 or torch.float32", "d", {"bf16", "fp32"}),
    ],
)
def test_literal_candidates(source, name, expected):
    assert choices_of_last_use(source, name) == expected


def test_a_parameter_has_no_candidate_and_a_self_attribute_has_its_class_ones():
    ctx = context(
        """
        import torch
        def f(dtype):
            use(dtype)

        class T:
            def __init__(self, fp16):
                self.amp_dtype = torch.float16 if fp16 else torch.bfloat16

            def step(self):
                use(self.amp_dtype)
        """
    )
    uses = [c for c in ctx.calls if c.dotted == "use"]
    assert dtype_choices(ctx, uses[0].node.args[0].value, uses[0].scope, uses[0].order) == set()
    assert dtype_choices(ctx, uses[1].node.args[0].value, uses[1].scope, uses[1].order) == {"fp16", "bf16"}


def test_a_region_whose_dtype_is_a_choice():
    ctx = context(
        """
        import torch
        from contextlib import nullcontext
        ptdtype = {"float32": torch.float32, "float16": torch.float16}[args.dtype]
        ctx = torch.amp.autocast(device_type="cuda", dtype=ptdtype) if cuda else nullcontext()

        def step(model, x):
            with ctx:
                return model(x)

        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x)
        """
    )
    by_row = {ctx.position(r.call)[0].row: r for r in ctx.regions}
    assert sorted(by_row) == [4, 10], "the aliased conditional autocast is a region of the function using it"
    assert by_row[4].dtype is None and region_dtype_choices(ctx, by_row[4]) == {"fp32", "fp16"}
    assert by_row[10].dtype == "bf16" and region_dtype_choices(ctx, by_row[10]) == set()
