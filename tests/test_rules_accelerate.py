"""AMP101 with accelerate's fp16 GradScaler: `accelerator.backward(loss)` scales the
loss when the file builds `Accelerator(mixed_precision="fp16")`, so a torch clip before
`accelerator.unscale_gradients()` sees scaled gradients. Shapes beyond the rule's
examples: where the accelerator is bound, how fp16 is spelled, and everything that must
keep the rule silent (run-time precision, parameters, plugins, CPU, unscaling helpers)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from amplint import Config, lint_source
from amplint.core.gates import scaled_backward_possible
from amplint.fix.apply import fix_source

HEAD = "import torch\nfrom accelerate import Accelerator\n"
LOOP = """
for batch in loader:
    accelerator.backward(model(**batch).loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""


def lint(code: str):
    source = textwrap.dedent(code).lstrip("\n")
    return [d for d in lint_source(source, "t.py", Config(select=("AMP101",))) if d.code == "AMP101"]


@pytest.mark.parametrize(
    "construct",
    [
        'accelerator = Accelerator(mixed_precision="fp16")',
        "accelerator = Accelerator(mixed_precision='FP16', gradient_accumulation_steps=4)",
        'accelerator = Accelerator(True, False, "fp16")',
        'accelerator = Accelerator(mixed_precision="fp16", cpu=False, deepspeed_plugin=None)',
    ],
)
def test_fires_after_an_fp16_accelerators_backward(construct):
    found = lint(HEAD + construct + "\n" + LOOP)
    assert [d.location.row for d in found] == [7]
    assert "the fp16 `accelerator.backward` left scaled" in found[0].message
    assert "accelerator.clip_grad_norm_" in found[0].help


def test_fires_through_the_module_alias_and_an_attribute_set_in_init():
    found = lint(
        """
        import accelerate
        from torch.nn.utils import clip_grad_value_

        class Trainer:
            def __init__(self, model, optimizer):
                self.accel = accelerate.Accelerator(mixed_precision="fp16")
                self.model, self.optimizer = self.accel.prepare(model, optimizer)

            def step(self, loss):
                self.accel.backward(loss)
                clip_grad_value_(self.model.parameters(), 0.5)
                self.optimizer.step()
        """
    )
    assert [d.location.row for d in found] == [11]
    assert "`self.accel.backward`" in found[0].message
    assert found[0].fix is not None and found[0].fix.edits[0].content == "self.accel.clip_grad_value_"


def test_fires_for_a_module_accelerator_used_in_a_function_and_one_built_in_main():
    module_level = HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\ndef train():' + textwrap.indent(LOOP, "    ")
    assert [d.location.row for d in lint(module_level)] == [7]
    local = HEAD + 'def main():\n    accelerator = Accelerator(mixed_precision="fp16")' + textwrap.indent(LOOP, "    ")
    assert [d.location.row for d in lint(local)] == [7]
    aliased = HEAD + 'acc = Accelerator(mixed_precision="fp16")\naccelerator = acc\n' + LOOP
    assert [d.location.row for d in lint(aliased)] == [8]


def test_the_fix_calls_the_accelerators_own_clip_and_is_unsafe():
    source = HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\n' + LOOP
    (d,) = lint(source)
    assert d.fix.applicability.value == "unsafe"
    assert fix_source(source, lint, unsafe=False) == (source, 0)
    fixed, count = fix_source(source, lint, unsafe=True)
    assert count == 1
    assert fixed == source.replace("torch.nn.utils.clip_grad_norm_(", "accelerator.clip_grad_norm_(")


@pytest.mark.parametrize(
    "clip",
    [
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, 2.0, True)",
        "torch.nn.utils.clip_grad_norm_(*clip_args)",
    ],
)
def test_no_fix_when_accelerates_method_would_not_take_the_arguments(clip):
    source = HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\n' + LOOP.replace(
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)", clip
    )
    (d,) = lint(source)
    assert d.fix is None


