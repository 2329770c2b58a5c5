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
