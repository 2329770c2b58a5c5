"""`embedded.never_loaded`: a plain module no program of the project loads (issue 22, read5's AMP301
false positive in an unused file of a vendored copy), and the look-alikes that some program may load."""
from __future__ import annotations

from amplint.model.embedded import never_loaded

ATTENTION = "import torch\n\n\ndef attend(q, k, mask):\n    return (q @ k).masked_fill(mask, -1e8)\n"


def _project(tmp_path, files):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path / "libs" / "models" / "attention.py")


def test_a_plain_module_nothing_loads(tmp_path):
    target = _project(tmp_path, {"libs/models/attention.py": ATTENTION, "train.py": "import torch\nfrom models import conv\n",
                                 "libs/models/conv.py": "import torch\n"})
    assert never_loaded(target, str(tmp_path))


def test_imported_named_or_run_it_may_load(tmp_path):
    cases = {
        "imported": {"train.py": "import sys\nsys.path.insert(0, 'libs')\nfrom models.attention import attend\n"},
        "a registry string": {"registry.py": "MODELS = {'attn': 'models.attention.attend'}\n"},
        "a config value": {"configs/model.yaml": "model: attention\n"},
        "a launch line": {"run.sh": "python libs/models/attention.py\n"},
        "a computed module of its folder": {"build.py": "import importlib\n\ndef build(n):\n    return importlib.import_module(f'models.{n}')\n"},
        "a loader quoting its name": {"build.py": "import importlib\nNAMES = ['attention']\nmods = [importlib.import_module(n) for n in NAMES]\n"},
        # diffusers' examples/community/README.md: `DiffusionPipeline.from_pretrained(..., custom_pipeline="<stem>")`
        "documentation loading it by name": {"libs/models/README.md": '```py\npipe = load(custom_pipeline="attention")\n```\n'},
        "an rst page quoting it as a value": {"docs/usage.rst": "    registry.build(name='attention')\n"},
    }
    for why, files in cases.items():
        root = tmp_path / why.replace(" ", "_")
        root.mkdir()
        target = _project(root, {"libs/models/attention.py": ATTENTION, **files})
        assert not never_loaded(target, str(root)), why


def test_documentation_naming_it_in_prose_does_not_load_it(tmp_path):
    target = _project(tmp_path, {"libs/models/attention.py": ATTENTION,
                                 "README.md": "The attention module (libs/models/attention.py) is unused.\n"})
    assert never_loaded(target, str(tmp_path))


