"""accelerate's run-time mixed precision in AMP202 (a backward inside `accelerator.autocast()`)
and AMP104 (accelerate's clip called twice before a step): which receivers count as an
Accelerator, how its precision is read, and the severities and messages of each answer."""
from __future__ import annotations

import textwrap

import pytest

from amplint import Config, lint_source


def lint(code: str, rule: str):
    source = textwrap.dedent(code).lstrip("\n")
    return [d for d in lint_source(source, "t.py", Config(select=(rule,))) if d.code == rule]


REGION = """
from accelerate import Accelerator
{construct}
for batch in loader:
    with accelerator.autocast():
        loss = model(batch)
        accelerator.backward(loss)
    optimizer.step()
"""


@pytest.mark.parametrize("construct,suffix", [
    ('accelerator = Accelerator(mixed_precision="fp16")', ""),
    ('accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=2)', ""),
    ("accelerator = Accelerator()", " (when mixed precision is on)"),
    ("accelerator = Accelerator(mixed_precision=args.mixed_precision)", " (when mixed precision is on)"),
    ("accelerator = Accelerator(**kwargs)", " (when mixed precision is on)"),
])
def test_amp202_backward_inside_an_accelerators_region(construct, suffix):
    found = lint(REGION.format(construct=construct), "AMP202")
    assert [d.location.row for d in found] == [6]
    assert found[0].message.endswith("`accelerator.autocast()`" + suffix)
    assert found[0].severity.value == "warning"


@pytest.mark.parametrize("construct", [
    'accelerator = Accelerator(mixed_precision="no")',
    'accelerator = Accelerator(mixed_precision="fp16", cpu=True)',
    "accelerator = make_accelerator()",  # not certainly an Accelerator
    "from lightning import Fabric\naccelerator = Fabric(precision='16-mixed')",
])
def test_amp202_silent_when_the_region_is_no_autocast_or_not_accelerates(construct):
    assert lint(REGION.format(construct=construct), "AMP202") == []


def test_amp202_an_annotated_parameter_or_a_constructor_in_the_class():
    code = """
    from typing import Optional
    from accelerate import Accelerator

    class Trainer:
        def __init__(self, accelerator: Optional[Accelerator] = None):
            self.accelerator = accelerator or None
            self.accelerator = accelerator

        def step(self, batch):
            with self.accelerator.autocast():
                self.accelerator.backward(self.model(batch))

    def train(accelerator: "Accelerator", batch):
        with accelerator.autocast():
            accelerator.backward(model(batch))

    def untyped(accelerator, batch):
        with accelerator.autocast():
            accelerator.backward(model(batch))
    """
    # `accelerator or None` is no Accelerator binding: the class's receiver is not certain
    assert [d.location.row for d in lint(code, "AMP202")] == [15]


TWICE = """
from accelerate import Accelerator
accelerator = Accelerator({args})
model, optimizer = accelerator.prepare(model, optimizer)
for batch in loader:
    accelerator.backward(model(batch))
    if clip:
        accelerator.clip_grad_norm_(model.encoder.parameters(), clip)
        accelerator.clip_grad_value_(model.decoder.parameters(), clip)
    {between}
    optimizer.step()
"""


@pytest.mark.parametrize("args,severity,prefix", [
    ('mixed_precision="fp16"', "error", ""),
    ("", "warning", "when accelerate runs fp16: "),
    ("mixed_precision=args.precision", "warning", "when accelerate runs fp16: "),
])
def test_amp104_a_second_accelerate_clip_before_the_step(args, severity, prefix):
    found = lint(TWICE.format(args=args, between="pass"), "AMP104")
    assert [(d.location.row, d.severity.value) for d in found] == [(8, severity)]
    assert found[0].message.startswith(prefix) and "clip_grad_value_` " in found[0].message
    assert found[0].related[0].location.row == 7


@pytest.mark.parametrize("args,between", [
    ('mixed_precision="bf16"', "pass"),
    ('mixed_precision="no"', "pass"),
    ("cpu=True", "pass"),
])
def test_amp104_silent_without_a_grad_scaler(args, between):
    assert lint(TWICE.format(args=args, between=between), "AMP104") == []