def test_one_fix_per_step_and_none_when_the_function_unscales_later():
    two = HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\n' + LOOP.replace(
        "    optimizer.step()", "    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)\n    optimizer.step()"
    )
    found = lint(two)
    assert len(found) == 2 and [d.fix is not None for d in found] == [True, False]
    later = HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\n' + LOOP.replace(
        "    optimizer.step()", "    accelerator.clip_grad_norm_(head.parameters(), 1.0)\n    optimizer.step()"
    )
    (d,) = lint(later)
    assert d.fix is None  # a second unscale in the step would raise


@pytest.mark.parametrize(
    "construct",
    [
        'accelerator = Accelerator(mixed_precision="no")',
        'accelerator = Accelerator(mixed_precision="bf16")',
        "accelerator = Accelerator()",  # ACCELERATE_MIXED_PRECISION / `accelerate config`: run time
        "accelerator = Accelerator(mixed_precision=args.mixed_precision)",
        'accelerator = Accelerator(mixed_precision="fp16" if args.fp16 else "no")',
        'accelerator = Accelerator(mixed_precision="fp16", cpu=True)',
        'accelerator = Accelerator(mixed_precision="fp16", cpu=args.cpu)',
        'accelerator = Accelerator(mixed_precision="fp16", deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))',
        'accelerator = Accelerator(mixed_precision="fp16", fsdp_plugin=plugin)',
        'accelerator = Accelerator(mixed_precision="fp16", **accelerator_kwargs)',
        'accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(enabled=args.amp)])',
        'accelerator = Accelerator(mixed_precision="fp16")\nif args.bf16:\n    accelerator = Accelerator(mixed_precision="bf16")',
        'accelerator = make_accelerator()',
        'accelerator = MyAccelerator(mixed_precision="fp16")',
    ],
)
def test_silent_unless_fp16_is_certain_from_the_code(construct):
    assert lint(HEAD + construct + "\n" + LOOP) == []


def test_silent_for_an_accelerator_passed_in_even_when_the_file_builds_an_fp16_one():
    code = HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\ndef train(accelerator, model, loader, optimizer):' + textwrap.indent(LOOP, "    ")
    assert lint(code) == []
    stored = """
        from accelerate import Accelerator
        import torch
        class Box:
            def __init__(self, accelerator):
                self.accelerator = accelerator
            def step(self, loss):
                self.accelerator.backward(loss)
                torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        accelerator = Accelerator(mixed_precision="fp16")
        """
    assert lint(stored) == []


@pytest.mark.parametrize(
    "before",
    [
        "accelerator.unscale_gradients()",
        "accelerator.unscale_gradients(optimizer=optimizer)",
        "if accelerator.sync_gradients:\n        accelerator.unscale_gradients()",
        "accelerator.clip_grad_value_(head.parameters(), 1.0)",
        "accelerator.scaler.unscale_(optimizer)",
    ],
)
def test_silent_when_accelerate_unscaled_before_the_clip(before):
    loop = LOOP.replace("    torch.nn.utils", f"    {before}\n    torch.nn.utils")
    assert lint(HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\n' + loop) == []


def test_silent_when_a_helper_of_the_file_unscales_first():
    code = """
        import torch
        from accelerate import Accelerator
        class T:
            def __init__(self):
                self.accelerator = Accelerator(mixed_precision="fp16")
            def _unscale(self):
                self.accelerator.unscale_gradients()
            def step(self, loss):
                self.accelerator.backward(loss)
                self._unscale()
                torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        """
    assert lint(code) == []


def test_silent_for_a_plain_backward_and_a_clip_on_the_other_branch():
    plain = HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\n' + LOOP.replace(
        "accelerator.backward(model(**batch).loss)", "model(**batch).loss.backward()"
    )
    assert lint(plain) == []
    branch = HEAD + 'accelerator = Accelerator(mixed_precision="fp16")\n' + """
for batch in loader:
    if use_accelerate:
        accelerator.backward(loss)
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
"""
    assert lint(branch) == []


def test_the_gate_passes_every_firing_shape_and_rejects_files_without_fp16():
    firing = HEAD + 'accelerator = Accelerator(mixed_precision="FP16")\n' + LOOP
    assert lint(firing) and scaled_backward_possible(firing)
    assert not scaled_backward_possible(HEAD + 'accelerator = Accelerator(mixed_precision="bf16")\n' + LOOP)
    assert not scaled_backward_possible("import torch\nloss.backward()\ntorch.nn.utils.clip_grad_norm_(p, 1.0)\n")
    assert scaled_backward_possible("scaler.scale(loss).backward()\n")