def test_a_script_or_a_package_module_is_not_judged(tmp_path):
    (tmp_path / "a").mkdir()
    target = _project(tmp_path / "a", {"libs/models/attention.py": ATTENTION + "\nif __name__ == '__main__':\n    attend(1, 2, 3)\n"})
    assert not never_loaded(target, str(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    target = _project(tmp_path / "b", {"libs/models/attention.py": ATTENTION + "\nprint(attend)\n"})
    assert not never_loaded(target, str(tmp_path / "b")), "top-level code: a script run by path"
    (tmp_path / "d").mkdir()
    target = _project(tmp_path / "d", {"libs/models/attention.py": "import torch\nmodel = model.half()\n" + ATTENTION})
    assert not never_loaded(target, str(tmp_path / "d")), "an assignment that calls runs code"
    (tmp_path / "c").mkdir()
    target = _project(tmp_path / "c", {"libs/models/attention.py": ATTENTION, "libs/models/__init__.py": ""})
    assert not never_loaded(target, str(tmp_path / "c")), "a package module: its users or a registry import it"
    (tmp_path / "e").mkdir()
    _project(tmp_path / "e", {"attention.py": ATTENTION})
    assert not never_loaded(str(tmp_path / "e" / "attention.py"), str(tmp_path / "e")), "a root module: an entry point"


LOSS = (
    "import torch\n\n\nclass SILogLoss:\n    def forward(self, p, t):\n        with torch.cuda.amp.autocast(enabled=False):\n"
    "            return (p.log() - t.log()).var()\n\n\nclass NLLLoss:\n    def forward(self, p, t):\n        return -p[t]\n"
)
TRAINER = "from zoe.trainers.loss import SILogLoss\n\n\nclass Trainer:\n    def __init__(self):\n        self.loss = SILogLoss()\n"


def _trainers(tmp_path, files):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    base = {"libs/zoe/trainers/loss.py": LOSS, "libs/zoe/trainers/zoe_trainer.py": TRAINER,
            "train.py": "import torch\nsys.path.insert(0, 'libs')\nfrom zoe.models import net\n", "libs/zoe/models/net.py": "import torch\n"}
    for name, text in {**base, **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path / "libs" / "zoe" / "trainers" / "loss.py")


def test_importers_that_are_never_loaded_do_not_load_it(tmp_path):
    """x-flux's ZoeDepth copy: the trainers import the loss module, and nothing imports them."""
    target = _trainers(tmp_path, {})
    assert never_loaded(target, str(tmp_path))
    assert never_loaded(str(tmp_path / "libs" / "zoe" / "trainers" / "zoe_trainer.py"), str(tmp_path))


def test_an_importer_some_program_loads_loads_it(tmp_path):
    cases = {
        "the trainer imported": {"train.py": "import sys\nsys.path.insert(0, 'libs')\nfrom zoe.trainers.zoe_trainer import Trainer\n"},
        "the trainer launched": {"run.sh": "python libs/zoe/trainers/zoe_trainer.py\n"},
        "the trainer picked by a dotted computed name": {
            "libs/zoe/trainers/builder.py": "from importlib import import_module\n\n\ndef get(n):\n    return import_module(f'zoe.trainers.{n}_trainer')\n",
            "train.py": "import sys\nsys.path.insert(0, 'libs')\nfrom zoe.trainers.builder import get\n",
        },
        "an importer that is a script": {"libs/zoe/trainers/zoe_trainer.py": TRAINER + "\nif __name__ == '__main__':\n    Trainer()\n"},
    }
    for why, files in cases.items():
        root = tmp_path / why.replace(" ", "_")
        root.mkdir()
        target = _trainers(root, files)
        assert not never_loaded(target, str(root)), why


def test_a_script_runs_only_what_its_main_block_names(tmp_path):
    from amplint.model.embedded import never_runs

    main = "\n\nif __name__ == '__main__':\n    print(NLLLoss().forward(1, 2))\n"
    target = _trainers(tmp_path, {"libs/zoe/trainers/loss.py": LOSS + main})
    assert not never_loaded(target, str(tmp_path)), "a script, run by its path"
    assert never_runs(target, "SILogLoss", str(tmp_path))
    assert not never_runs(target, "NLLLoss", str(tmp_path))
    assert not never_runs(target, None, str(tmp_path)), "its top level runs"
    (tmp_path / "b").mkdir()
    through = LOSS + "\n\ndef check():\n    return SILogLoss()\n\n\nif __name__ == '__main__':\n    check()\n"
    target = _trainers(tmp_path / "b", {"libs/zoe/trainers/loss.py": through})
    assert not never_runs(target, "SILogLoss", str(tmp_path / "b")), "named through a definition the block calls"
    (tmp_path / "c").mkdir()
    target = _trainers(tmp_path / "c", {"libs/zoe/trainers/loss.py": LOSS + main,
                                        "train.py": "import sys\nsys.path.insert(0, 'libs')\nfrom zoe.trainers.zoe_trainer import Trainer\n"})
    assert not never_runs(target, "SILogLoss", str(tmp_path / "c")), "a program loads it: any definition may run"


def test_a_test_file_or_a_namespace_module_of_a_distributed_package_runs(tmp_path):
    """read6's look-alikes of the x-flux shape: MS-AMP's `tests/nn/test_linear.py` (pytest collects
    it) and ColBERT's `colbert/distillation/scorer.py` (no `__init__.py`, inside the `colbert`
    package its `setup.py` ships: users import `colbert.distillation.scorer`)."""
    from amplint.model.embedded import never_runs

    (tmp_path / "t").mkdir()
    target = _trainers(tmp_path / "t", {"libs/zoe/trainers/test_loss.py": LOSS})
    test = str(tmp_path / "t" / "libs" / "zoe" / "trainers" / "test_loss.py")
    assert not never_runs(test, "SILogLoss", str(tmp_path / "t")), "a test runner collects it"
    assert never_runs(target, "SILogLoss", str(tmp_path / "t")), "the module beside it still runs nowhere"
    root = tmp_path / "ns"
    root.mkdir()
    (root / "setup.py").write_text("from setuptools import setup\nsetup(name='zoe')\n")
    for name, text in {"zoe/__init__.py": "", "zoe/trainers/loss.py": LOSS, "zoe/trainers/zoe_trainer.py": TRAINER}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert not never_runs(str(root / "zoe" / "trainers" / "loss.py"), "SILogLoss", str(root)), "a namespace subpackage users import"


def test_a_hydra_defaults_entry_picking_a_config_file_does_not_name_the_module(tmp_path):
    """`- /model: attention` in a Hydra defaults list loads `configs/model/attention.yaml`, a config
    of the project, not the module (s4's transformer baseline, read9's AMP301 false positive); the
    same entry with no such config file, or the name as another value, may still pick the module."""
    configs = {
        "configs/experiment/attn.yaml": "# @package _global_\ndefaults:\n  - /model: attention\n",
        "configs/model/attention.yaml": "defaults:\n  - base\n  - override layer: attention\n",
        "configs/model/layer/attention.yaml": "_name_: mha\n",
    }
    root = tmp_path / "hydra"
    root.mkdir()
    assert never_loaded(_project(root, {"libs/models/attention.py": ATTENTION, **configs}), str(root))
    cases = {
        "no config file of that option": {"configs/experiment/attn.yaml": "defaults:\n  - /model: attention\n"},
        "also a plain value": {**configs, "configs/model/layer/attention.yaml": "_name_: attention\n"},
    }
    for why, files in cases.items():
        root = tmp_path / why.replace(" ", "_")
        root.mkdir()
        assert not never_loaded(_project(root, {"libs/models/attention.py": ATTENTION, **files}), str(root)), why


def test_amp301_in_a_module_only_a_hydra_config_name_points_at(tmp_path):
    from amplint import Config, lint_paths

    train = ("import torch\nfrom models import conv\n\n\ndef step(model, x):\n"
             "    with torch.autocast('cuda', dtype=torch.float16):\n        return model(x)\n")
    base = {"libs/models/attention.py": ATTENTION, "train.py": train, "libs/models/conv.py": "import torch\n",
            "configs/model/attention.yaml": "_name_: mha\n"}
    found = {}
    for why, config in {"valid": "defaults:\n  - /model: attention\n", "invalid": "model: attention\n"}.items():
        root = tmp_path / why
        root.mkdir()
        _project(root, {**base, "configs/experiment/attn.yaml": config})
        found[why] = [d.location.row for d in lint_paths([str(root)], Config(select=frozenset(["AMP301"]))).diagnostics]
    assert found == {"valid": [], "invalid": [5]}