@pytest.mark.parametrize("code", [
    # a step between the two clips updates the scaler
    """
    from accelerate import Accelerator
    accelerator = Accelerator(mixed_precision="fp16")
    accelerator.backward(loss_g)
    accelerator.clip_grad_norm_(gen.parameters(), 1.0)
    opt_g.step()
    accelerator.backward(loss_d)
    accelerator.clip_grad_norm_(disc.parameters(), 1.0)
    opt_d.step()
    """,
    # a function of the file between them may step
    """
    from accelerate import Accelerator
    accelerator = Accelerator(mixed_precision="fp16")
    def update(): opt.step()
    accelerator.clip_grad_norm_(gen.parameters(), 1.0)
    update()
    accelerator.clip_grad_norm_(disc.parameters(), 1.0)
    """,
    # exclusive branches
    """
    from accelerate import Accelerator
    accelerator = Accelerator(mixed_precision="fp16")
    if by_value:
        accelerator.clip_grad_value_(model.parameters(), 1.0)
    else:
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    """,
    # two Accelerators
    """
    from accelerate import Accelerator
    a = Accelerator(mixed_precision="fp16")
    b = Accelerator(mixed_precision="fp16")
    a.clip_grad_norm_(gen.parameters(), 1.0)
    b.clip_grad_norm_(disc.parameters(), 1.0)
    """,
    # unscale_gradients of one optimizer: the rule does not pair them
    """
    from accelerate import Accelerator
    accelerator = Accelerator(mixed_precision="fp16")
    accelerator.unscale_gradients(opt_g)
    accelerator.unscale_gradients(opt_d)
    """,
    # not certainly an Accelerator
    """
    accelerator = build()
    accelerator.clip_grad_norm_(gen.parameters(), 1.0)
    accelerator.clip_grad_norm_(disc.parameters(), 1.0)
    """,
])
def test_amp104_silent_shapes(code):
    assert lint(code, "AMP104") == []


ACCUMULATE = """
from accelerate import Accelerator
{constants}
accelerator = Accelerator({args})
model, optim, loader = accelerator.prepare(model, optim, loader)
for batch in loader:
    with accelerator.accumulate(model):
        accelerator.backward(model(batch))
{clip}
        optim.step()
        optim.zero_grad()
"""
CLIP = "        accelerator.clip_grad_norm_(model.parameters(), 0.5)"


@pytest.mark.parametrize("constants,args,severity,prefix", [
    ("", 'mixed_precision="fp16", gradient_accumulation_steps=4', "error", ""),
    ("ACCUM = 8", "gradient_accumulation_steps=ACCUM", "warning", "when accelerate runs fp16: "),
    ("", "mixed_precision=args.mixed_precision, gradient_accumulation_steps=2 * 2", "warning", "when accelerate runs fp16: "),
])
def test_amp104_an_accelerate_clip_on_every_micro_batch_of_accumulate(constants, args, severity, prefix):
    found = lint(ACCUMULATE.format(constants=constants, args=args, clip=CLIP), "AMP104")
    assert [d.location.row for d in found] == [8]
    assert found[0].severity.value == severity
    assert found[0].message.startswith(prefix + "`")
    assert found[0].data["shape"] == "accelerate-accumulate"
    assert len(found[0].message) < 100


@pytest.mark.parametrize("constants,args,clip", [
    ("", 'mixed_precision="bf16", gradient_accumulation_steps=4', CLIP),  # no scaler
    ("", 'mixed_precision="fp16"', CLIP),  # default of 1: every micro-batch syncs
    ("", 'mixed_precision="fp16", gradient_accumulation_steps=args.accum', CLIP),  # may be 1
    ("ACCUM = 4\nACCUM = 1", 'mixed_precision="fp16", gradient_accumulation_steps=ACCUM', CLIP),
    ("", 'mixed_precision="fp16", gradient_accumulation_steps=4, deepspeed_plugin=plugin', CLIP),
    ("", 'mixed_precision="fp16", gradient_accumulation_steps=4',
     "        if accelerator.sync_gradients:\n    " + CLIP),
    ("", 'mixed_precision="fp16", gradient_accumulation_steps=4',
     "        if not accelerator.sync_gradients:\n            continue\n" + CLIP),
])
def test_amp104_accumulate_silent_shapes(constants, args, clip):
    assert lint(ACCUMULATE.format(constants=constants, args=args, clip=clip), "AMP104") == []


def test_amp104_accumulate_in_a_trainer_method():
    code = """
    from accelerate import Accelerator

    class Trainer:
        def __init__(self, model, optim):
            self.accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=4)
            self.model, self.optim = self.accelerator.prepare(model, optim)

        def train_step(self, batch):
            with self.accelerator.accumulate(self.model):
                self.accelerator.backward(self.model(batch))
                if self.max_grad_norm is not None:
                    self.accelerator.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
                self.optim.step()
                self.optim.zero_grad()
    """
    found = lint(code, "AMP104")
    assert [d.location.row for d in found] == [12]
    assert found[0].severity.value == "error"
