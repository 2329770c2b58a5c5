"""AMP106's accelerate half: trained modules cast to a weight dtype that is fp16 exactly when
accelerate runs fp16 (and so builds its GradScaler), whose prepared optimizer then steps."""
from __future__ import annotations

import textwrap

import pytest

from amplint import Config, lint_source

HEAD = """
import torch
from accelerate import Accelerator


def main(args):
    accelerator = Accelerator(mixed_precision={mp})
    params = [p for n, p in net.unet.named_parameters() if "lora" in n]
    optimizer = torch.optim.AdamW(params, lr=5e-6)
    net, optimizer, loader = accelerator.prepare(net, optimizer, loader)
    weight_dtype = torch.float32
    if {test} == "fp16":
        weight_dtype = torch.float16
{between}    net.to(dtype=weight_dtype)
{after}    for batch in loader:
        accelerator.backward(net(batch).mean())
        optimizer.step()
"""


def lint(mp="args.mixed_precision", test="accelerator.mixed_precision", between="", after=""):
    source = HEAD.format(mp=mp, test=test, between=textwrap.indent(between, "    "), after=textwrap.indent(after, "    "))
    return [(d.location.row, d.severity.value, d.message) for d in lint_source(source, "train.py", Config(select=("AMP106",)))]


def test_runtime_precision_is_a_warning_at_the_cast():
    (found,) = lint()
    assert found[0] == 14 and found[1] == "warning"
    assert found[2].startswith("when accelerate runs fp16, `accelerator`'s GradScaler raises")


def test_the_option_handed_to_the_accelerator_couples_too():
    (found,) = lint(test="args.mixed_precision")
    assert found[1] == "warning"


def test_a_literal_fp16_accelerator_is_an_error():
    (found,) = lint(mp='"fp16"')
    assert found[1] == "error"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mp": '"bf16"'},  # accelerate never runs fp16: no scaler
        {"test": "args.weight_precision"},  # fp16 chosen apart from accelerate's precision: AMP201's
        {"between": "net.requires_grad_(False)\n"},  # frozen
        {"after": "cast_training_params(net, dtype=torch.float32)\n"},  # trainable parameters cast back
        {"after": "net.add_adapter(lora_config)\n"},  # adapters added after the cast keep their dtype
        {"mp": "args.mixed_precision, deepspeed_plugin=plugin"},  # DeepSpeed scales on its own
    ],
)
def test_look_alikes_are_silent(kwargs):
    assert lint(**kwargs) == []


# -- the adapters' fp32 upcast keyed on the script's option, which is None when accelerate's launch
# flag or config file picks fp16 (an explicit `Accelerator(mixed_precision=...)` wins, None reads
# ACCELERATE_MIXED_PRECISION): the adapters keep the fp16 of the layers they wrap

LORA = """
import argparse
import torch
from accelerate import Accelerator
from diffusers.training_utils import cast_training_params


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mixed_precision", type=str{default}, choices=["no", "fp16", "bf16"])
    args = parser.parse_args()
    return args


def main(args):
    accelerator = Accelerator(mixed_precision={mp})
{before}    weight_dtype = torch.float32
    if accelerator.mixed_precision == "fp16":
        weight_dtype = torch.float16
    unet.requires_grad_(False)
    {load}
    {adapter}
    if {guard} == "fp16":
        {upcast}
{after}    optimizer = optimizer_cls(filter(lambda p: p.requires_grad, unet.parameters()), lr=1e-4)
    unet, optimizer = accelerator.prepare(unet, optimizer)
    for batch in loader:
        accelerator.backward(unet(batch).mean())
        optimizer.step()
"""


def lint_lora(default=", default=None", mp="args.mixed_precision", before="", load="unet.to(accelerator.device, dtype=weight_dtype)",
              adapter="unet.add_adapter(lora_config)", guard="args.mixed_precision", upcast="cast_training_params(unet, dtype=torch.float32)",
              after=""):
    source = LORA.format(default=default, mp=mp, before=textwrap.indent(before, "    "), load=load, adapter=adapter, guard=guard,
                         upcast=upcast, after=textwrap.indent(after, "    "))
    return [(d.location.row, d.severity.value, d.message) for d in lint_source(source, "train.py", Config(select=("AMP106",)))]


