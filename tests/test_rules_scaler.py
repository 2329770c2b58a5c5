"""The GradScaler-protocol rules (AMP102-AMP108) beyond their examples, and the
AMP-model helpers they rest on (repeated conditions, helper-call resolution)."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint import Config, lint_source
from amplint.model.context import ModuleContext
from amplint.model.paths import exclusive
from amplint.model.scalers import is_grad_scaler_call


def build(code: str) -> ModuleContext:
    source = textwrap.dedent(code).lstrip("\n")
    return ModuleContext.build(cst.parse_module(source), source, "t.py")


def lint(code: str, *codes: str):
    source = textwrap.dedent(code).lstrip("\n")
    return [d for d in lint_source(source, "t.py", Config(select=codes)) if d.code in codes]


def call(ctx: ModuleContext, dotted: str):
    return next(c for c in ctx.calls if c.dotted == dotted)


# --------------------------------------------------------------------- AMP model


@pytest.mark.parametrize(
    "code,expected",
    [
        ("if amp:\n    f()\nif amp:\n    pass\nelse:\n    g()", True),
        ("if amp:\n    f()\nif not amp:\n    g()", True),
        ("if not amp:\n    f()\nif not amp:\n    pass\nelse:\n    g()", True),
        ("if amp:\n    f()\nif amp:\n    g()", False),
        ("if amp:\n    f()\nif other:\n    pass\nelse:\n    g()", False),
        ("if scaler is not None:\n    f()\nelse:\n    pass\nif scaler is not None:\n    pass\nelse:\n    g()", True),
    ],
)
def test_exclusive_knows_a_condition_tested_twice(code, expected):
    ctx = build(code)
    assert exclusive(call(ctx, "f").path, call(ctx, "g").path) is expected


def test_callee_resolves_methods_of_the_own_class_and_local_functions():
    ctx = build(
        """
        class A:
            def step(self):
                self.helper()
            def helper(self):
                pass
        class B:
            def helper(self):
                pass
        def outer():
            def inner():
                pass
            inner()
            top()
        def top():
            pass
        """
    )
    helper_call = call(ctx, "self.helper")
    target = ctx.callee(helper_call)
    assert target is not None and target.name == "helper" and target.cls.name.value == "A"
    inner = ctx.callee(call(ctx, "inner"))
    assert inner is not None and inner.parent.name == "outer"
    assert ctx.callee(call(ctx, "top")).name == "top"
    assert [c.dotted for c in ctx.callers(ctx.scope_named("top"))] == ["top"]


def test_reachable_events_follow_helpers_once():
    ctx = build(
        """
        import torch
        scaler = torch.amp.GradScaler()
        def finish():
            scaler.update()
            finish()
        def train():
            scaler.scale(loss).backward()
            scaler.step(opt)
            finish()
        """
    )
    kinds = [e.kind for e in ctx.reachable_events(ctx.scope_named("train"))]
    assert kinds == ["scaled_backward", "scaler_step", "call", "update", "call"]


def test_is_grad_scaler_call_through_aliases():
    ctx = build("from torch.cuda.amp import GradScaler as S\nimport torch as T\na = S()\nb = T.amp.GradScaler('cuda')\nc = Other()")
    assert [is_grad_scaler_call(c) for c in ctx.calls] == [True, True, False]


# --------------------------------------------------------------------- rules


def test_amp102_fix_is_not_offered_when_step_has_arguments():
    (d,) = lint(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        optimizer.step(closure)
        """,
        "AMP102",
    )
    assert d.fix is None and d.message == "`optimizer.step()` applies gradients still multiplied by the loss scale"


def test_amp102_needs_a_scaled_backward_on_the_path():
    assert not lint(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
            optimizer.step()
        """,
        "AMP102",
    )


def test_amp103_update_after_the_loop_is_not_enough():
    (d,) = lint(
        """
        import torch
        def train(loader):
            scaler = torch.amp.GradScaler()
            for epoch in range(3):
                for batch in loader:
                    scaler.scale(model(batch)).backward()
                    scaler.step(opt)
                scaler.update()
        """,
        "AMP103",
    )
    assert d.message == "`scaler.step(...)` is never followed by `scaler.update()`; the next step raises"


def test_amp103_hook_methods_of_one_class_share_the_scaler():
    assert not lint(
        """
        from torch.cuda.amp import GradScaler
        class Plugin:
            def __init__(self):
                self.scaler = GradScaler()
            def optimizer_step(self, optimizer):
                self.scaler.step(optimizer)
            def on_step_end(self):
                self.scaler.update()
        """,
        "AMP103",
    )


def test_amp104_unscale_in_a_boundary_tested_twice_is_inside():
    assert not lint(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for i, batch in enumerate(loader):
            scaler.scale(model(batch) / accum).backward()
            if (i + 1) % accum == 0:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if (i + 1) % accum == 0:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
        """,
        "AMP104",
    )


