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
