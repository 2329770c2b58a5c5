"""The precision a project's Lightning Trainers run (`model/lightning_trainers.py`): AMP101's
manual-optimization shape holds only where some Trainer scales the loss (fp16 mixed)."""
from __future__ import annotations

import pytest

from amplint.model.facts import LIGHTNING_FP16, ProjectFacts, condition_holds
from amplint.model.lightning_trainers import fp16_trainer_site, own_trainer_precision

TRAINER = "import pytorch_lightning as pl\n"


@pytest.mark.parametrize(
    "source,expected",
    [
        (TRAINER + 'pl.Trainer(precision="16-mixed")\n', True),
        (TRAINER + "pl.Trainer(precision=16)\n", True),
        (TRAINER + 'pl.Trainer(precision="bf16-mixed")\n', False),
        (TRAINER + 'pl.Trainer(precision="16-true")\n', False),  # no scaler
        (TRAINER + "pl.Trainer()\n", None),  # Lightning's default: 32-true, nothing fixed here
        (TRAINER + 'pl.Trainer(precision="16-mixed", strategy="deepspeed_stage_2")\n', None),
        (TRAINER + 'pl.Trainer(precision="16-mixed", plugins=[p])\n', None),
        (TRAINER + 'pl.Trainer(precision="16-mixed", accelerator="cpu")\n', None),
        (TRAINER + 'pl.Trainer(precision="16-mixed", **kwargs)\n', True),  # a repeated keyword raises
        (
            TRAINER + 'import argparse\np = argparse.ArgumentParser()\np.add_argument("--precision", default="16")\n'
            "args = p.parse_args()\npl.Trainer(precision=args.precision)\n",
            True,
        ),
        (
            TRAINER + 'import argparse\np = argparse.ArgumentParser()\np.add_argument("--precision", choices=["16-mixed", "32"])\n'
            "args = p.parse_args()\npl.Trainer(precision=args.precision)\n",
            None,
        ),
        ("class Trainer:\n    pass\nTrainer(precision='16-mixed')\n", None),  # not Lightning's
    ],
)
def test_own_trainer_precision(source, expected):
    assert own_trainer_precision(source) is expected


def _project(tmp_path, ini, script):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    if ini is not None:
        (tmp_path / "defaults.ini").write_text(ini)
    (tmp_path / "train.py").write_text(script)
    module = tmp_path / "module.py"
    module.write_text("import torch\n")
    return str(module)


SCRIPT = TRAINER + "from prefigure.prefigure import get_all_args\nargs = get_all_args()\npl.Trainer(precision=args.precision)\n"


def test_a_defaults_file_sets_the_precision(tmp_path):
    module = _project(tmp_path, '[DEFAULTS]\nprecision = "16-mixed"\n', SCRIPT)
    assert fp16_trainer_site(module, str(tmp_path)) == "train.py:4"
    assert condition_holds(LIGHTNING_FP16, ProjectFacts(), "auto", module, str(tmp_path))
    assert not condition_holds(LIGHTNING_FP16, ProjectFacts(), "bf16", module, str(tmp_path))


@pytest.mark.parametrize("ini", [None, '[DEFAULTS]\nprecision = "bf16-mixed"\n', "[DEFAULTS]\nbatch = 4\n"])
def test_no_fp16_trainer(tmp_path, ini):
    module = _project(tmp_path, ini, SCRIPT)
    assert fp16_trainer_site(module, str(tmp_path)) is None
    assert not condition_holds(LIGHTNING_FP16, ProjectFacts(), "auto", module, str(tmp_path))
    assert not condition_holds(LIGHTNING_FP16, ProjectFacts(), "auto", None, str(tmp_path))


def test_an_argparse_option_is_not_read_from_a_defaults_file(tmp_path):
    script = TRAINER + 'import argparse\np = argparse.ArgumentParser()\np.add_argument("--precision")\nargs = p.parse_args()\npl.Trainer(precision=args.precision)\n'
    module = _project(tmp_path, '[DEFAULTS]\nprecision = "16-mixed"\n', script)
    assert fp16_trainer_site(module, str(tmp_path)) is None