def test_amp104_unscale_and_update_every_micro_batch_is_silent_corruption():
    (d,) = lint(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for i, batch in enumerate(loader):
            scaler.scale(model(batch) / accum).backward()
            scaler.unscale_(opt)
            if (i + 1) % accum == 0:
                scaler.step(opt)
                opt.zero_grad()
            scaler.update()
        """,
        "AMP104",
    )
    assert d.data["shape"] == "every-updated" and d.location.row == 5


def test_amp104_separate_optimizers_are_unscaled_once_each():
    assert not lint(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        for opt in (opt_g, opt_d):
            scaler.unscale_(opt)
        scaler.unscale_(opt_e)
        scaler.step(opt_g)
        scaler.update()
        """,
        "AMP104",
    )


def test_amp105_is_silent_when_a_scaler_exists_anywhere_in_the_file():
    assert not lint(
        """
        import torch
        def evaluate(model, x):
            with torch.autocast("cuda"):
                loss = model(x)
            loss.backward()

        def make_scaler():
            return torch.amp.GradScaler("cuda")
        """,
        "AMP105",
    )


def test_amp105_quantifies_the_underflow():
    (d,) = lint(
        """
        import torch
        with torch.autocast("cuda"):
            loss = model(x)
        loss.backward()
        optimizer.step()
        """,
        "AMP105",
    )
    assert "without a GradScaler" in d.message and d.severity.value == "warning"


def test_amp106_the_model_cast_back_to_fp32_is_fine():
    assert not lint(
        """
        import torch
        model = Net().half()
        model.float()
        optimizer = torch.optim.AdamW(model.parameters())
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        """,
        "AMP106",
    )


def test_amp106_conditional_cast_with_a_runtime_scaler_is_left_alone():
    assert not lint(
        """
        import torch
        model = Net()
        if args.half:
            model = model.half()
        optimizer = torch.optim.AdamW(model.parameters())
        scaler = torch.amp.GradScaler("cuda", enabled=not args.half)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        """,
        "AMP106",
    )


def test_amp106_a_frozen_fp16_module_is_not_unscaled():
    assert not lint(
        """
        import torch
        encoder = Encoder().half()
        encoder.requires_grad_(False)
        optimizer = torch.optim.AdamW(encoder.parameters())
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        """,
        "AMP106",
    )


def test_amp107_the_step_helper_called_per_batch_is_per_step():
    (d,) = lint(
        """
        import torch
        def train_step(model, batch, optimizer):
            scaler = torch.amp.GradScaler("cuda")
            scaler.scale(model(batch)).backward()
            scaler.step(optimizer)
            scaler.update()

        def main(model, loader, optimizer):
            for batch in loader:
                train_step(model, batch, optimizer)
        """,
        "AMP107",
    )
    assert d.data["per_step"] is True


def test_amp108_is_off_by_default():
    source = textwrap.dedent(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
        scaler.scale(loss).backward()
        """
    ).lstrip("\n")
    assert not [d for d in lint_source(source, "t.py", Config()) if d.code == "AMP108"]
    assert [d.code for d in lint_source(source, "t.py", Config(select=("AMP108",)))] == ["AMP108"]


def test_amp104_update_every_iteration_is_fine_when_another_optimizer_steps_every_iteration():
    assert not lint(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for i, real in enumerate(loader):
            scaler.scale(critic_loss(real)).backward()
            scaler.step(opt_d)
            if i % n_critic == 0:
                scaler.scale(gen_loss(real)).backward()
                scaler.step(opt_g)
                opt_g.zero_grad()
            scaler.update()
        """,
        "AMP104",
    )


def test_amp102_direct_step_as_the_alternative_of_scaler_step():
    assert not lint(
        """
        import torch
        scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
        scaler.scale(loss).backward()
        if scaler.is_enabled():
            scaler.step(optimizer)
        else:
            optimizer.step()
        scaler.update()
        """,
        "AMP102",
    )


def test_amp105_is_not_silenced_by_a_comment_or_docstring_mentioning_a_scaler():
    from amplint import Config, lint_source

    source = '"""We dropped the GradScaler here."""\nimport torch\nwith torch.autocast("cuda"):\n    loss = model(x)\nloss.backward()  # no scaler\noptimizer.step()\n'
    found = [d for d in lint_source(source, "t.py", Config(select=("AMP105",)))]
    assert [d.location.row for d in found] == [5]
