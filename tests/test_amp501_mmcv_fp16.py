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
