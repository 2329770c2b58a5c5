"""AMP501 on kernels applied only under mmcv's `@force_fp32()` (bevfusion's `bev_pool`): mmcv
casts the method's fp16 arguments to fp32 and runs it with autocast off, when the module sets
`fp16_enabled` and the project turns it on (`amplint/model/mmcv_fp16.py`). Every other use of
the Function, its alias or the function of its file applying it keeps the finding."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

from amplint import Config
from amplint.engine.run import lint_paths

CONFIG = Config(select=("AMP501",))

OP = textwrap.dedent(
    """\
    import torch

    from . import pool_ext


    class PoolCuda(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, geom, ranks):
            ctx.save_for_backward(geom, ranks)
            return pool_ext.forward(x, geom, ranks)

        @staticmethod
        def backward(ctx, grad):
            geom, ranks = ctx.saved_tensors
            return pool_ext.backward(grad, geom, ranks), None, None


    pool_apply = PoolCuda.apply


    def bev_pool(feats, coords):
        ranks = coords[:, 0] * 100 + coords[:, 1]
        return PoolCuda.apply(feats, coords, ranks)
    """
)

MODEL = textwrap.dedent(
    """\
    from mmcv.runner import auto_fp16, force_fp32
    from torch import nn

    from pkg.ops.pool import bev_pool, pool_apply


    class Transform(nn.Module):
        def __init__(self):
            super().__init__()
            self.fp16_enabled = False

        @force_fp32()
        def pool(self, geom, x):
            return bev_pool(x, geom) + pool_apply(x, geom, geom)

        @auto_fp16(apply_to=("img",))
        def forward(self, img, geom):
            return self.pool(geom, img)
    """
)

TRAIN = textwrap.dedent(
    """\
    import torch
    from mmcv.runner import Fp16OptimizerHook

    from pkg.models import Transform


    def train(cfg, loader):
        hook = Fp16OptimizerHook(**cfg.fp16)
        model = Transform()
        with torch.autocast("cuda", dtype=torch.float16):
            for img, geom in loader:
                model(img, geom).sum().backward()
        return hook
    """
)


def _lint(tmp_path: Path, files: Dict[str, str]) -> List[str]:
    base = {
        "pyproject.toml": '[project]\nname = "pkg"\nversion = "0"\n',
        "pkg/__init__.py": "",
        "pkg/ops/__init__.py": "",
        "pkg/ops/pool.py": OP,
        "pkg/models/__init__.py": "from .transform import Transform\n",
        "pkg/models/transform.py": MODEL,
        "train.py": TRAIN,
    }
    base.update(files)
    for name, text in base.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = lint_paths([str(tmp_path)], CONFIG)
    return [f"{Path(d.filename).name}:{d.location.row}" for d in result.diagnostics if d.code == "AMP501"]


def test_applied_only_under_force_fp32_is_silent(tmp_path):
    assert _lint(tmp_path, {}) == []


@pytest.mark.parametrize(
    "old,new",
    [
        ("@force_fp32()", "@auto_fp16()"),  # autocast on, fp16 arguments
        ("@force_fp32()", '@force_fp32(apply_to=("x",))'),  # `geom` keeps autocast's dtype
        ("        self.fp16_enabled = False\n", ""),  # force_fp32 does nothing
        ("        return self.pool(geom, img)", "        return bev_pool(img, geom)"),  # under auto_fp16
        ("        return self.pool(geom, img)", "        return self.pool(geom, img), [bev_pool]"),  # a value
        ("from pkg.ops.pool import bev_pool, pool_apply", "from pkg.ops.pool import bev_pool as bp, pool_apply"),
    ],
)
def test_any_other_use_keeps_the_finding(tmp_path, old, new):
    assert old in MODEL
    assert _lint(tmp_path, {"pkg/models/transform.py": MODEL.replace(old, new)}) == ["pool.py:8"]


def test_a_flag_nothing_turns_on_keeps_the_finding(tmp_path):
    train = TRAIN.replace("from mmcv.runner import Fp16OptimizerHook\n", "").replace("hook = Fp16OptimizerHook(**cfg.fp16)", "hook = None")
    assert _lint(tmp_path, {"train.py": train}) == ["pool.py:8"]


def test_a_caller_in_its_own_file_outside_force_fp32_keeps_the_finding(tmp_path):
    op = OP + "\n\nclass Pool(torch.nn.Module):\n    def forward(self, x, geom):\n        return bev_pool(x, geom)\n"
    assert _lint(tmp_path, {"pkg/ops/pool.py": op}) == ["pool.py:8"]


def test_apply_to_naming_every_argument_casts_them_all(tmp_path):
    model = MODEL.replace("@force_fp32()", '@force_fp32(apply_to=("geom", "x"))')
    assert _lint(tmp_path, {"pkg/models/transform.py": model}) == []


# torch's `@custom_fwd(cast_inputs=torch.float32)`: the same fact with no flag (GLIP's deform_conv,
# whose decorator is imported through the project's `utils/amp.py` re-export)
AMP = "try:\n    from torch.cuda.amp import custom_fwd, custom_bwd\nexcept ImportError:\n    custom_fwd = None\n"

CUSTOM = textwrap.dedent(
    """\
    import torch
    from torch import nn

    from pkg.ops.pool import bev_pool, pool_apply
    from pkg.utils.amp import custom_fwd


    class Transform(nn.Module):
        @custom_fwd(cast_inputs=torch.float32)
        def pool(self, geom, x):
            return bev_pool(x, geom) + pool_apply(x, geom, geom)

        def forward(self, img, geom):
            return self.pool(geom, img)
    """
)

PLAIN_TRAIN = textwrap.dedent(
    """\
    import torch

    from pkg.models import Transform


    def train(loader):
        model = Transform()
        with torch.autocast("cuda", dtype=torch.float16):
            for img, geom in loader:
                model(img, geom).sum().backward()
    """
)


def _custom(tmp_path: Path, model: str = CUSTOM, **files: str) -> List[str]:
    base = {"pkg/models/transform.py": model, "pkg/utils/__init__.py": "", "pkg/utils/amp.py": AMP, "train.py": PLAIN_TRAIN}
    base.update({k.replace("__", "/").replace("_py", ".py"): v for k, v in files.items()})
    return _lint(tmp_path, base)


def test_applied_only_under_custom_fwd_cast_to_fp32_is_silent(tmp_path):
    assert _custom(tmp_path) == []


@pytest.mark.parametrize(
    "model",
    [
        CUSTOM.replace("from pkg.utils.amp import custom_fwd", "from torch.cuda.amp import custom_fwd"),
        CUSTOM.replace("from pkg.utils.amp import custom_fwd", "from ..utils.amp import custom_fwd"),
        CUSTOM.replace("from pkg.utils.amp import custom_fwd\n", "").replace(
            "@custom_fwd(cast_inputs=torch.float32)", '@torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)'
        ),
    ],
)
def test_custom_fwd_spelled_from_torch_or_a_relative_reexport_is_silent(tmp_path, model):
    assert _custom(tmp_path, model) == []


@pytest.mark.parametrize(
    "old,new",
    [
        ("@custom_fwd(cast_inputs=torch.float32)", "@custom_fwd"),  # records autocast's state, casts nothing
        ("@custom_fwd(cast_inputs=torch.float32)", "@custom_fwd(cast_inputs=torch.float16)"),  # fp16 inputs
        ("from pkg.utils.amp import custom_fwd", "from pkg.utils.misc import custom_fwd"),  # not torch's
        ("        return self.pool(geom, img)", "        return bev_pool(img, geom)"),  # outside it
    ],
)
def test_custom_fwd_that_does_not_force_fp32_keeps_the_finding(tmp_path, old, new):
    assert old in CUSTOM
    misc = "def custom_fwd(**kwargs):\n    return lambda f: f\n"
    assert _custom(tmp_path, CUSTOM.replace(old, new), pkg__utils__misc_py=misc) == ["pool.py:8"]


def test_another_files_own_class_of_the_same_name_is_not_a_use(tmp_path):
    # `bev_pool_v2.py` defines and applies its own `PoolCuda`, outside any forced function
    own = OP.replace("pool_apply = PoolCuda.apply\n", "").replace("def bev_pool(", "def bev_pool_v2(")
    own += "\n\ndef run(x, geom, ranks):\n    return PoolCuda.apply(x, geom, ranks)\n"
    found = _lint(tmp_path, {"pkg/ops/pool_v2.py": own})
    assert found == ["pool_v2.py:8"]  # the second one is reported for itself; the first stays silent


def _vendored(tmp_path: Path, model: str = MODEL) -> List[str]:
    # the op lives in a vendored package with its own packaging (MapTR's `mmdetection3d/`, with
    # its `setup.py`); the `@force_fp32()` method applying it is the checkout's plugin code
    files = {
        "vendor/setup.py": "from setuptools import setup\nsetup(name='pkg')\n",
        "vendor/pkg/__init__.py": "",
        "vendor/pkg/ops/__init__.py": "",
        "vendor/pkg/ops/pool.py": OP,
        "plugin/__init__.py": "",
        "plugin/models/__init__.py": "from .transform import Transform\n",
        "plugin/models/transform.py": model,
        "tools/train.py": TRAIN.replace("from pkg.models import", "from plugin.models import"),
    }
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = lint_paths([str(tmp_path)], CONFIG)
    return [f"{Path(d.filename).name}:{d.location.row}" for d in result.diagnostics if d.code == "AMP501"]


def test_a_vendored_packages_op_applied_by_the_checkouts_forced_method_is_silent(tmp_path):
    assert _vendored(tmp_path) == []


def test_a_vendored_packages_op_applied_by_the_checkout_outside_force_fp32_keeps_the_finding(tmp_path):
    assert _vendored(tmp_path, MODEL.replace("@force_fp32()", "@auto_fp16()")) == ["pool.py:8"]
