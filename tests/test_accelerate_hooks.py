"""AMP104 / AMP102 in per-parameter gradient hooks, with the scaling Accelerator followed across
files (`model/project/accelerate_hooks.py`): a helper returns `Accelerator(mixed_precision=...)`,
the precision comes from an argparse option the project defines (or a literal), a plugin helper
may return None. Each variation that makes the scaler uncertain keeps the rules silent."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import List, Tuple

from amplint import Config, lint_paths
from amplint.model.precision_names import lightning_autocast_dtype, lightning_precision, precision_dtype
from amplint.model.runtime_choices import choice_precision

UTIL = """
import argparse

from accelerate import Accelerator, DeepSpeedPlugin


def add_training_arguments(parser):
    parser.add_argument("--mixed_precision", type=str, default="no", choices=CHOICES)


def prepare_deepspeed_plugin(args):
    if not args.deepspeed:
        return None
    return DeepSpeedPlugin(zero_stage=2)


def prepare_accelerator(args):
    plugin = prepare_deepspeed_plugin(args)
    accelerator = Accelerator(MIXED, deepspeed_plugin=plugin)
    return accelerator
"""

TRAIN = """
import torch

from kit import util


def train(args, model, loader):
    accelerator = util.prepare_accelerator(args)
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    for group in optimizer.param_groups:
        for p in group["params"]:

            def hook(tensor, group=group):
                accelerator.CLIP(tensor, 1.0)
                optimizer.STEP(tensor, group)

            p.register_post_accumulate_grad_hook(hook)
    for batch in loader:
        accelerator.backward(model(batch).mean())