@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="needs accelerate (the watch-test extra)")
def test_accelerates_own_code_leaves_gradients_scaled_for_a_torch_clip():
    """The fact the rule rests on, on the installed accelerate: scripts/measure_accelerate_amp101.py,
    in its own process (torch and accelerate's global state stay out of the test process)."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "measure_accelerate_amp101.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = {r["mode"]: r for r in json.loads(done.stdout)["runs"]}
    flagged = runs["torch clip"]
    assert flagged["ratio"] == pytest.approx(flagged["scale"], rel=1e-4)
    for fixed in ("accelerator.clip_grad_norm_", "unscale_gradients, then torch clip"):
        assert runs[fixed]["ratio"] == pytest.approx(1.0, rel=1e-4)
        assert runs[fixed]["weight_moved"] > 1000 * flagged["weight_moved"]


SERVER_FILE = '''import torch
from accelerate import Accelerator


class Setup:
    def __init__(self):
        self.accelerator = Accelerator(mixed_precision="fp16")


def post_forward(self, loss):
    self.accelerator.backward(loss)
    torch.nn.utils.clip_grad_norm_(self.params, 1.0)
    self.optimizer.step()


accelerator = Accelerator(mixed_precision="fp16")


def train(model, loader, optimizer):
    for batch in loader:
        accelerator.backward(model(**batch).loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
'''


@pytest.mark.parametrize(
    "old, new",
    [
        ('        self.accelerator = Accelerator(mixed_precision="fp16")', '        self.accelerator = Accelerator(mixed_precision="bf16")'),
        ('accelerator = Accelerator(mixed_precision="fp16")\n\n', 'accelerator = Accelerator(mixed_precision="no")\n\n'),
        ("        torch.nn.utils.clip_grad_norm_(model", "        accelerator.unscale_gradients()\n        torch.nn.utils.clip_grad_norm_(model"),
        ("    self.optimizer.step()", "    self.optimizer.step()\n    self.count += 1"),
    ],
)
def test_the_servers_incremental_relint_follows_the_accelerator_across_definitions(old, new):
    """An edit to one definition re-lints what depends on it: the editor shows what a full lint shows."""
    from amplint.engine.pipeline import selected_rules
    from amplint.server.documents import full_lint
    from amplint.server.incremental import base_of, relint

    config = Config(select=("AMP101",))
    codes, rules = selected_rules(config)
    full = full_lint(SERVER_FILE, "train.py", config)
    assert [d.location.row for d in full.raw if d.code == "AMP101"] == [12, 22]
    base = base_of(SERVER_FILE, full.raw, full.facts, full.active, config)
    after = SERVER_FILE.replace(old, new, 1)
    assert after != SERVER_FILE
    got = relint(base, after, "train.py", config, rules, codes)
    expected = full_lint(after, "train.py", config).raw
    assert (got.raw if got is not None else expected) == expected
    if "unscale_gradients" in new:  # an edit inside `train` only: the fast path, and the finding goes
        assert got is not None and [d.location.row for d in got.raw] == [12]


# ------------------------------------------------------------------ AMP102: what accelerate's prepare leaves unwrapped (issue 22 shape 6)

CONTAINER = """
    import torch
    from functools import reduce


    class MultiOptimizer:
        def __init__(self, optimizers={}, schedulers={}):
            self.optimizers = optimizers
            self.schedulers = schedulers
            self.keys = list(optimizers.keys())

        def step(self, key=None, scaler=None):
            keys = [key] if key is not None else self.keys
            for k in keys:
                self.optimizers[k].step()


    def build_optimizer(parameters_dict, lr):
        optim = {key: torch.optim.AdamW(params, lr=lr) for key, params in parameters_dict.items()}
        return MultiOptimizer(optim, {})
