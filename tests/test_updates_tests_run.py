"""AMP105 / AMP202 on a test the test runner runs (issue 22): no optimizer steps after a test returns,
so a backward under fp16 autocast in it (a smoke test, a gradient-existence check) loses no update."""
from __future__ import annotations

from pathlib import Path

import pytest

from amplint import Config
from amplint.engine.run import lint_paths

SMOKE = (
    "import torch\n"
    "\n"
    "class TrainingTesterMixin:\n"
    "    def test_mixed_precision_training(self):\n"
    "        model = self.model_class().to('cuda')\n"
    "        with torch.amp.autocast(device_type='cuda', dtype=torch.float16):\n"
    "            loss = torch.nn.functional.mse_loss(model(self.x), self.y)\n"
    "            loss.backward()\n"
    "        model.zero_grad()\n"
    "\n"
    "    def test_ema(self):\n"
    "        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)\n"
    "        self.model(self.x).float().mean().backward()\n"
    "        optimizer.step()\n"
)
STEPPING = SMOKE.replace("        model.zero_grad()\n", "        optimizer.step()\n")


def _codes(tmp_path: Path, relpath: str, source: str) -> list:
    target = tmp_path / relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source)
    (tmp_path / "setup.py").write_text("")
    found = lint_paths([str(tmp_path)], Config(select=frozenset({"AMP105", "AMP202"}))).diagnostics
    return sorted((d.code, d.location.row) for d in found)


@pytest.mark.parametrize("relpath, source", [
    ("tests/models/testing_utils/training.py", SMOKE),  # collected by its path
    ("pkg/checks.py", "import pytest\n" + SMOKE),  # a module importing pytest
    ("pkg/test_training.py", SMOKE),
])
def test_a_backward_in_a_test_the_runner_runs_is_silent(tmp_path, relpath, source):
    assert _codes(tmp_path, relpath, source) == []


def test_the_same_function_outside_a_test_module_or_stepping_keeps_its_findings(tmp_path):
    # an instance method of a plain module: its object's owner may step
    assert _codes(tmp_path / "plain", "pkg/trainer.py", SMOKE) == [("AMP105", 8), ("AMP202", 8)]
    # a test that steps an optimizer itself (an unresolved `optimizer`: any `x.step()` counts)
    assert _codes(tmp_path / "steps", "tests/test_amp.py", STEPPING) == [("AMP105", 8), ("AMP202", 8)]
