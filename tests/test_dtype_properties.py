"""A config's property mapping a precision string to a dtype across files (`model/dtype_properties.py`):
AMP105's condition `dtype-property=<name>` holds only for a literal mapping that offers float16."""
from __future__ import annotations

import pytest

from amplint.model.dtype_properties import fp16_dtype_property
from amplint.model.facts import DTYPE_PROPERTY, ProjectFacts, condition_holds

MAPPING = '''import torch


class TrainConfig:
    precision = "amp_bf16"

    @property
    def autocast_precision(self):
        if self.precision == "amp_bf16":
            return torch.bfloat16
        elif self.precision == "amp_fp16":
            return torch.float16
        raise ValueError(self.precision)
'''


def _project(tmp_path, config, extra=None):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "config.py").write_text(config)
    if extra is not None:
        (tmp_path / "other.py").write_text(extra)
    trainer = tmp_path / "trainer.py"
    trainer.write_text("import torch\n")
    return str(trainer)


def test_a_literal_mapping_offering_fp16(tmp_path):
    trainer = _project(tmp_path, MAPPING)
    assert fp16_dtype_property(trainer, "autocast_precision", str(tmp_path)) == "config.py:8"
    condition = f"{DTYPE_PROPERTY}=autocast_precision"
    assert condition_holds(condition, ProjectFacts(), "auto", trainer, str(tmp_path))
    assert not condition_holds(condition, ProjectFacts(), "bf16", trainer, str(tmp_path))


@pytest.mark.parametrize(
    "config,extra",
    [
        (MAPPING.replace("torch.float16", "torch.float32"), None),  # no fp16 choice
        (MAPPING.replace("return torch.bfloat16", "return getattr(torch, self.name)"), None),  # not a literal
        (MAPPING.replace("    @property\n", ""), None),  # a method, read as an attribute: a bound method
        (MAPPING, "class Other:\n    def __init__(self, d):\n        self.autocast_precision = d\n"),  # a value of that name
        (MAPPING, "import dataclasses\n@dataclasses.dataclass\nclass Eval:\n    autocast_precision: object = None\n"),  # a field
        (MAPPING, "class Other:\n    @property\n    def autocast_precision(self):\n        return self.dtype\n"),  # another definition
        ("import torch\n", None),  # defined nowhere
    ],
)
def test_not_a_literal_fp16_mapping(tmp_path, config, extra):
    trainer = _project(tmp_path, config, extra)
    assert fp16_dtype_property(trainer, "autocast_precision", str(tmp_path)) is None
    assert not condition_holds(f"{DTYPE_PROPERTY}=autocast_precision", ProjectFacts(), "auto", trainer, str(tmp_path))


def test_a_method_called_without_arguments(tmp_path):
    method = MAPPING.replace("    @property\n", "")
    trainer = _project(tmp_path, method)
    assert fp16_dtype_property(trainer, "autocast_precision()", str(tmp_path)) == "config.py:7"
    assert fp16_dtype_property(trainer, "autocast_precision", str(tmp_path)) is None
    assert fp16_dtype_property(_project(tmp_path, MAPPING), "autocast_precision()", str(tmp_path)) is None


def test_no_file_on_disk():
    assert fp16_dtype_property(None, "autocast_precision") is None


BF16_OR_FP32 = '''import torch
from enum import Enum


class ModelDtype(Enum):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"

    @property
    def autocast_dtype(self):
        return {ModelDtype.BFLOAT16: torch.bfloat16, ModelDtype.FLOAT32: torch.float}[self]
'''

CONTEXT = '''import torch
from typing import TypedDict


class ModelContext(TypedDict):
    autocast_dtype: torch.dtype
'''


def test_the_dtypes_a_property_maps_to(tmp_path):
    from amplint.model.dtype_properties import dtype_property_values
    from amplint.model.facts import DTYPE_PROPERTY_MAY_FP16

    trainer = _project(tmp_path, BF16_OR_FP32, CONTEXT)  # a TypedDict's field is a key, not an attribute
    assert dtype_property_values(trainer, "autocast_dtype", str(tmp_path)) == {"bf16", "fp32"}
    assert not condition_holds(f"{DTYPE_PROPERTY_MAY_FP16}=autocast_dtype", ProjectFacts(), "auto", trainer, str(tmp_path))
    assert condition_holds(f"{DTYPE_PROPERTY_MAY_FP16}=autocast_dtype", ProjectFacts(), "fp16", trainer, str(tmp_path))
    assert dtype_property_values(trainer, "autocast_precision", str(tmp_path)) is None  # defined nowhere


@pytest.mark.parametrize(
    "config,extra",
    [
        (BF16_OR_FP32.replace("torch.float}", "torch.float16}"), None),  # float16 among the values
        (BF16_OR_FP32, CONTEXT.replace("(TypedDict)", "")),  # a plain class's field: the object read may be that one
        ("import torch\n", None),  # defined nowhere
    ],
)
def test_a_property_that_may_map_to_fp16(tmp_path, config, extra):
    from amplint.model.facts import DTYPE_PROPERTY_MAY_FP16

    trainer = _project(tmp_path, config, extra)
    assert condition_holds(f"{DTYPE_PROPERTY_MAY_FP16}=autocast_dtype", ProjectFacts(), "auto", trainer, str(tmp_path))


def test_a_caller_in_another_file_may_pass_fp16(tmp_path):
    """`<name>@<function>`: the value reaches the region through the function's parameter, so a
    call of it that another file makes may pass anything."""
    from amplint.model.facts import DTYPE_PROPERTY_MAY_FP16

    trainer = _project(tmp_path, BF16_OR_FP32, "import torch\nfrom trainer import train_step\n\ntrain_step(torch.float16)\n")
    holds = lambda spec: condition_holds(f"{DTYPE_PROPERTY_MAY_FP16}={spec}", ProjectFacts(), "auto", trainer, str(tmp_path))
    assert holds("autocast_dtype@train_step")
    assert not holds("autocast_dtype@validate_step")
    assert not holds("autocast_dtype")