"""

FINETUNE = """
    import torch
    from accelerate import Accelerator
    from optimizers import build_optimizer

    accelerator = Accelerator({precision})


    def main(model, loader):
        optimizer = build_optimizer({{key: model[key].parameters() for key in model}}, lr=1e-4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            optimizer.zero_grad()
            d_loss = model.disc(batch).mean()
            accelerator.backward(d_loss)
            optimizer.step("msd")
"""


def container_project(root: Path, precision: str = 'mixed_precision="fp16"', container: str = CONTAINER) -> Path:
    from .project_files import write_project

    return write_project(root, {"optimizers.py": container, "train.py": FINETUNE.format(precision=precision)})


def amp102(root: Path, paths=None):
    from amplint import lint_paths

    found = lint_paths(paths or [str(root)], Config(select=frozenset({"AMP102"}))).diagnostics
    return [f"{Path(d.filename).name}:{d.location.row}" for d in found], found


def test_a_container_of_optimizers_from_another_file_is_stepped_on_scaled_gradients(tmp_path):
    root = container_project(tmp_path)
    where, found = amp102(root)
    assert where == ["train.py:16"]
    assert "left `MultiOptimizer` unwrapped" in found[0].message
    assert [(Path(r.filename).name, r.location.row) for r in found[0].related] == [("optimizers.py", 6)]
    assert amp102(root, [str(root / "train.py")])[0] == ["train.py:16"]


def test_no_finding_without_a_literal_fp16_or_for_a_torch_optimizer_subclass(tmp_path):
    assert amp102(container_project(tmp_path / "run", precision=""))[0] == [], "precision from the launch config"
    assert amp102(container_project(tmp_path / "bf", precision='mixed_precision="bf16"'))[0] == []
    assert amp102(container_project(tmp_path / "ds", precision='mixed_precision="fp16", deepspeed_plugin=plugin'))[0] == []
    subclass = CONTAINER.replace("class MultiOptimizer:", "class MultiOptimizer(torch.optim.Optimizer):")
    assert amp102(container_project(tmp_path / "sub", container=subclass))[0] == [], "a torch Optimizer is wrapped"


CONFIG_STEP = """
class Trainer:
    def __init__(self, model, mixed_precision=None):
        {construct}
        self.model = model

    def step(self, batch):
        with self.accelerator.autocast():
            loss = self.model(batch)
        self.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
"""


@pytest.mark.parametrize(
    "construct",
    [
        "self.accelerator = Accelerator(mixed_precision=mixed_precision)",
        "self.accelerator = Accelerator(split_batches=True)",
        "self.accelerator = Accelerator(mixed_precision=None)",
    ],
)
def test_a_precision_from_accelerates_config_under_its_autocast_is_a_warning(construct):
    found = lint(HEAD + CONFIG_STEP.format(construct=construct))
    assert [(d.location.row, d.severity.value) for d in found] == [(13, "warning")]
    assert found[0].message.startswith("when accelerate's config is fp16: ")
    assert found[0].data["choice"] == "accelerate's config is fp16"
    assert scaled_backward_possible(HEAD + CONFIG_STEP.format(construct=construct))


@pytest.mark.parametrize(
    "construct",
    [
        'self.accelerator = Accelerator(mixed_precision="bf16")',
        "self.accelerator = Accelerator(mixed_precision=args.mixed_precision)",
        "self.accelerator = Accelerator(cpu=args.cpu)",
        "self.accelerator = Accelerator(deepspeed_plugin=plugin)",
        "self.accelerator = Accelerator(**kwargs)",
        "mixed_precision = 'bf16'\n        self.accelerator = Accelerator(mixed_precision=mixed_precision)",
    ],
)
def test_silent_for_a_config_precision_the_code_states_or_hands_elsewhere(construct):
    assert lint(HEAD + CONFIG_STEP.format(construct=construct)) == []


def test_a_config_precision_is_an_error_when_the_code_says_fp16():
    found = lint(HEAD + CONFIG_STEP.format(construct='self.accelerator = Accelerator(mixed_precision="fp16")'))
    assert [d.severity.value for d in found] == ["error"]


def test_a_config_precision_without_its_autocast_stays_silent():
    code = HEAD + CONFIG_STEP.format(construct="self.accelerator = Accelerator()").replace(
        "with self.accelerator.autocast():", "if True:")
    assert lint(code) == []