"""


def lint(tmp_path: Path, util: str = UTIL, train: str = TRAIN, **subs: str) -> List[Tuple[str, int, str, str]]:
    values = {"CHOICES": '["no", "fp16", "bf16"]', "MIXED": "mixed_precision=args.mixed_precision",
              "CLIP": "clip_grad_norm_", "STEP": "step_param", **subs}
    for key, value in values.items():
        util, train = util.replace(key, value), train.replace(key, value)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "__init__.py").write_text("")
    (tmp_path / "kit" / "util.py").write_text(textwrap.dedent(util))
    (tmp_path / "train.py").write_text(textwrap.dedent(train))
    result = lint_paths([str(tmp_path)], Config())
    return sorted(
        (d.code, d.location.row, d.severity.value, d.message)
        for d in result.diagnostics if d.code in ("AMP102", "AMP104")
    )


def test_clip_and_step_in_the_hook_on_the_fp16_choice(tmp_path):
    found = lint(tmp_path)
    assert [(c, r, s) for c, r, s, _ in found] == [("AMP102", 16, "warning"), ("AMP104", 15, "warning")]
    assert all(m.startswith("when --mixed_precision is fp16: ") and len(m) < 100 for *_, m in found)


def test_a_literal_fp16_with_a_plugin_helper_is_a_warning(tmp_path):
    """A literal "fp16" scales on the runs where the plugin helper returns None: a run-time choice too."""
    found = lint(tmp_path, MIXED='mixed_precision="fp16"')
    assert [(c, s) for c, _, s, _ in found] == [("AMP102", "warning"), ("AMP104", "warning")]
    assert not any(m.startswith("when ") for *_, m in found)


def test_a_literal_fp16_without_plugin_is_an_error(tmp_path):
    util = UTIL.replace("    plugin = prepare_deepspeed_plugin(args)\n", "").replace(", deepspeed_plugin=plugin", "")
    found = lint(tmp_path, util=util, MIXED='mixed_precision="fp16"')
    assert [(c, s) for c, _, s, _ in found] == [("AMP102", "error"), ("AMP104", "error")]
    assert not any(m.startswith("when ") for *_, m in found)


def test_unscale_gradients_in_the_hook(tmp_path):
    assert [c for c, *_ in lint(tmp_path, CLIP="unscale_gradients")] == ["AMP102", "AMP104"]


def test_choices_without_fp16_are_silent(tmp_path):
    assert lint(tmp_path, CHOICES='["no", "bf16"]') == []


def test_non_literal_choices_are_silent(tmp_path):
    assert lint(tmp_path, CHOICES="PRECISIONS") == []


def test_two_parsers_disagreeing_are_silent(tmp_path):
    util = UTIL + '\n\ndef other(parser):\n    parser.add_argument("--mixed_precision", choices=["no", "bf16"])\n'
    assert lint(tmp_path, util=util) == []


def test_plugin_always_built_is_silent(tmp_path):
    util = UTIL.replace("    if not args.deepspeed:\n        return None\n", "")
    assert lint(tmp_path, util=util) == []


def test_cpu_or_kwargs_are_silent(tmp_path):
    assert lint(tmp_path, MIXED="mixed_precision=args.mixed_precision, cpu=args.cpu") == []
    other = tmp_path / "b"
    other.mkdir()
    assert lint(other, MIXED="mixed_precision=args.mixed_precision, **extra") == []


def test_a_prepared_step_in_the_hook_is_not_amp102(tmp_path):
    train = TRAIN.replace("optimizer.STEP(tensor, group)", "optimizer.step()")
    assert [c for c, *_ in lint(tmp_path, train=train)] == ["AMP104"]


def test_without_backward_or_prepare_silent(tmp_path):
    train = TRAIN.replace("        accelerator.backward(model(batch).mean())", "        model(batch).mean().backward()")
    assert lint(tmp_path, train=train) == []
    other = tmp_path / "b"
    other.mkdir()
    train = TRAIN.replace("    model, optimizer = accelerator.prepare(model, optimizer)\n", "")
    assert lint(other, train=train) == []


def test_accelerator_handed_in_as_a_parameter_is_silent(tmp_path):
    train = TRAIN.replace("def train(args, model, loader):\n    accelerator = util.prepare_accelerator(args)\n",
                          "def train(args, model, loader, accelerator):\n")
    assert lint(tmp_path, train=train) == []


def test_hook_factory(tmp_path):
    train = TRAIN.replace(
        """            def hook(tensor, group=group):
                accelerator.CLIP(tensor, 1.0)
                optimizer.STEP(tensor, group)

            p.register_post_accumulate_grad_hook(hook)""",
        """            def make(group):
                def hook(tensor):
                    accelerator.CLIP(tensor, 1.0)
                    optimizer.STEP(tensor, group)

                return hook

            p.register_post_accumulate_grad_hook(make(group))""",
    )
    assert [(c, r) for c, r, *_ in lint(tmp_path, train=train)] == [("AMP102", 17), ("AMP104", 16)]


def test_one_precision_table():
    assert precision_dtype("FP16") == precision_dtype("16-mixed") == precision_dtype(16) == "fp16"
    assert precision_dtype("no") == "fp32" and precision_dtype("amp") is None and precision_dtype(True) is None
    assert choice_precision("bf16-true") == "bf16"
    assert lightning_precision(16) == lightning_precision("16") == "16-mixed"
    assert lightning_autocast_dtype("16") == "fp16" and lightning_autocast_dtype("bf16") == "bf16"
    assert lightning_autocast_dtype("16-true") is None and lightning_autocast_dtype("half") is None


def test_a_hook_registered_once_is_silent(tmp_path):
    """One registration (no loop over the parameters): the hook runs once per backward, one unscale_."""
    train = TRAIN.replace(
        """    for group in optimizer.param_groups:
        for p in group["params"]:

            def hook(tensor, group=group):
                accelerator.CLIP(tensor, 1.0)
                optimizer.STEP(tensor, group)

            p.register_post_accumulate_grad_hook(hook)""",
        """    group = optimizer.param_groups[0]

    def hook(tensor, group=group):
        accelerator.CLIP(tensor, 1.0)

    model.head.weight.register_post_accumulate_grad_hook(hook)""",
    )
    assert lint(tmp_path, train=train) == []
