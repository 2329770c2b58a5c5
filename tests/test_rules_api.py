"""Fix edge cases of the API rules (AMP001, AMP002, AMP503) and the helpers they use:
positional-to-keyword mapping, torch-version gating, import handling."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint import Config, lint_source
from amplint.core.text import apply_edits
from amplint.fix.apply import fix_source, parses
from amplint.model.context import ModuleContext
from amplint.model.edits import ensure_import, module_alias


def _src(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


def _lint(code: str, select=("AMP001",), path="example.py", **config):
    return lint_source(code, path, Config(select=tuple(select), **config))


def _fix(code: str, select=("AMP001",), path="example.py", **config):
    source = _src(code)
    fixed, _ = fix_source(source, lambda s: _lint(s, select, path, **config), unsafe=False)
    assert parses(fixed)
    return fixed


def _ctx(code: str, path="example.py") -> ModuleContext:
    source = _src(code)
    return ModuleContext.build(cst.parse_module(source), source, path)


# --------------------------------------------------------------- positional mapping


def test_autocast_every_positional_becomes_a_keyword():
    fixed = _fix(
        """
        import torch
        with torch.cuda.amp.autocast(True, torch.bfloat16, False):
            pass
        """
    )
    assert 'torch.amp.autocast("cuda", enabled=True, dtype=torch.bfloat16, cache_enabled=False)' in fixed


def test_grad_scaler_positionals_and_keywords_kept():
    fixed = _fix(
        """
        import torch
        scaler = torch.cuda.amp.GradScaler(1024.0, 2.0, 0.5, growth_interval=100, enabled=use_amp)
        """
    )
    assert (
        'torch.amp.GradScaler("cuda", init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, '
        "growth_interval=100, enabled=use_amp)" in fixed
    )


def test_multiline_call_keeps_comments():
    fixed = _fix(
        """
        import torch
        scaler = torch.cpu.amp.GradScaler(
            2.0**10,  # small start
            enabled=True,
        )
        """
    )
    assert fixed == _src(
        """
        import torch
        scaler = torch.amp.GradScaler(
            "cpu", init_scale=2.0**10,  # small start
            enabled=True,
        )
        """
    )


def test_no_fix_for_string_or_star_arguments():
    for call in ('torch.cuda.amp.autocast("cuda")', "torch.cuda.amp.autocast(*args)", "torch.cuda.amp.GradScaler(**kw)"):
        found = _lint(_src(f"import torch\nwith {call}:\n    pass\n"))
        assert len(found) == 1 and found[0].fix is None, call


def test_state_functions():
    fixed = _fix(
        """
        import torch
        a = torch.get_autocast_gpu_dtype()
        torch.set_autocast_cpu_dtype(torch.bfloat16)
        on = torch.is_autocast_cpu_enabled()
        """
    )
    assert 'torch.get_autocast_dtype("cuda")' in fixed
    assert 'torch.set_autocast_dtype("cpu", torch.bfloat16)' in fixed
    assert 'torch.is_autocast_enabled("cpu")' in fixed


def test_message_is_short_and_the_exact_warning_is_in_the_data():
    (d,) = _lint(_src("import torch\ns = torch.cuda.amp.GradScaler()\n"))
    assert d.message == "`torch.cuda.amp.GradScaler` is deprecated"
    assert d.help == 'Use `torch.amp.GradScaler("cuda", ...)`'
    assert d.data["category"] == "FutureWarning" and d.data["warning"] == (
        "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead."
    )
    (d,) = _lint(_src("import torch\nt = torch.get_autocast_cpu_dtype()\n"))
    assert d.message == "`torch.get_autocast_cpu_dtype` is deprecated"
    assert d.data["category"] == "DeprecationWarning" and "torch.get_autocast_cpu_dtype() is deprecated." in d.data["warning"]


def test_not_deprecated_state_functions_are_silent():
    assert not _lint(_src("import torch\nx = torch.is_autocast_enabled()\ntorch.set_autocast_enabled(False)\n"))


# --------------------------------------------------------------- torch-version


@pytest.mark.parametrize(
    "version,call,expected",
    [
        ((2, 2), "torch.cuda.amp.GradScaler()", None),
        ((2, 3), "torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")'),
        ((2, 3), "torch.cuda.amp.custom_fwd(f)", None),
        ((2, 4), "torch.cuda.amp.custom_fwd(f)", 'torch.amp.custom_fwd(fwd=f, device_type="cuda")'),
        ((2, 3), "torch.get_autocast_gpu_dtype()", None),
        ((2, 2), "torch.cuda.amp.autocast(False)", 'torch.autocast("cuda", enabled=False)'),
        ((1, 9), "torch.cuda.amp.autocast(False)", None),
        (None, "torch.cuda.amp.custom_bwd(g)", 'torch.amp.custom_bwd(bwd=g, device_type="cuda")'),
    ],
)
def test_torch_version_gates_the_fix(version, call, expected):
    source = f"import torch\nx = {call}\n"
    (d,) = _lint(source, torch_version=version)
    if expected is None:
        assert d.fix is None
    else:
        assert apply_edits(source, d.fix.edits) == f"import torch\nx = {expected}\n"


# --------------------------------------------------------------- imports


def test_from_import_replaced_by_import_torch():
    fixed = _fix(
        """
        '''Trainer.'''
        from __future__ import annotations
        import os
        from torch.cuda.amp import autocast, GradScaler
        scaler = GradScaler()
        with autocast():
            pass
        with autocast(enabled=False):
            pass
        """
    )
    assert fixed == _src(
        """
        '''Trainer.'''
        from __future__ import annotations
        import os
        import torch
        scaler = torch.amp.GradScaler("cuda")
        with torch.amp.autocast("cuda"):
            pass
        with torch.amp.autocast("cuda", enabled=False):
            pass
        """
    )


def test_import_kept_while_a_use_is_left():
    fixed = _fix(
        """
        import torch
        from torch.cuda.amp import GradScaler
        scaler = GradScaler()
        other = GradScaler()  # noqa: AMP001
        """
    )
    assert fixed == _src(
        """
        import torch
        from torch.cuda.amp import GradScaler
        scaler = torch.amp.GradScaler("cuda")
        other = GradScaler()  # noqa: AMP001
        """
    )


def test_import_kept_for_bare_references():
    fixed = _fix(
        """
        import torch
        from torch.cuda.amp import GradScaler
        scaler = GradScaler()
        assert isinstance(scaler, GradScaler)
        """
    )
    assert "from torch.cuda.amp import GradScaler\n" in fixed
    assert 'scaler = torch.amp.GradScaler("cuda")' in fixed


def test_parenthesized_import_keeps_other_names():
    fixed = _fix(
        """
        import torch
        from torch.cuda.amp import (
            GradScaler,
            autocast,
        )
        with autocast():
            pass
        assert isinstance(s, GradScaler)
        """
    )
    assert "autocast," not in fixed and "GradScaler" in fixed.splitlines()[2]
    assert 'with torch.amp.autocast("cuda"):' in fixed


def test_torch_alias_is_used():
    fixed = _fix(
        """
        import torch as th
        from torch.cuda.amp import autocast
        with autocast():
            pass
        """
    )
    assert fixed == _src(
        """
        import torch as th
        with th.amp.autocast("cuda"):
            pass
        """
    )


def test_no_fix_when_torch_name_is_taken():
    source = _src(
        """
        from mylib import torch
        from torch.cuda.amp import autocast
        with autocast():
            pass
        """
    )
    (d,) = _lint(source)
    assert d.fix is None


def test_init_module_keeps_reexported_import():
    fixed = _fix(
        """
        from torch.cuda.amp import autocast
        def run():
            with autocast():
                pass
        """,
        path="pkg/__init__.py",
    )
    assert fixed.startswith("import torch\nfrom torch.cuda.amp import autocast\n")


def test_module_alias_and_ensure_import():
    ctx = _ctx('"""doc"""\nimport torch.nn as nn\nx = 1\n')
    assert module_alias(ctx, "torch") is None
    edit = ensure_import(ctx, "torch")
    assert apply_edits(ctx.source, [edit]) == '"""doc"""\nimport torch\nimport torch.nn as nn\nx = 1\n'
    ctx = _ctx("import torch.nn\n")
    assert module_alias(ctx, "torch") == "torch" and ensure_import(ctx, "torch") is None
    ctx = _ctx('"""doc"""')
    assert apply_edits(ctx.source, [ensure_import(ctx, "torch")]) == '"""doc"""\nimport torch\n'
    ctx = _ctx("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n\ntry:\n    import apex\nexcept ImportError:\n    apex = None\n")
    assert apply_edits(ctx.source, [ensure_import(ctx, "torch")]).startswith(
        "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n\nimport torch\ntry:\n"
    )


# --------------------------------------------------------------- AMP001 x AMP002 x AMP503


def test_amp502_registration_forms():
    base = """
        import torch
        lib = torch.library.Library("myops", "DEF")
        lib.define("rms(Tensor x) -> Tensor")
        {extra}
        with torch.autocast("cuda"):
            y = torch.ops.myops.rms(model(x))
        """
    assert _lint(_src(base.format(extra="")), select=("AMP502",))
    for extra in (
        'lib.impl("rms", rms_autocast, "AutocastCUDA")',
        'torch.library.register_autocast("myops::rms", "cuda", torch.float32)',
    ):
        assert not _lint(_src(base.format(extra=extra)), select=("AMP502",)), extra
    # never suggests the API that does not exist
    (d,) = _lint(_src(base.format(extra="")), select=("AMP502",))
    assert "register_op_dtype" not in d.help and "register_autocast" in d.help


def test_fixes_of_several_rules_converge():
    code = """
        from torch.cuda.amp import autocast, custom_fwd
        from torch.amp import custom_bwd
        import torch

        class F(torch.autograd.Function):
            @staticmethod
            @custom_fwd
            def forward(ctx, x):
                return x @ x

            @staticmethod
            @custom_bwd
            def backward(ctx, g):
                return g

        with autocast(device_type="cuda", dtype=torch.bfloat16):
            y = F.apply(x)
        with autocast(dtype=torch.bfloat16):
            z = F.apply(x)
        """
    rules = ("AMP001", "AMP002", "AMP503")
    fixed = _fix(code, select=rules)
    assert not _lint(fixed, select=rules)
    assert '@torch.amp.custom_fwd(device_type="cuda")' in fixed
    assert '@custom_bwd(device_type="cuda")' in fixed
    assert 'with torch.autocast(device_type="cuda", dtype=torch.bfloat16):' in fixed
    assert 'with torch.amp.autocast("cuda", dtype=torch.bfloat16):' in fixed
    again = _fix(fixed, select=rules)
    assert again == fixed


def test_amp001_leaves_device_type_calls_to_amp002():
    source = _src('import torch\nwith torch.cuda.amp.autocast(device_type="cuda"):\n    pass\n')
    assert [d.code for d in _lint(source, select=("AMP001", "AMP002"))] == ["AMP002"]


def test_amp503_no_fix_when_name_is_ambiguous():
    source = _src(
        """
        try:
            from torch.amp import custom_bwd
        except ImportError:
            from torch.cuda.amp import custom_bwd
        @custom_bwd
        def backward(ctx, g):
            return g
        """
    )
    (d,) = _lint(source, select=("AMP503",))
    assert d.fix is None and "`custom_bwd` without `device_type=` raises `TypeError`" in d.message
    assert not _lint(source, select=("AMP001",))


# --------------------------------------------------------------- the reference model


def test_references_skip_strings_keywords_and_attributes():
    ctx = _ctx(
        """
        import torch
        from torch.cuda.amp import autocast
        s = "torch.cuda.amp.autocast()"
        f(autocast=1)
        obj.autocast()
        with autocast():
            pass
        """
    )
    spelled = [(ctx.code_for(r.node), r.use) for r in ctx.references()]
    assert spelled == [("autocast", "call")]


def test_references_are_version_gated_through_getattr_and_ifexp():
    ctx = _ctx(
        """
        import torch
        a = getattr(torch.amp, "GradScaler", torch.cuda.amp.GradScaler)
        b = torch.amp.autocast if hasattr(torch, "amp") else torch.cuda.amp.autocast
        c = torch.cuda.amp.GradScaler()
        """
    )
    cuda = [(ctx.code_for(r.node), r.use, ctx.is_version_gated(r.path)) for r in ctx.references() if ".cuda." in ctx.code_for(r.node)]
    assert cuda == [
        ("torch.cuda.amp.GradScaler", "bare", True),
        ("torch.cuda.amp.autocast", "bare", True),
        ("torch.cuda.amp.GradScaler", "call", False),
    ]


def test_rebound_names():
    ctx = _ctx("from torch.amp import custom_fwd\ncustom_fwd = wrap(custom_fwd)\ndef f(autocast): pass\n")
    assert ctx.is_rebound("custom_fwd") and ctx.is_rebound("autocast") and not ctx.is_rebound("torch")


def test_amp501_is_conditional_on_project_autocast(tmp_path):
    from amplint import lint_paths

    (tmp_path / "fn.py").write_text(
        "import torch\nclass L(torch.autograd.Function):\n    @staticmethod\n"
        "    def forward(ctx, x, w):\n        ctx.save_for_backward(x, w)\n        return x @ w\n"
        "    @staticmethod\n    def backward(ctx, g):\n        x, w = ctx.saved_tensors\n        return g @ w.t(), x.t() @ g\n"
    )
    def amp501():
        # AMP501 alone: train.py passes no selected gate, its facts are read on demand
        return [d for d in lint_paths([str(tmp_path)], Config(select=("AMP501",))).diagnostics if d.code == "AMP501"]

    assert not amp501()
    (tmp_path / "train.py").write_text('import torch\nwith torch.autocast("cuda"):\n    y = model(x)\n')
    found = amp501()
    assert [(d.code, d.location.row) for d in found] == [("AMP501", 4)]


# --------------------------------------------------------------- feature probes tested against None


def test_fallback_of_a_getattr_probe_tested_against_none_is_silent():
    # rfdetr's `_cuda_autocast_dtype`: the old getter runs only on a torch without the new one
    code = _src(
        """
        import torch
        def cuda_autocast_dtype():
            get_dtype = getattr(torch, "get_autocast_dtype", None)
            if get_dtype is None:
                return torch.get_autocast_gpu_dtype()
            return get_dtype("cuda")
        """
    )
    assert _lint(code) == []


def test_none_test_on_a_name_that_is_no_probe_stays_flagged():
    code = _src(
        """
        import torch
        def train_step(model, batch, scaler=None):
            if scaler is not None:
                with torch.cuda.amp.autocast():
                    return model(batch)
            return model(batch)
        """
    )
    assert [(d.code, d.location.row) for d in _lint(code)] == [("AMP001", 4)]


# --------------------------------------------------------------- class attributes do not shadow imports


def test_class_attribute_of_the_same_name_does_not_hide_the_import():
    # yolov5 `AutoShape`: `amp = False` is a class attribute; `forward` still calls torch.cuda.amp
    code = _src(
        """
        import torch
        from torch.cuda import amp

        class AutoShape(torch.nn.Module):
            amp = False

            def forward(self, ims):
                autocast = self.amp and ims.device.type != "cpu"
                with amp.autocast(autocast):
                    return self.model(ims)
        """
    )
    assert [(d.code, d.location.row) for d in _lint(code)] == [("AMP001", 9)]


def test_name_used_in_the_class_body_that_binds_it_stays_ambiguous():
    code = _src(
        """
        from torch.cuda import amp

        class Config:
            amp = make_amp()
            context = amp.autocast()
        """
    )
    assert _lint(code) == []


def test_a_branch_behind_a_private_flag_only_turned_off_is_silent_unless_another_file_names_it(tmp_path):
    """LLaVA-NeXT's trimmed trl DPOTrainer: `self._peft_has_been_casted_to_bf16` is set False in
    `__init__` and nowhere else in the project, so `torch.cuda.amp.autocast` is never chosen."""
    from amplint.engine.run import lint_paths

    trainer = _src(
        """
        from contextlib import nullcontext

        import torch


        class DPOTrainer:
            def __init__(self):
                self._peft_has_been_casted_to_bf16 = False

            def reference_logps(self, batch):
                manager = torch.cuda.amp.autocast if self._peft_has_been_casted_to_bf16 else nullcontext
                with manager():
                    return batch
        """
    )
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "trl").mkdir()
    (tmp_path / "trl" / "__init__.py").write_text("")
    (tmp_path / "trl" / "dpo_trainer.py").write_text(trainer)
    (tmp_path / "train_dpo.py").write_text("from trl.dpo_trainer import DPOTrainer\n\nDPOTrainer()\n")
    config = Config(select=("AMP001",))
    assert lint_paths([str(tmp_path)], config).diagnostics == []
    # look-alike: a subclass in another file turns the flag on
    other = tmp_path / "other"
    other.mkdir()
    (other / "setup.py").write_text("")
    (other / "dpo_trainer.py").write_text(trainer)
    (other / "llava_dpo.py").write_text(
        "from dpo_trainer import DPOTrainer\n\n\nclass LlavaDPO(DPOTrainer):\n    def __init__(self):\n"
        "        super().__init__()\n        self._peft_has_been_casted_to_bf16 = True\n"
    )
    assert [d.location.row for d in lint_paths([str(other)], config).diagnostics] == [11]


def test_a_stand_in_module_that_re_exports_the_names_is_reported_when_an_importer_calls_them(tmp_path):
    """GLIP's `maskrcnn_benchmark/utils/amp.py`: a `try: from torch.cuda.amp import ...` whose bare
    `except:` binds stand-ins, called by the modules importing it, not by the module itself."""
    from amplint.engine.run import lint_paths

    amp = _src(
        """
        from contextlib import contextmanager

        @contextmanager
        def nullcontext(enter_result=None, **kwargs):
            yield enter_result

        try:
            from torch.cuda.amp import autocast, GradScaler, custom_fwd
        except:
            GradScaler = nullcontext
            autocast = nullcontext
            custom_fwd = nullcontext
        """
    )
    config = Config(select=("AMP001",))

    def project(name, **others):
        root = tmp_path / name
        (root / "pkg").mkdir(parents=True)
        (root / "setup.py").write_text("")
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "amp.py").write_text(amp)
        for stem, text in others.items():
            (root / "pkg" / f"{stem}.py").write_text(text)
        return lint_paths([str(root)], config).diagnostics

    # nothing imports the module: silent
    assert project("alone") == []
    # an importer naming `GradScaler` without calling it (a reference): still silent
    assert project("named", check="from pkg.amp import GradScaler\n\nKIND = GradScaler\n") == []
    # an importer of the module calling torch's own `GradScaler` (its own finding, not this module's): silent
    own = project("torch_own", check="from pkg.amp import autocast\nfrom torch.cuda.amp import GradScaler\n\nscaler = GradScaler()\n")
    assert [d.filename.rsplit("/", 1)[-1] for d in own] == ["check.py"]
    # a parenthesized import spanning lines still names the name
    found = project("parens", trainer="from pkg.amp import (\n    autocast,\n    GradScaler,\n)\n\nscaler = GradScaler()\n")
    assert [(d.location.row, d.message.split("`")[1]) for d in found] == [(8, "GradScaler")]
    # importers calling `GradScaler()` and decorating with `@custom_fwd(...)`: those two, at the import
    found = project(
        "called",
        trainer="from pkg.amp import GradScaler\n\nscaler = GradScaler()\n",
        layer="from pkg.amp import custom_fwd\n\n\nclass F:\n    @custom_fwd(cast_inputs=None)\n    def forward(ctx, x):\n        return x\n",
    )
    assert sorted((d.filename.endswith("amp.py"), d.location.row, d.message.split("`")[1]) for d in found) == [
        (True, 8, "GradScaler"), (True, 8, "custom_fwd"),
    ]


# --------------------------------------------------------------- AMP002 device mismatch


def test_amp002_device_mismatch_examples():
    """AMP002's CUDA-only region on a device chosen as the CPU: a warning at the region."""
    from amplint.core.diagnostics import Severity
    from amplint.rules.amp002_cuda_autocast_device_type import CudaAutocastDeviceType as R

    for case in R.DEVICE_INVALID:
        found = [d for d in _lint(case.code.lstrip("\n"), select=("AMP002",)) if d.code == "AMP002"]
        assert len(found) == 1, case.code
        assert found[0].location.row == case.line and found[0].severity == Severity.WARNING
        assert found[0].data["kind"] == "device-mismatch"
    for case in R.MPS_INVALID:
        found = [d for d in _lint(case.code.lstrip("\n"), select=("AMP002",)) if d.code == "AMP002"]
        assert len(found) == 1, case.code
        assert found[0].location.row == case.line and found[0].severity == Severity.WARNING
        assert found[0].data["kind"] == "mps-as-cpu"


# --------------------------------------------------------------- AMP304 promoted concatenation


def test_amp304_promoted_concatenation_examples():
    """AMP304's `torch.stack` of fp16-cast tensors with an uncast sibling: a warning at the call."""
    from amplint.core.diagnostics import Severity
    from amplint.rules.amp304_flash_attention_fp32 import FlashAttentionFp32 as R

    for case in R.PROMOTED_INVALID:
        found = [d for d in _lint(case.code.lstrip("\n"), select=("AMP304",)) if d.code == "AMP304"]
        assert len(found) == 1, case.code
        assert found[0].location.row == case.line and found[0].severity == Severity.WARNING
        assert found[0].data["promoted"] is True
