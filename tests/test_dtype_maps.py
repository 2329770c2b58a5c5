"""The one reader of a property mapping a precision setting to torch dtypes (`model/project/dtype_maps.py`),
which AMP105's `dtype_properties` and AMP803's scale summary share."""
from __future__ import annotations

import ast

from amplint.model.project.dtype_maps import read_dtype_map

CHAIN = '''
@property
def autocast_precision(self):
    """The dtype."""
    if self.precision == "amp_bf16":
        return torch.bfloat16
    elif self.precision in ("amp_fp16", "fp16"):
        return torch.float16
    elif self.precision == "amp_bf16":
        return torch.float16
    elif self.precision == "fp32":
        raise ValueError(self.precision)
    return torch.float32
'''


def _read(text, **kw):
    return read_dtype_map(ast.parse(text).body[0], **kw)


def test_an_if_elif_chain_maps_each_value_to_its_dtype():
    m = _read(CHAIN)
    assert (m.kind, m.arguments, m.setting) == ("property", False, "precision")
    assert m.dtypes == {"bf16", "fp16", "fp32"}
    # source order; a value tested again is read by its first test; a raise maps to no dtype
    assert m.values == {"amp_bf16": "bf16", "amp_fp16": "fp16", "fp16": "fp16"}
    assert m.rows == {"amp_bf16": 6, "amp_fp16": 8, "fp16": 8}


def test_other_shapes_keep_their_dtypes_without_a_chain():
    m = _read("def dt(self, x):\n    return torch.float16 if x else {1: torch.bfloat16}[x]\n")
    assert (m.kind, m.arguments, m.setting, m.values) == ("method", True, None, {})
    assert m.dtypes == {"fp16", "bf16"}
    m = _read("@torch.no_grad()\ndef dt(self):\n    if self.cfg.p == 'a':\n        x = 1\n    return torch.half\n")
    assert (m.kind, m.setting, m.dtypes) == ("decorated", None, {"fp16"})
    m = _read("def dt(self):\n    if self.a == 'x':\n        return torch.half\n    elif self.b == 'y':\n        return torch.float\n    raise KeyError\n")
    assert m.setting is None  # two settings


def test_not_a_dtype_mapping():
    assert _read("def dt(self):\n    return getattr(torch, self.name)\n") is None
    assert _read("def dt(self):\n    raise ValueError\n") is None
    assert _read("def dt(self):\n    yield torch.float16\n") is None
    assert _read("def dt(self):\n    return\n") is None


def test_the_caller_reads_the_literals():
    text = "def dt(self):\n    if self.p == 'fp16':\n        return 'half'\n    return 'bf16'\n"
    assert _read(text) is None  # strings are not torch dtypes by default
    strings = {"half": "fp16", "bf16": "bf16"}
    m = _read(text, dtype_of=lambda n: strings.get(n.value) if isinstance(n, ast.Constant) else None)
    assert (m.setting, m.values, m.dtypes) == ("p", {"fp16": "fp16"}, {"fp16", "bf16"})
