"""`runtime_choices`: the literal choices of a file's argparse options (model/runtime_choices.py),
and how dtype tables and accelerate's `mixed_precision` read through them."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.model import ModuleContext, choice_naming, choice_precision, dtype_choices, option_read, scaling_accelerator, scaling_choice

PARSER = "import argparse\nimport torch\nparser = argparse.ArgumentParser()\n"


def context(source: str) -> ModuleContext:
    source = textwrap.dedent(source).lstrip("\n")
    return ModuleContext.build(cst.parse_module(source), source, "t.py")


def last_use(source: str):
    ctx = context(source + "\nuse(VALUE)\n")
    call = [c for c in ctx.calls if c.dotted == "use"][-1]
    return ctx, call


@pytest.mark.parametrize(
    "argument, dest, choices",
    [
        ('"--precision", choices=["fp16", "bf16", "fp32"]', "precision", {"fp16", "bf16", "fp32"}),
        ('"--mixed-precision", default="no", choices=("no", "fp16")', "mixed_precision", {"no", "fp16"}),
        ('"-p", "--dtype", choices=[None, "float16"]', "dtype", {"float16"}),
        ('"--p", dest="amp_dtype", type=str, choices=["bf16"]', "amp_dtype", {"bf16"}),
    ],
)
def test_options_with_literal_choices(argument, dest, choices):
    ctx, call = last_use(PARSER + f"parser.add_argument({argument})\nargs = parser.parse_args()\nVALUE = args.{dest}")
    value = ctx.assignments_to("VALUE")[0].value
    option = option_read(ctx, value)
    assert option is not None and option.dest == dest and option.choices == choices


@pytest.mark.parametrize(
    "argument",
    [
        '"--precision"',  # no choices: any text
        '"--precision", choices=PRECISIONS',  # choices the file does not spell
        '"--precision", choices=["fp16", name]',  # a non-literal element
        '"--precision", type=parse_dtype, choices=["fp16", "bf16"]',  # a converter maps the text
        '*flags, choices=["fp16"]',  # flags not spelled
    ],
)
def test_unknown_options(argument):
    ctx, _ = last_use(PARSER + f"parser.add_argument({argument})\nargs = parser.parse_args()\nVALUE = args.precision")
    assert option_read(ctx, ctx.assignments_to("VALUE")[0].value) is None


def test_a_destination_defined_twice_with_other_choices_is_unknown():
    source = PARSER + (
        'parser.add_argument("--precision", choices=["fp16", "fp32"])\n'
        'other.add_argument("--precision", choices=["bf16", "fp32"])\n'
        "VALUE = args.precision"
    )
    ctx, _ = last_use(source)
    assert option_read(ctx, ctx.assignments_to("VALUE")[0].value) is None


@pytest.mark.parametrize(
    "choices, expected",
    [
        ('["fp16", "bf16"]', {"fp16", "bf16"}),
        ('["bf16", "fp32"]', {"bf16", "fp32"}),  # the table's fp16 entry is never selected
        ('["fp32"]', {"fp32"}),
    ],
)
def test_a_table_keyed_by_an_option_yields_the_entries_its_choices_select(choices, expected):
    source = PARSER + (
        f'parser.add_argument("--dtype", choices={choices})\nargs = parser.parse_args()\n'
        'DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}\n'
        "d = DTYPES[args.dtype]"
    )
    ctx, _ = last_use(source)
    d = ctx.assignments_to("d")[0]
    assert dtype_choices(ctx, d.value, d.scope, d.order) == expected


def test_getattr_torch_of_an_option_yields_its_choices_dtypes_and_names_the_choice():
    source = PARSER + (
        'parser.add_argument("--precision", default="bfloat16", choices=["float16", "bfloat16"])\n'
        "args = parser.parse_args()\nd = getattr(torch, args.precision)"
    )
    ctx, _ = last_use(source)
    d = ctx.assignments_to("d")[0]
    assert dtype_choices(ctx, d.value, d.scope, d.order) == {"fp16", "bf16"}
    assert choice_naming(ctx, d.value, d.scope, "fp16") == "--precision is float16"
    assert choice_naming(ctx, d.value, d.scope, "fp32") is None


def test_choice_naming_follows_a_name_to_the_table_lookup():
    source = PARSER + (
        'parser.add_argument("--dtype", choices=["fp16", "bf16"])\nargs = parser.parse_args()\n'
        'd = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]'
    )
    ctx, call = last_use(source)
    name = cst.Name("d")
    assert choice_naming(ctx, name, call.scope, "fp16", call.order) == "--dtype is fp16"
    assert choice_naming(ctx, name, call.scope, "bf16", call.order) == "--dtype is bf16"


@pytest.mark.parametrize(
    "text, precision",
    [("fp16", "fp16"), ("float16", "fp16"), ("16-mixed", "fp16"), ("bf16-mixed", "bf16"), ("no", "fp32"), ("amp", None), ("int8", None)],
)
def test_choice_precision(text, precision):
    assert choice_precision(text) == precision


@pytest.mark.parametrize("choices, scales", [('["no", "fp16", "bf16"]', True), ('["no", "bf16"]', False)])
def test_an_accelerator_scales_on_a_flag_choice_fp16(choices, scales):
    source = (
        "import argparse\nfrom accelerate import Accelerator\nparser = argparse.ArgumentParser()\n"
        f'parser.add_argument("--mixed_precision", default="no", choices={choices})\nargs = parser.parse_args()\n'
        "accelerator = Accelerator(mixed_precision=args.mixed_precision)"
    )
    ctx, call = last_use(source)
    assert (scaling_accelerator(ctx, "accelerator", call.scope) is not None) is scales
    assert scaling_choice(ctx, "accelerator", call.scope) == ("--mixed_precision is fp16" if scales else None)


def test_an_accelerator_of_a_literal_fp16_names_no_choice():
    ctx, call = last_use('from accelerate import Accelerator\naccelerator = Accelerator(mixed_precision="fp16")')
    assert scaling_accelerator(ctx, "accelerator", call.scope) is not None
    assert scaling_choice(ctx, "accelerator", call.scope) is None


@pytest.mark.parametrize(
    "binding, read, known",
    [
        ("args = parser.parse_args()", "args.dtype", True),
        ("args, unknown = parser.parse_known_args()", "args.dtype", True),
        ("args = parser.parse_args()\ncfg = load_config(args.config)", "cfg.dtype", False),  # a config, not the parser's namespace
        ("opt = parser.parse_args()", "args.dtype", False),
    ],
)
def test_only_the_parsers_namespace_reads_an_option(binding, read, known):
    source = PARSER + f'parser.add_argument("--dtype", choices=["fp16", "bf16"])\n{binding}\nVALUE = {read}'
    ctx, _ = last_use(source)
    assert (option_read(ctx, ctx.assignments_to("VALUE")[0].value) is not None) is known


def test_a_function_parameter_named_like_the_namespace_reads_the_option():
    source = PARSER + (
        'parser.add_argument("--dtype", choices=["fp16", "bf16"])\n'
        "def main(args):\n    return args.dtype\n"
        "if __name__ == '__main__':\n    main(parser.parse_args())\n    args = parser.parse_args()"
    )
    ctx = context(source)
    read = next(n for n in ctx.module.body[4].body.body[0].body if isinstance(n, cst.Return)).value
    assert option_read(ctx, read) is not None
