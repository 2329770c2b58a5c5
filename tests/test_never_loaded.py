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
    }
    for why, files in cases.items():
        root = tmp_path / why.replace(" ", "_")
        root.mkdir()
        target = _project(root, {"libs/models/attention.py": ATTENTION, **files})
        assert not never_loaded(target, str(root)), why


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
