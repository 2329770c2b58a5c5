"""AMP304 on a project's default fp32 run (issue 23): SDPA restricted to the flash kernel through a
settings object chosen at run time (`sdp_kernel(**config._asdict())`), and flash attention on
inputs of no visible dtype in a project that fixes no low precision anywhere (`FP32_DEFAULT`)."""
from __future__ import annotations

import textwrap

from amplint import Config, Severity, lint_paths, lint_source
from amplint.model import texts
from amplint.model.facts import fp32_default

ATTEND = """
from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn

Config = namedtuple("Config", ["enable_flash", "enable_math", "enable_mem_efficient"])


class Attend(nn.Module):
    def __init__(self, flash=False):
        super().__init__()
        self.cpu_config = Config(True, True, True)
        self.cuda_config = None
        if torch.cuda.is_available() and flash and torch.cuda.get_device_properties(0).major == 8:
            self.cuda_config = Config({flash_only})
        else:
            self.cuda_config = Config(False, True, True)

    def forward(self, q, k, v):
        config = self.cuda_config if q.is_cuda else self.cpu_config
        with torch.backends.cuda.sdp_kernel(**config._asdict()):
            return F.scaled_dot_product_attention({q}, k, v)
"""


def lint(code, rule="AMP304"):
    source = textwrap.dedent(code).lstrip("\n")
    return [d for d in lint_source(source, "example.py", Config(select=(rule,))) if d.code == rule]


def project(tmp_path, files):
    for name, code in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code).lstrip("\n"))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    texts._listings.clear()  # a listing is reused for a few seconds: these projects change within them
    result = lint_paths([str(tmp_path)], Config(select=("AMP304",), root=str(tmp_path)), cache=None)
    return [d for d in result.diagnostics if d.code == "AMP304"]


def test_settings_object_flash_only_on_fp32_input_is_a_warning():
    found = lint(ATTEND.format(flash_only="True, False, False", q="q.float()"))
    assert [(d.location.row, d.severity) for d in found] == [(23, Severity.WARNING)]
    assert [r.location.row for r in found[0].related] == [16]  # the flash-only Config(...)


def test_settings_objects_with_a_fallback_are_silent():
    assert lint(ATTEND.format(flash_only="True, True, False", q="q.float()")) == []
    dict_settings = ATTEND.replace("Config({flash_only})", "dict(enable_flash=True, enable_math=False, enable_mem_efficient=True)")
    assert lint(dict_settings.format(q="q.float()")) == []


def test_dict_settings_flash_only():
    code = ATTEND.replace("Config({flash_only})", '{{"enable_flash": True, "enable_math": False, "enable_mem_efficient": False}}')
    assert len(lint(code.format(q="q.float()"))) == 1


def test_default_fp32_run_of_a_project(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/attend.py": ATTEND.format(flash_only="True, False, False", q="q"),
             "pkg/train.py": "from accelerate import Accelerator\naccelerator = Accelerator()\n"}
    found = project(tmp_path, files)
    assert [(d.location.row, d.severity, d.data.get("default_run")) for d in found] == [(23, Severity.WARNING, True)]


def test_a_project_fixing_a_low_precision_is_silent(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/attend.py": ATTEND.format(flash_only="True, False, False", q="q"),
             "pkg/train.py": "import torch\n\ndef step(model, x):\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
                             "        return model(x)\n"}
    assert project(tmp_path, files) == []


def test_inputs_of_a_visible_low_precision_are_silent(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/attend.py": ATTEND.format(flash_only="True, False, False", q="q")}
    assert len(project(tmp_path, files)) == 1
    assert project(tmp_path, files | {"pkg/attend.py": ATTEND.format(flash_only="True, False, False", q="q.bfloat16()")}) == []


def test_flash_attn_func_on_the_default_run(tmp_path):
    blocks = """
    from flash_attn import flash_attn_func
    from torch import nn

    class SelfAttention(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.to_qkv = nn.Linear(dim, 3 * dim)

        def forward(self, x):
            q, k, v = self.to_qkv(x).chunk(3, dim=-1)
            return flash_attn_func(q, k, v)
    """
    assert [d.location.row for d in project(tmp_path, {"pkg/__init__.py": "", "pkg/blocks.py": blocks})] == [11]
    # an accelerate script that fixes fp16 hands it fp16 projections under autocast
    fixed = 'from accelerate import Accelerator\naccelerator = Accelerator(mixed_precision="fp16")\n'
    assert project(tmp_path, {"pkg/__init__.py": "", "pkg/blocks.py": blocks, "train.py": fixed}) == []


def test_fp32_default_words(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    quiet = tmp_path / "a.py"
    quiet.write_text("# half of the heads; see `accelerate launch --mixed_precision`\nx = y.to(w.dtype)\nm = torch.ones(2, dtype=torch.bool)\n")
    assert fp32_default(str(quiet), str(tmp_path))
    for text in ("m = m.half()\n", "dtype = torch.bfloat16\n", "model.to(weight_dtype)\n", "trainer = Trainer(precision='16-mixed')\n",
                 "with torch.autocast('cuda'):\n    pass\n", "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n",
                 "args.fp16 = True\n", "scaler = GradScaler()\n", "import deepspeed\n"):
        (tmp_path / "b.py").write_text(text)
        texts._listings.clear()
        assert not fp32_default(str(quiet), str(tmp_path)), text
    (tmp_path / "b.py").write_text("x = 1\n")
    # launchers, configs and docs fix a precision too
    for name, text in (("train.sh", "accelerate launch --mixed_precision=fp16 train.py\n"), ("conf.yaml", "trainer:\n  precision: 16\n"),
                       ("ds.json", '{"bf16": {"enabled": "auto"}}\n'), ("README.md", "Train with `--fp16`.\n")):
        texts._listings.clear()
        assert fp32_default(str(quiet), str(tmp_path))
        (tmp_path / name).write_text(text)
        texts._listings.clear()
        assert not fp32_default(str(quiet), str(tmp_path)), name
        (tmp_path / name).unlink()