def test_an_upcast_keyed_on_an_option_without_default_is_a_warning_at_the_test():
    (found,) = lint_lora()
    assert found[:2] == (23, "warning")
    assert found[2] == "`args.mixed_precision` is None when accelerate launch/config picks fp16: the adapters stay fp16"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"default": ""},  # no `default=` at all: None too
        {"load": 'unet = UNet.from_pretrained(path, subfolder="unet", torch_dtype=weight_dtype)'},  # loaded in the dtype
        {"upcast": "for p in unet.parameters():\n            if p.requires_grad:\n                p.data = p.to(torch.float32)"},
        {"upcast": "cast_training_params([unet])"},  # fp32 is cast_training_params' default
    ],
)
def test_the_same_shape_spelled_otherwise(kwargs):
    (found,) = lint_lora(**kwargs)
    assert found[1] == "warning"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"default": ', default="no"'},  # always handed to accelerate, which then never reads the launch flag
        {"default": ", default=None, required=True"},
        {"guard": "accelerator.mixed_precision"},  # accelerate's own precision: right however fp16 was chosen
        {"after": "cast_training_params(unet, dtype=torch.float32)\n"},  # an upcast on every run as well
        {"before": "args.mixed_precision = args.mixed_precision or 'no'\n"},  # the option filled in
        {"adapter": "unet = get_peft_model(unet, lora_config)"},  # peft's PeftModel upcasts its adapters
        {"mp": "args.mixed_precision, deepspeed_plugin=plugin"},  # DeepSpeed: no accelerate GradScaler
        {"mp": '"fp16"'},  # no option: the upcast's test reads nothing accelerate gets
    ],
)
def test_upcast_look_alikes_are_silent(kwargs):
    assert lint_lora(**kwargs) == []


def test_an_adapter_added_on_one_branch_only_is_silent():
    assert lint_lora(adapter="if args.use_lora:\n        unet.add_adapter(lora_config)") == []


def _swap(old, new, source=None):
    source = source or LORA.format(default=", default=None", mp="args.mixed_precision", before="",
                                   load="unet.to(accelerator.device, dtype=weight_dtype)", adapter="unet.add_adapter(lora_config)",
                                   guard="args.mixed_precision", upcast="cast_training_params(unet, dtype=torch.float32)", after="")
    assert old in source
    source = source.replace(old, new)
    return [(d.location.row, d.severity.value) for d in lint_source(source, "train.py", Config(select=("AMP106",)))]


DEEPSPEED_BRANCH = """    weight_dtype = torch.float32
    if accelerator.state.deepspeed_plugin:
        if accelerator.state.deepspeed_plugin.deepspeed_config["fp16"]["enabled"]:
            weight_dtype = torch.float16
    else:
        if accelerator.mixed_precision == "fp16":
            weight_dtype = torch.float16
"""


def test_a_float16_taken_on_accelerates_deepspeed_branch_leaves_the_scaled_run_alone():
    # DeepSpeed scales with its own engine: the GradScaler's fp16 run is the else branch's
    old = """    weight_dtype = torch.float32
    if accelerator.mixed_precision == "fp16":
        weight_dtype = torch.float16
"""
    assert [s for _, s in _swap(old, DEEPSPEED_BRANCH)] == ["warning"]
    assert _swap(old, DEEPSPEED_BRANCH.replace("if accelerator.state.deepspeed_plugin:", "if args.deepspeed_fp16:")) == []


def test_an_option_read_through_a_function_returning_parse_args():
    old = """    args = parser.parse_args()
    return args
"""
    assert [s for _, s in _swap(old, "    return parser.parse_args()\n")] == []  # `args` is bound to nothing here
    source = LORA.format(default=", default=None", mp="args.mixed_precision", before="",
                         load="unet.to(accelerator.device, dtype=weight_dtype)", adapter="unet.add_adapter(lora_config)",
                         guard="args.mixed_precision", upcast="cast_training_params(unet, dtype=torch.float32)", after="")
    source = source.replace(old, "    return parser.parse_args()\n") + "\n\nif __name__ == '__main__':\n    args = parse_args()\n    main(args)\n"
    assert [s for _, s in _swap("return parser.parse_args()", "return parser.parse_args()", source)] == ["warning"]
    assert _swap("return parser.parse_args()", "return Namespace(**vars(parser.parse_args()))", source) == []
